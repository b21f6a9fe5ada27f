"""The ``thread`` executor: a pool of ``workers`` threads in the worker's process."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar

from .attempt import run_attempt
from .base import FAILED, AttemptRequest, ExecutorContext, Outcome, Sink
from .inline import warn_memory_limit_ignored

if TYPE_CHECKING:
    from ..settings import Field

__all__ = ["ThreadExecutor"]


class ThreadExecutor:
    """Runs attempts on a thread pool; cannot enforce timeouts (threads cannot be killed) nor
    memory limits (see :func:`~.inline.warn_memory_limit_ignored`)."""

    name: ClassVar[str] = "thread"
    can_kill: ClassVar[bool] = False
    settings_schema: ClassVar[Mapping[str, Field]] = {}
    active = False  # attempts run on the pool's threads, never on the caller's

    def __init__(self, context: ExecutorContext | None = None) -> None:
        """Create a pool of ``context.workers`` threads (started lazily)."""
        self.context = context or ExecutorContext()
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, self.context.workers), thread_name_prefix="conveyor-task"
        )
        self._warned = False  # about a memory limit it cannot enforce (once)

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Queue the attempt on the pool; its outcome arrives through ``sink``."""
        if request.memory_limit and not self._warned:
            self._warned = True
            warn_memory_limit_ignored(self.name, request)
        # in a copy of the caller's context: tasks run() makes (dynamic dependencies) take the
        # [tasks.*] defaults of the worker that started it, held in a ContextVar
        self._pool.submit(contextvars.copy_context().run, _run_and_report, request, sink)

    def interrupt(self, reason: str, hard: bool = False) -> None:
        """Threads cannot be killed: running attempts are left to finish."""

    def close(self) -> None:
        """Wait for running attempts, then stop the threads."""
        self._pool.shutdown(wait=True)


def _run_and_report(request: AttemptRequest, sink: Sink) -> None:
    try:
        outcome = run_attempt(request, sink, suspend=True)
    except BaseException as exc:  # SystemExit & co. from run(): the worker must still hear of it
        outcome = Outcome(
            request.task_id,
            FAILED,
            error=f"run() raised {type(exc).__name__}: {exc}",
            exception_type=type(exc).__name__,
        )
    sink(outcome)
