"""The ``inline`` executor: runs ``run()`` in the worker's own thread, one at a time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from .attempt import run_attempt
from .base import FAILED, AttemptRequest, ExecutorContext, Interrupted, Outcome, Sink

if TYPE_CHECKING:
    from ..settings import Field

__all__ = ["InlineExecutor"]


class InlineExecutor:
    """Runs each attempt synchronously inside ``start()``; cannot enforce timeouts."""

    name: ClassVar[str] = "inline"
    can_kill: ClassVar[bool] = False
    settings_schema: ClassVar[Mapping[str, Field]] = {}

    def __init__(self, context: ExecutorContext | None = None) -> None:
        """Inline needs no settings; ``context`` is accepted for a uniform constructor."""
        self.context = context or ExecutorContext()
        self.active = False

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Run the attempt now and report its outcome before returning.

        While it runs, ``active`` is True: the worker's SIGTERM/SIGINT handler then raises
        :class:`Interrupted` into the task, which ends the attempt as failed (interrupted).
        """
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
