"""Compiled bytecode for the conveyor the benchmarks measure, as an installed one has it.

A wheel installed by pip comes with its modules compiled; a checkout installed in editable
mode (``pip install -e .``), or a tree put first on ``PYTHONPATH`` to compare it, is compiled
by the first process that imports it, and by every process when ``PYTHONDONTWRITEBYTECODE`` is
set, as it is on some machines and in many container images. A benchmark that starts worker
processes inside its clock would then time the compiling of conveyor's modules (0.13 to 0.38 s
of CPU a process here) along with conveyor. :func:`compile_measured` compiles them first,
into their own ``__pycache__`` directories (ignored by git); ``bench_server.py`` and
``bench_luigi.py`` call it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def compile_measured(env: Mapping[str, str], cwd: Path, extra: Sequence[str] = ()) -> None:
    """Compile the ``conveyor`` package that a child with ``env`` started in ``cwd`` imports
    (the tree on its ``PYTHONPATH`` first, else the installed one) and the files ``extra``, in
    place; a package already compiled is left as it is. One that cannot be compiled there
    (read-only) is measured as it is, with a line on standard error that says so; RuntimeError,
    with Python's error, if ``conveyor`` cannot be imported at all."""
    where = "import conveyor, os; print(os.path.dirname(conveyor.__file__))"
    found = _python(env, cwd, "-c", where)
    if found.returncode:
        raise RuntimeError(f"the workers could not import conveyor: {found.stderr.strip()}")
    package = found.stdout.strip()
    compiled = _python(env, cwd, "-m", "compileall", "-q", package, *extra)
    if compiled.returncode:  # (a read-only install: measured as it is, said so)
        print(
            f"# could not compile {package} in place, so its processes compile it as they "
            f"start: {compiled.stdout.strip() or compiled.stderr.strip()}",
            file=sys.stderr,
        )


def _python(env: Mapping[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This interpreter run with ``args`` as a worker would be (``env``, in ``cwd``)."""
    return subprocess.run(
        [sys.executable, *args], env=dict(env), cwd=cwd, check=False, capture_output=True, text=True
    )
