"""The ``inline`` executor: runs ``run()`` in the worker's own thread, one at a time.

Neither it nor the ``thread`` executor can enforce a memory limit (the attempt's memory is the
worker's): an attempt with one runs without it, and the first such attempt of the executor logs
a warning (:func:`warn_memory_limit_ignored`); the task never fails for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import structlog

from ..sizes import format_size
from .attempt import run_attempt
from .base import FAILED, AttemptRequest, ExecutorContext, Interrupted, Outcome, Sink

if TYPE_CHECKING:
    from ..settings import Field

__all__ = ["InlineExecutor", "warn_memory_limit_ignored"]

log = structlog.get_logger("conveyor.executors")


def warn_memory_limit_ignored(executor: str, request: AttemptRequest) -> None:
    """Log that ``executor`` (inline or thread) runs ``request`` without its memory limit."""
    log.warning(
        f"the {executor} executor cannot enforce a memory limit (its attempts run in the "
        "worker's own process): this attempt and later ones run without it; the fork and "
        "subprocess executors enforce it",
        task_id=request.task_id,
        memory_limit=format_size(request.memory_limit),
    )


class InlineExecutor:
    """Runs each attempt synchronously inside ``start()``; cannot enforce timeouts or memory
    limits."""

    name: ClassVar[str] = "inline"
    can_kill: ClassVar[bool] = False
    settings_schema: ClassVar[Mapping[str, Field]] = {}

    def __init__(self, context: ExecutorContext | None = None) -> None:
        """Inline needs no settings; ``context`` is accepted for a uniform constructor."""
        self.context = context or ExecutorContext()
        self.active = False
        self._warned = False  # about a memory limit it cannot enforce (once)

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Run the attempt now and report its outcome before returning.

        While it runs, ``active`` is True: the worker's SIGTERM/SIGINT handler then raises
        :class:`Interrupted` into the task, which ends the attempt as failed (interrupted).
        """
        if request.memory_limit and not self._warned:
            self._warned = True
            warn_memory_limit_ignored(self.name, request)
        self.active = True
        try:
            outcome = run_attempt(request, sink, suspend=True)
        except Interrupted as exc:
            outcome = Outcome(
                request.task_id,
                FAILED,
                error=str(exc),
                exception_type="Interrupted",
                interrupted=True,
            )
        finally:
            self.active = False
        sink(outcome)

    def interrupt(self, reason: str, hard: bool = False) -> None:
        """Nothing to do here: the worker raises Interrupted into the running attempt."""

    def close(self) -> None:
        """Nothing to release."""
