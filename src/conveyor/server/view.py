"""A read-only view of the central server, for the routes its plugins contribute.

``conveyor_scheduler_routes(server)`` receives a :class:`SchedulerView`: what a metrics or
status route reads when it is called (tasks per state, live workers, the server's role),
without reaching into the scheduler's internals. Each method is cheap and thread-safe; those
that read the state store may block, so call them from a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .app import SchedulerService

__all__ = ["SchedulerView"]


class SchedulerView:
    """What a plugin route may read of the server that serves it."""

    def __init__(self, service: SchedulerService) -> None:
        """A view of ``service`` (made by the server; plugins only receive one)."""
        self._service = service

    def is_leader(self) -> bool:
        """Whether this server leads now (a server with a store of its own always does; a
        standby of a shared store does not)."""
        return self._service.leading()

    @property
    def role(self) -> str:
        """``"leader"`` or ``"standby"``."""
        return str(self._service.role)

    @property
    def leader(self) -> str:
        """The leader's public URL ("" while none is known)."""
        return self._service.leader

    def task_counts(self) -> Mapping[str, int]:
        """Registered tasks per state (all six, 0 included), as the state store holds them;
        may block on the store: call it from a thread."""
        return dict(self._service.reads.summary().counts)

    def live_workers(self) -> int:
        """The workers this server has heard from and not declared gone (0 on a standby,
        which keeps no list of workers)."""
        if not self.is_leader():
            return 0
        return self._service.core.worker_count()
