"""The worker's signal handlers (see docs/executors.md), installed only around ``Worker.run()``.

SIGUSR1 drains: no new work, running attempts finish. SIGTERM and SIGINT interrupt: no new
work, running attempt trees get SIGTERM then SIGKILL after ``kill_grace``; a second SIGINT
kills at once. Handlers are installed only in the main thread, and the previous ones are
restored when ``run()`` returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

__all__ = ["install_signal_handlers"]


class _Interruptible(Protocol):
    def drain(self) -> None: ...

    def interrupt(self, signal_name: str, hard: bool = False) -> None: ...


def install_signal_handlers(worker: _Interruptible) -> Callable[[], None] | None:
    """Install the handlers for ``worker``; return a function restoring the previous ones."""
    if threading.current_thread() is not threading.main_thread():
        return None
    seen: set[int] = set()

    def on_drain(signum: int, frame: FrameType | None) -> None:
        worker.drain()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        hard = signum == signal.SIGINT and signum in seen
        seen.add(signum)
        worker.interrupt(signal.Signals(signum).name, hard=hard)

    handlers: dict[int, Any] = {
        signal.SIGUSR1: on_drain,
        signal.SIGTERM: on_stop,
        signal.SIGINT: on_stop,
    }
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore
