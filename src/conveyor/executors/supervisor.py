"""Watching attempt processes: messages, exits, timeouts and kills, on one thread.

Every child an executor starts is handed to the :class:`Supervisor`, which multiplexes, with a
selector, each child's message pipe and a pidfd that becomes readable when the child exits.
It enforces deadlines (SIGTERM to the whole tree, SIGKILL ``kill_grace`` seconds later), reaps
every child, kills what is left of its process group, and reports exactly one outcome per
attempt: the child's own, or TIMED_OUT, PROCESS_DIED, or an interruption.

When to stop a process, and how, is not decided here: each child has a
:class:`~.deadline.Deadline` of the supervisor's :class:`~.deadline.DeadlinePolicy`, measured on
the executor's injected clock (``ExecutorContext.clock``, the worker's own), which says which
:class:`~.deadline.Step` is due; the supervisor only performs it. So a
``conveyor.testing.FakeClock`` drives timeouts: moving it past a deadline wakes the supervisor,
which terminates the attempt as if the time had passed.

A child tells how far it got (:class:`~.channel.Stage`: its task loaded, its ``run()``
starting); a timeout that fires before ``run()`` started says so, and what the process was
still doing (its start-up, or checking the task's dependencies), since a timeout clock that
includes interpreter start-up can run out before any of the task's code ran.

An attempt with a memory limit (:attr:`Child.memory_limit`) has the resident memory of its
process tree sampled every :data:`MEMORY_EVERY` seconds (real time) while it runs — only while
some attempt has one: nothing is sampled otherwise. Past the limit the tree is stopped like at a
timeout, and the attempt is PROCESS_DIED "exceeded memory limit 2 GiB (peak 2.1 GiB)", the
peak being the highest sample. What is counted is RSS (see :class:`~.proctree.TreeMemory`).

Every attempt's environment carries a mark (:data:`~.proctree.MARK_VARIABLE`). After attempts
end — at most every :data:`SWEEP_EVERY` seconds while others run, at once when none does, and
when the executor closes — processes still carrying the mark of an ended attempt (a helper that
left the process group with ``setsid``) are killed, and the leak is logged with their command
line.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import itertools
import os
import selectors
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import psutil
import structlog

from ..clock import SYSTEM, Clock
from ..sizes import format_size
from ..tasklike import DEFAULT_LOADER
from .base import (
    FAILED,
    MEMORY_REASON,
    PROCESS_DIED,
    TIMED_OUT,
    ExecutorContext,
    Outcome,
    Sink,
)
from .channel import AttemptStage, LineReader, Stage, decode
from .deadline import Announcing, Deadline, DeadlinePolicy, Step
from .proctree import (
    MARK_VARIABLE,
    ProcessTable,
    TreeMemory,
    descendants,
    marked_leftovers,
    signal_each,
    signal_tree,
)

if TYPE_CHECKING:
    from ..settings import Field
    from .zygote import ForkServer

__all__ = [
    "MEMORY_EVERY",
    "MEMORY_REASON",
    "Child",
    "ProcessExecutor",
    "Supervisor",
    "memory_error",
]

_POLL = 0.1  # seconds between waitpid() polls where pidfd_open is unavailable
_NEVER = float("inf")
SWEEP_EVERY = 0.25  # seconds between two searches for left-behind processes while busy
MEMORY_EVERY = 0.2
"""Seconds (real time) between two samples of the memory of the attempts that have a limit."""
log = structlog.get_logger("conveyor.executors")


class _Stop(enum.Enum):
    """Why the supervisor stopped an attempt's process."""

    TIMED_OUT = "its timeout ran out"
    MEMORY = "its process tree exceeded its memory limit"
    SERVER_DIED = "the fork server that started it died"
    INTERRUPTED = "the worker was interrupted"


