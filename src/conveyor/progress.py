"""Live progress on a terminal (done / running / pending / failed), as a hook plugin."""

from __future__ import annotations

import time
from typing import TextIO

from . import events as ev
from .hookspecs import hookimpl

__all__ = ["ProgressPlugin"]


class ProgressPlugin:
    """Keeps counts from the hooks and redraws one status line on ``stream`` (a TTY)."""

    def __init__(self, stream: TextIO, min_interval: float = 0.1) -> None:
        """Draw on ``stream`` at most every ``min_interval`` seconds."""
        self.stream = stream
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
            self.stream.write("\r\x1b[K" + self.line())
            self.stream.flush()

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
        self.stream.write("\n")
        self.stream.flush()
