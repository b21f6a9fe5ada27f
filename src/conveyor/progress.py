"""Live progress on a terminal (done / running / pending / failed), as a hook plugin.

The status line shares stderr with the log lines. :class:`TerminalStream` is what both write
through: it clears the status line before a log line and draws it again after it, so that the
two never end up on one line of the terminal.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TextIO

from . import events as ev
from .hookspecs import hookimpl

__all__ = ["ProgressPlugin", "TerminalStream"]

_CLEAR = "\r\x1b[K"  # carriage return, then erase to the end of the line
_instances: weakref.WeakSet[TerminalStream] = weakref.WeakSet()


def _reset_locks_after_fork() -> None:
    for stream in list(_instances):
        stream._after_fork()


class TerminalStream:
    """A text stream on a terminal, shared by whole log lines and one live status line.

    Text is written a whole line at a time (one ``write`` of the underlying stream, so lines
    from several processes do not interleave), each starting with a clear of the terminal's
    current line, which removes a status line drawn there by this process or, after a fork, by
    its parent. In the process that owns the status line, the status line is drawn again after
    every line.
    """

    def __init__(self, stream: TextIO) -> None:
        """Wrap ``stream`` (normally ``sys.stderr`` on a terminal)."""
        self.stream = stream
        self._status = ""
        self._shown = False  # the status line is on screen, the cursor at its end
        self._pending = ""  # the start of a line not yet ended
        self._mid_line = False  # the start of a line was flushed out without its end
        self._owner = os.getpid()
        self._lock = threading.RLock()
        _instances.add(self)

    def _after_fork(self) -> None:
        self._lock = threading.RLock()  # another thread may have held it at the fork

    def write(self, text: str) -> int:
        """Write text above the status line; it appears once its line is ended."""
        with self._lock:
            self._pending += text
            cut = self._pending.rfind("\n") + 1
            if cut:
                lines, self._pending = self._pending[:cut], self._pending[cut:]
                self._emit(lines)
        return len(text)

    def _emit(self, text: str) -> None:
        out = text if self._mid_line else _CLEAR + text
        self._mid_line = not text.endswith("\n")
        self._shown = False
        if not self._mid_line and self._status and os.getpid() == self._owner:
            out += self._status
            self._shown = True
        self.stream.write(out)
        self.stream.flush()

    def show(self, status: str) -> None:
        """Draw ``status`` as the live line (redrawn after every log line until :meth:`end`)."""
        with self._lock:
            self._status = status
            if self._mid_line or self._pending:
                return  # drawn when the line being written ends
            self.stream.write(_CLEAR + status)
            self.stream.flush()
            self._shown = True

    def end(self) -> None:
        """Leave the status line on screen as a finished line; stop redrawing it."""
        with self._lock:
            if self._shown:
                self.stream.write("\n")
                self.stream.flush()
            self._status = ""
            self._shown = False

    def flush(self) -> None:
        """Write out the start of a line not yet ended, and flush the wrapped stream."""
        with self._lock:
            if self._pending:
                text, self._pending = self._pending, ""
                self._emit(text)
        self.stream.flush()

    def isatty(self) -> bool:
        """Whether the wrapped stream is a terminal."""
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def fileno(self) -> int:
        """The wrapped stream's file descriptor."""
        return self.stream.fileno()


os.register_at_fork(after_in_child=_reset_locks_after_fork)


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
