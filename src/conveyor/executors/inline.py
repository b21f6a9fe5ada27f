"""The ``inline`` executor: runs ``run()`` in the worker's own thread, one at a time."""

from __future__ import annotations

from typing import ClassVar

from .attempt import run_attempt
from .base import AttemptRequest, ExecutorContext, Sink

__all__ = ["InlineExecutor"]


class InlineExecutor:
    """Runs each attempt synchronously inside ``start()``; cannot enforce timeouts."""

    name: ClassVar[str] = "inline"
    can_kill: ClassVar[bool] = False

    def __init__(self, context: ExecutorContext | None = None) -> None:
        """Inline needs no settings; ``context`` is accepted for a uniform constructor."""
        self.context = context or ExecutorContext()

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Run the attempt now and report its outcome before returning."""
        sink(run_attempt(request, sink))

    def close(self) -> None:
        """Nothing to release."""
