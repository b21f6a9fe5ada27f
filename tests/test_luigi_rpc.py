"""Unmodified Luigi 3 workers (the real ``luigi`` CLI) against ``conveyor scheduler`` with
``[server] luigi_rpc = true``: graphs with dynamic dependencies, two workers on one graph, a
worker killed mid-task, a failing task's retries, the routes' security, and Luigi workers
mixed with a conveyor worker."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import signal
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.server.luigi_rpc import conveyor_worker_id
from conveyor.testing.processes import (
    Reply,
    SchedulerProcess,
    child_env,
    http_request,
    kill_marked,
    wait_file,
    wait_for,
)

pytest.importorskip("luigi")

pytestmark = pytest.mark.timeout(180)

TOKEN = "luigi-rpc-test-token"
MARKER = "LUIGI_RPC_MARKER"
SERVER_TOML = f"""\
[server]
luigi_rpc = true
token = "{TOKEN}"

[scheduler]
worker_disconnect_delay = 5
retry_delay = 1
retry_count = 2
"""
LUIGI_CFG = """\
[core]
rpc-retry-wait = 1

[worker]
keep_alive = true
wait_interval = 0.2
ping_interval = 0.5
"""

GRAPH = """
import os
import luigi


class Leaf(luigi.Task):
    n = luigi.IntParameter()

    def output(self):
        return luigi.LocalTarget(f"out/leaf-{self.n}.txt")

    def run(self):
        self.set_status_message(f"leaf {self.n} written")
        with self.output().open("w") as out:
            out.write(str(self.n))


