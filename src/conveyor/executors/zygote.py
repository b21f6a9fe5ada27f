"""The fork server: a single-threaded process that forks the ``fork`` executor's attempts.

``fork()`` in a process with several threads copies only the calling thread; a lock another
thread held at that moment (logging's, an HTTP connection's, the allocator's) stays held in the
child forever, and Python 3.12 warns about it. The worker has threads (the supervisor, the
scheduler pings), so it never forks an attempt itself: it asks its fork server.

The server is started when the executor is created. If the worker has one thread at that
moment — the usual case: ``conveyor run`` and ``conveyor.build()`` create the executor before
any thread — it is a ``fork()`` of the worker and shares everything the worker had imported and
defined until then. Otherwise it is a fresh interpreter (``python -m conveyor.executors.zygote``)
that imports task modules by name when it first needs them. Either way it never starts a thread,
so each attempt is forked from a process with exactly one.

Protocol, over two Unix socket pairs (no pickle: tasks travel as module, family and string
parameters):

- **requests** (worker → server): length-prefixed JSON. ``spawn`` carries the attempt (its
  :class:`~conveyor.protocol.AttemptSpec` in the protocol's codec, and its mark) (and,
  when they changed since the last one, the worker's environment, working directory and
  ``sys.path``) with the attempt's message-pipe and watchdog descriptors attached
  (``SCM_RIGHTS``); the server answers one JSON line, ``{"pid": n}`` or ``{"error": why}``.
  ``signal`` asks it to signal an attempt's process group; it is answered by nothing.
- **events** (server → worker): one JSON line ``{"pid": n, "status": s}`` per attempt process
  that exited, sent after the server killed what was left of its process group (while the
  exited process still held its pid, so a recycled pid is never hit) and reaped it.

The server exits when the worker closes its end (the worker exited, even by SIGKILL), killing
the process groups of attempts still running. An attempt process asks the kernel to kill its
process group when the server dies.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import psutil

from ..errors import ConveyorError, TaskLoadError
from ..protocol import AttemptSpec, decode, encode
from ..task import load_task_class
from ..tasklike import DEFAULT_LOADER
from .child import arm_parent_death, rebuild_and_run, reset_signals
from .proctree import MARK_VARIABLE, descendants, signal_tree

__all__ = ["ForkServer", "ServerGone", "SpawnRefused", "process_threads"]

_HEADER = struct.Struct("!I")
_MAX_FDS = 16
_SERVERS: weakref.WeakSet[ForkServer] = weakref.WeakSet()  # this process's open servers


class ServerGone(ConveyorError):
    """The fork server has exited (or its socket broke): start another one."""


class SpawnRefused(ConveyorError):
    """The fork server could not start the attempt (its task class could not be loaded, or
    ``fork()`` failed); ``exception_type`` names what went wrong there, ``load_error`` says
    whether it was the task class that could not be loaded."""

    def __init__(self, message: str, exception_type: str = "", load_error: bool = False) -> None:
        """Carry the server's explanation, the exception's class name and its kind."""
        super().__init__(message)
        self.exception_type = exception_type or "SpawnRefused"
        self.load_error = load_error


def _close_worker_ends() -> None:
    """In any child forked from the worker (a task's own multiprocessing, the embedding
    program's fork): drop the worker's ends of every fork server's sockets, or the servers
    would not see end of file when the worker exits."""
    for server in list(_SERVERS):
        server._requests.close()
        server._events.close()
    _SERVERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_worker_ends)


def process_threads() -> int:
    """How many threads this process has (the operating system's count where it is known)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


# --- the worker's side -----------------------------------------------------------------------


class ForkServer:
    """The worker's handle on one fork server process."""

    def __init__(self, log_level: str = "info", log_format: str = "json") -> None:
        """Start the server: a fork of this process if it has one thread, else a fresh one."""
        self._requests, their_requests = socket.socketpair()
        self._events, their_events = socket.socketpair()
        self._lock = threading.Lock()
        self._pending_signals: list[tuple[int, int]] = []
        self._sent_env: dict[str, str] | None = None
        self._sent_cwd = ""
        self._sent_path: list[str] = []
        self._popen: subprocess.Popen[bytes] | None = None
        self._reply_buffer = b""
        self._event_buffer = b""
        if hasattr(os, "fork") and process_threads() == 1:
            self.forked = True
            for stream in (sys.stdout, sys.stderr):  # or the server would print it again
                with contextlib.suppress(Exception):
                    stream.flush()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the server process, measured by the tests
                code = 0
                try:  # (the worker's ends of the other servers were closed at fork)
                    self._requests.close()
                    self._events.close()
                    _serve(their_requests, their_events)
                except BaseException:
                    code = 70
                finally:
                    os._exit(code)
            self.pid = pid
            # what the server inherited is what it knows: send only what changes from now on
            self._sent_env = dict(os.environ)
            self._sent_cwd = _cwd()
            self._sent_path = list(sys.path)
        else:
            self.forked = False
            fds = (their_requests.fileno(), their_events.fileno())
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            command = [sys.executable, "-m", "conveyor.executors.zygote", *map(str, fds)]
            self._popen = subprocess.Popen(
                [*command, log_level, log_format],
                pass_fds=fds,
                start_new_session=True,
                env=env,
            )
            self.pid = self._popen.pid
            self._sent_path = list(sys.path)
        their_requests.close()
        their_events.close()
        self._gone = False
        self._closed = False
        _SERVERS.add(self)

    @property
    def events_fd(self) -> int:
        """The descriptor to watch for exit events (readable, or end of file if it died)."""
        return self._events.fileno()

    @property
    def alive(self) -> bool:
        """Whether the server process still runs (reaps it if it exited)."""
        if self._gone:
            return False
        if self._popen is not None:
            self._gone = self._popen.poll() is not None
        else:
            with contextlib.suppress(ChildProcessError):
                self._gone = os.waitpid(self.pid, os.WNOHANG)[0] != 0
        return not self._gone

    def spawn(self, attempt: AttemptSpec, fds: list[int], mark: str) -> int:
        """Have the server fork the attempt (``fds``: its message and watchdog descriptors, kept
        open here; ``mark``: the value of its mark variable); its pid. ServerGone if the
        server is gone, SpawnRefused with its reason."""
        if self._gone:
            raise ServerGone("the fork server exited")
        with self._lock:
            message = {"op": "spawn", "attempt": encode(attempt), "mark": mark, **self._changes()}
            try:
                self._send(message, fds)
                line = self._reply_line()
            except OSError as exc:
                self._gone = True
                raise ServerGone(f"the fork server broke: {exc}") from None
            except BaseException:  # half an exchange: the next reply would be this one's
                self._gone = True
                raise
        self._flush_signals()
        if not line:
            self._gone = True
            raise ServerGone("the fork server exited")
        reply = json.loads(line)
        if "error" in reply:
            raise SpawnRefused(
                str(reply["error"]), str(reply.get("type", "")), reply.get("load_error") is True
            )
        pid: int = reply["pid"]
        return pid

    def signal(self, pid: int, signum: int) -> None:
        """Ask the server to send ``signum`` to the process group of its attempt ``pid`` (if it
        has not reaped it yet). Never blocks: from a signal handler, or while another thread
        is talking to the server, the request goes out as soon as that conversation ends."""
        self._pending_signals.append((pid, signum))
        self._flush_signals()

    def read_events(self) -> list[tuple[int, int]] | None:
        """The ``(pid, wait status)`` of attempt processes that exited since the last call
        (call when :attr:`events_fd` is readable); None once the server is gone."""
        try:
            data = self._events.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._gone = True
            return None
        self._event_buffer += data
        *lines, self._event_buffer = self._event_buffer.split(b"\n")
        events = []
        for line in lines:
            body = json.loads(line)
            events.append((int(body["pid"]), int(body["status"])))
        return events

    def close(self, timeout: float = 5.0) -> None:
        """Stop the server (it kills any attempt still running) and wait for it to exit; a
        second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self._gone = True
        _SERVERS.discard(self)
        for sock in (self._requests, self._events):
            with contextlib.suppress(OSError):  # end of file for the server, whoever else
                sock.shutdown(socket.SHUT_RDWR)  # holds a copy of this end
            sock.close()
        if self._popen is not None:
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()
            return
        with contextlib.suppress(ChildProcessError):
            for _ in range(int(timeout / 0.01)):
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
                threading.Event().wait(0.01)
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)

    def _reply_line(self) -> bytes:
        while b"\n" not in self._reply_buffer:
            data = self._requests.recv(4096)
            if not data:
                return b""
            self._reply_buffer += data
        line, _, self._reply_buffer = self._reply_buffer.partition(b"\n")
        return line

    def _changes(self) -> dict[str, Any]:
        """What changed since the last request (called with the lock held)."""
        changes: dict[str, Any] = {}
        env = dict(os.environ)
        if env != self._sent_env:
            changes["env"] = self._sent_env = env
        cwd = _cwd()
        if cwd != self._sent_cwd:
            changes["cwd"] = self._sent_cwd = cwd
        if sys.path != self._sent_path:
            changes["path"] = self._sent_path = list(sys.path)
        return changes

    def _send(self, message: Mapping[str, Any], fds: list[int]) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        data = _HEADER.pack(len(body)) + body
        sent = socket.send_fds(self._requests, [data], fds) if fds else 0
        self._requests.sendall(data[sent:])

    def _flush_signals(self) -> None:
        while self._pending_signals:
            if not self._lock.acquire(blocking=False):
                return  # whoever holds the lock flushes when it is done
            try:
                while self._pending_signals:
                    pid, signum = self._pending_signals.pop(0)
                    with contextlib.suppress(OSError):
                        self._send({"op": "signal", "pid": pid, "signum": signum}, [])
            finally:
                self._lock.release()


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed under us: nothing to pass on
        return ""


# --- the server's side -----------------------------------------------------------------------


class _Server:
    """The server loop's state: its sockets, its live attempt processes, its wake-up pipe."""

    def __init__(self, requests: socket.socket, events: socket.socket) -> None:
        self.requests = requests
        self.events = events
        self.live: set[int] = set()
        self.trees: dict[int, dict[int, psutil.Process]] = {}  # descendants seen, per attempt
        self.buffer = b""
        self.fds: list[int] = []
        self.wake_r, wake_w = os.pipe()
        self.wake_w = wake_w
        for fd in (self.wake_r, wake_w):
            os.set_blocking(fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(requests, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)

    def run(self) -> None:
        """Serve until the worker closes its end, then kill and reap what still runs."""
        signal.signal(signal.SIGCHLD, _ignore)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        try:
            while True:
                for key, _ in self.selector.select():
                    if key.fileobj == self.wake_r:
                        with contextlib.suppress(OSError):
                            os.read(self.wake_r, 4096)
                    elif not self._receive():
                        return
                self._reap()
        finally:
            self._shutdown()

    def _receive(self) -> bool:
        data, fds, _, _ = socket.recv_fds(self.requests, 65536, _MAX_FDS)
        self.fds.extend(fds)
        if not data:
            return False
        self.buffer += data
        while len(self.buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self.buffer)
            if len(self.buffer) < _HEADER.size + size:
                break
            body = self.buffer[_HEADER.size : _HEADER.size + size]
            self.buffer = self.buffer[_HEADER.size + size :]
            message = json.loads(body)
            if message["op"] == "spawn":
                self._spawn(message, self.fds[:2])
                del self.fds[:2]
            elif message["op"] == "signal" and message["pid"] in self.live:
                self._signal(message["pid"], message["signum"])
        return True

    def _signal(self, pid: int, signum: int) -> None:
        """Signal attempt ``pid`` (not reaped yet, so the pid is surely its): its group, and
        every descendant seen now or before (those that left the group with setsid)."""
        tree = self.trees.setdefault(pid, {})
        for proc in descendants(pid):
            tree.setdefault(proc.pid, proc)
        signal_tree(pid, signal.Signals(signum), list(tree.values()), scan=False)

    def _spawn(self, message: dict[str, Any], fds: list[int]) -> None:
        if "env" in message:
            os.environ.clear()
            os.environ.update(message["env"])
        if message.get("cwd"):
            with contextlib.suppress(OSError):
                os.chdir(message["cwd"])
        if "path" in message:
            sys.path[:] = message["path"]
        try:
            attempt = decode(AttemptSpec, message["attempt"], strict=False)
            # imported here, once: every later attempt of the family forks with it loaded
            if attempt.loader == DEFAULT_LOADER:
                load_task_class(attempt.module, attempt.family)
            else:  # another framework's task: its loader finds the class in the attempt
                importlib.import_module(attempt.module)
            if attempt.plugins:  # and its plugins' attempt hooks, loaded once here too
                from ..plugins import attempt_hooks

                attempt_hooks(attempt.plugins)
        except BaseException as exc:  # SystemExit at import included: the server stays up
            self._refuse(fds, exc)
            return
        msg_w, dog_r = fds
        server_pid = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # e.g. out of processes
            self._refuse(fds, exc)
            return
        if pid == 0:  # pragma: no cover - the attempt process, measured by the process tests
            code = 0
            try:
                self._become_attempt(message["mark"])
                arm_parent_death(server_pid, dog_r)
                rebuild_and_run(attempt, msg_w)
            except BaseException:  # the worker sees PROCESS_DIED with this code
                code = 70
            finally:
                os._exit(code)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race
        for fd in fds:
            os.close(fd)
        self.live.add(pid)
        self._reply({"pid": pid})

    def _refuse(self, fds: list[int], exc: BaseException) -> None:
        for fd in fds:
            os.close(fd)
        if isinstance(exc, TaskLoadError):
            why = (
                f"{exc} (the fork executor rebuilds each task in its fork server from module, "
                "family and parameters: define task classes at module level, or before the "
                "worker is created)"
            )
        else:
            why = f"the fork server could not start the attempt: {type(exc).__name__}: {exc}"
        load_error = isinstance(exc, TaskLoadError)
        self._reply({"error": why, "type": type(exc).__name__, "load_error": load_error})

    def _become_attempt(self, mark: str) -> None:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        reset_signals()
        self.selector.close()
        for fd in (self.wake_r, self.wake_w):
            os.close(fd)
        self.requests.close()
        self.events.close()
        os.environ[MARK_VARIABLE] = mark  # inherited by what the task starts

    def _reply(self, body: Mapping[str, Any]) -> None:
        self.requests.sendall(json.dumps(body).encode() + b"\n")

    def _reap(self) -> None:
        while self.live:
            try:
                found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if found is None:
                return
            pid = found.si_pid
            if pid not in self.live:  # not an attempt (a helper a module import started)
                os.waitpid(pid, 0)
                continue
            # the exited process still holds its pid (and group id): kill what is left of the
            # attempt's group, and the descendants seen when it was signalled, before reaping,
            # so no recycled id can be hit
            tree = self.trees.pop(pid, {})
            signal_tree(pid, signal.SIGKILL, list(tree.values()), scan=False)
            _, status = os.waitpid(pid, 0)
            self.live.discard(pid)
            self.events.sendall(json.dumps({"pid": pid, "status": status}).encode() + b"\n")

    def _shutdown(self) -> None:
        for pid in self.live:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        for pid in self.live:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _ignore(signum: int, frame: object) -> None:
    """SIGCHLD only has to wake the loop (through the wake-up descriptor)."""


def _serve(requests: socket.socket, events: socket.socket) -> None:
    """Run a fork server on these sockets (in a process with one thread)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # out of the terminal's group: Ctrl-C is the worker's to handle
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        _Server(requests, events).run()


def main(argv: list[str]) -> int:
    """``python -m conveyor.executors.zygote REQUESTS_FD EVENTS_FD LOG_LEVEL LOG_FORMAT``."""
    from ..config import LoggingSettings
    from ..log import configure_logging

    requests_fd, events_fd, level, fmt = argv
    configure_logging(LoggingSettings(level=level, format=fmt))
    _serve(socket.socket(fileno=int(requests_fd)), socket.socket(fileno=int(events_fd)))
    return 0


if __name__ == "__main__":  # pragma: no cover - the fresh-interpreter server
    sys.exit(main(sys.argv[1:]))
