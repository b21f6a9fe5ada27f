"""Live progress on a terminal (done / running / pending / failed), as a hook plugin.

The status line shares stderr with the log lines. :class:`~conveyor.terminal.TerminalStream`
(re-exported here) is what both write through: it clears the status line before a log line and
draws it again after it, so that the two never end up on one line of the terminal.
"""

from __future__ import annotations

import time
from typing import TextIO

from . import events as ev
from .hookspecs import hookimpl
from .terminal import TerminalStream

__all__ = ["ProgressPlugin", "TerminalStream"]


class ProgressPlugin:
    """Keeps counts from the hooks and redraws one status line on ``stream`` (a TTY)."""

    def __init__(self, stream: TextIO | TerminalStream, min_interval: float = 0.1) -> None:
        """Draw on ``stream`` at most every ``min_interval`` seconds.

        Pass the :class:`TerminalStream` that the logs also write to, so that log lines and
        the status line do not collide; a plain stream is wrapped in one of its own.
        """
        self.stream = stream if isinstance(stream, TerminalStream) else TerminalStream(stream)
        self.min_interval = min_interval
        self.pending: set[str] = set()
        self.running: set[str] = set()
        self.done = 0
        self.failed = 0
        self._last = 0.0

    def line(self) -> str:
        """The current status line."""
        return (
            f"conveyor: {self.done} done / {len(self.running)} running / "
            f"{len(self.pending)} pending / {self.failed} failed"
        )

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.min_interval:
            self._last = now
            self.stream.show(self.line())

    @hookimpl
    def conveyor_task_dependencies_discovered(self, event: ev.DependenciesDiscovered) -> None:
        """A registered (or re-registered) task is pending."""
        self.running.discard(event.task_id)
        self.pending.add(event.task_id)
        self._draw()

    @hookimpl
    def conveyor_task_started(self, event: ev.TaskStarted) -> None:
        """Pending → running."""
        self.pending.discard(event.task_id)
        self.running.add(event.task_id)
        self._draw()

    @hookimpl
    def conveyor_task_succeeded(self, event: ev.TaskSucceeded) -> None:
        """Running → done."""
        self.running.discard(event.task_id)
        self.done += 1
        self._draw()

    def _failed(self, task_id: str) -> None:
        self.running.discard(task_id)
        self.failed += 1
        self._draw()

    @hookimpl
    def conveyor_task_failed(self, event: ev.TaskFailed) -> None:
        """Running → failed."""
        self._failed(event.task_id)

    @hookimpl
    def conveyor_task_timed_out(self, event: ev.TaskTimedOut) -> None:
        """Running → failed (timed out)."""
        self._failed(event.task_id)

    @hookimpl
    def conveyor_task_process_died(self, event: ev.ProcessDied) -> None:
        """Running → failed (process died)."""
        self._failed(event.task_id)

    @hookimpl
    def conveyor_worker_stopped(self, event: ev.WorkerStopped) -> None:
        """Draw the final line and end it."""
        self._draw(force=True)
        self.stream.end()
