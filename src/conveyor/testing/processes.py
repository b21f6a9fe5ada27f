"""Helpers for tests that start real processes and servers (used by conveyor's own tests).

Poll instead of sleeping, pick free loopback ports, and leave no process behind: mark every
process a test starts with an environment variable and kill what carries it at teardown.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "Reply",
    "SchedulerProcess",
    "StubServer",
    "alive",
    "append_line",
    "child_env",
    "free_port",
    "gone_within",
    "http_request",
    "json_lines",
    "kill_marked",
    "kill_tree",
    "marked",
    "put",
    "serve_app",
    "wait_file",
    "wait_for",
]


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON log records in ``text`` (objects with an ``event``; other lines, such as the
    execution summary, are skipped)."""
    found = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "event" in record:
                found.append(record)
    return found


class StubServer:
    """A real HTTP server on loopback standing in for a scheduler: every ``POST`` is recorded
    in :attr:`asked` (its path) and answered ``answer(path)``, a status and a JSON body."""

    def __init__(self, answer: Callable[[str], tuple[int, object]]) -> None:
        """Start serving on a free port (:attr:`url`); :meth:`close` stops it."""
        self.asked: list[str] = []
        asked = self.asked

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                asked.append(self.path)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, body = answer(self.path)
                out = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05
) -> Any:
    """Poll ``predicate`` every ``interval`` seconds (longer for a look that costs the
    servers something) until it returns something truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` (loopback) that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants, and wait for them to go."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


def marked(variable: str, value: str) -> list[psutil.Process]:
    """Live processes (not this one) whose environment has ``variable=value``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(variable) == value and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def kill_marked(variable: str, value: str) -> None:
    """SIGKILL every live process carrying ``variable=value`` (orphans included)."""
    found = marked(variable, value)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(found, timeout=10)


def child_env(directory: Path, variable: str, marker: str, **extra: str) -> dict[str, str]:
    """This process's environment without ``CONVEYOR_*`` variables, with ``directory`` first on
    ``PYTHONPATH`` and ``variable=marker`` set (so the child can be found and killed later)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH")) if p)
    env[variable] = marker
    env.update(extra)
    return env


class SchedulerProcess:
    """A real ``conveyor scheduler`` subprocess on a free loopback port, for tests.

    Its state file, stdout and stderr live in ``directory``; it can be killed (``kill -9``) and
    started again on the same port and state. Subclass it to add request helpers.
    """

    token: str = ""
    """The bearer token the server's configuration sets: :meth:`request` sends it to ``/api/``."""

    def __init__(
        self,
        directory: Path,
        config: Path,
        env: dict[str, str],
        port: int = 0,
        flags: Sequence[str] = (),
    ) -> None:
        """Describe the server (``flags``: more ``conveyor scheduler`` options, such as
        ``--recover``); nothing is started yet."""
        self.flags = list(flags)
        self.directory = directory
        self.config = config
        self.env = env
        self.port = port or free_port()
        self.state = directory / "state.db"
        self.stdout = directory / "server.stdout"
        self.stderr = directory / "server.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str | None] | None = None,
    ) -> Reply:
        """One request on a fresh connection: a ``body`` that is not bytes or str is sent as
        JSON, declared so; the bearer token goes to every path but the web UI's (``/ui``…) when
        the server has one; ``headers`` come last, and one given as None is left out."""
        sent: dict[str, str | None] = {}
        data: bytes | str | None = None
        if body is not None:
            data = body if isinstance(body, bytes | str) else json.dumps(body)
            sent["Content-Type"] = "application/json"
        if self.token and not path.startswith("/ui"):
            sent["Authorization"] = f"Bearer {self.token}"
        sent.update(headers or {})
        return http_request(self.port, method, path, data, sent)

    def start(self, timeout: float = 30) -> None:
        """Start the server and wait (bounded) until ``GET /health`` answers 200."""
        args = ["--port", str(self.port), "--state-path", str(self.state)]
        with self.stdout.open("ab") as out, self.stderr.open("ab") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "conveyor",
                    "scheduler",
                    *args,
                    *self.flags,
                    "--config",
                    str(self.config),
                ],
                cwd=self.directory,
                env=self.env,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"the server exited with {proc.returncode} at start-up: {self.output()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        wait_for(healthy, timeout, f"the server on port {self.port} to answer /health")

    def kill(self) -> None:
        """SIGKILL the server (like ``kill -9``) and reap it."""
        if self.proc is not None:
            kill_tree(self.proc.pid)
            self.proc.wait(timeout=10)

    def output(self) -> str:
        """Everything the server printed so far, stdout then stderr."""
        return "".join(
            p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""
            for p in (self.stdout, self.stderr)
        )


def put(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically: a reader in another process never sees half of it.
    Each call writes a file of its own first, so a call from a signal handler that interrupts
    another (a process signalled twice) does not take that one's file away."""
    tmp = f"{os.fspath(path)}.tmp-{os.getpid()}-{next(_PUT_SERIAL)}"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)


_PUT_SERIAL = itertools.count()


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` and a newline to ``path`` with one ``O_APPEND`` write, so lines that
    several processes append never mix (what a task writes to say it ran)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@contextlib.contextmanager
def serve_app(build: Callable[[int], Any], host: str = "127.0.0.1") -> Iterator[int]:
    """Serve the ASGI app ``build(port)`` (an app that knows its own port, for the server's
    Host check) with the real uvicorn on a free port of ``host``, in a thread, lifespan
    included; yield the port, and stop it afterwards."""
    import uvicorn

    from ..server.main import bind_listener

    listener = bind_listener(host, 0)
    port = int(listener.getsockname()[1])
    config = uvicorn.Config(build(port), log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "uvicorn to start")
        yield port
    finally:
        server.should_exit = True
        thread.join(15)
        listener.close()


def wait_file(path: str | os.PathLike[str], timeout: float) -> bool:
    """Poll for ``path`` to exist for at most ``timeout`` seconds; True if it appeared."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@dataclass
class Reply:
    """One HTTP answer, as :func:`http_request` returns it; header names lower-case."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (an AssertionError naming the status if it is not)."""
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError(
                f"HTTP {self.status} body is not JSON: {self.body[:300]!r}"
            ) from None

    def error(self) -> str:
        """The ``error`` of a JSON error body."""
        error = self.json()["error"]
        assert isinstance(error, str), self
        return error


def http_request(
    port: int,
    method: str,
    path: str,
    body: bytes | str | None = None,
    headers: Mapping[str, str | None] | None = None,
    host: str = "127.0.0.1",
    timeout: float = 15,
) -> Reply:
    """One request on a fresh connection to ``host:port`` (a header given as None is left
    out); the answer, read whole."""
    sent = {k: v for k, v in (headers or {}).items() if v is not None}
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        answer = {k.lower(): v for k, v in response.getheaders()}
        return Reply(response.status, answer, response.read())
    finally:
        conn.close()


def alive(proc: psutil.Process) -> bool:
    """Whether ``proc`` (the very process, not a reuse of its pid) runs and is not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_within(procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Poll up to ``timeout`` seconds for ``procs`` to end; the survivors."""
    deadline = time.monotonic() + timeout
    while True:
        survivors = [p for p in procs if alive(p)]
        if not survivors or time.monotonic() > deadline:
            return survivors
        time.sleep(0.05)
