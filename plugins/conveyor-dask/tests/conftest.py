"""Fixtures: real Dask clusters on loopback, and an environment Dask workers inherit.

Before any Dask process starts, the session puts this directory on ``PYTHONPATH`` (so attempt
processes on Dask workers can import :mod:`dask_tasks_for_tests`) and sets a session marker
variable that every process started from here inherits; at the end of the session whatever
still carries the marker is killed, so a failing test leaves no orphan behind.

``cluster`` is one session-wide cluster started with the ``dask scheduler`` / ``dask worker``
commands: two single-threaded workers, the first with ``--resources gpu=1``. ``doomed_cluster``
is a fresh one per test, for tests that kill one of its workers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conveyor.testing.processes import kill_marked

from dask_cluster_for_tests import MARKER_VARIABLE, DaskCluster

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session", autouse=True)
def dask_environment() -> Iterator[str]:
    """This directory on PYTHONPATH and a session marker, for every process started later."""
    marker = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as mp:
        paths = [str(HERE), os.environ.get("PYTHONPATH", "")]
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
        mp.setenv(MARKER_VARIABLE, marker)
        for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
            mp.delenv(name, raising=False)  # Dask's comms talk to loopback directly
        yield marker
    kill_marked(MARKER_VARIABLE, marker)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    """A shared external cluster: worker ``w0`` has ``gpu=1``, worker ``w1`` has none."""
    started = DaskCluster(tmp_path_factory.mktemp("cluster"), [["--resources", "gpu=1"], []])
    try:
        started.start()
        yield started
    finally:
        started.stop()


@pytest.fixture
def doomed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    """A cluster of two workers of this test's own, which it may kill a worker of."""
    started = DaskCluster(tmp_path_factory.mktemp("doomed"), [[], []])
    try:
        started.start()
        yield started
    finally:
        started.stop()
