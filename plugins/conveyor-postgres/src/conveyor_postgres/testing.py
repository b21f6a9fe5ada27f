"""A throwaway PostgreSQL server for tests: :class:`ThrowawayCluster`.

It runs Debian's (or any) PostgreSQL binaries — ``initdb`` and ``pg_ctl`` from ``PATH``, else the
newest ``/usr/lib/postgresql/<version>/bin`` — on a free loopback port, with its data, socket
and log in a temporary directory that goes when it is closed. PostgreSQL refuses to run as root:
as root the cluster belongs to, and runs as, the unprivileged user ``nobody``.

Connections over TCP need the password (``scram-sha-256``), so a wrong one is refused as in
production::

    with ThrowawayCluster() as cluster:
        dsn = cluster.create_database("t1")   # postgresql://conveyor:…@127.0.0.1:port/t1
        cluster.restart()                     # a real restart: connections are dropped
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["ClusterUnavailable", "ThrowawayCluster", "postgres_bin", "session_cluster"]

_UNPRIVILEGED = "nobody"


class ClusterUnavailable(RuntimeError):
    """PostgreSQL's server binaries are not installed here (or the cluster cannot start)."""


def postgres_bin() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``: ``PATH``'s, else the newest
    ``/usr/lib/postgresql/<version>/bin``; ClusterUnavailable if there is none."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def version(path: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", path.split("/")[3]))

    if not versions:
        raise ClusterUnavailable(
            "PostgreSQL's server is not installed (no initdb on PATH nor in "
            "/usr/lib/postgresql/*/bin): apt-get install postgresql"
        )
    return Path(max(versions, key=version)).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayCluster:
    """One PostgreSQL server in a temporary directory (see the module's docstring)."""

    user = "conveyor"
    """The superuser the cluster is made with (and every DSN names)."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        """``settings``: server settings (``-c name=value``) beyond the defaults, which turn
        ``fsync`` off (tests never lose the machine's power; commits are still synchronous)."""
        self.bin = postgres_bin()
        self.password = secrets.token_urlsafe(12)
        self.port = _free_port()
        self.settings = {"fsync": "off", "full_page_writes": "off", **(settings or {})}
        # as root the server runs as nobody, who must reach its directory: /tmp (1777), not
        # a TMPDIR that may be root's own
        where = "/tmp" if os.geteuid() == 0 and os.path.isdir("/tmp") else None
        self.base = Path(tempfile.mkdtemp(prefix="conveyor-pg-", dir=where))
        self.data = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log = self.base / "server.log"
        self._as: dict[str, Any] = {}
        self._started = False
        self._initialised = False

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> ThrowawayCluster:
        try:
            self.start()
        except BaseException:
            self.close()  # (no server nor directory left behind)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HOME": str(self.base), "LC_ALL": "C"}
        env.pop("PGDATA", None)
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
            **self._as,
        )

    def _initialise(self) -> None:
        self.socket_dir.mkdir()
        pwfile = self.base / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:  # (initdb and postgres refuse root)
            entry = pwd.getpwnam(_UNPRIVILEGED)
            for path in (self.base, self.socket_dir, pwfile):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            self._as = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        done = self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            check=False,
        )
        pwfile.unlink()
        if done.returncode:
            raise ClusterUnavailable(f"initdb failed: {done.stderr.strip() or done.stdout}")
        self._initialised = True

    def start(self) -> None:
        """Create the cluster if needed and start the server; return once it accepts
        connections (ClusterUnavailable, with the end of its log, if it does not)."""
        if not self._initialised:
            self._initialise()
        options = " ".join(
            f"-c {k}={v}"
            for k, v in {
                "listen_addresses": "127.0.0.1",
                "port": str(self.port),
                "unix_socket_directories": str(self.socket_dir),
                **self.settings,
            }.items()
        )
        try:
            done = self._run(
                "pg_ctl",
                "start",
                "-w",
                "-t",
                "90",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                check=False,
            )
            why = done.stderr.strip() if done.returncode else ""
        except (subprocess.SubprocessError, OSError) as exc:
            why = f"pg_ctl start failed ({exc})"
        if why:
            self._kill()  # (a server pg_ctl gave up waiting for may be running all the same)
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise ClusterUnavailable(f"PostgreSQL did not start: {why}\n{tail}")
        self._started = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: ``smart``, ``fast`` or ``immediate``, as pg_ctl's)."""
        if self._started:
            self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))
            self._started = False

    def restart(self, mode: str = "fast") -> None:
        """Stop the server and start it again on the same port (clients are cut off)."""
        self.stop(mode)
        self.start()

    def close(self) -> None:
        """Stop the server at once (its processes killed if pg_ctl cannot) and remove every
        file of the cluster."""
        try:
            if self._started:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self.stop("immediate")
            self._kill()  # (whatever still runs: a stop that failed, a start given up on)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def _kill(self) -> None:
        """SIGKILL the server named by ``postmaster.pid``, if any (its process group when it
        leads one, as pg_ctl starts it; never this process's group)."""
        pid_file = self.data / "postmaster.pid"
        self._started = False
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pid_file.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline")
            if cmdline.parent.exists() and b"postgres" not in cmdline.read_bytes():
                return  # (a stale file: that pid is another program's now)
            if pid > 1 and os.getpgid(pid) == pid != os.getpgid(0):
                os.killpg(pid, signal.SIGKILL)
            elif pid > 1:
                os.kill(pid, signal.SIGKILL)

    # --- what tests connect with ----------------------------------------------------------

    def dsn(self, database: str = "postgres", password: str | None = None) -> str:
        """A ``postgresql://`` DSN for ``database`` over TCP, with the cluster's password
        (or ``password``)."""
        secret = self.password if password is None else password
        return f"postgresql://{self.user}:{secret}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create the database ``name`` (a plain identifier) and return its DSN."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r}: expected a lower-case identifier")
        self.sql(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def sql(self, statement: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement (autocommit) as the superuser; its rows, if it returns any."""
        import psycopg

        with psycopg.connect(self.dsn(database), autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []


@contextlib.contextmanager
def session_cluster(settings: dict[str, str] | None = None) -> Iterator[ThrowawayCluster]:
    """A started :class:`ThrowawayCluster` for a test session (a pytest fixture's body),
    closed at the end: the test is skipped when PostgreSQL's server binaries are missing, and
    fails instead on CI (``CI`` set), where ``.ci/run`` installs them."""
    import pytest

    cluster: ThrowawayCluster | None = None
    try:
        cluster = ThrowawayCluster(settings)
        cluster.start()
    except ClusterUnavailable as exc:
        if cluster is not None:
            cluster.close()  # (a server that started late, its directory)
        if os.environ.get("CI"):
            pytest.fail(f"these tests need PostgreSQL on CI: {exc}")
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.close()
