"""Shared helpers of the web UI's browser tests (SPEC §9): a real ``conveyor scheduler`` with
request helpers, real ``conveyor run`` workers, the task module they run, and page helpers.

Imported by ``tests/ui/conftest.py`` and the ``tests/ui/test_ui_*.py`` modules (pytest puts
``tests/ui`` on ``sys.path`` because the directory is not a package). Nothing here sleeps to
synchronise: everything polls with a deadline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from conveyor.testing.processes import (
    SchedulerProcess,
    child_env,
    kill_tree,
    wait_for,
)

MARKER = "UITEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
STATES = ("PENDING", "RUNNING", "DONE", "FAILED", "DISABLED", "UNKNOWN")

# Read when this module is imported (collection time): tests/conftest.py clears every
# CONVEYOR_* variable around each test.
SCREENSHOT_DIR = os.environ.get("CONVEYOR_UI_SCREENSHOTS", "")

XSS_IMG = "<img src=x onerror=window.__xss=1>"
XSS_SCRIPT = "</script><script>window.__xss=2</script>"
XSS_URL = "javascript:window.__xss=3"
XSS_WORKER = "<img src=x onerror=window.__xss=4>"
XSS_TASK_ID = "<b>bold</b><img src=x onerror=window.__xss=5>"

QUICK_WORKER = {
    "CONVEYOR_WORKER__WAIT_INTERVAL": "0.1",
    "CONVEYOR_WORKER__WAIT_JITTER": "0",
    "CONVEYOR_WORKER__PING_INTERVAL": "0.2",
}

# The tasks the real workers run. They talk to the tests through files in ``root``.
TASKS = f'''
import os

import conveyor
from conveyor.testing.processes import put, wait_file

XSS_IMG = {XSS_IMG!r}
XSS_SCRIPT = {XSS_SCRIPT!r}
XSS_URL = {XSS_URL!r}


class Base(conveyor.Task):
    root = conveyor.Parameter()

    def path(self, name):
        return os.path.join(self.root, name)

    def output(self):
        return conveyor.LocalTarget(self.path(self.task_id + ".out"))

    def finish(self):
        with self.output().open("w") as out:
            out.write("ok")


class Good(Base):
    n = conveyor.IntParameter()

    def run(self):
        self.set_status_message(f"good {{self.n}} done")
        self.finish()


class Bad(Base):
    def run(self):
        raise ValueError("the warehouse is on fire")


class BadA(Base):
    n = conveyor.IntParameter()

    def run(self):
        raise ValueError(f"bad a {{self.n}}")


class BadB(Base):
    def run(self):
        raise ValueError("bad b")


class Fragile(Base):
    """Disabled after its first failure."""

    retry_count = 1
    note = conveyor.Parameter(default="Needle-In-Param")

    def run(self):
        raise RuntimeError("fragile broke")


class Slowpoke(Base):
    """Runs past its timeout: the attempt is timed_out."""

    worker_timeout = 1.0

    def run(self):
        wait_file(self.path("never"), 60)
        self.finish()


class Dies(Base):
    """Its process exits without a word: the attempt is process_died."""

    def run(self):
        os._exit(4)


class Stuck(Base):
    """Runs until its worker is stopped by SIGTERM: the attempt is interrupted."""

    def run(self):
        put(self.path("stuck.started"), str(os.getpid()))
        wait_file(self.path("never"), 60)
        self.finish()


class Evil(Base):
    """Every value it publishes is an attempt at script injection."""

    img = conveyor.Parameter(default=XSS_IMG)
    script = conveyor.Parameter(default=XSS_SCRIPT)
    url = conveyor.Parameter(default=XSS_URL)

    def run(self):
        self.set_status_message(self.script)
        self.set_tracking_url(self.url)
        raise RuntimeError(f"evil {{self.img}} {{self.script}} {{self.url}}")


class Pipeline(conveyor.WrapperTask):
    """PENDING for ever: blocked behind failed and disabled dependencies."""

    root = conveyor.Parameter()

    def requires(self):
        return [
            Good(root=self.root, n=1),
            Good(root=self.root, n=2),
            Bad(root=self.root),
            Fragile(root=self.root),
            Evil(root=self.root),
            Slowpoke(root=self.root),
            Dies(root=self.root),
        ]


class ActionTargets(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [
            Bad(root=self.root),
            Fragile(root=self.root),
            BadA(root=self.root, n=1),
            BadA(root=self.root, n=2),
            BadB(root=self.root),
            Good(root=self.root, n=1),
        ]


class Gated(Base):
    """RUNNING until ``gate`` exists, holding one ``db``, with a message, progress and URL."""

    resources = {{"db": 1}}

    def run(self):
        self.set_status_message("halfway there")
        self.set_progress_percentage(42)
        self.set_tracking_url("http://tracking.invalid/job/42")
        put(self.path("gated.started"), str(os.getpid()))
        if not wait_file(self.path("gate"), 600):
            raise RuntimeError("the gate never opened")
        self.finish()


class Stepper(Base):
    """Publishes step one; step two once ``go2`` exists; DONE once ``go3`` exists."""

    def run(self):
        self.set_status_message("step one")
        self.set_progress_percentage(10)
        if not wait_file(self.path("go2"), 120):
            raise RuntimeError("go2 never came")
        self.set_status_message("step two")
        self.set_progress_percentage(60)
        if not wait_file(self.path("go3"), 120):
            raise RuntimeError("go3 never came")
        self.finish()
'''


def write_tasks(directory: Path, name: str) -> str:
    """Write the task module as ``directory/<name>.py``; return its name."""
    (directory / f"{name}.py").write_text(TASKS, encoding="utf-8")
    return name


class UiServer(SchedulerProcess):
    """A ``conveyor scheduler`` subprocess with request helpers for the UI tests."""

    def __init__(self, directory: Path, marker: str, *, token: str = "", config: str = "") -> None:
        """Describe the server (FAILED stays FAILED for an hour, workers are not dropped for
        ten minutes, plus ``config``); nothing is started yet."""
        directory.mkdir(parents=True, exist_ok=True)
        text = "[scheduler]\nretry_delay = 3600\nworker_disconnect_delay = 600\n"
        if token:
            text += f'[server]\ntoken = "{token}"\n'
        path = directory / "server.toml"
        path.write_text(text + config, encoding="utf-8")
        super().__init__(directory, path, child_env(directory, MARKER, marker))
        self.marker = marker
        self.token = token

    def json(self, method: str, path: str, body: Any = None) -> Any:
        """A request that must answer 200; its JSON."""
        reply = self.request(method, path, body)
        assert reply.status == 200, (method, path, reply.status, reply.body[:500])
        return reply.json()

    def tasks(self) -> dict[str, dict[str, Any]]:
        """``GET /api/v1/tasks``, by task id."""
        return {t["task_id"]: t for t in self.json("GET", "/api/v1/tasks")["tasks"]}

    def states(self) -> dict[str, str]:
        """Each task's status, by task id."""
        return {tid: t["status"] for tid, t in self.tasks().items()}

    def snapshot(self) -> list[tuple[Any, ...]]:
        """What a GET must never change: every task's id, status, worker and annotations."""
        keys = ("status", "worker", "status_message", "progress", "tracking_url", "explanation")
        return sorted((tid, *(t[k] for k in keys)) for tid, t in self.tasks().items())

    def worker_ids(self) -> set[str]:
        """The ids of the workers ``GET /api/v1/workers`` lists."""
        return {w["worker_id"] for w in self.json("GET", "/api/v1/workers")["workers"]}

    def add_tasks(self, worker_id: str, specs: Sequence[dict[str, Any]], chunk: int = 1000) -> None:
        """Register tasks through the worker API, ``chunk`` per request."""
        for start in range(0, len(specs), chunk):
            body = {"worker_id": worker_id, "tasks": list(specs[start : start + chunk])}
            self.json("POST", "/api/v1/add_tasks", body)

    def ui_task(self, task_id: str, cookie: str = "") -> dict[str, Any]:
        """The UI's detail of one task (``GET /ui/api/task``)."""
        headers = {"Cookie": cookie} if cookie else None
        reply = self.request("GET", "/ui/api/task?id=" + quote(task_id, safe=""), None, headers)
        assert reply.status == 200, (task_id, reply.status, reply.body[:300])
        detail: dict[str, Any] = reply.json()["task"]
        return detail

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.output()


