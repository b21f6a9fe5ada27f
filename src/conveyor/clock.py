"""Time as the worker sees it: a small protocol, so that a fake clock can drive a whole run.

The worker reads wall time for event timestamps and monotonic time for retry schedules, and
waits for executor messages with a timeout. :data:`SYSTEM` uses the real clock and blocks;
``conveyor.testing.FakeClock`` moves only when told and makes the worker's timed waits
instantaneous, so that retry delays, disable windows, disconnect delays and keep_alive waits
can be tested deterministically without sleeping.
"""

from __future__ import annotations

import time as _time
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM", "Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """What the worker needs to know about time."""

    blocks: bool
    """True if :meth:`sleep` really waits (then the worker waits for messages the same way)."""

    def time(self) -> float:
        """Wall-clock seconds (Unix time): event timestamps."""

    def monotonic(self) -> float:
        """Seconds that never go backwards: retry schedules."""

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass."""


class SystemClock:
    """The real clock (its methods are the ``time`` module's own functions)."""

    blocks = True
    time = staticmethod(_time.time)
    monotonic = staticmethod(_time.monotonic)
    sleep = staticmethod(_time.sleep)


SYSTEM = SystemClock()
