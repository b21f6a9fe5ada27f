"""High availability on the ``postgres`` store, black-box: several real ``conveyor scheduler``
processes on one database of a real PostgreSQL, real ``conveyor run`` workers given every
scheduler's URL, and the faults of a production fail-over — ``kill -9`` of the leader, a leader
paused (SIGSTOP) past its lease, a clean stop (SIGTERM), PostgreSQL itself restarted.

What must hold (docs/server.md, "Running several schedulers"): one server leads at a time; a
standby takes over and loads the state; nothing acknowledged is lost; a task runs once (its
``<task_id>.done`` marker is created with ``O_EXCL``, so a second run fails it); a task running
on a live worker keeps running and is reported to the new leader; a leader that was paused past
its lease commits nothing and steps down.

The leases are short (2 or 3 s) so the tests are quick; deadlines are generous and only bound a
failure (a loaded 2-core machine starts Python in 2 s). How long a take-over took is printed
(``pytest -s``), never asserted: the benchmark measures it.
"""

from __future__ import annotations

import collections
import http.client
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conveyor.protocol import AddTasks, GetWork, TaskSpec, encode
from conveyor.testing.processes import kill_marked, wait_for

from conveyor_postgres.testing import ThrowawayCluster
from failover_support import (
    MARKER_VARIABLE,
    RIDE_OUT_FAILOVERS,
    PgScheduler,
    Workers,
    done_markers,
    leader_among,
    one_leader,
    ran_lines,
    stored_rows,
    wait_for_leader,
    wait_for_standby,
    write_tasks,
)

MakeScheduler = Callable[..., PgScheduler]

KEEP_ALIVE = {"CONVEYOR_WORKER__KEEP_ALIVE": "true"}
"""Each ``conveyor run`` of a shared graph waits for the tasks running on the other worker,
so both exit 0 once the whole graph is DONE."""


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A per-test marker; every process carrying it is killed after the test."""
    monkeypatch.chdir(tmp_path)
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER_VARIABLE, value)


@pytest.fixture
def schedulers(tmp_path: Path, pg_dsn: str, marker: str) -> Iterator[MakeScheduler]:
    """Starts schedulers on the test's database: ``make(name, lease=3.0, extra="")``; every
    one is killed (a paused one too) after the test."""
    made: list[PgScheduler] = []

    def make(name: str, lease: float = 3.0, extra: str = "") -> PgScheduler:
        server = PgScheduler(tmp_path, name, pg_dsn, marker, lease, extra)
        made.append(server)
        server.start(timeout=60)
        return server

    try:
        yield make
    finally:
        for server in made:
            server.close()


@pytest.fixture
def workers(tmp_path: Path, marker: str) -> Iterator[Workers]:
    """Starts ``conveyor`` CLI processes for the test and kills them all afterwards."""
    registry = Workers(tmp_path, marker)
    try:
        yield registry
    finally:
        registry.kill_all()


@pytest.fixture
def mod(tmp_path: Path) -> str:
    """The name of the task module (Root, Node, Blocker), importable by the processes."""
    return write_tasks(tmp_path)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The directory the tasks write into (markers, ran.log; outputs under ``out/``)."""
    path = tmp_path / "root"
    (path / "out").mkdir(parents=True)
    return path


def urls(*servers: PgScheduler) -> str:
    """The servers' URLs as one ``--scheduler-url`` value (comma-separated)."""
    return ", ".join(s.url for s in servers)


def add_task(task_id: str, worker: str = "registrar") -> dict[str, Any]:
    """The JSON body of an ``add_tasks`` call registering one PENDING task ``task_id``."""
    spec = TaskSpec(task_id=task_id, family="Probe", module="failover_probe")
    body = encode(AddTasks(worker, (spec,)))
    assert isinstance(body, dict)
    return body


def say(text: str) -> None:
    """A line for ``pytest -s`` (the take-over times)."""
    print(f"[failover] {text}", flush=True)


def assert_ran_once_and_done(
    root: Path, statuses: dict[str, str], rows: dict[str, dict[str, Any]], count: int
) -> None:
    """``count`` tasks, all DONE on the leader and in the store; each run exactly once (one
    ``ran.log`` line, one marker) and with one attempt in its stored history."""
    counts = collections.Counter(statuses.values())
    assert len(statuses) == count, counts
    assert counts == {"DONE": count}, counts
    assert done_markers(root) == set(statuses), "the markers are not the DONE tasks"
    runs = ran_lines(root)
    assert {t: n for t, n in runs.items() if n != 1} == {}, "tasks run more than once"
    assert set(runs) == set(statuses)
    assert {t: r["status"] for t, r in rows.items()} == statuses
    # the attempt history: one hand-out each, which succeeded
    histories = {t: [a["outcome"] for a in r["attempts"]] for t, r in rows.items()}
    assert {t: h for t, h in histories.items() if h != ["succeeded"]} == {}, "more attempts"


