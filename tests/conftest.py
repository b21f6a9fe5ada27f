"""Shared helpers: an isolated environment, task modules in tmp_path, and the real CLI."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

RunCli = Callable[..., subprocess.CompletedProcess[str]]
WriteModule = Callable[..., str]


@pytest.fixture(autouse=True)
def _no_conveyor_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Clear every CONVEYOR_* variable so the developer's environment cannot leak in."""
    for name in list(os.environ):
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def run_cli(tmp_path: Path) -> RunCli:
    """Run ``python -m conveyor *args`` as a real subprocess; tmp_path is on its PYTHONPATH."""

    def run(
        *args: str, cwd: Path | str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ)
        paths = [str(tmp_path), full_env.get("PYTHONPATH", "")]
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "conveyor", *args],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def task_module(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> WriteModule:
    """Write Python source into tmp_path as a uniquely named module; return its dotted name.

    With ``package=True`` the source becomes ``<name>/tasks.py`` of a new package and the name
    returned is ``<name>.tasks``. tmp_path is put on ``sys.path`` for in-process imports too.
    """
    base = "tm_" + re.sub(r"\W", "_", request.node.name)
    counter = iter(range(1000))
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str, *, package: bool = False) -> str:
        name = f"{base}_{next(counter)}"
        code = textwrap.dedent(source)
        if not package:
            (tmp_path / f"{name}.py").write_text(code, encoding="utf-8")
            return name
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("", encoding="utf-8")
        (tmp_path / name / "tasks.py").write_text(code, encoding="utf-8")
        return f"{name}.tasks"

    return write


@pytest.fixture
def process_module(
    task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], Any]:
    """Write ``source`` as a module and import it: importable here and, through PYTHONPATH, in
    every process a test starts (an attempt's); the test runs in tmp_path (no worker.toml of
    the checkout is discovered)."""
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.chdir(tmp_path)

    def make(source: str) -> Any:
        name = task_module(source)
        return importlib.import_module(name)

    return make
