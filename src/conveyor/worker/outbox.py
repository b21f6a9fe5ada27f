"""Reports the scheduler must not lose, kept in order while it is unreachable (see docs/server.md).

Each report is a request value of :mod:`conveyor.protocol` (``TaskDone``, ``TaskFailed``,
``AddTasks``, …), delivered by ``transport.call(request)``. When a call raises
:class:`~conveyor.errors.SchedulerUnavailable` (the transport has already spent its own
retries), the request is queued. The worker stops asking for new work,
lets running attempts finish (their results join the queue) and retries the queue with the
capped, jittered, doubling waits of :class:`~conveyor.backoff.Backoff`. After
``rpc_give_up_after`` seconds of failure it gives up, and the queued tasks count as unreported
failures.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from ..backoff import Backoff
from ..config import SchedulerSettings
from ..errors import SchedulerUnavailable, StaleReport
from ..protocol import TaskDone, TaskFailed
from ..transports.base import SchedulerTransport

__all__ = ["Outbox"]

log = structlog.get_logger("conveyor.worker")
_RESULTS = (TaskDone, TaskFailed)


class Outbox:
    """Ordered, retried delivery of result reports to the scheduler."""

    def __init__(
        self,
        transport: SchedulerTransport,
        settings: SchedulerSettings,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """Deliver through ``transport`` with the ``rpc_*`` settings, timed by ``clock``."""
        self.transport = transport
        self.settings = settings
        self.clock = clock
        self.rand = rand
        self._backoff = Backoff(settings.rpc_retry_wait, settings.rpc_retry_max_wait)
        self._queue: list[Any] = []  # request values, oldest first
        self._held: list[TaskDone | TaskFailed] = []  # results to go with the next get_work
        self._since = 0.0
        self._next = 0.0
        self._failures = 0

    @property
    def pending(self) -> bool:
        """True while reports are waiting for the scheduler."""
        return bool(self._queue)

    @property
    def holding(self) -> bool:
        """True while results are held for the next ``get_work``."""
        return bool(self._held)

    def held_task_ids(self) -> tuple[str, ...]:
        """The tasks whose results are held (their attempts ended; not reported yet)."""
        return tuple([r.task_id for r in self._held]) if self._held else ()

    def hold(self, result: TaskDone | TaskFailed) -> None:
        """Keep the result ``result`` to go with the worker's next ``get_work``
        (:meth:`take_held`), or queue it behind undelivered reports. Whatever is sent by
        :meth:`send` first delivers the held results, so reports keep their order."""
        if self._queue:
            self._queue.append(result)
        else:
            self._held.append(result)

    def take_held(self, text: int) -> tuple[tuple[TaskDone, ...], tuple[TaskFailed, ...]]:
        """The oldest held results whose explanations come to at most ``text`` characters
        (at least one), successes and failures apart, now the caller's to deliver (by a
        ``get_work`` that carries them; :meth:`requeue` them if it could not be sent, or
        :meth:`unhold` them if it was refused); the others stay held."""
        held = self._held
        if len(held) <= 1:  # (the common case: at least one is always taken)
            self._held = []
            if not held:
                return (), ()
            return ((held[0],), ()) if isinstance(held[0], TaskDone) else ((), (held[0],))
        taken = 0
        for index, result in enumerate(held):
            taken += len(result.explanation) + len(getattr(result, "not_retried", ""))
            if taken > text and index:
                held, self._held = self._held[:index], self._held[index:]
                break
        else:
            held, self._held = self._held, []
        done = tuple(r for r in held if isinstance(r, TaskDone))
        failed = tuple(r for r in held if isinstance(r, TaskFailed))
        return done, failed

    def unhold(self, results: Sequence[TaskDone | TaskFailed]) -> None:
        """Hold ``results`` again (taken by :meth:`take_held`), before those held since."""
        self._held[:0] = results

    def requeue(self, results: Sequence[TaskDone | TaskFailed], exc: SchedulerUnavailable) -> None:
        """Queue ``results`` (taken by :meth:`take_held`; a ``get_work`` that carried them
        could not reach the scheduler, ``exc``) before anything else, to be retried."""
        if not results:
            return
        was_empty = not self._queue
        self._queue[:0] = [*results, *self._held]
        self._held = []
        if was_empty:
            self._since = self.clock()
            self._schedule_retry()
            log.error("scheduler unreachable; keeping results until it is back", error=str(exc))

    def send_held(self) -> None:
        """Deliver the held results by their own routes (nothing will carry them)."""
        held, self._held = self._held, []
        for result in held:
            self.send(result)

    def send(self, request: Any) -> None:
        """Deliver ``request`` (a request value of :data:`conveyor.protocol.ROUTES`) by
        ``transport.call(request)`` now, or queue it behind earlier undelivered ones (held
        results are delivered before it)."""
        if self._held:
            self.send_held()
        if self._queue:
            self._queue.append(request)
            return
        try:
            self.transport.call(request)
        except StaleReport as exc:
            _refused(exc)
        except SchedulerUnavailable as exc:
            self._queue.append(request)
            self._since = self.clock()
            self._schedule_retry()
            log.error("scheduler unreachable; keeping results until it is back", error=str(exc))
        except Exception:
            self._broken(request)
            raise

    def flush(self) -> bool:
        """Try the queue if its retry time has come; True once it is empty."""
        if not self._queue:
            return True
        if self.clock() < self._next:
            return False
        while self._queue:
            try:
                self.transport.call(self._queue[0])
            except StaleReport as exc:
                _refused(exc)
            except SchedulerUnavailable:
                self._schedule_retry()
                return False
            except Exception:
                self._broken(self._queue[0])
                raise
            self._queue.pop(0)
        self._failures = 0
        log.info("scheduler reachable again; results reported")
        return True

    def _broken(self, request: Any) -> None:
        """Say which report a transport failed on with an error that is neither a refusal nor
        an outage (a bug: it is raised on and ends the run, not taken for an outage)."""
        kind = type(self.transport)
        log.error(
            "the scheduler transport failed on a report with an unexpected error; the run stops",
            transport=f"{kind.__module__}.{kind.__qualname__}",
            request=type(request).__name__,
            task_id=getattr(request, "task_id", None),
            exc_info=True,
        )

    def _schedule_retry(self) -> None:
        self._failures += 1
        self._next = self.clock() + self._backoff.delay(self._failures, self.rand)

    def seconds_to_retry(self) -> float:
        """How long until the next attempt to deliver."""
        return max(0.0, self._next - self.clock())

    def expired(self) -> bool:
        """True when delivery has failed for longer than ``rpc_give_up_after``."""
        return bool(self._queue) and self.clock() - self._since > self.settings.rpc_give_up_after

    def unreported(self) -> set[str]:
        """Task ids whose results never reached the scheduler."""
        return {r.task_id for r in (*self._queue, *self._held) if isinstance(r, _RESULTS)}


def _refused(exc: StaleReport) -> None:
    """A report the scheduler refused as stale is dropped: another attempt owns the task."""
    log.warning("the scheduler refused a stale report; dropped", error=str(exc))
