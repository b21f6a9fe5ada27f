"""Fixtures: one real, throwaway PostgreSQL server per test session
(:class:`conveyor_postgres.testing.ThrowawayCluster`) and a fresh database in it per test.

Without PostgreSQL's server binaries the tests are skipped, except on CI (``CI`` set), where
that is a failure: ``.ci/run`` installs Debian's ``postgresql``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from conveyor_postgres.testing import ThrowawayCluster, session_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[ThrowawayCluster]:
    """A PostgreSQL server of its own for the session, on a free loopback port."""
    with session_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_dsn(pg_cluster: ThrowawayCluster) -> str:
    """The DSN of a new, empty database of the session's server, for this test alone."""
    return pg_cluster.create_database(f"t_{uuid.uuid4().hex[:16]}")
