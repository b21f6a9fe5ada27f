"""Live progress on a terminal, as a hook plugin::

    conveyor: 12/40 done (30%) · 2 running · 25 pending · 1 failed · 42 s elapsed · ETA 1 min 38 s

The total counts the tasks this run has to run (registered pending, whether they ran or not;
tasks found complete are not in it). The elapsed time counts from the start of
``Worker.run()`` (during the graph walk before it, the line has only the counts). The ETA is
the time the tasks not finished yet would take at the average rate of the finished ones (done
or failed) so far; it is shown once a task has finished and while some are left. A ticker
redraws the line every second (elapsed time and ETA move while a long task runs); the last
line, drawn when the run ends, has no ETA.

The status line shares stderr with the log lines. :class:`~conveyor.terminal.TerminalStream`
(re-exported here) is what both write through: it clears the status line before a log line and
draws it again after it, so that the two never end up on one line of the terminal.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

from . import events as ev
from .core.summary import format_duration
from .hookspecs import hookimpl
from .terminal import TerminalStream

__all__ = ["ProgressPlugin", "TerminalStream", "progress_line"]

_PENDING, _RUNNING, _DONE, _FAILED = "pending", "running", "done", "failed"


def progress_line(
    done: int, running: int, pending: int, failed: int, elapsed: float | None, final: bool = False
) -> str:
    """The status line for these counts, ``elapsed`` seconds into the run (pure).

    Elapsed time and ETA are left out before the run started (``elapsed`` None: the graph
    walk); the ETA also from a ``final`` line, before any task finished, and when nothing is
    left.
    """
    total = done + running + pending + failed
    percent = done * 100 // total if total else 0  # (100 % only when every task is done)
    parts = [
        f"conveyor: {done}/{total} done ({percent}%)",
        f"{running} running",
        f"{pending} pending",
        f"{failed} failed",
    ]
    if elapsed is None:
        return " · ".join(parts)
    parts.append(f"{format_duration(elapsed)} elapsed")
    finished, left = done + failed, running + pending
    if not final and finished and left:
        parts.append(f"ETA {format_duration(elapsed / finished * left)}")
    return " · ".join(parts)


class ProgressPlugin:
    """Keeps counts from the hooks and redraws one status line on ``stream`` (a TTY)."""

    def __init__(
        self,
        stream: TextIO | TerminalStream,
        min_interval: float = 0.1,
        *,
        clock: Callable[[], float] = time.monotonic,
        tick: float = 1.0,
    ) -> None:
        """Draw on ``stream`` at most every ``min_interval`` seconds, and every ``tick``
        seconds while attempts run (0: only when a count changes).

        Pass the :class:`TerminalStream` that the logs also write to, so that log lines and
        the status line do not collide; a plain stream is wrapped in one of its own. ``clock``
        measures the elapsed time (monotonic seconds).
        """
        self.stream = stream if isinstance(stream, TerminalStream) else TerminalStream(stream)
        self.min_interval = min_interval
        self.clock = clock
        self.tick = tick
        self.states: dict[str, str] = {}
        self.counts: Counter[str] = Counter()
        self.started: float | None = None  # the clock at worker_started
        self._last = float("-inf")
        self._lock = threading.Lock()  # the ticker draws too
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def line(self, final: bool = False) -> str:
        """The current status line."""
        counts = self.counts
        elapsed = None if self.started is None else self.clock() - self.started
        return progress_line(
            counts[_DONE], counts[_RUNNING], counts[_PENDING], counts[_FAILED], elapsed, final
        )

    def _move(self, task_id: str, state: str | None) -> None:
        """Put ``task_id`` in ``state`` (None: out of the counts) and redraw."""
        with self._lock:
            old = self.states.pop(task_id, None)
            if old is not None:
                self.counts[old] -= 1
            if state is not None:
                self.states[task_id] = state
                self.counts[state] += 1
        self._draw()

    def _draw(self, force: bool = False, final: bool = False) -> None:
        with self._lock:
            now = self.clock()
            if force or now - self._last >= self.min_interval:
                self._last = now
                self.stream.show(self.line(final))

    def _start_ticker(self) -> None:
        """Redraw every ``tick`` seconds from now on (started with the first attempt: a thread
        made at worker_started would come before the worker's fork server is made)."""
        if self._ticker is not None or self.tick <= 0:
            return

        def tick() -> None:
            while not self._stop.wait(self.tick):
                self._draw(force=True)

        self._ticker = threading.Thread(target=tick, name="conveyor-progress", daemon=True)
        self._ticker.start()

    @hookimpl
    def conveyor_worker_started(self, event: ev.WorkerStarted) -> None:
        """The run's clock starts."""
        self.started = self.clock()
        self._stop.clear()  # (a worker may run again: its ticker starts again)

    @hookimpl
    def conveyor_task_dependencies_discovered(self, event: ev.DependenciesDiscovered) -> None:
        """A registered (or re-registered) task is pending."""
        self._move(event.task_id, _PENDING)

    @hookimpl
    def conveyor_task_complete_checked(self, event: ev.CompleteChecked) -> None:
        """A task counted as pending that turns out complete (external data appeared) is done;
        one found complete before it was registered is not part of the run's work."""
        if event.complete and self.states.get(event.task_id) == _PENDING:
            self._move(event.task_id, _DONE)

    @hookimpl
    def conveyor_task_broken(self, event: ev.TaskBroken) -> None:
        """A broken task never runs: out of the counts."""
        self._move(event.task_id, None)

    @hookimpl
    def conveyor_task_started(self, event: ev.TaskStarted) -> None:
        """Pending (or failed, for a retry) → running."""
        self._move(event.task_id, _RUNNING)
        self._start_ticker()

    @hookimpl
    def conveyor_task_succeeded(self, event: ev.TaskSucceeded) -> None:
        """Running → done."""
        self._move(event.task_id, _DONE)

    @hookimpl
    def conveyor_task_failed(self, event: ev.TaskFailed) -> None:
        """Running → failed."""
        self._move(event.task_id, _FAILED)

    @hookimpl
    def conveyor_task_timed_out(self, event: ev.TaskTimedOut) -> None:
        """Running → failed (timed out)."""
        self._move(event.task_id, _FAILED)

    @hookimpl
    def conveyor_task_process_died(self, event: ev.ProcessDied) -> None:
        """Running → failed (process died)."""
        self._move(event.task_id, _FAILED)

    @hookimpl
    def conveyor_worker_stopped(self, event: ev.WorkerStopped) -> None:
        """Stop the ticker, draw the final line (without ETA) and end it."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
            self._ticker = None
        self._draw(force=True, final=True)
        self.stream.end()
