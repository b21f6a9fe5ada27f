"""Compiled bytecode for the conveyor the benchmarks measure, as an installed one has it.

A wheel installed by pip comes with its modules compiled; a checkout installed in editable
mode (``pip install -e .``), or a tree put first on ``PYTHONPATH`` to compare it, is compiled
by the first process that imports it, and by every process when ``PYTHONDONTWRITEBYTECODE`` is
set, as it is on some machines and in many container images. A benchmark that starts worker
processes inside its clock would then time the compiling of conveyor's modules (some 0.3 s
of CPU a process here) along with conveyor. :func:`compile_measured` compiles them first,
into their own ``__pycache__`` directories (ignored by git), for every benchmark that starts
``conveyor`` processes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence


def compile_measured(env: Mapping[str, str], extra: Sequence[str] = ()) -> None:
    """Compile the ``conveyor`` package that a child with ``env`` imports (the tree on its
    ``PYTHONPATH`` first, else the installed one) and the files ``extra``, in place; a
    package already compiled is left as it is. One that cannot be compiled there (read-only)
    is measured as it is, with a line on standard error that says so; CalledProcessError if
    ``conveyor`` cannot be imported at all."""
    found = subprocess.run(
        [sys.executable, "-c", "import conveyor, os; print(os.path.dirname(conveyor.__file__))"],
        env=dict(env),
        check=True,
        capture_output=True,
        text=True,
    )
    package = found.stdout.strip()
    compiled = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", package, *extra],
        env=dict(env),
        check=False,
        capture_output=True,
        text=True,
    )
    if compiled.returncode:  # (a read-only install: measured as it is, said so)
        print(
            f"# could not compile {package} in place, so its processes compile it as they "
            f"start: {compiled.stdout.strip() or compiled.stderr.strip()}",
            file=sys.stderr,
        )