@dataclass(eq=False)
class Child:
    """One attempt process as the supervisor tracks it."""

    pid: int
    task_id: str
    sink: Sink
    msg_fd: int
    dog_fd: int
    timeout: float
    pidfd: int | None = None
    reader: LineReader = field(default_factory=LineReader)
    outcome: Outcome | None = None
    stopped: _Stop | None = None
    """Why the supervisor stopped it (None: it was not stopped)."""
    interrupted_by: str = ""
    """With :attr:`_Stop.INTERRUPTED`: what interrupted it (``SIGTERM``...)."""
    tree: list[psutil.Process] = field(default_factory=list)
    popen: Any = None
    closed: bool = False
    mark: str = ""
    """The value of the attempt's mark variable (set by the executor before it starts)."""
    server: ForkServer | None = None
    """The fork server whose child this is (it signals the group and reports the exit);
    None for the executor's own children."""
    startup: str = "process start-up"
    """What the process does before it has loaded its task, as a timeout then explains it
    (``interpreter start-up`` for a fresh interpreter)."""
    stage: AttemptStage | None = None
    """How far the process has said it got (None: nothing said yet)."""
    loader: str = DEFAULT_LOADER
    """The task loader that rebuilds the dependencies the attempt yields (its spec's)."""
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    """The context of the thread that started the attempt (the worker's, with its
    ``[tasks.*]`` defaults): the dependencies it yields are rebuilt in it, on this thread."""
    deadline: Deadline = field(init=False, default_factory=lambda: Deadline(0.0, 0.0, 0.0))
    """Its timeout and the escalation so far (none until :meth:`Supervisor.watch` sets it)."""
    memory_limit: int = 0
    """The most resident memory (bytes) its process tree may hold; 0: no limit."""
    peak: int = 0
    """The highest resident memory of its tree sampled so far (bytes; with a limit only)."""
    memory: TreeMemory | None = field(init=False, default=None)
    """Its tree's memory, sampled while it runs (with a limit only; set by
    :meth:`Supervisor.watch`, None again once it is gone)."""

    def stop_for(self, why: _Stop, by: str = "") -> None:
        """Record why it is being stopped, unless it is being stopped already (the first
        cause stands); ``by`` names an interruption (``SIGTERM``)."""
        if self.stopped is None:
            self.stopped, self.interrupted_by = why, by

    def before_run(self) -> str:
        """What the process was doing if ``run()`` has not started yet, else ""."""
        if self.stage is AttemptStage.RUNNING:
            return ""
        if self.stage is AttemptStage.LOADED:
            return "checking completeness and dependencies"
        return self.startup