def stderr_size(server: UiServer) -> int:
    """How many bytes the server wrote to its stderr so far."""
    return server.stderr.stat().st_size if server.stderr.exists() else 0


def audit_lines(server: UiServer, task_id: str, action: re.Pattern[str], since: int) -> list[str]:
    """Lines of the server's stderr after byte ``since`` naming ``task_id`` and ``action``."""
    with server.stderr.open("rb") as err:
        err.seek(since)
        text = err.read().decode("utf-8", errors="replace")
    return [line for line in text.splitlines() if task_id in line and action.search(line)]


class Workers:
    """Real ``conveyor run`` worker processes against one server; their output in files."""

    def __init__(self, server: UiServer, directory: Path, module: str) -> None:
        self.server = server
        self.directory = directory
        self.module = module
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self, **extra: str) -> dict[str, str]:
        """The workers' environment: quick polling, the token if the server has one."""
        more = dict(QUICK_WORKER)
        if self.server.token:
            more["CONVEYOR_SCHEDULER__TOKEN"] = self.server.token
        more.update(extra)
        return child_env(self.directory, MARKER, self.server.marker, **more)

    def start(self, family: str, *args: str, workers: int = 1) -> subprocess.Popen[bytes]:
        """Start ``conveyor run <module>.<family> *args`` in the background."""
        n = len(self.procs)
        with (
            (self.directory / f"worker{n}.out").open("wb") as out,
            (self.directory / f"worker{n}.err").open("wb") as err,
        ):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "conveyor",
                    "run",
                    f"{self.module}.{family}",
                    *args,
                    "--workers",
                    str(workers),
                    "--scheduler-url",
                    self.server.url,
                    "--log-level",
                    "warning",
                ],
                cwd=self.directory,
                env=self.env(),
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def run(self, family: str, *args: str, workers: int = 1, timeout: float = 60) -> int:
        """Run one worker to its end; its pid (the worker id is ``<host>-<pid>-1``)."""
        proc = self.start(family, *args, workers=workers)
        proc.wait(timeout=timeout)
        n = self.procs.index(proc)
        assert proc.returncode in (0, 1), (
            proc.returncode,
            (self.directory / f"worker{n}.err").read_text(errors="replace")[-3000:],
        )
        return proc.pid

    def stop(self) -> None:
        """Kill every worker this object started."""
        for proc in self.procs:
            kill_tree(proc.pid)
            proc.wait(timeout=10)


