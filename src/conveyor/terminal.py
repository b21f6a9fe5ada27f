"""A terminal stream shared by whole log lines and one live status line.

Kept apart from :mod:`conveyor.progress` (a hook plugin) so that logging set-up — also in
every ``subprocess`` attempt's fresh interpreter — does not import the plugin machinery.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TextIO

__all__ = ["TerminalStream"]

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