# --- leadership seen from outside ----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_health_says_who_leads_on_every_server(schedulers: MakeScheduler) -> None:
    """The first server leads; a second stands by and names it; both say so in /health."""
    s1 = schedulers("s1")
    wait_for_leader(s1, 60)
    s2 = schedulers("s2")
    wait_for_standby(s2, s1, 60)

    leader, standby = s1.health(), s2.health()
    assert leader is not None and standby is not None
    assert (leader["status"], leader["role"], leader["leader"]) == ("ok", "leader", s1.url)
    assert (standby["status"], standby["role"], standby["leader"]) == ("ok", "standby", s1.url)
    assert leader_among([s1, s2]) == [s1]


@pytest.mark.timeout(120)
def test_a_standby_answers_worker_routes_503_with_retry_after_and_the_leader(
    schedulers: MakeScheduler,
) -> None:
    """A standby refuses every worker-facing call (after the token check) with 503,
    Retry-After and the leader's URL, and changes nothing; the leader serves the same call."""
    s1 = schedulers("s1")
    wait_for_leader(s1, 60)
    s2 = schedulers("s2")
    wait_for_standby(s2, s1, 60)

    unauthorised = s2.request("POST", "/api/v1/add_tasks", add_task("T1"), {"Authorization": None})
    assert unauthorised.status == 401, unauthorised
    for route, body in [
        ("add_tasks", add_task("T1")),
        ("get_work", encode(GetWork("w1"))),
    ]:
        refused = s2.post(route, body)
        assert refused.status == 503, (route, refused)
        assert refused.headers.get("retry-after") == "1", refused.headers
        assert refused.json()["leader"] == s1.url
        assert s1.url in refused.error()
    workers = s2.request("GET", "/api/v1/workers")
    assert (workers.status, workers.json()["leader"]) == (503, s1.url)
    assert "T1" not in s1.statuses()  # the standby changed nothing

    accepted = s1.post("add_tasks", add_task("T1"))
    assert accepted.status == 200, accepted
    assert s1.statuses() == {"T1": "PENDING"}
    assert s2.statuses() == {"T1": "PENDING"}  # a standby reads what the leader stored


@pytest.mark.timeout(180)
def test_sigterm_on_the_leader_hands_over_before_its_lease_runs_out(
    schedulers: MakeScheduler,
) -> None:
    """A leader stopped cleanly gives the lease up, and the standby leads with the state the
    leader stored long before the lease would have run out.

    With a 60 s lease, renewed every 20 s, the lease the leader held when it was stopped runs
    until at least 40 s after the stop; the standby looks at least every 20 s, so it leads
    within about 20 s of a hand-over. The 35 s deadline tells the two apart without asking
    for any speed."""
    s1 = schedulers("s1", lease=60.0)
    wait_for_leader(s1, 60)
    s2 = schedulers("s2", lease=60.0)
    wait_for_standby(s2, s1, 60)
    assert s1.post("add_tasks", add_task("Kept")).status == 200

    stopped_at = time.monotonic()
    code = s1.terminate(timeout=30)
    assert code in (0, -signal.SIGTERM, 128 + signal.SIGTERM), (code, s1.output()[-2000:])
    wait_for_leader(s2, 35 - (time.monotonic() - stopped_at))
    say(f"SIGTERM hand-over: s2 led {time.monotonic() - stopped_at:.2f} s after the stop")
    assert s2.statuses() == {"Kept": "PENDING"}


