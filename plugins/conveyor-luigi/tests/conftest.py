"""Fixtures: this directory on ``PYTHONPATH`` for every process a test starts, a session marker
killed at the end, and a fresh working directory per test.

Attempt processes (``fork``, ``subprocess``) and ``conveyor run`` subprocesses import
:mod:`luigi_tasks_for_tests` from here. Every process started from the session carries the
marker variable; whatever still carries it at the end is killed, so a failing test leaves no
orphan behind.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conveyor.testing.processes import kill_marked

from luigi_marker_for_tests import MARKER_VARIABLE

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session", autouse=True)
def luigi_environment() -> Iterator[str]:
    """This directory on PYTHONPATH and a session marker, for every process started later."""
    marker = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as mp:
        paths = [str(HERE), os.environ.get("PYTHONPATH", "")]
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
        mp.setenv(MARKER_VARIABLE, marker)
        yield marker
    kill_marked(MARKER_VARIABLE, marker)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh current directory (no worker.toml or luigi.cfg of the checkout is found)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
