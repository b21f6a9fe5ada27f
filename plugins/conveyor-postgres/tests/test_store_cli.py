"""The ``postgres`` store through the real CLI: ``conveyor scheduler`` refusing to start with
one line and exit code 2 (wrong password, nothing listening, a newer schema, an older one
while another server's lease is live), ``conveyor
config`` hiding the password, and a scheduler on PostgreSQL serving a run, its task list and
the web UI's counts."""

from __future__ import annotations

import json
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conveyor.protocol import TaskStatus
from conveyor.scheduler.persist import to_row
from conveyor.scheduler.policy import TaskRecord
from conveyor.secrets import REDACTED, redact
from conveyor.server.stores import StoreContext
from conveyor.testing.processes import SchedulerProcess, free_port, kill_marked, wait_for

from conveyor_postgres import SCHEMA_VERSION, PostgresStore
from conveyor_postgres.testing import ThrowawayCluster
from pg_support import (
    MARKER_VARIABLE,
    TASKS,
    child_env,
    conveyor,
    get_json,
    schema_2_store,
    set_lease,
    write_config,
)

WRONG = "Wr0ng-Passw0rd"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the test's processes, with a marker; they are all killed after."""
    marker = uuid.uuid4().hex
    yield child_env(tmp_path, marker)
    kill_marked(MARKER_VARIABLE, marker)