# --- fencing -------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_paused_leader_is_fenced_and_steps_down(
    schedulers: MakeScheduler,
    workers: Workers,
    mod: str,
    root: Path,
    pg_dsn: str,
    pg_cluster: ThrowawayCluster,
) -> None:
    """A leader paused (SIGSTOP) past its lease while a standby takes over: a state change it
    received while paused is refused when it resumes, never stored; it stands by for the new
    leader, which goes on serving workers."""
    s1 = schedulers("s1", lease=2.0)
    wait_for_leader(s1, 60)
    s2 = schedulers("s2", lease=2.0)
    wait_for_standby(s2, s1, 60)
    assert s1.post("add_tasks", add_task("Before")).status == 200

    s1.signal(signal.SIGSTOP)
    try:
        took = wait_for_leader(s2, 60)
        say(f"s2 took over from the paused s1 after {took:.2f} s")
        # a state change for the paused leader: the kernel takes the connection and the
        # request; s1 reads it only once it runs again
        conn = http.client.HTTPConnection("127.0.0.1", s1.port, timeout=60)
        conn.request(
            "POST",
            "/api/v1/add_tasks",
            body=json.dumps(add_task("Fenced", worker="stale")),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {s1.token}"},
        )
    finally:
        s1.signal(signal.SIGCONT)
    try:
        response = conn.getresponse()
        status, retry_after = response.status, response.getheader("Retry-After")
        body = response.read()
    finally:
        conn.close()

    assert status == 503, (status, body[:500])
    assert retry_after == "1", retry_after
    assert json.loads(body)["leader"] in ("", s2.url), body
    wait_for_standby(s1, s2, 60)
    assert "Fenced" not in s2.statuses()
    assert "Fenced" not in stored_rows(pg_dsn)  # read from the database by a fresh store
    database = pg_dsn.rsplit("/", 1)[1]
    stored = pg_cluster.sql("SELECT task_id FROM conveyor.tasks ORDER BY task_id", database)
    assert stored == [("Before",)]
    assert s2.statuses() == {"Before": "PENDING"}

    refused = s1.post("add_tasks", add_task("Late"))
    assert (refused.status, refused.json()["leader"]) == (503, s2.url)
    assert s2.post("add_tasks", add_task("After")).status == 200
    assert s2.statuses() == {"Before": "PENDING", "After": "PENDING"}

    # a worker given both URLs, the deposed leader's first, runs a small graph on s2
    (root / "gate").touch()
    args = ["run", f"{mod}.Root", "--root", str(root), "--count", "7", "--width", "3"]
    run = workers.start("worker", *args, "--scheduler-url", urls(s1, s2), env=RIDE_OUT_FAILOVERS)
    assert workers.wait(run, timeout=120) == 0, workers.output(run)[-3000:]
    statuses = s2.statuses()
    graph = {t: s for t, s in statuses.items() if t not in ("Before", "After")}
    rows = {t: r for t, r in stored_rows(pg_dsn).items() if t in graph}
    assert_ran_once_and_done(root, graph, rows, 7)
    assert s1.role() == "standby"


# --- fail-over under load ------------------------------------------------------------------------


def wait_for_markers(root: Path, count: int, procs: list[subprocess.Popen[bytes]]) -> int:
    """Poll until at least ``count`` tasks have their marker (the workers still running);
    how many there are then."""

    def enough() -> int:
        for proc in procs:
            assert proc.poll() is None, f"a worker exited early with {proc.returncode}"
        found = len(done_markers(root))
        return found if found >= count else 0

    return int(wait_for(enough, 300, f"{count} tasks to run", 0.1))