class Supervisor:
    """Owns every running attempt process of one executor."""

    def __init__(self, kill_grace: float, clock: Clock = SYSTEM) -> None:
        """Create an idle supervisor whose deadlines run on ``clock``; its thread starts with
        the first child."""
        self.kill_grace = kill_grace
        self.policy = DeadlinePolicy(kill_grace, clock)
        self._lock = threading.RLock()  # re-entered by a signal handler on the loop thread
        self._children: dict[int, Child] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread: threading.Thread | None = None
        self._closing = False
        self._idle = threading.Condition(self._lock)
        self.token = uuid.uuid4().hex[:12]  # this executor's attempts' marks start with it
        self._serials = itertools.count(1)
        self._live_marks: set[str] = set()  # issued to attempts not reaped yet
        self._swept = 0.0
        self._sweep_due = False  # an attempt ended since the last sweep
        self._sampled = 0.0  # when the memory of the attempts with a limit was last sampled
        self._servers: set[ForkServer] = set()  # whose exit events the selector watches
        self._early: dict[tuple[ForkServer, int], int] = {}  # exits reported before watch()
        self._due: list[tuple[Child, int]] = []  # their children, to reap on the loop
        self.interrupts = 0  # how many interrupt() calls so far (see watch's ``since``)
        self._interrupt: tuple[str, bool] = ("", False)  # the last one's reason and hardness
        self._unsubscribe: Callable[[], None] | None = None
        if not clock.blocks and isinstance(clock, Announcing):  # woken when it is moved
            self._unsubscribe = clock.on_advance(self._wake)

    def next_mark(self) -> str:
        """A new attempt's mark, ``<token>-<serial>``: live from now on (its process may be
        running before :meth:`watch` sees it) until its child is reaped."""
        mark = f"{self.token}-{next(self._serials)}"
        with self._lock:
            self._live_marks.add(mark)
        return mark

    def release_mark(self, mark: str) -> None:
        """Forget a mark whose attempt never started (its process could not be created)."""
        with self._lock:
            self._live_marks.discard(mark)

    # --- called from the worker's thread ---------------------------------------------------

    def watch(self, child: Child, since: int | None = None) -> None:
        """Start supervising ``child`` (already running). ``since``: the value of
        :attr:`interrupts` before its process was asked for; an interrupt that came while it
        was being started applies to it too."""
        server = child.server
        child.deadline = self.policy.start(child.timeout)
        # a fork server's child has a pidfd too (not watched: the server reports the exit),
        # to kill it surely if the server dies
        child.pidfd = _pidfd(child.pid)
        if child.memory_limit > 0:
            with contextlib.suppress(psutil.Error):  # (gone already: its exit is reported)
                child.memory = TreeMemory(child.pid)
        with self._lock:
            self._children[child.pid] = child
            self._selector.register(child.msg_fd, selectors.EVENT_READ, ("msg", child))
            if server is None and child.pidfd is not None:
                self._selector.register(child.pidfd, selectors.EVENT_READ, ("exit", child))
            if server is not None:
                if server not in self._servers:
                    self._servers.add(server)
                    self._selector.register(server.events_fd, selectors.EVENT_READ, server)
                if (server, child.pid) in self._early:
                    self._due.append((child, self._early.pop((server, child.pid))))
            missed = since is not None and since != self.interrupts
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="conveyor-supervisor", daemon=True
                )
                self._thread.start()
        if missed:
            reason, hard = self._interrupt
            child.stop_for(_Stop.INTERRUPTED, reason)
            self._terminate(child, hard)
        self._wake()

    def interrupt(self, reason: str, hard: bool) -> None:
        """Kill every running attempt (TERM then KILL, or KILL at once) as interrupted."""
        with self._lock:
            self.interrupts += 1
            self._interrupt = (reason, hard)
            children = list(self._children.values())
        for child in children:
            if child.closed:
                continue
            child.stop_for(_Stop.INTERRUPTED, reason)
            self._terminate(child, hard)
        self._wake()

    def stop(self, pid: int, reason: str, hard: bool = False) -> None:
        """Stop the one attempt whose process is ``pid`` (if still running) as interrupted."""
        with self._lock:
            child = self._children.get(pid)
        if child is None or child.closed:
            return
        child.stop_for(_Stop.INTERRUPTED, reason)
        self._terminate(child, hard)
        self._wake()

    def stop_task(self, task_id: str, reason: str) -> bool:
        """Stop the running attempt of ``task_id`` (TERM, then KILL after the grace) as
        interrupted by ``reason``; False if no attempt of it runs here."""
        with self._lock:
            found = [c for c in self._children.values() if c.task_id == task_id and not c.closed]
        for child in found:
            child.stop_for(_Stop.INTERRUPTED, reason)
            self._terminate(child, False)
        if found:
            self._wake()
        return bool(found)

    def sweep(self) -> int:
        """Kill every process carrying the mark of an attempt that has ended; how many."""
        self._swept = time.monotonic()
        self._sweep_due = False
        killed = 0
        # the live set itself, not a copy: a mark is added before its attempt's process exists
        # and removed only once it is reaped, so a process seen with a mark that is not in it
        # *at the time it is seen* belongs to an attempt that has ended
        for pid, mark in marked_leftovers(self.token, self._live_marks):
            try:
                proc = psutil.Process(pid)
                if proc.environ().get(MARK_VARIABLE) != mark:
                    continue  # gone, and its pid already reused
                command = " ".join(proc.cmdline())[:300]
                tree = [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
            for leftover in tree:
                with contextlib.suppress(psutil.Error):
                    leftover.kill()
            killed += 1
            log.warning(
                "an attempt left a process behind (outside its process group); killed it",
                pid=pid,
                command=command,
                mark=mark,
            )
        return killed

    def close(self) -> None:
        """Wait for every child to be reaped, kill what they left behind, then stop the
        thread and release descriptors."""
        with self._lock:
            while self._children:
                self._idle.wait(timeout=1.0)
            self._closing = True
        if self._unsubscribe is not None:  # (before the wake pipe's descriptors are closed)
            self._unsubscribe()
        for _ in range(3):  # a leftover may have started another before it was killed
            if not self.sweep():
                break
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._selector.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # --- the supervisor thread -------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while not self._closing:
            for key, _ in self._selector.select(self._next_timeout()):
                if key.data is None:
                    with contextlib.suppress(BlockingIOError, OSError):
                        os.read(self._wake_r, 4096)
                elif not isinstance(key.data, tuple):
                    self._server_events(key.data)
                elif key.data[1].closed:
                    # reaped earlier in this batch: its descriptor numbers may already belong
                    # to a new attempt's pipe
                    continue
                elif key.data[0] == "msg":
                    self._read(key.data[1])
                else:
                    self._reap(key.data[1])
            with self._lock:
                due, self._due = self._due, []
            for child, status in due:
                self._reap(child, status)
            self._check_clocks()

    def _server_events(self, server: ForkServer) -> None:
        """Exits reported by a fork server; if it died, every attempt of it is over."""
        events = server.read_events()
        if events is None:
            with self._lock:
                self._servers.discard(server)
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(server.events_fd)
                orphaned = [c for c in self._children.values() if c.server is server]
                for key in [k for k in self._early if k[0] is server]:
                    del self._early[key]
            server.close()
            for child in orphaned:
                self._orphaned(child)
            return
        for pid, status in events:
            with self._lock:
                exited = self._children.get(pid)
                if exited is None or exited.server is not server:
                    self._early[(server, pid)] = status  # watch() has not run yet
                    continue
            self._reap(exited, status)

    def _orphaned(self, child: Child) -> None:
        """Its fork server died: kill the attempt (its pidfd names it surely; its group is
        dying of the server's death already) and report it once it is gone."""
        child.stop_for(_Stop.SERVER_DIED)
        child.deadline.enter(Step.KILL, self.policy.now())
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        if child.pidfd is None:
            self._reap(child, None)
            return
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
        with self._lock:  # reported when its pidfd says it is gone
            self._selector.register(child.pidfd, selectors.EVENT_READ, ("exit", child))

    def _next_timeout(self) -> float | None:
        """How long the selector may wait: until the next step of a deadline is due (as its
        clock allows, see :meth:`DeadlinePolicy.wait`), the next sweep (real time) or poll."""
        with self._lock:
            children = list(self._children.values())
        wait = self.policy.wait(min((c.deadline.next_at for c in children), default=_NEVER))
        polling = any(c.pidfd is None and c.server is None for c in children)
        if self._sweep_due:
            sweep = max(0.0, self._swept + SWEEP_EVERY - time.monotonic())
            wait = sweep if wait is None else min(wait, sweep)
        if any(_limited(c) for c in children):
            sample = max(0.0, self._sampled + MEMORY_EVERY - time.monotonic())
            wait = sample if wait is None else min(wait, sample)
        if polling:
            wait = _POLL if wait is None else min(wait, _POLL)
        return wait

    def _read(self, child: Child) -> None:
        """Read what the selector says is available; stop watching the pipe at end of file."""
        try:
            data = os.read(child.msg_fd, 65536)
        except OSError:
            data = b""
        if not data:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(child.msg_fd)
            return
        self._deliver(child, data)

    def _deliver(self, child: Child, data: bytes) -> None:
        for line in child.reader.feed(data):
            message = child.context.run(decode, line, child.task_id, child.loader)
            if isinstance(message, Stage):
                child.stage = message.stage
            elif isinstance(message, Outcome):
                child.outcome = message
                # it should exit now; if it lingers, KILL after kill_grace
                child.deadline.enter(Step.FINISHING, self.policy.now())
            else:
                child.sink(message)

    def _drain(self, child: Child) -> None:
        """Take whatever the exited child left in its pipe, without waiting for more (a
        grandchild may still hold the write end)."""
        os.set_blocking(child.msg_fd, False)
        while True:
            try:
                data = os.read(child.msg_fd, 65536)
            except OSError:  # BlockingIOError included: nothing more now
                return
            if not data:
                return
            self._deliver(child, data)

    def _check_clocks(self) -> None:
        if self._sweep_due and time.monotonic() - self._swept >= SWEEP_EVERY:
            self.sweep()
        with self._lock:
            children = list(self._children.values())
        now = self.policy.now()
        for child in children:
            if child.closed:
                continue
            step = child.deadline.due(now)
            if step is Step.KILL:
                child.deadline.enter(Step.KILL, now)
                self._signal(child, signal.SIGKILL)
            elif step is Step.TERMINATE:
                child.stop_for(_Stop.TIMED_OUT)
                self._terminate(child, hard=False)
            if child.pidfd is None and child.server is None:
                self._poll_exit(child)
        self._check_memory(children)

    def _check_memory(self, children: list[Child]) -> None:
        """Sample the memory of the attempts that have a limit, if :data:`MEMORY_EVERY` has
        passed, and stop those past it (TERM to the tree, KILL after the grace, like a
        timeout). Only running ones: not one that reported its outcome or is being stopped."""
        limited = [c for c in children if _limited(c)]
        if not limited or time.monotonic() - self._sampled < MEMORY_EVERY:
            return
        self._sampled = time.monotonic()
        table = ProcessTable.read()  # (one look at /proc for every tree; None: psutil's)
        for child in limited:
            assert child.memory is not None  # (_limited)
            rss = child.memory.sample(table)
            if rss is None:  # it exited: the exit is reported as usual
                child.memory = None
                continue
            child.peak = max(child.peak, rss)
            if rss <= child.memory_limit:
                continue
            child.stop_for(_Stop.MEMORY)
            if child.stopped is not _Stop.MEMORY:  # (stopped for another reason meanwhile)
                continue
            log.warning(
                "an attempt exceeded its memory limit; stopping its process tree",
                task_id=child.task_id,
                pid=child.pid,
                memory_limit=child.memory_limit,
                rss=rss,
            )
            # every process the samples found is signalled too, re-parented ones included
            child.tree = child.memory.processes()
            self._terminate(child, hard=False)

    def _terminate(self, child: Child, hard: bool) -> None:
        """TERMINATE (SIGTERM now, KILL after kill_grace) unless the escalation is past
        RUNNING already; KILL at once if ``hard``."""
        if child.server is None:  # (a fork server finds its child's tree itself)
            child.tree = child.tree or descendants(child.pid)
        now = self.policy.now()
        if hard:
            child.deadline.enter(Step.KILL, now)
            self._signal(child, signal.SIGKILL)
        elif child.deadline.enter(Step.TERMINATE, now):
            self._signal(child, signal.SIGTERM)

    @staticmethod
    def _signal(child: Child, sig: signal.Signals, scan: bool = True) -> None:
        """Signal the attempt's tree; a fork server's child through its server (which alone
        knows whether the pid is still that child's), and the descendants already known
        (those memory samples found; psutil refuses a pid that names another process now)."""
        if child.server is None:
            signal_tree(child.pid, sig, child.tree, scan=scan)
        else:
            child.server.signal(child.pid, sig)  # (its group and the tree it knows)
            signal_each(child.tree, sig, child.pid)

    def _poll_exit(self, child: Child) -> None:
        """Where pidfds are missing: has the child exited? (It stays a zombie until reaped.)"""
        with contextlib.suppress(ChildProcessError):
            if os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                return
        self._reap(child)

    def _reap(self, child: Child, status: int | None = None) -> None:
        """The child exited: collect its status and last messages, clean up, report.

        A fork server's child comes with its wait status (the server reaped it), or None if
        the server died."""
        # kill what is left of the attempt while the exited child (a zombie) still holds its
        # pid and process group, so a recycled pid can never be hit (a fork server did that
        # for its own child before reaping it)
        # (no psutil scan of descendants here: that costs ~1 ms per attempt; the group and any
        # tree seen at a timeout or interruption are killed now, and what escaped both is
        # found by its mark in the sweep below)
        signal_tree(child.pid, signal.SIGKILL, child.tree, scan=False, group=child.server is None)
        if child.server is None:
            with contextlib.suppress(ChildProcessError):
                _, status = os.waitpid(child.pid, 0)
        self._drain(child)
        self._forget(child)
        with self._lock:
            busy = bool(self._children)
        if not busy or time.monotonic() - self._swept >= SWEEP_EVERY:
            self.sweep()
        else:
            self._sweep_due = True  # soon: _check_clocks sweeps when SWEEP_EVERY has passed
        if child.popen is not None:
            child.popen.returncode = _exit_code(status)
        child.sink(self._outcome_of(child, status))

    def _forget(self, child: Child) -> None:
        with self._lock:
            child.closed = True
            self._children.pop(child.pid, None)
            self._live_marks.discard(child.mark)
            for fd in (child.msg_fd, child.pidfd):
                if fd is not None:
                    with contextlib.suppress(KeyError, ValueError):
                        self._selector.unregister(fd)
            for fd in (child.msg_fd, child.dog_fd, child.pidfd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._idle.notify_all()

    def _outcome_of(self, child: Child, status: int | None) -> Outcome:
        elapsed = child.deadline.elapsed(self.policy.now())
        if child.stopped is _Stop.TIMED_OUT:
            # (its last messages are read by now: the stage is the last one it sent)
            before_run = child.before_run()
            when = f", before run() started ({before_run})" if before_run else ""
            return Outcome(
                child.task_id,
                TIMED_OUT,
                elapsed,
                timeout=child.timeout,
                error=f"timed out after {child.timeout:g} s{when}; its process tree was killed",
                exception_type="Timeout",
                before_run=before_run,
            )
        if child.stopped is _Stop.MEMORY:
            exitcode, signum = _decode_status(status)
            return Outcome(
                child.task_id,
                PROCESS_DIED,
                elapsed,
                exitcode=exitcode,
                signal=signum,
                error=memory_error(child.memory_limit, child.peak),
                exception_type="ProcessDied",
            )
        if child.outcome is not None:  # reported before it was stopped: the outcome stands
            return child.outcome
        if child.stopped is _Stop.SERVER_DIED:
            return Outcome(
                child.task_id,
                PROCESS_DIED,
                elapsed,
                error="the fork server that started the task's process died, and the process "
                "with it, before it reported a result",
                exception_type="ProcessDied",
            )
        if child.stopped is _Stop.INTERRUPTED:
            return Outcome(
                child.task_id,
                FAILED,
                elapsed,
                error=f"interrupted by {child.interrupted_by}",
                exception_type="Interrupted",
                interrupted=True,
            )
        exitcode, signum = _decode_status(status)
        what = f"signal {signum}" if signum is not None else f"exit code {exitcode}"
        return Outcome(
            child.task_id,
            PROCESS_DIED,
            elapsed,
            exitcode=exitcode,
            signal=signum,
            error=f"the task's process ended with {what} without reporting a result",
            exception_type="ProcessDied",
        )


def memory_error(limit: int, peak: int) -> str:
    """The reason of an attempt killed for its memory: ``exceeded memory limit 2 GiB (peak
    2.1 GiB)`` (``limit`` and ``peak`` in bytes)."""
    return f"{MEMORY_REASON}{format_size(limit)} (peak {format_size(peak)})"


def _limited(child: Child) -> bool:
    """Whether ``child``'s memory is to be sampled now: it has a limit, and it is running
    (not reported, not being stopped, not gone)."""
    return child.memory is not None and child.deadline.step is Step.RUNNING and not child.closed


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


def _decode_status(status: int | None) -> tuple[int | None, int | None]:
    if status is None:
        return None, None
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status), None


def _exit_code(status: int | None) -> int | None:
    return None if status is None else os.waitstatus_to_exitcode(status)


class ProcessExecutor:
    """What the process executors share: a supervisor, interruption and closing.

    Subclasses implement ``start()``: create the attempt's process and ``watch()`` it.
    """

    name: ClassVar[str] = "process"
    can_kill: ClassVar[bool] = True
    settings_schema: ClassVar[Mapping[str, Field]] = {}
    active = False  # attempts run in child processes

    def __init__(self, context: ExecutorContext | None = None) -> None:
        """Create the executor; its supervisor thread starts with the first attempt."""
        self.context = context or ExecutorContext()
        self.supervisor = Supervisor(self.context.kill_grace, self.context.clock)

    def interrupt(self, reason: str, hard: bool = False) -> None:
        """Kill every running attempt's tree, reporting them as interrupted by ``reason``."""
        self.supervisor.interrupt(reason, hard)

    def stop_attempt(self, task_id: str, reason: str) -> bool:
        """Stop one running attempt, of ``task_id``, as :meth:`interrupt` stops them all
        (the task was cancelled); False if none of it runs here."""
        return self.supervisor.stop_task(task_id, reason)

    def close(self) -> None:
        """Wait for every attempt process to end and be reaped."""
        self.supervisor.close()
