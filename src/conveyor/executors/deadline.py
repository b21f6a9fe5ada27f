"""The deadline policy: when an attempt's process is stopped, and how, on an injected clock.

Theory of operation. Every attempt that runs in a process of its own gets a :class:`Deadline`
when its supervisor starts watching it. The deadline is pure: it holds times read from the
policy's :class:`~conveyor.clock.Clock` and a :class:`Step`, and answers two questions —
*when is the next step due* (:attr:`Deadline.next_at`) and *which step is due now*
(:meth:`Deadline.due`). The supervisor performs the step (it sends the signal) and records it
with :meth:`Deadline.enter`, which refuses a move the table :data:`MOVES` does not allow::

    RUNNING ──timeout──▶ TERMINATE ──kill_grace──▶ KILL
       │                     ▲                        ▲
       │                     └── soft interruption    │
       ├──outcome reported──▶ FINISHING ──kill_grace──┤
       └──────────────── hard interruption ───────────┘

* ``RUNNING``: before the timeout (``timeout`` seconds after the process started; 0 = none).
* ``TERMINATE``: SIGTERM went to the attempt's process tree, at the timeout or because the
  worker was interrupted; ``kill_grace`` seconds later comes KILL.
* ``FINISHING``: the process reported its outcome and should exit by itself; if it is still
  there ``kill_grace`` seconds later, KILL. The timeout no longer applies.
* ``KILL``: SIGKILL went to the tree; nothing is left to escalate.

The same policy answers the worker's question "can this executor enforce this timeout, or must
the attempt run in a process of its own?" (:meth:`DeadlinePolicy.needs_isolation`), so the rule
lives in one place.

All times are the policy's clock's ``monotonic()``: with ``conveyor.testing.FakeClock`` a
timeout fires when the fake clock is moved past it, not when wall time passes (and nothing
escalates while the fake clock stands still). A clock that does not block (``blocks`` False)
and can tell when it moves (:class:`Announcing`, as FakeClock does) wakes the supervisor when
it is advanced; one that cannot is polled every :data:`POLL_UNANNOUNCED` seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..clock import SYSTEM, Clock

if TYPE_CHECKING:
    from .base import Executor

__all__ = ["MOVES", "POLL_UNANNOUNCED", "Announcing", "Deadline", "DeadlinePolicy", "Step"]

NEVER = float("inf")
POLL_UNANNOUNCED = 0.05
"""Seconds between two looks at a non-blocking clock that does not announce its moves."""


class Step(enum.StrEnum):
    """How far the escalation against one attempt's process has gone (see the module doc)."""

    RUNNING = "running"
    """Before its timeout; nothing sent."""
    FINISHING = "finishing"
    """It reported its outcome; it has ``kill_grace`` seconds to exit by itself."""
    TERMINATE = "terminate"
    """SIGTERM sent to its tree; SIGKILL follows ``kill_grace`` seconds later."""
    KILL = "kill"
    """SIGKILL sent to its tree; the last step."""


MOVES: dict[Step, frozenset[Step]] = {
    Step.RUNNING: frozenset({Step.FINISHING, Step.TERMINATE, Step.KILL}),
    Step.FINISHING: frozenset({Step.KILL}),  # (a soft interruption leaves it to finish)
    Step.TERMINATE: frozenset({Step.KILL}),
    Step.KILL: frozenset(),
}
"""The legal moves between steps: from each step, the steps it may go on to."""


@runtime_checkable
class Announcing(Protocol):
    """A clock that calls listeners when it is moved (``conveyor.testing.FakeClock``)."""

    def on_advance(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (no arguments) after every move; returns what removes it."""


@dataclass(frozen=True, slots=True)
class DeadlinePolicy:
    """Timeouts and their escalation for one executor: ``kill_grace`` on ``clock``."""

    kill_grace: float = 5.0
    """Seconds from SIGTERM (or a reported outcome) to SIGKILL."""
    clock: Clock = SYSTEM
    """The time deadlines are measured in (the worker's own clock)."""

    @staticmethod
    def needs_isolation(executor: Executor, timeout: float) -> bool:
        """True if an attempt with ``timeout`` (seconds, 0 = none) cannot be left to
        ``executor``: it has a timeout and the executor cannot kill an attempt, so the attempt
        runs under a process executor instead (a timeout is never ignored)."""
        return bool(timeout) and not executor.can_kill

    @staticmethod
    def any_needs_isolation(executor: Executor, timeouts: Iterable[float]) -> bool:
        """True if an attempt with one of ``timeouts`` would need isolation (see
        :meth:`needs_isolation`); the timeouts are not looked at if ``executor`` can kill."""
        return not executor.can_kill and any(timeouts)

    def now(self) -> float:
        """The clock's monotonic time: what every deadline is measured against."""
        return self.clock.monotonic()

    def start(self, timeout: float) -> Deadline:
        """The deadline of an attempt whose process starts now, with ``timeout`` seconds."""
        return Deadline(self.kill_grace, self.now(), timeout)

    def wait(self, until: float) -> float | None:
        """How long (real seconds) a supervisor may block waiting for ``until`` (clock time):
        the time left on a blocking clock; on one that does not block, None (wait for its
        announcement) if it announces its moves, else :data:`POLL_UNANNOUNCED`."""
        if until == NEVER:
            return None
        if self.clock.blocks:
            return max(0.0, until - self.now())
        return None if isinstance(self.clock, Announcing) else POLL_UNANNOUNCED


@dataclass(slots=True)
class Deadline:
    """One attempt's escalation: pure state, times in its policy's clock."""

    kill_grace: float
    started: float
    """When the attempt's process started (clock time)."""
    timeout: float
    """Seconds it may run; 0 = no timeout."""
    step: Step = Step.RUNNING
    kill_at: float = NEVER
    """When KILL is due (in FINISHING and TERMINATE)."""

    @property
    def expires(self) -> float:
        """When the timeout runs out (clock time), or infinity without one."""
        return self.started + self.timeout if self.timeout > 0 else NEVER

    @property
    def next_at(self) -> float:
        """When the next step is due (clock time), or infinity if none will be."""
        if self.step is Step.RUNNING:
            return self.expires
        return self.kill_at

    def due(self, now: float) -> Step | None:
        """The step to take at ``now``: TERMINATE once the timeout ran out, KILL once
        ``kill_grace`` passed after TERMINATE or FINISHING; None if nothing is due."""
        if now < self.next_at:
            return None
        return Step.TERMINATE if self.step is Step.RUNNING else Step.KILL

    def enter(self, step: Step, now: float) -> bool:
        """Record that ``step`` is taken at ``now``; False (and nothing changed) if the
        table :data:`MOVES` does not allow it from the current step."""
        if step not in MOVES[self.step]:
            return False
        self.step = step
        self.kill_at = NEVER if step is Step.KILL else now + self.kill_grace
        return True

    def elapsed(self, now: float) -> float:
        """Seconds since the attempt's process started, at ``now``."""
        return now - self.started