def worker_id_of(server: UiServer, pid: int) -> str:
    """The id of the worker process ``pid`` as the server lists it."""
    ids = [w for w in server.worker_ids() if re.fullmatch(rf".+-{pid}-\d+", w)]
    assert len(ids) == 1, (pid, server.worker_ids())
    return ids[0]


def by_family(server: UiServer, family: str) -> list[str]:
    """The ids of the server's tasks of one family, sorted."""
    return sorted(tid for tid, t in server.tasks().items() if t["family"] == family)


def fail_through_api(server: UiServer, worker_id: str, task_ids: Iterable[str]) -> None:
    """Register tasks, hand them out and report them failed, through the worker API."""
    ids = list(task_ids)
    server.add_tasks(worker_id, [{"task_id": t, "family": "Api", "module": "m"} for t in ids])
    for _ in ids:
        work = server.json("POST", "/api/v1/get_work", {"worker_id": worker_id})["work"]
        assert work is not None
        body = {
            "worker_id": worker_id,
            "task_id": work["task_id"],
            "explanation": f"ApiError: {work['task_id']} failed",
            "attempt": work["attempt"],
        }
        assert server.json("POST", "/api/v1/task_failed", body)["status"] == "FAILED"


# --- pages ------------------------------------------------------------------------------------


def ui_url(server: UiServer, route: str = "/") -> str:
    """The page's URL for a hash route such as ``/tasks?state=FAILED``."""
    return f"{server.url}/ui/#{route}"


def list_route(**filters: str) -> str:
    """``/tasks?state=..&family=..`` with the values URL-encoded."""
    return "/tasks?" + urlencode(filters, quote_via=quote) if filters else "/tasks"


def task_route(task_id: str) -> str:
    """The detail's hash route."""
    return "/task/" + quote(task_id, safe="")


def graph_route(task_id: str, down: bool = False) -> str:
    """The graph's hash route."""
    return "/graph/" + quote(task_id, safe="") + ("?down=1" if down else "")


def row_ids(page: Any) -> list[str]:
    """The ``data-task-id`` of every task-list row, in page order."""
    ids: list[str] = page.locator('[data-testid="task-row"]').evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-task-id'))"
    )
    return ids


def eventually(get: Callable[[], Any], want: Any, timeout: float, what: str) -> Any:
    """Poll ``get()`` until it equals ``want`` (:func:`wait_for`); on timeout, an
    AssertionError showing both."""
    seen: list[Any] = []

    def matches() -> bool:
        seen[:] = [get()]
        return bool(seen[0] == want)

    try:
        wait_for(matches, timeout, what)
    except AssertionError:
        raise AssertionError(
            f"{what}: after {timeout} s got {seen[0]!r}, expected {want!r}"
        ) from None
    return seen[0]


def rows_become(page: Any, want: Iterable[str], timeout: float = 30, what: str = "rows") -> None:
    """Wait until the list shows exactly the tasks ``want`` (in any order)."""
    eventually(lambda: sorted(row_ids(page)), sorted(want), timeout, what)


def screenshot(page: Any, name: str) -> None:
    """Save ``name`` in $CONVEYOR_UI_SCREENSHOTS when it is set; otherwise nothing."""
    if SCREENSHOT_DIR:
        Path(SCREENSHOT_DIR).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOT_DIR) / name), full_page=True)


def csp_directives(value: str) -> dict[str, list[str]]:
    """A Content-Security-Policy header as {directive: [sources]}."""
    out: dict[str, list[str]] = {}
    for part in value.split(";"):
        words = part.split()
        if words:
            out[words[0].lower()] = words[1:]
    return out


def check_security_headers(url: str, headers: dict[str, str]) -> None:
    """SPEC §9 Safety: the CSP and nosniff of one UI response (header names lower-case)."""
    csp = headers.get("content-security-policy")
    assert csp, f"{url}: no Content-Security-Policy header ({headers})"
    rules = csp_directives(csp)
    assert "'self'" in rules.get("default-src", []), (url, csp)
    scripts = rules.get("script-src", rules["default-src"])
    assert "'unsafe-inline'" not in scripts and "'unsafe-eval'" not in scripts, (url, csp)
    assert rules.get("frame-ancestors") == ["'none'"], (url, csp)
    assert headers.get("x-content-type-options", "").lower() == "nosniff", (url, headers)