class Extra(luigi.Task):
    def output(self):
        return luigi.LocalTarget("out/extra.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write("10")


class Top(luigi.Task):
    def requires(self):
        return [Leaf(n=i) for i in range(3)]

    def output(self):
        return luigi.LocalTarget("out/top.txt")

    def run(self):
        extra = yield Extra()  # a dynamic dependency
        total = sum(int(t.open().read()) for t in self.input()) + int(extra.open().read())
        with self.output().open("w") as out:
            out.write(str(total))


class Part(luigi.Task):
    '''One of 29 parts; part i needs part i - 10, so the graph has chains.'''

    i = luigi.IntParameter()

    def requires(self):
        return [Part(i=self.i - 10)] if self.i >= 10 else []

    def output(self):
        return luigi.LocalTarget(f"out/part-{self.i}.txt")

    def run(self):
        import time

        # a second run of the same task fails here: each part must run exactly once
        os.close(os.open(f"marks/{self.task_id}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        while not os.path.exists("go"):  # (the test lets parts finish once all workers run one)
            time.sleep(0.02)
        with self.output().open("w") as out:
            out.write(str(self.i))


class Fan(luigi.Task):
    def requires(self):
        return [Part(i=i) for i in range(29)]

    def output(self):
        return luigi.LocalTarget("out/fan.txt")

    def run(self):
        os.close(os.open(f"marks/{self.task_id}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        with self.output().open("w") as out:
            out.write("ok")


class Slow(luigi.Task):
    '''Runs until the file "release" exists; says it started by writing started-<pid>.'''

    def output(self):
        return luigi.LocalTarget("out/slow.txt")

    def run(self):
        import time

        open(f"started-{os.getpid()}", "w").close()
        while not os.path.exists("release"):
            time.sleep(0.05)
        with self.output().open("w") as out:
            out.write("slow")


class SlowTop(luigi.Task):
    def requires(self):
        return Slow()

    def output(self):
        return luigi.LocalTarget("out/slowtop.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write("top")


class Batched(luigi.Task):
    '''A task with a batch_method parameter: Luigi's worker calls add_task_batcher with
    max_batch_size=float("inf"), sent as Infinity.'''

    d = luigi.IntParameter(batch_method=max)

    def output(self):
        return luigi.LocalTarget(f"out/batched-{self.d}.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write(str(self.d))


class BatchTop(luigi.WrapperTask):
    def requires(self):
        return [Batched(d=i) for i in range(3)]


class Odd(luigi.Task):
    '''Values luigid takes that are not what conveyor's own API takes.'''

    priority = 1.5
    resources = {"gpu": 0.5}

    def output(self):
        return luigi.LocalTarget("out/odd.txt")

    def run(self):
        self.set_status_message(42)
        self.set_progress_percentage(12.5)
        with self.output().open("w") as out:
            out.write("odd")


class Broken(luigi.Task):
    def output(self):
        return luigi.LocalTarget("out/broken.txt")

    def run(self):
        with open("broken-runs", "a") as log:
            log.write("run\\n")
        raise RuntimeError("the broken task failed on purpose")
"""


class Server(SchedulerProcess):
    """A real ``conveyor scheduler`` with a token, serving Luigi's RPC."""

    token = TOKEN

    def tasks(self) -> dict[str, dict[str, Any]]:
        """``GET /api/v1/tasks``, by task id."""
        reply = self.request("GET", "/api/v1/tasks")
        assert reply.status == 200, reply
        return {t["task_id"]: t for t in reply.json()["tasks"]}

    def luigi_url(self, password: str = TOKEN) -> str:
        """The ``--scheduler-url`` a Luigi worker is given."""
        return f"http://luigi:{password}@127.0.0.1:{self.port}/"


class Env:
    """The test's directory, its task module, and the processes it starts."""

    def __init__(self, tmp_path: Path, marker: str) -> None:
        self.dir = tmp_path
        self.marker = marker
        (tmp_path / "out").mkdir()
        (tmp_path / "marks").mkdir()
        self.module = "lrpc_" + uuid.uuid4().hex[:8]
        (tmp_path / f"{self.module}.py").write_text(GRAPH, encoding="utf-8")
        (tmp_path / "luigi.cfg").write_text(LUIGI_CFG, encoding="utf-8")
        self.env = child_env(
            tmp_path, MARKER, marker, LUIGI_CONFIG_PATH=str(tmp_path / "luigi.cfg")
        )
        self.servers: list[Server] = []
        self.count = 0

    def server(self, toml: str = SERVER_TOML) -> Server:
        """Start a server configured by ``toml``."""
        config = self.dir / f"server-{len(self.servers)}.toml"
        config.write_text(toml, encoding="utf-8")
        server = Server(self.dir, config, self.env)
        self.servers.append(server)
        server.start()
        return server

    def luigi(
        self, server: Server, task: str, *flags: str, url: str | None = None
    ) -> tuple[subprocess.Popen[str], Path]:
        """Start an unmodified ``luigi`` CLI worker on ``task`` (its own process group; ``url``:
        its ``--scheduler-url``, the server's by default); return it and its log file."""
        self.count += 1
        log = self.dir / f"luigi-{self.count}.log"
        args = [sys.executable, "-m", "luigi", "--module", self.module, task]
        args += ["--scheduler-url", url or server.luigi_url(), "--workers", "1"]
        args += ["--retcode-task-failed", "3", "--retcode-scheduling-error", "5"]
        args += ["--retcode-already-running", "7", "--no-lock", *flags]  # (several per host)
        with log.open("w") as out:
            proc = subprocess.Popen(
                args,
                cwd=self.dir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        return proc, log

    def task_id(self, expr: str) -> str:
        """Luigi's own task id of ``expr`` (``"Leaf(n=1)"``), computed by luigi itself."""
        spec = importlib.util.spec_from_file_location(self.module, self.dir / f"{self.module}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return str(eval(expr, vars(module)).task_id)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """The test's environment; every process it started is killed at teardown."""
    marker = uuid.uuid4().hex
    made = Env(tmp_path, marker)
    yield made
    for server in made.servers:
        server.kill()
    kill_marked(MARKER, marker)


def finish(proc: subprocess.Popen[str], log: Path, timeout: float = 120) -> str:
    """Wait for a Luigi worker to exit; its output (AssertionError if it did not exit)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"the luigi worker did not finish: {log.read_text()}") from None
    return log.read_text()


def let_go_once_each_runs_a_part(server: Server, env: Env, workers: int) -> None:
    """Wait until ``workers`` different workers each run a part (parts wait for the file
    ``go``), then let every part finish: so each worker runs at least one task."""

    def running_on() -> set[str]:
        tasks = server.tasks().values()
        return {t["worker"] for t in tasks if t["status"] == "RUNNING" and t["worker"]}

    wait_for(lambda: len(running_on()) == workers, 90, f"{workers} workers to run a part each")
    (env.dir / "go").touch()


def runs_in(text: str, family: str) -> int:
    """How many runs of ``family`` a Luigi worker's log says finished (``done`` lines)."""
    return sum(1 for line in text.splitlines() if " done " in line and f"   {family}(" in line)


def test_a_luigi_worker_runs_a_graph_with_a_dynamic_dependency(env: Env) -> None:
    """One unmodified Luigi worker runs Top (3 leaves and a dynamic dependency) against the
    server: exit 0, the outputs Luigi computes, and every task DONE in conveyor's task list
    under Luigi's own task id, with the status message a task set."""
    server = env.server()
    proc, log = env.luigi(server, "Top")
    text = finish(proc, log)
    assert proc.returncode == 0, text
    assert (env.dir / "out" / "top.txt").read_text() == "13"  # 0 + 1 + 2 + 10
    listed = server.tasks()
    ids = [env.task_id(e) for e in ("Top()", "Extra()", "Leaf(n=0)", "Leaf(n=1)", "Leaf(n=2)")]
    assert {i: listed[i]["status"] for i in ids} == dict.fromkeys(ids, "DONE")
    top = listed[ids[0]]
    assert top["family"] == "Top"
    assert set(top["dependencies"]) == set(ids[1:])  # the dynamic one included
    assert listed[env.task_id("Leaf(n=1)")]["status_message"] == "leaf 1 written"
    assert listed[env.task_id("Leaf(n=1)")]["params"] == {"n": "1"}
    luigi_id = next(line for line in text.splitlines() if "Worker(salt=" in line)
    assert "running   Top()" in text and luigi_id


def test_two_luigi_workers_share_one_graph_and_run_each_task_once(env: Env) -> None:
    """Two Luigi CLI workers on one 30-task graph: every task runs exactly once (a second
    run would fail creating its marker), all DONE, both workers exit 0."""
    server = env.server()
    first = env.luigi(server, "Fan")
    second = env.luigi(server, "Fan")
    let_go_once_each_runs_a_part(server, env, 2)
    texts = [finish(*first), finish(*second)]
    assert (first[0].returncode, second[0].returncode) == (0, 0), texts
    assert len(list((env.dir / "marks").iterdir())) == 30
    assert all(runs_in(t, "Part") for t in texts), texts
    ran = sum(runs_in(t, "Part") + runs_in(t, "Fan") for t in texts)
    assert ran == 30, texts
    listed = server.tasks()
    assert len(listed) == 30
    assert {t["status"] for t in listed.values()} == {"DONE"}


def ui_detail(server: Server, task_id: str) -> dict[str, Any]:
    """The web UI's detail of a task (signed in with the token)."""
    login = server.request("POST", "/ui/login", {"token": TOKEN})
    assert login.status == 200, login
    cookie = login.headers["set-cookie"].split(";")[0]
    path = "/ui/api/task?" + urllib.parse.urlencode({"id": task_id})
    reply = server.request("GET", path, headers={"Cookie": cookie})
    assert reply.status == 200, reply
    detail: dict[str, Any] = reply.json()["task"]
    return detail


def test_a_killed_luigi_worker_loses_its_task_to_another(env: Env) -> None:
    """A Luigi worker SIGKILLed mid-task: after the disconnect delay its task fails, is
    retried, handed to the other Luigi worker and finishes; the killed attempt is in the
    task's history."""
    server = env.server()
    doomed, _ = env.luigi(server, "SlowTop")
    started = wait_for(lambda: list(env.dir.glob("started-*")), 60, "Slow to start")
    (first_pid,) = (int(p.name.split("-")[1]) for p in started)
    assert first_pid == doomed.pid  # (--workers 1: run() runs in the worker's process)
    survivor = env.luigi(server, "SlowTop")
    slow = env.task_id("Slow()")
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=10)
    wait_for(lambda: len(list(env.dir.glob("started-*"))) == 2, 60, "Slow to run again")
    (env.dir / "release").touch()
    text = finish(*survivor)
    assert survivor[0].returncode == 0, text
    assert (env.dir / "out" / "slowtop.txt").read_text() == "top"
    listed = server.tasks()
    assert listed[slow]["status"] == "DONE"
    assert listed[env.task_id("SlowTop()")]["status"] == "DONE"
    attempts = ui_detail(server, slow)["attempts"]
    outcomes = [a["outcome"] for a in attempts]
    assert outcomes == ["process_died", "succeeded"], attempts
    assert attempts[0]["worker"] != attempts[1]["worker"]


def test_a_failing_luigi_task_is_retried_then_disabled_with_its_explanation(env: Env) -> None:
    """A task that always fails: FAILED with Luigi's explanation, retried after
    retry_delay, DISABLED after retry_count = 2 failures; the worker exits 3 (task failed)."""
    server = env.server()
    proc, log = env.luigi(server, "Broken")
    text = finish(proc, log)
    assert proc.returncode == 3, text
    assert (env.dir / "broken-runs").read_text().count("run") == 2
    broken = server.tasks()[env.task_id("Broken()")]
    assert broken["status"] == "DISABLED"
    assert "the broken task failed on purpose" in broken["explanation"]
    assert "RuntimeError" in broken["explanation"]


def luigi_post(
    server: Server, method: str, body: bytes, headers: dict[str, str | None] | None = None
) -> Reply:
    """A raw POST to a Luigi RPC route, form-encoded, with the token as Basic password."""
    auth = base64.b64encode(f"luigi:{TOKEN}".encode()).decode()
    sent: dict[str, str | None] = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Authorization": f"Basic {auth}",
    }
    sent.update(headers or {})
    return http_request(server.port, "POST", f"/api/{method}", body, sent)


def test_the_luigi_routes_are_off_by_default_guarded_and_refuse_bad_bodies(env: Env) -> None:
    """Off: 404. On: a wrong or missing Basic password 401, a GET of a state-changing route
    405, another site's Origin refused, and malformed bodies 400 JSON errors naming the
    problem; a well-formed call answers Luigi's {"response": ...}."""
    off = env.server("[server]\n")
    reply = http_request(
        off.port,
        "POST",
        "/api/add_task",
        b"data=%7B%7D",
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert reply.status == 404 and "luigi_rpc" in reply.error()
    off.kill()

    server = env.server()
    ok = luigi_post(server, "ping", b"data=" + json.dumps({"worker": "w"}).encode())
    assert (ok.status, ok.json()) == (200, {"response": {"rpc_messages": []}})

    wrong = base64.b64encode(b"luigi:not-the-token").decode()
    for auth in (f"Basic {wrong}", None, f"Bearer {TOKEN}"):
        reply = luigi_post(server, "ping", b"data=%7B%7D", {"Authorization": auth})
        assert reply.status == 401, reply
        assert "password" in reply.error()

    auth = base64.b64encode(f"luigi:{TOKEN}".encode()).decode()
    got = http_request(
        server.port, "GET", "/api/add_task", None, {"Authorization": f"Basic {auth}"}
    )
    assert got.status == 405 and got.json()["error"]

    evil = luigi_post(server, "ping", b"data=%7B%7D", {"Origin": "http://evil.example"})
    assert evil.status == 403 and "evil.example" in evil.error()

    as_json = luigi_post(server, "ping", b'{"worker": "w"}', {"Content-Type": "application/json"})
    assert as_json.status == 415

    for body, expected in (
        (b"worker=w", "no data field"),
        (b"data=notjson", "not valid JSON"),
        (b"data=%5B1%5D", "expected a JSON object"),
        (b"data=" + json.dumps({"task_id": 5}).encode(), "task_id: expected a string"),
        (b"data=" + json.dumps({"task_id": "t"}).encode(), "worker: required"),
    ):
        reply = luigi_post(server, "add_task", body)
        assert reply.status == 400, (body, reply)
        assert expected in reply.error(), (body, reply.error())
    assert server.tasks() == {}


def test_a_stale_luigi_report_is_refused_without_failing_the_worker(env: Env) -> None:
    """A report of an attempt the scheduler took back and handed out again is answered 200
    with "refused" (Luigi ignores add_task's answer) and changes nothing."""
    server = env.server()

    def call(method: str, **args: Any) -> Any:
        reply = luigi_post(server, method, b"data=" + json.dumps(args).encode())
        assert reply.status == 200, reply
        return reply.json()

    spec = {"task_id": "T_1", "family": "T", "module": "m", "params": {}, "deps": []}
    for worker in ("wa", "wb"):
        call("add_task", worker=worker, status="PENDING", runnable=True, **spec)
    handed = call("get_work", worker="wa", current_tasks=[])["response"]
    assert handed["task_id"] == "T_1" and handed["task_family"] == "T"
    # wa goes silent: after the disconnect delay its attempt fails and is retried on wb
    again = wait_for(
        lambda: call("get_work", worker="wb", current_tasks=[])["response"]["task_id"],
        30,
        "the task to be handed to wb",
    )
    assert again == "T_1"
    late = call("add_task", worker="wa", status="DONE", runnable=None, expl='""', **spec)
    assert late["response"] is None and "refused" in late["refused"]
    assert server.tasks()["T_1"]["status"] == "RUNNING"
    # wa's late messages from run(): dynamic dependencies and a tracking URL, both refused
    new = {**spec, "new_deps": ["D_1"]}
    yielded = call("add_task", worker="wa", status="PENDING", runnable=None, expl='""', **new)
    assert yielded["response"] is None and "taken back" in yielded["refused"], yielded
    stale_url = {"task_id": "T_1", "status": "RUNNING", "tracking_url": "http://stale/"}
    assert "not running on that worker" in call("add_task", worker="wa", **stale_url)["refused"]
    t1 = server.tasks()["T_1"]
    assert (t1["status"], t1["worker"], t1["dependencies"]) == ("RUNNING", "wb", [])
    assert not t1["tracking_url"]
    assert "D_1" not in server.tasks()
    wb_url = {"task_id": "T_1", "status": "RUNNING", "tracking_url": "http://wb/"}
    assert "refused" not in call("add_task", worker="wb", **wb_url)
    assert server.tasks()["T_1"]["tracking_url"] == "http://wb/"
    done = call("add_task", worker="wb", status="DONE", runnable=None, expl='""', **spec)
    assert "refused" not in done
    assert server.tasks()["T_1"]["status"] == "DONE"


def test_luigi_tasks_with_a_batch_method_run_each_alone(env: Env) -> None:
    """Tasks with a ``batch_method`` parameter: Luigi's worker sends add_task_batcher with
    ``max_batch_size`` Infinity, answered as a no-op; every task runs alone and is DONE."""
    server = env.server()
    proc, log = env.luigi(server, "BatchTop")
    text = finish(proc, log)
    assert proc.returncode == 0, text
    assert [(env.dir / "out" / f"batched-{i}.txt").read_text() for i in range(3)] == ["0", "1", "2"]
    listed = server.tasks()
    ids = [env.task_id(f"Batched(d={i})") for i in range(3)] + [env.task_id("BatchTop()")]
    assert {i: listed[i]["status"] for i in ids} == dict.fromkeys(ids, "DONE")
    assert runs_in(text, "Batched") == 3, text

    data = '{"worker": "w", "task_family": "F", "batched_args": ["d"], "max_batch_size": Infinity}'
    reply = luigi_post(server, "add_task_batcher", b"data=" + urllib.parse.quote(data).encode())
    assert (reply.status, reply.json()) == (200, {"response": None})


def test_values_luigid_accepts_do_not_fail_a_luigi_worker(env: Env) -> None:
    """A task with ``priority = 1.5``, ``resources = {"gpu": 0.5}`` that calls
    ``set_status_message(42)`` runs under a real Luigi worker (priority 2, gpu 1, message
    "42"); raw calls with Infinity, NaN, fractions, negatives and non-string values are read
    leniently, while a wrong shape is still a 400."""
    server = env.server()
    proc, log = env.luigi(server, "Odd")
    text = finish(proc, log)
    assert proc.returncode == 0, text
    odd = server.tasks()[env.task_id("Odd()")]
    assert (odd["status"], odd["priority"], odd["status_message"]) == ("DONE", 2, "42")
    assert odd["progress"] == 12.5
    assert ui_detail(server, env.task_id("Odd()"))["resources"] == {"gpu": 1}

    def post(method: str, data: str) -> Reply:
        return luigi_post(server, method, b"data=" + urllib.parse.quote(data).encode())

    spec = '"worker": "w", "task_id": "L_1", "family": "L", "status": "PENDING", "runnable": true'
    odd_values = (
        ', "priority": 2.5, "params": {"n": 3, "s": "x"}, "retry_policy_dict": '
        '{"retry_count": 1.5, "disable_window": Infinity}, "resources": {"cpu": -1, "mem": NaN}'
    )
    assert post("add_task", "{" + spec + odd_values + "}").status == 200
    detail = ui_detail(server, "L_1")
    assert (detail["priority"], detail["retry_count"]) == (3, 2)  # (halves up)
    assert (detail["params"], detail["resources"]) == ({"n": "3", "s": "x"}, {"cpu": 0})
    infinite = spec.replace("L_1", "L_2") + ', "priority": Infinity'
    assert post("add_task", "{" + infinite + "}").status == 200
    assert ui_detail(server, "L_2")["priority"] == 0
    for note in ('"progress_percentage": "50"', '"progress_percentage": NaN'):
        assert (
            post("set_task_progress_percentage", '{"task_id": "L_1", ' + note + "}").status == 200
        )
    assert server.tasks()["L_1"]["progress"] == 50.0
    assert (
        post("set_task_status_message", '{"task_id": "L_1", "status_message": null}').status == 200
    )
    for data, field in (
        ("{" + spec + ', "resources": {"cpu": "x"}}', "resources.cpu"),
        ("{" + spec + ', "priority": "high"}', "priority"),
        ("{" + spec + ', "resources": [1]}', "resources"),
    ):
        reply = post("add_task", data)
        assert (reply.status, reply.json()["field"]) == (400, field), (data, reply)


def test_the_luigi_routes_refuse_cross_site_browser_requests(env: Env) -> None:
    """On Luigi's routes a 401 has no WWW-Authenticate challenge; Sec-Fetch-Site other than
    same-origin or none is refused, and so is a Referer naming another origin when there is
    no Origin; what Luigi and same-origin requests send is served."""
    server = env.server()
    ping = b"data=" + json.dumps({"worker": "w"}).encode()
    denied = luigi_post(server, "ping", ping, {"Authorization": None})
    assert denied.status == 401 and "www-authenticate" not in denied.headers
    for site in ("cross-site", "same-site", "Cross-Site"):
        reply = luigi_post(server, "ping", ping, {"Sec-Fetch-Site": site})
        assert reply.status == 403 and "Sec-Fetch-Site" in reply.error(), (site, reply)
    for site in ("same-origin", "none"):
        assert luigi_post(server, "ping", ping, {"Sec-Fetch-Site": site}).status == 200, site
    own = f"http://127.0.0.1:{server.port}"
    for referer in ("http://evil.example/page", f"http://127.0.0.1:{server.port + 1}/", "junk"):
        reply = luigi_post(server, "ping", ping, {"Referer": referer})
        assert reply.status == 403 and "Referer" in reply.error(), (referer, reply)
    assert luigi_post(server, "ping", ping, {"Referer": f"{own}/ui/"}).status == 200
    both = {"Referer": "http://evil.example/", "Origin": own}  # (the Origin is what counts)
    assert luigi_post(server, "ping", ping, both).status == 200


def test_disable_worker_is_refused_not_half_done(env: Env) -> None:
    """disable_worker would have to be stored to hold: it is answered 501 saying what to do
    instead, and the worker is still handed work."""
    server = env.server()
    reply = luigi_post(server, "disable_worker", b"data=" + json.dumps({"worker": "w"}).encode())
    assert reply.status == 501 and "SIGUSR1" in reply.error(), reply
    task = {"worker": "w", "task_id": "W_1", "family": "W", "status": "PENDING", "runnable": True}
    assert luigi_post(server, "add_task", b"data=" + json.dumps(task).encode()).status == 200
    work = luigi_post(server, "get_work", b"data=" + json.dumps({"worker": "w"}).encode())
    assert work.json()["response"]["task_id"] == "W_1", work
    assert work.json()["response"]["worker_state"] == "active"


def test_count_pending_counts_the_tasks_a_worker_registered_last(env: Env) -> None:
    """n_pending_last_scheduled as luigid counts it: pending tasks whose latest registration
    was this worker's (registering again keeps the order)."""
    server = env.server()

    def call(method: str, **args: Any) -> Any:
        reply = luigi_post(server, method, b"data=" + json.dumps(args).encode())
        assert reply.status == 200, reply
        return reply.json()["response"]

    def task(task_id: str) -> dict[str, Any]:
        return {"task_id": task_id, "family": "C", "status": "PENDING", "runnable": True}

    call("add_task", worker="wa", **task("C_1"))
    call("add_task", worker="wa", **task("C_2"))
    call("add_task", worker="wb", **task("C_2"))
    call("add_task", worker="wa", **task("C_2"))  # (again: wb stays the latest)
    mine = call("count_pending", worker="wa")
    assert (mine["n_pending_tasks"], mine["n_unique_pending"]) == (2, 1)
    assert mine["n_pending_last_scheduled"] == 1
    assert call("count_pending", worker="wb")["n_pending_last_scheduled"] == 1


def test_the_token_is_taken_utf8_or_latin1_encoded(env: Env) -> None:
    """A token with a non-ASCII character: a real Luigi worker given it percent-encoded
    (its requests fetcher sends it Latin-1 encoded) runs its task; raw Basic auth with the
    token as UTF-8 or as Latin-1 bytes is accepted, anything else is 401."""
    token = "t\u00f6ken-\u00fc"
    server = env.server(SERVER_TOML.replace(TOKEN, token))
    url = f"http://luigi:{urllib.parse.quote(token)}@127.0.0.1:{server.port}/"
    proc, log = env.luigi(server, "Extra", url=url)
    text = finish(proc, log)
    assert proc.returncode == 0, text
    assert (env.dir / "out" / "extra.txt").read_text() == "10"
    ping = b"data=" + json.dumps({"worker": "w"}).encode()
    for password, status in (
        (token.encode("utf-8"), 200),
        (token.encode("latin-1"), 200),
        (b"t\xf6ken", 401),
        (urllib.parse.quote(token).encode(), 401),
    ):
        auth = base64.b64encode(b"luigi:" + password).decode()
        reply = luigi_post(server, "ping", ping, {"Authorization": f"Basic {auth}"})
        assert reply.status == status, (password, reply)


def test_a_luigi_report_after_a_server_restart_is_fenced_by_the_stored_attempt(env: Env) -> None:
    """The server is killed (-9) and restarted while a Luigi worker runs a task: its report is
    matched to the attempt stored for it (the hand-outs kept in memory are gone), so another
    worker's report of that task is refused and the runner's is applied."""
    server = env.server()

    def call(method: str, **args: Any) -> Any:
        reply = luigi_post(server, method, b"data=" + json.dumps(args).encode())
        assert reply.status == 200, reply
        return reply.json()

    spec = {"task_id": "R_1", "family": "R", "module": "m", "params": {"x": "1"}}
    for worker in ("wa", "wb"):
        call("add_task", worker=worker, status="PENDING", runnable=True, **spec)
    assert call("get_work", worker="wa", current_tasks=[])["response"]["task_id"] == "R_1"
    server.kill()
    server.start()
    other = call("add_task", worker="wb", status="DONE", runnable=None, **spec)
    assert "never handed" in other["refused"]
    assert server.tasks()["R_1"]["status"] == "RUNNING"
    mine = call("add_task", worker="wa", status="DONE", runnable=None, **spec)
    assert "refused" not in mine
    assert server.tasks()["R_1"]["status"] == "DONE"


def test_luigi_worker_ids_map_deterministically_to_conveyor_ids() -> None:
    """Luigi's ids are kept as they are when they fit; others are made to fit, the same
    way every time."""
    luigi_id = "Worker(salt=123456789, workers=1, host=h, username=u, pid=42)"
    assert conveyor_worker_id(luigi_id) == luigi_id
    odd = "w\x00" + "x" * 2000
    mapped = conveyor_worker_id(odd)
    assert mapped == conveyor_worker_id(odd) and len(mapped) == 1000 and "\x00" not in mapped
    assert mapped != conveyor_worker_id("w\x00" + "x" * 1999)


def _plugin_ready() -> bool:
    try:
        import conveyor_luigi  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _plugin_ready(), reason="the conveyor-luigi plugin is not installed")
def test_two_luigi_workers_and_a_conveyor_worker_finish_one_graph_once(
    env: Env, run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """Two unmodified Luigi workers and one ``conveyor run`` of the same Luigi task (through
    the conveyor-luigi plugin) on one server finish the graph, each task exactly once, each
    of the three running some of it (one graph: Luigi's task ids on both sides)."""
    server = env.server()
    worker_toml = env.dir / "worker.toml"
    worker_toml.write_text(
        f'[scheduler]\ntoken = "{TOKEN}"\n\n[worker]\nkeep_alive = true\nwait_interval = 0.2\n',
        encoding="utf-8",
    )
    first = env.luigi(server, "Fan")
    second = env.luigi(server, "Fan")
    ours = subprocess.Popen(
        [
            *(sys.executable, "-m", "conveyor", "run", f"{env.module}.Fan"),
            *("--scheduler-url", server.url, "--config", str(worker_toml)),
        ],
        cwd=env.dir,
        env=env.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    let_go_once_each_runs_a_part(server, env, 3)
    out, _ = ours.communicate(timeout=150)
    texts = [finish(*first), finish(*second)]
    assert ours.returncode == 0, out
    assert (first[0].returncode, second[0].returncode) == (0, 0), texts
    assert len(list((env.dir / "marks").iterdir())) == 30
    listed = server.tasks()
    assert len(listed) == 30 and {t["status"] for t in listed.values()} == {"DONE"}
    assert wait_file(env.dir / "out" / "fan.txt", 1)
