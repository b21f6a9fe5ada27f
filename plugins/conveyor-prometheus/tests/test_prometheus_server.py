"""The central server's ``GET /metrics``: behind the server's token when it has one (a
Prometheus ``bearer_token`` scrape), open when it has none, in the format the scrape asks for;
a standby's share of a sum over servers."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from conveyor.testing.processes import wait_for

from prom_support import (
    OPENMETRICS,
    TEXT_FORMAT,
    Server,
    by_label,
    conveyor_run,
    finish,
    parse,
    value,
    write_tasks,
)

pytestmark = pytest.mark.timeout(120)


def test_the_token_protects_metrics(workdir: Path, marker: str) -> None:
    """No token or a wrong one: 401 and no metrics in the body; the right one: 200."""
    server = Server(workdir, marker)
    server.start()
    for authorization in (None, "Bearer wrong-token", "Basic eDp5"):
        reply = server.request("GET", "/metrics", headers={"Authorization": authorization})
        assert reply.status == 401, (authorization, reply.status)
        assert b"conveyor_" not in reply.body
    samples = parse(server.metrics())
    assert value(samples, "conveyor_scheduler_is_leader") == 1.0
    # the guard's refusals are counted under a route of their own, never the raw path
    refused = value(samples, "conveyor_scheduler_requests_total", route="(refused)", code="401")
    assert refused == 3.0, [k for k in samples if k[0] == "conveyor_scheduler_requests_total"]


def test_without_a_token_metrics_are_open(workdir: Path, marker: str) -> None:
    """A server without a token serves /metrics to anyone; an OpenMetrics scrape gets
    OpenMetrics; nothing registered yet: every state 0, no attempts."""
    server = Server(workdir, marker, token="")
    server.start()
    reply = server.request("GET", "/metrics")
    assert reply.status == 200, reply.status
    assert reply.headers["content-type"] == TEXT_FORMAT
    samples = parse(reply.body.decode())
    assert value(samples, "conveyor_tasks", state="PENDING") == 0.0
    assert value(samples, "conveyor_workers") == 0.0
    assert not [name for name, _ in samples if name == "conveyor_task_attempts_total"]
    openmetrics = server.request("GET", "/metrics", headers={"Accept": OPENMETRICS})
    assert openmetrics.status == 200
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.body.rstrip().endswith(b"# EOF")
    assert server.request("POST", "/metrics", body={}).status == 405


def test_a_worker_table_in_the_server_file_binds_and_writes_nothing(
    workdir: Path, marker: str
) -> None:
    """A server whose file has a worker's ``[prometheus]`` port (one another process listens
    on) and textfile starts, serves /metrics, never binds the port and leaves the existing
    textfile byte-identical (a worker's final counts are not wiped)."""
    textfile = workdir / "worker.prom"
    counts = b'# a worker\'s final counts\nconveyor_task_attempts_total{family="A"} 7.0\n'
    textfile.write_bytes(counts)
    before = textfile.stat()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        table = f'[prometheus]\nport = {port}\ntextfile = "{textfile}"\ninterval = 0.01\n'
        server = Server(workdir, marker, extra=table)
        server.start()
        samples = parse(server.metrics())
        assert value(samples, "conveyor_scheduler_is_leader") == 1.0
        proc = conveyor_run(
            workdir, "Succeeds", marker, "--root", str(workdir / "out"), server=server
        )
        code, out, err = finish(proc)
        assert code == 0, (out + err)[-3000:]
        after = parse(server.metrics())
        assert value(after, "conveyor_workers") == 1.0
    assert textfile.read_bytes() == counts
    assert textfile.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in workdir.iterdir() if p.name.endswith(".prom")) == ["worker.prom"]


@pytest.mark.timeout(180)
def test_a_standby_exports_no_task_counts(workdir: Path, marker: str, prom_pg_dsn: str) -> None:
    """Two servers on one PostgreSQL store: the leader counts the tasks a worker ran; the
    standby exports no ``conveyor_tasks`` samples, 0 workers and is_leader 0, so a sum over
    both servers counts each task once."""
    table = 'state_store = "postgres"\nleader_lease = 3\n'
    store = f'[state_stores.postgres]\ndsn = "{prom_pg_dsn}"\n'
    servers = []
    for name in ("a", "b"):
        directory = workdir / name
        directory.mkdir()
        write_tasks(directory)
        servers.append(Server(directory, marker, server=table, extra=store))
    first, second = servers
    first.start()
    wait_for(lambda: first.role() == "leader", 60, "the first server to lead")
    second.start()
    assert second.role() == "standby"
    proc = conveyor_run(workdir, "Succeeds", marker, "--root", str(workdir / "out"), server=first)
    code, out, err = finish(proc)
    assert code == 0, (out + err)[-3000:]

    leader = parse(first.metrics())
    standby = parse(second.metrics())
    assert by_label(leader, "conveyor_tasks", "state")[("DONE",)] == 1.0
    assert value(leader, "conveyor_scheduler_is_leader") == 1.0
    assert value(leader, "conveyor_workers") == 1.0
    assert by_label(standby, "conveyor_tasks", "state") == {}
    assert value(standby, "conveyor_scheduler_is_leader") == 0.0
    assert value(standby, "conveyor_workers") == 0.0
