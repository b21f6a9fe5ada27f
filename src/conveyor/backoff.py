"""The one retry schedule every retry loop uses: capped exponential backoff with jitter.

Pure: the caller supplies the attempt number and the random source (``rand`` returns a float
in [0, 1)), and sleeps or schedules by its own clock. The ``http`` transport's retries, the
worker's outbox of undelivered results and any later retry loop (notifiers) share it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits of ``first``, doubled per attempt, capped at ``cap``, jittered.

    The wait before retry number ``attempt`` (1, 2, …) is ``min(cap, first * 2**(attempt-1))``
    times a factor drawn uniformly from ``[low, 1)``: with the default ``low = 0.5`` concurrent
    clients spread out, and never wait more than the cap.
    """

    first: float
    cap: float
    low: float = 0.5

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``attempt`` (1 for the first retry)."""
        exponent = min(max(attempt, 1) - 1, 64)  # 2**64 times any wait is past every cap
        base = min(self.cap, self.first * 2.0**exponent)
        return base * (self.low + (1.0 - self.low) * rand())
