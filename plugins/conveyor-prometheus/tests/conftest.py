"""Fixtures of the Prometheus plugin's tests: a per-test marker that kills every process the
test started, a directory holding the task module, and a PostgreSQL database (for two servers
sharing a store: a leader and a standby)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conveyor.testing.processes import kill_marked

from prom_support import MARKER_VARIABLE, write_tasks


@pytest.fixture
def marker() -> Iterator[str]:
    """A per-test marker: every process carrying it is killed when the test ends."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER_VARIABLE, value)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """``tmp_path`` with the task module in it (the workers' and servers' directory)."""
    write_tasks(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def prom_pg_cluster() -> Iterator[Any]:
    """A throwaway PostgreSQL server for the session (skipped without PostgreSQL's server
    binaries, except on CI), for the test of a standby's metrics."""
    testing = pytest.importorskip("conveyor_postgres.testing")
    with testing.session_cluster() as cluster:
        yield cluster


@pytest.fixture
def prom_pg_dsn(prom_pg_cluster: Any) -> str:
    """The DSN of a new, empty database for this test alone."""
    return str(prom_pg_cluster.create_database(f"prom_{uuid.uuid4().hex[:16]}"))
