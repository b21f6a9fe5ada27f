"""Leadership of a state store several servers share (:class:`~.stores.CanLead`).

Each server runs one :class:`Campaign`: a thread that asks the store for the lease every third
of ``[server] leader_lease``. The server that holds it leads: it loaded the state after taking
it, and every save it makes carries its term, so the store refuses the saves of a leader that
was paused or cut off while another took over. A leader that cannot renew in time stops
acknowledging when its lease runs out by its own clock (:meth:`SchedulerService._check_leader`)
and one whose save is refused steps down at once. A standby looks again when the lease it saw
runs out, so it takes over within the lease (plus the time to load the state) of the leader's
last renewal.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from .stores import CanLead, Lease, Workers

if TYPE_CHECKING:
    from ..scheduler.policy import TaskRecord
    from .app import SchedulerService

__all__ = ["LEADER", "STANDBY", "Campaign"]

LEADER = "leader"
STANDBY = "standby"
"""A server's roles (``/health``'s ``role``)."""

log = structlog.get_logger("conveyor.server")

_MIN_WAIT = 0.05
"""The shortest a standby waits before it looks at the lease again."""


class Campaign:
    """Keeps ``service`` leading, or standing by, as the lease in ``store`` says."""

    def __init__(
        self,
        service: SchedulerService,
        store: CanLead,
        *,
        lease: float,
        load: Callable[[], tuple[list[TaskRecord], Workers]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``lease``: ``[server] leader_lease`` in seconds; ``load()``: the stored records and
        workers (called after the lease is taken, before the server leads)."""
        self.service = service
        self.store = store
        self.lease = lease
        self.load = load
        self.clock = clock
        service.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = ""  # the kind of error the last look failed with ("" if it did not)

    def start(self) -> None:
        """Look now, then keep looking on a thread of its own."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="conveyor-lease", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop looking; give the lease up if this server leads (saves are refused after)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.lease)
        if self.service.role == LEADER:
            self.service.step_down("", "the server is stopping", stopping=True)
            try:
                self.store.resign()
            except Exception as exc:  # (the lease then runs out by itself)
                with contextlib.suppress(OSError):
                    log.warning("could not give up the lease", error=f"{type(exc).__name__}: {exc}")

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                wait = self.step()
            except Exception:  # (a fault must not end the campaign: logged, tried again)
                log.exception("leadership check failed")
                wait = self.lease / 3

    def step(self) -> float:
        """Look at the lease once and act on it; how long to wait before the next look."""
        service = self.service
        started = self.clock()
        try:
            lease = self.store.lead(service.public_url, self.lease)
        except Exception as exc:
            self._failed(exc)
            return min(self.lease / 3, 1.0)
        if self._failing:
            self._failing = ""
            log.info("the state store answers again")
        if lease.held:
            if service.role == LEADER and lease.term != service.term:
                # (it took the lease afresh: another server led meanwhile, so what this one
                # holds in memory is not what is stored)
                service.step_down("", f"another server led since term {service.term}")
            if service.role != LEADER:
                self._take_over(lease)
            else:
                service.lease_deadline = started + self.lease
            return self.lease / 3
        if service.role == LEADER:
            service.step_down(lease.holder, f"the lease is held by {lease.holder or 'nobody'}")
        elif lease.holder:
            service.failure = ""  # (a take-over of its own that failed is another's job now)
        if service.leader != lease.holder:
            log.info("standing by", leader=lease.holder or None, term=lease.term)
        service.leader = lease.holder
        return min(self.lease / 3, max(_MIN_WAIT, lease.expires_in))

    def _take_over(self, lease: Lease) -> None:
        """Load the state and lead, the lease renewed once loaded (loading can take a good
        part of it); if the state cannot be loaded, give the lease up and say why in
        ``/health`` (``state_store_error``)."""
        try:
            records, workers = self.load()
        except Exception as exc:
            kind = f"{type(exc).__name__}: {exc}"
            log.error("took the lease but cannot load the state; giving it up", error=kind)
            self.service.failure = f"cannot lead: the stored state cannot be loaded ({kind})"
            with contextlib.suppress(Exception):
                self.store.resign()
            return
        started = self.clock()
        try:
            again = self.store.lead(self.service.public_url, self.lease)
        except Exception as exc:  # (it looks again shortly, and loads again then)
            self._failed(exc)
            return
        if not again.held or again.term != lease.term:
            # (it ran out while loading and another server led meanwhile: load again at the
            # next look if it holds the lease now)
            self.service.leader = "" if again.held else again.holder
            return
        if self._stop.is_set():  # (the server is stopping: it does not start leading)
            with contextlib.suppress(Exception):
                self.store.resign()
            return
        self.service.promote(records, workers, started + self.lease, lease.term)
        log.warning(
            "leading",
            term=lease.term,
            url=self.service.public_url,
            tasks=len(records),
            workers=len(workers),
        )

    def _failed(self, exc: Exception) -> None:
        """The store could not be asked: log it once; a leader whose lease ran out by now
        steps down (its calls are refused from that moment anyway)."""
        kind = f"{type(exc).__name__}: {exc}"
        if kind != self._failing:
            self._failing = kind
            with contextlib.suppress(OSError):
                log.error("cannot reach the state store to renew or take the lease", error=kind)
        service = self.service
        deadline = service.lease_deadline
        if service.role == LEADER and deadline is not None and self.clock() >= deadline:
            service.step_down("", "its lease ran out before it could renew it")
