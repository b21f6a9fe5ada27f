""":class:`conveyor.Client`: a small typed client of a central scheduler's control API.

It submits tasks for the scheduler's assistants, cancels tasks, and reads statuses and the
task list, over the same ``http`` transport a worker uses (its kept-alive connections, its
token, TLS settings, retries and fail-over between several scheduler URLs), so everything
a worker's ``[scheduler]`` table configures applies here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from ..config import Config
from ..errors import ConveyorError, SchedulerUnavailable, UnknownTask
from ..protocol import (
    Cancel,
    CancelAnswer,
    Explanation,
    ExplanationAnswer,
    Statuses,
    StatusesAnswer,
    Submit,
    SubmitAnswer,
    TaskInfo,
    TaskStatus,
)
from ..task import as_task

__all__ = ["SETTLED", "Client"]

SETTLED = frozenset({TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.DISABLED, TaskStatus.UNKNOWN})
"""The statuses :meth:`Client.wait` returns on: the task ran (or was found complete), or it
failed, was disabled (cancelled, say) or is broken. ``FAILED`` is retried later by the
scheduler; a caller that wants to wait for the retry calls ``wait`` again."""

_GIVE_UP_AFTER = 30.0  # seconds a call keeps trying an unreachable scheduler (a worker: 1 h)
_PAUSE = 0.5  # seconds between two tries of a call that could not reach the scheduler


class Client:
    """A client of the central scheduler at ``url`` (``token``: its ``[server] token``).

    ``Client(url, token)`` is enough; ``config`` (a :class:`~conveyor.Config`) brings the
    rest of a ``[scheduler]`` table (TLS files, ``rpc_timeout``, retries). A call that cannot
    reach the scheduler keeps trying for ``give_up_after`` seconds, then raises
    :class:`~conveyor.SchedulerUnavailable`; a request the scheduler refuses raises
    :class:`~conveyor.ConveyorError` with its reason. A client may be used from several
    threads (each keeps its own connection); :meth:`close` (or ``with``) closes the calling
    thread's.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        config: Config | None = None,
        give_up_after: float = _GIVE_UP_AFTER,
    ) -> None:
        """Nothing is contacted yet; ConfigError for a URL or TLS setting it cannot use."""
        base = config if config is not None else Config()
        base = base.with_overrides(scheduler_url=url)
        base = base.with_section("scheduler", token=token, rpc_give_up_after=give_up_after)
        self._init(base)

    @classmethod
    def from_config(cls, config: Config) -> Client:
        """A client of the scheduler ``config``'s ``[scheduler]`` table names (its url, token
        and TLS settings), giving up on an unreachable one after 30 s unless the table says
        less."""
        client = cls.__new__(cls)
        give_up = min(config.scheduler.rpc_give_up_after, _GIVE_UP_AFTER)
        client._init(config.with_section("scheduler", rpc_give_up_after=give_up))
        return client

    def _init(self, config: Config) -> None:
        from ..transports.http import HttpTransport  # (the core's http client: no extra)

        self.config = config
        self._transport = HttpTransport(config)
        self.sleep: Callable[[float], None] = time.sleep  # replaceable, e.g. by a test's
        self.clock: Callable[[], float] = time.monotonic

    # --- control ----------------------------------------------------------------------------

    def submit(self, task: object, *, by: str = "") -> str:
        """Register ``task`` (a :class:`conveyor.Task` instance, or any task a worker runs)
        for the scheduler's assistants, which walk its graph and run it; its task id, at
        once. ``by`` says who submits (the server adds how the call was let in)."""
        return self.submit_answer(task, by=by).task_id

    def submit_answer(self, task: object, *, by: str = "") -> SubmitAnswer:
        """:meth:`submit`'s whole answer: the task id and its status on the scheduler now.
        TypeError for something that is not a task."""
        from ..worker.walk import task_spec

        adapted = as_task(task)  # (a luigi.Task through its installed loader)
        if adapted is None:
            raise TypeError(
                f"Client.submit() takes a task (conveyor.Task, or one an installed task loader "
                f"adapts), got {type(task).__name__}"
            )
        task = adapted
        answer: SubmitAnswer = self._call(self._transport.call, Submit(task_spec(task), by))
        return answer

    def cancel(self, task_id: str, downstream: bool = False, *, by: str = "") -> tuple[str, ...]:
        """Cancel ``task_id`` (with ``downstream``, every task that needs it): each becomes
        ``DISABLED`` with the reason "cancelled" and a running attempt is stopped through its
        worker; the ids cancelled. :class:`~conveyor.errors.UnknownTask` if the scheduler
        does not know the task."""
        return self.cancel_answer(task_id, downstream, by=by).cancelled

    def cancel_answer(
        self, task_id: str, downstream: bool = False, *, by: str = ""
    ) -> CancelAnswer:
        """:meth:`cancel`'s whole answer: the ids cancelled, those whose running attempts
        are being stopped, and those kept (``DONE``)."""
        try:
            answer: CancelAnswer = self._call(self._transport.call, Cancel(task_id, downstream, by))
        except ConveyorError as exc:
            if getattr(exc, "status", None) == 404 and getattr(exc, "field", "") == "task_id":
                # (not a 404 of a server without the route, which names no field)
                raise UnknownTask(task_id) from None
            raise
        return answer

    # --- reads ------------------------------------------------------------------------------

    def status(self, task_id: str) -> TaskStatus:
        """The task's status on the scheduler; :class:`~conveyor.errors.UnknownTask` if it
        does not know the task."""
        status = self.statuses((task_id,)).get(task_id)
        if status is None:
            raise UnknownTask(task_id)
        return status

    def statuses(self, task_ids: Iterable[str]) -> dict[str, TaskStatus]:
        """The status of each of ``task_ids`` the scheduler knows (the others left out)."""
        answer: StatusesAnswer = self._call(self._transport.call, Statuses(tuple(task_ids)))
        return {t: TaskStatus(s) for t, s in answer.statuses.items()}

    def explanation(self, task_id: str) -> str:
        """The task's stored explanation on the scheduler (why it failed, "cancelled"...;
        "" when it has none or the scheduler does not know it)."""
        answer: ExplanationAnswer = self._call(self._transport.call, Explanation(task_id))
        return answer.explanation

    def tasks(self, **filters: Any) -> list[TaskInfo]:
        """The scheduler's task list (``GET /api/v1/tasks``), keeping the tasks whose fields
        equal every filter given (``status="FAILED"``, ``family="Daily"``, ``worker=...``);
        TypeError for a filter that is not a field of :class:`~conveyor.protocol.TaskInfo`."""
        unknown = sorted(set(filters) - set(TaskInfo.__dataclass_fields__))
        if unknown:
            raise TypeError(
                f"Client.tasks() got an unknown filter {unknown[0]!r}; expected fields of "
                "TaskInfo: " + ", ".join(TaskInfo.__dataclass_fields__)
            )
        listed: list[TaskInfo] = self._call(self._transport.task_list)
        return [t for t in listed if all(getattr(t, k) == v for k, v in filters.items())]

    def wait(self, task_id: str, timeout: float, *, poll: float = 0.5) -> TaskStatus:
        """Wait until the task is settled (:data:`SETTLED`: ``DONE``, ``FAILED``, ``DISABLED``
        or ``UNKNOWN``) and return that status, asking every ``poll`` seconds; TimeoutError
        naming the last status after ``timeout`` seconds."""
        if not poll > 0:
            raise ValueError(f"Client.wait(): poll = {poll!r}; expected seconds > 0")
        deadline = self.clock() + timeout
        while True:
            status = self.status(task_id)
            if status in SETTLED:
                return status
            left = deadline - self.clock()
            if left <= 0:
                raise TimeoutError(
                    f"task {task_id} is still {status} after {timeout:g} s; expected one of "
                    + ", ".join(sorted(SETTLED))
                )
            self.sleep(min(poll, left))

    def _call(self, send: Callable[..., Any], *request: Any) -> Any:
        """``send(*request)``, tried again while the scheduler cannot be reached, until
        ``give_up_after`` seconds have passed since the first try (each try is the transport's
        own, with its ``rpc_retries``); then the last SchedulerUnavailable."""
        deadline = self.clock() + self.config.scheduler.rpc_give_up_after
        while True:
            try:
                return send(*request)
            except SchedulerUnavailable:
                left = deadline - self.clock()
                if left <= 0:
                    raise
                self.sleep(min(_PAUSE, left))

    # --- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the calling thread's connection (a later call opens another)."""
        self._transport.close()

    def __enter__(self) -> Client:
        """The client itself; closed at the end of the ``with`` block."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close it (:meth:`close`)."""
        self.close()