@pytest.mark.timeout(600)
def test_two_leader_kills_run_every_task_exactly_once(
    schedulers: MakeScheduler,
    workers: Workers,
    mod: str,
    root: Path,
    pg_dsn: str,
) -> None:
    """2,000 tasks, two workers, two schedulers; the leader is ``kill -9``ed twice mid-run (a
    third of the way and two thirds of the way): both workers exit 0, every task ran exactly
    once, and the final states are DONE for exactly the tasks with markers — all of them."""
    count, width = 2000, 50
    s1 = schedulers("s1")
    wait_for_leader(s1, 60)
    s2 = schedulers("s2")
    wait_for_standby(s2, s1, 60)

    args = ["run", f"{mod}.Root", "--root", str(root), "--count", str(count)]
    args += ["--width", str(width), "--workers", "2"]
    env = {**RIDE_OUT_FAILOVERS, **KEEP_ALIVE}
    # Tasks wait at a gate until both workers registered the graph: a task finishing while
    # the second worker walks it would be registered PENDING again (it saw it incomplete),
    # and run twice — Luigi's semantics, not the fail-over's doing.
    w1 = workers.start("worker1", *args, "--scheduler-url", urls(s1, s2), env=env)

    def running(n: int) -> Callable[[], bool]:
        def check() -> bool:
            for proc in started:
                assert proc.poll() is None, workers.output(proc)[-3000:]
            statuses = s1.statuses()
            return len(statuses) == count and list(statuses.values()).count("RUNNING") == n

        return check

    started = [w1]
    wait_for(running(2), 180, "worker1 to register the graph and start 2 tasks", 0.5)
    w2 = workers.start("worker2", *args, "--scheduler-url", urls(s2, s1), env=env)
    started.append(w2)
    wait_for(running(4), 180, "worker2 to register the graph and start 2 tasks", 0.5)
    (root / "gate").touch()

    servers = [s1, s2]
    for third in (1, 2):
        marked = wait_for_markers(root, third * count // 3, started)
        assert marked < count
        # (the leader is normally the one expected; should a loaded machine have moved the
        # lease meanwhile, the one leading now is the one killed)
        leader = one_leader(servers, 60)
        (standby,) = [s for s in servers if s is not leader]
        leader.kill()
        took = wait_for_leader(standby, 120)
        say(f"kill -9 of {leader.name} with {marked} tasks run: {standby.name} led in {took:.2f} s")
        leader.start(timeout=60)  # again, as a standby
        wait_for_standby(leader, standby, 60)

    codes = [workers.wait(w, timeout=400) for w in started]
    for proc, code in zip(started, codes, strict=True):
        assert code == 0, workers.output(proc)[-3000:]
    leader = one_leader(servers, 60)
    assert_ran_once_and_done(root, leader.statuses(), stored_rows(pg_dsn), count)


@pytest.mark.timeout(300)
def test_postgresql_restart_mid_run_loses_nothing(
    schedulers: MakeScheduler,
    workers: Workers,
    mod: str,
    root: Path,
    pg_dsn: str,
    pg_cluster: ThrowawayCluster,
) -> None:
    """PostgreSQL goes away twice while a worker runs 400 tasks on two schedulers: restarted
    at once (a third of the way: the servers' connections are cut), then stopped until no
    server leads any more (its lease ran out unrenewed) and started again (two thirds of the
    way). A server leads again each time, the run exits 0, every task ran once, and every
    task is DONE in the store."""
    count = 400
    s1 = schedulers("s1")
    wait_for_leader(s1, 60)
    s2 = schedulers("s2")
    wait_for_standby(s2, s1, 60)
    servers = [s1, s2]

    (root / "gate").touch()
    args = ["run", f"{mod}.Root", "--root", str(root), "--count", str(count), "--width", "10"]
    args += ["--workers", "2", "--pause", "0.01", "--scheduler-url", urls(s1, s2)]
    run = workers.start("worker", *args, env=RIDE_OUT_FAILOVERS)

    marked = wait_for_markers(root, count // 3, [run])
    assert marked < count
    began = time.monotonic()
    pg_cluster.restart()
    say(f"PostgreSQL restarted with {marked} tasks run ({time.monotonic() - began:.2f} s)")
    leader = one_leader(servers, 60)
    say(f"{leader.name} leads after the restart")

    marked = wait_for_markers(root, 2 * count // 3, [run])
    assert marked < count
    pg_cluster.stop()
    try:
        began = time.monotonic()
        wait_for(lambda: not leader_among(servers), 60, "the leader to step down")
        gone = time.monotonic() - began
        say(f"PostgreSQL stopped with {marked} tasks run; no leader after {gone:.2f} s")
        assert run.poll() is None, workers.output(run)[-3000:]
    finally:
        pg_cluster.start()
    leader = one_leader(servers, 60)
    say(f"{leader.name} leads once PostgreSQL is back")

    assert workers.wait(run, timeout=240) == 0, workers.output(run)[-3000:]
    leader = one_leader(servers, 60)
    assert_ran_once_and_done(root, leader.statuses(), stored_rows(pg_dsn), count)


@pytest.mark.timeout(180)
def test_a_task_running_across_a_failover_finishes_once_on_the_new_leader(
    schedulers: MakeScheduler,
    workers: Workers,
    mod: str,
    root: Path,
    pg_dsn: str,
) -> None:
    """A task runs while its leader is ``kill -9``ed: the new leader loads it RUNNING, hands
    it to nobody, and takes the same worker's report; one attempt, DONE, run once."""
    s1 = schedulers("s1")
    wait_for_leader(s1, 60)
    s2 = schedulers("s2")
    wait_for_standby(s2, s1, 60)
    args = ["run", f"{mod}.Blocker", "--root", str(root), "--scheduler-url", urls(s1, s2)]
    run = workers.start("worker", *args, env=RIDE_OUT_FAILOVERS)
    wait_for((root / "b.pid").exists, 60, "the task to start")
    (task_id,) = wait_for(
        lambda: [t for t, s in s1.statuses().items() if s == "RUNNING"], 60, "it RUNNING"
    )

    s1.kill()
    took = wait_for_leader(s2, 60)
    say(f"kill -9 of s1 with a task running: s2 led after {took:.2f} s")
    assert s2.statuses() == {task_id: "RUNNING"}
    assert run.poll() is None, workers.output(run)[-3000:]
    (root / "b.go").touch()

    assert workers.wait(run, timeout=120) == 0, workers.output(run)[-3000:]
    pid = (root / "b.pid").read_text()
    assert (root / "out" / f"{task_id}.out").read_text() == pid  # the same process finished
    assert_ran_once_and_done(root, s2.statuses(), stored_rows(pg_dsn), 1)