def _database(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


def _refused(tmp_path: Path, env: dict[str, str], config: Path) -> str:
    """Start a scheduler with ``config``: it must exit 2 with one error line; that line."""
    port = str(free_port())
    done = conveyor(tmp_path, env, "scheduler", "--port", port, "--config", str(config))
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor: error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


@pytest.mark.timeout(90)
def test_wrong_password_exits_2_with_one_line_without_it(
    pg_cluster: ThrowawayCluster, pg_dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    db = _database(pg_dsn)
    for name, dsn in (
        ("url", pg_cluster.dsn(db, password=WRONG)),
        ("keywords", f"host=127.0.0.1 port={pg_cluster.port} dbname={db} password={WRONG}"),
    ):
        line = _refused(tmp_path, env, write_config(tmp_path / f"{name}.toml", dsn=dsn))
        assert WRONG not in line, line
        assert f"127.0.0.1:{pg_cluster.port}/{db}" in line and "password authentication" in line


@pytest.mark.timeout(90)
def test_nothing_listening_exits_2_with_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    dsn = f"postgresql://conveyor:{WRONG}@127.0.0.1:{free_port()}/conveyor"
    line = _refused(tmp_path, env, write_config(tmp_path / "c.toml", dsn=dsn))
    assert WRONG not in line and "connection refused" in line.lower(), line


@pytest.mark.timeout(90)
def test_a_newer_schema_exits_2_naming_both_versions(
    pg_cluster: ThrowawayCluster, pg_dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    PostgresStore(StoreContext(settings={"dsn": pg_dsn})).close()
    pg_cluster.sql("UPDATE conveyor.schema_version SET version = 7", _database(pg_dsn))
    line = _refused(tmp_path, env, write_config(tmp_path / "c.toml", dsn=pg_dsn))
    assert "schema version 7" in line and f"understands ({SCHEMA_VERSION})" in line, line
    assert pg_cluster.password not in line


@pytest.mark.timeout(150)
def test_an_older_schema_is_not_migrated_while_another_lease_is_live(
    pg_cluster: ThrowawayCluster, pg_dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """A schema-2 store whose lease a server of the older release holds: the upgraded
    scheduler exits 2 with one line naming that server and both versions, and the store is
    still schema 2; once the lease ran out it migrates the store, leads and lists its tasks."""
    record = TaskRecord(
        task_id="Old(n=1)", seq=1, family="Old", module="m", params={"n": "1"},
        status=TaskStatus.DONE, deps=("Dep(n=2)",), registered=True,
    )  # fmt: skip
    schema_2_store(pg_dsn, [to_row(record)])
    old = "http://sched-old.internal:8082"
    set_lease(pg_dsn, 7, old, 600)
    config = write_config(tmp_path / "c.toml", dsn=pg_dsn)
    line = _refused(tmp_path, env, config)
    assert f"while {old!r} holds its lease (term 7" in line, line
    assert f"stored 2, this conveyor-postgres {SCHEMA_VERSION}" in line, line
    assert "stop every scheduler of the older version" in line and "start this one again" in line
    assert pg_cluster.password not in line
    version = "SELECT version FROM conveyor.schema_version"
    assert pg_cluster.sql(version, _database(pg_dsn)) == [(2,)]
    set_lease(pg_dsn, 7, old, -1)  # (it stopped: its lease ran out)
    server = SchedulerProcess(tmp_path, config, env)
    server.start(timeout=60)
    wait_for(lambda: get_json(server.url + "/health").get("role") == "leader", 60, "a leader")
    assert pg_cluster.sql(version, _database(pg_dsn)) == [(SCHEMA_VERSION,)]
    tasks = get_json(server.url + "/api/v1/tasks")["tasks"]
    assert [(t["task_id"], t["status"]) for t in tasks] == [("Old(n=1)", "DONE")], tasks
    assert tasks[0]["dependencies"] == ["Dep(n=2)"], tasks
    server.kill()
    assert "Traceback" not in server.output()


@pytest.mark.timeout(90)
def test_conveyor_config_never_shows_the_password(
    pg_cluster: ThrowawayCluster, pg_dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    db = _database(pg_dsn)
    secret = pg_cluster.password
    for name, dsn in (
        ("url", pg_dsn),
        ("keywords", f"host=127.0.0.1 port={pg_cluster.port} dbname={db} password={secret}"),
        ("quoted", f"host=127.0.0.1 dbname={db} password='{secret} x'"),
        # (review: each of these showed the password, or a part of it)
        ("url ?", f"postgresql://conveyor:{secret}?x@127.0.0.1/{db}"),
        ("url #", f"postgresql://conveyor:a#{secret}@127.0.0.1/{db}"),
        ("sslpassword", f"host=127.0.0.1 dbname={db} sslpassword={secret}"),
        ("escaped", f"host=127.0.0.1 dbname={db} password=p\\ {secret}"),
    ):
        config = write_config(tmp_path / f"{name}.toml", dsn=dsn)
        done = conveyor(tmp_path, env, "config", "--config", str(config))
        assert done.returncode == 0, done.stderr
        assert "[state_stores.postgres]" in done.stdout, done.stdout
        assert secret not in done.stdout + done.stderr, (name, done.stdout)
        assert "127.0.0.1" in done.stdout


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://u:pa?S3cr3t@h/db", "S3cr3t"),
        ("postgresql://u:pa#S3cr3t@h/db?sslmode=require", "S3cr3t"),
        ("postgresql://u:p@S3cr3t@h/db", "S3cr3t"),
        ("postgresql://h/db?sslmode=require&password=a#S3cr3t", "S3cr3t"),
        ("host=h sslpassword=S3cr3t user=u", "S3cr3t"),
        ("host=h password='a S3cr3t' user=u", "S3cr3t"),
        ("host=h password='it\\'s S3cr3t' user=u", "S3cr3t"),
        ("host=h password=p\\ S3cr3t user=u", "S3cr3t"),
        ("host=h password=ab'S3cr3t user=u", "S3cr3t"),
    ],
)
def test_redact_hides_every_way_libpq_takes_a_password(dsn: str, secret: str) -> None:
    shown = redact("dsn", dsn)
    assert secret not in shown and REDACTED in shown, shown
    assert "h" in shown and (" user=u" in shown or "/db" in shown), shown


@pytest.mark.timeout(90)
def test_an_unparseable_dsn_exits_2_with_one_line_without_the_password(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """libpq's message ends in a newline: the error is one line all the same."""
    line = _refused(
        tmp_path, env, write_config(tmp_path / "c.toml", dsn="postgresql://u:s3cr%zzet@h/db")
    )
    assert "is not a PostgreSQL connection string" in line and "s3cr" not in line, line


@pytest.mark.timeout(180)
def test_a_scheduler_on_postgresql_serves_a_run(
    pg_dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """A real scheduler on the store (its DSN in a file) leads, serves a `conveyor run` of a
    3-task graph, and lists the tasks in /api/v1/tasks and the web UI's counts."""
    (tmp_path / "pgtasks.py").write_text(TASKS, encoding="utf-8")
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(pg_dsn + "\n", encoding="utf-8")
    config = write_config(tmp_path / "server.toml", dsn_file=str(dsn_file))
    server = SchedulerProcess(tmp_path, config, env)
    server.start(timeout=60)
    wait_for(
        lambda: get_json(server.url + "/health").get("role") == "leader",
        60,
        "the scheduler to take the lease and lead",
    )
    out = tmp_path / "out"
    out.mkdir()
    done = conveyor(
        tmp_path,
        env,
        "run",
        "pgtasks.Root",
        "--root",
        str(out),
        "--scheduler-url",
        server.url,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tasks = get_json(server.url + "/api/v1/tasks")["tasks"]
    assert len(tasks) == 3 and {t["status"] for t in tasks} == {"DONE"}, tasks
    summary = get_json(server.url + "/ui/api/summary")
    assert summary["counts"]["DONE"] == 3 and summary["total"] == 3, summary
    # what the scheduler acknowledged is in the database
    store = PostgresStore(StoreContext(settings={"dsn": pg_dsn}))
    try:
        assert store.summary().counts["DONE"] == 3
    finally:
        store.close()
    server.kill()
    assert pg_dsn.split("@")[0].split(":")[-1] not in server.output()


@pytest.mark.timeout(240)
def test_a_ui_read_while_postgresql_is_down_is_a_503_without_a_traceback(
    pg_cluster: ThrowawayCluster, pg_dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """The web UI's counts with PostgreSQL stopped: 503 with Retry-After and a JSON error
    naming PostgreSQL, no traceback in the server's output; answered again once it is back."""
    server = SchedulerProcess(tmp_path, write_config(tmp_path / "server.toml", dsn=pg_dsn), env)
    server.start(timeout=60)
    wait_for(lambda: get_json(server.url + "/health").get("role") == "leader", 60, "a leader")
    assert get_json(server.url + "/ui/api/summary")["total"] == 0
    pg_cluster.stop()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            get_json(server.url + "/ui/api/summary")
        assert refused.value.code == 503, refused.value
        assert refused.value.headers.get("Retry-After"), dict(refused.value.headers)
        body = json.loads(refused.value.read())
        assert "PostgreSQL" in body["error"] and pg_cluster.password not in body["error"], body
    finally:
        pg_cluster.start()
    wait_for(
        lambda: _answers(server.url + "/ui/api/summary"), 60, "the counts once PostgreSQL is back"
    )
    server.kill()
    output = server.output()
    assert "Traceback" not in output and pg_cluster.password not in output, output


def _answers(url: str) -> bool:
    try:
        return bool(get_json(url)["total"] == 0)
    except urllib.error.HTTPError:
        return False


@pytest.mark.timeout(300)
def test_the_readme_tour_runs_on_a_postgresql_scheduler(
    pg_dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """The README's tour, its tasks taken from the README itself, against `conveyor scheduler`
    with `state_store = "postgres"`: the outputs are made and both tasks are DONE in the
    database."""
    readme = Path(__file__).resolve().parents[3] / "README.md"
    tour = readme.read_text(encoding="utf-8").split("```python\n", 1)[1].split("```", 1)[0]
    assert "class Shout" in tour, "the README's first Python block is no longer the tour"
    (tmp_path / "mymodule.py").write_text(tour, encoding="utf-8")
    server = SchedulerProcess(tmp_path, write_config(tmp_path / "server.toml", dsn=pg_dsn), env)
    server.start(timeout=60)
    wait_for(lambda: get_json(server.url + "/health").get("role") == "leader", 60, "a leader")
    done = conveyor(
        tmp_path, env, "run", "mymodule.Shout", "--name", "world",
        "--scheduler-url", server.url, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "out" / "shout-world.txt").read_text() == "HELLO WORLD\n"
    store = PostgresStore(StoreContext(settings={"dsn": pg_dsn}))
    try:
        stored = {t.family: t.status for t in store.task_infos()}
    finally:
        store.close()
    assert stored == {"Greeting": "DONE", "Shout": "DONE"}
