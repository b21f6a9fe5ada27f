"""A task's own retry policy: :class:`RetryPolicy` (the ``retry_policy`` class attribute).

The scheduler retries a failed task on a schedule (``[scheduler] retry_delay``,
``retry_backoff``, ``retry_max_delay``, ``retry_jitter``) and disables it after ``retry_count``
failures within ``disable_window``. A task may set any of those numbers for itself, and may
name the exceptions worth retrying (``retry_on``): a failure whose exception is not one of
them disables the task at once.

What crosses to the scheduler is data: the numbers, as a :class:`~conveyor.protocol.RetrySpec`
(:meth:`RetryPolicy.spec`) and the count as ``TaskSpec.retry_count``. Exception classes never
leave the process that knows them: whether a failure is retried is decided where its
exception was raised (the attempt), or, for a time-out or a process death, by the worker
(:class:`~conveyor.errors.TaskTimeout`, :class:`~conveyor.errors.ProcessDied` stand for
them), and only the verdict travels (``TaskFailed.not_retried``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ProcessDied, RetryPolicyError, TaskTimeout

if TYPE_CHECKING:
    from .protocol import RetrySpec

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the scheduler retries one task class; every field None is the scheduler's setting.

    ``count``: failures within ``disable_window`` that make the task ``DISABLED`` (what the
    ``retry_count`` attribute means, which it overrides; 0: never disabled for its failures).
    ``delay``: seconds a failed task waits before it is ``PENDING`` again; each further
    failure within ``disable_window`` waits ``backoff`` (>= 1) times longer, never longer than
    ``max_delay``; ``jitter`` (0 to 1) moves each wait by up to that fraction either way, at
    random. ``retry_on``: the exception classes worth a retry (None: every failure is retried);
    a failure whose exception is an instance of none of them disables the task at once, with
    the reason in its explanation. A time-out counts as :class:`~conveyor.TaskTimeout` and a
    process death as :class:`~conveyor.ProcessDied`, so a ``retry_on`` that leaves them out
    disables the task on those too. Failures without an exception of the task's own (its
    outputs missing after ``run()``, its class not loadable, an interruption of the worker)
    are retried whatever ``retry_on`` says.

    Bad values raise :class:`~conveyor.TaskDefinitionError` (a ``ValueError`` too) when the
    policy is made.
    """

    count: int | None = None
    delay: float | None = None
    backoff: float | None = None
    max_delay: float | None = None
    jitter: float | None = None
    retry_on: tuple[type[BaseException], ...] | None = None

    def __post_init__(self) -> None:
        """Check every field (a clear message naming it and what was expected)."""
        count = self.count
        if count is not None and (
            not isinstance(count, int) or isinstance(count, bool) or count < 0
        ):
            raise RetryPolicyError(f"RetryPolicy(count={count!r}): expected an integer >= 0")
        _check_number("delay", self.delay, 0.0, None)
        _check_number("backoff", self.backoff, 1.0, None)
        _check_number("max_delay", self.max_delay, 0.0, None)
        _check_number("jitter", self.jitter, 0.0, 1.0)
        retry_on = self.retry_on
        if retry_on is not None:
            if isinstance(retry_on, type):  # (one class given bare: a tuple of one)
                retry_on = (retry_on,)
            if not isinstance(retry_on, tuple | list | set | frozenset):
                raise RetryPolicyError(
                    f"RetryPolicy(retry_on={retry_on!r}): expected a tuple of exception classes"
                )
            for item in retry_on:
                if not (isinstance(item, type) and issubclass(item, BaseException)):
                    raise RetryPolicyError(
                        f"RetryPolicy(retry_on=...): {item!r} is not an exception class "
                        "(a subclass of BaseException)"
                    )
            object.__setattr__(self, "retry_on", tuple(retry_on))

    def spec(self) -> RetrySpec | None:
        """The schedule as the scheduler receives it (None when every number is its own)."""
        from .protocol import RetrySpec  # (the worker's side only: task modules need not)

        numbers = (self.delay, self.backoff, self.max_delay, self.jitter)
        if numbers == (None, None, None, None):
            return None
        return RetrySpec(
            delay=_float(self.delay),
            backoff=_float(self.backoff),
            max_delay=_float(self.max_delay),
            jitter=_float(self.jitter),
        )

    def not_retried(self, exc: BaseException) -> str:
        """Why a failure raising ``exc`` is not retried ("" when it is: no ``retry_on``, or
        ``exc`` is an instance of one of its classes)."""
        retry_on = self.retry_on
        if retry_on is None or isinstance(exc, retry_on):
            return ""
        return f"{type(exc).__name__} is not in retry_on ({self._names()})"

    def not_retried_outcome(self, timed_out: bool) -> str:
        """Why a time-out (``timed_out``) or a process death is not retried ("" when it is:
        no ``retry_on``, or it includes :class:`~conveyor.TaskTimeout` /
        :class:`~conveyor.ProcessDied` or a base class of it)."""
        retry_on = self.retry_on
        stands_for = TaskTimeout if timed_out else ProcessDied
        if retry_on is None or issubclass(stands_for, retry_on):
            return ""
        what = "a time-out (TaskTimeout)" if timed_out else "a process death (ProcessDied)"
        return f"{what} is not in retry_on ({self._names()})"

    def _names(self) -> str:
        names = [cls.__name__ for cls in self.retry_on or ()]
        return ", ".join(names) if names else "nothing"


def _check_number(name: str, value: object, low: float, high: float | None) -> None:
    """RetryPolicyError unless ``value`` is None or a finite number from ``low`` to ``high``."""
    if value is None:
        return
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value
        and (high is None or value <= high)
    ):
        return
    bound = f"from {low:g} to {high:g}" if high is not None else f">= {low:g}"
    raise RetryPolicyError(f"RetryPolicy({name}={value!r}): expected a number {bound}")


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)
