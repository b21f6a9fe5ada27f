"""Dispatching notifications: a hook plugin of the worker feeding one sender thread (SPEC §4.3).

:class:`NotifyPlugin` is registered like any plugin and sees exactly the events every plugin
sees. Its hooks only append ``(kind, event)`` to a bounded inbox — the worker's loop never waits
for a notifier. The :class:`Dispatcher`'s sender thread turns them into
:class:`~conveyor.notifiers.Message` objects (redacted, truncated), aggregates bursts, and
delivers each message to every enabled notifier with a timeout on every send, bounded retries
with backoff (a notifier's ``RetryAfter`` sets the wait), and a failure log line per notifier at
most once per :data:`FAILURE_LOG_INTERVAL`. At exit, :meth:`Dispatcher.close` delivers what is
queued within ``flush_timeout`` in total.

Aggregation: within a window of ``aggregate_window`` seconds starting at its first
notification, the first ``aggregate_after`` notifications are sent one by one; the rest are held
and sent as one ``aggregate`` message when the window ends (or at exit). ``run_finished`` is
never held.
"""

from __future__ import annotations

import heapq
import itertools
import random
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from .. import events as ev
from ..backends import load_backend
from ..backoff import Backoff
from ..hookspecs import hookimpl
from ..secrets import (
    REDACTED,
    hide_secret_params,
    is_secret_name,
    is_secret_setting,
    redact_argv,
    redact_text,
)
from ..settings import schema_of
from . import Message, RetryAfter

if TYPE_CHECKING:
    from ..config import Config

__all__ = [
    "FAILURE_LOG_INTERVAL",
    "Dispatcher",
    "NotifyPlugin",
    "aggregate",
    "build_dispatcher",
    "compose",
    "label",
]

FAILURE_LOG_INTERVAL = 60.0  # seconds between two log lines about the same failing notifier
DEFAULT_TIMEOUT = 10.0  # per send, when a notifier's table declares no `timeout`
DEFAULT_RETRIES = 3  # retries after a failed send, when its table declares no `max_retries`
QUEUE_SIZE = 1000  # notifications (and deliveries) held at most; beyond, the oldest is dropped
MAX_EXPLANATION = 8000  # characters of a failure explanation kept in a message
MAX_SUBJECT = 200
MAX_LISTED = 200  # tasks listed one per line in an aggregate
_BACKOFF = Backoff(first=1.0, cap=30.0)
log = structlog.get_logger("conveyor.notifiers")

_DESCRIBED = {
    "failed": "failed",
    "timed_out": "timed out",
    "process_died": "process died",
    "broken": "broken",
    "succeeded": "succeeded",
}


@dataclass(slots=True)
class _Target:
    """One enabled notifier, with what the dispatcher takes from its table."""

    name: str
    notifier: Any
    timeout: float
    retries: int
    secrets: tuple[str, ...]
    failures: int = 0
    logged_at: float = float("-inf")


@dataclass(order=True, slots=True)
class _Delivery:
    """One message for one notifier, due at ``due`` (monotonic seconds)."""

    due: float
    seq: int
    message: Message = field(compare=False)
    target: _Target = field(compare=False)
    attempt: int = field(default=0, compare=False)


class Dispatcher:
    """Owns the enabled notifiers, the inbox and the sender thread of one worker."""

    def __init__(
        self,
        targets: Sequence[tuple[str, Any, Mapping[str, Any]]],
        *,
        aggregate_after: int = 5,
        aggregate_window: float = 60.0,
        queue_size: int = QUEUE_SIZE,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """``targets`` are ``(name, notifier, validated settings)``; nothing starts yet."""
        self.targets = [_target(name, notifier, settings) for name, notifier, settings in targets]
        self.aggregate_after = aggregate_after
        self.aggregate_window = aggregate_window
        self.queue_size = max(1, queue_size)
        self.clock = clock
        self.rand = rand
        self.command = redact_argv(sys.argv) if sys.argv else ""
        self.dropped = 0
        self.delivered = 0
        self.given_up = 0
        self._inbox: deque[tuple[str, ev.Event]] = deque()
        self._deliveries: list[_Delivery] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._deadline: float | None = None  # set by close(): deliver until then, then stop
        self._window_end = float("-inf")
        self._in_window = 0
        self._held: list[Message] = []
        self._dropped_logged = float("-inf")

    # --- the worker's side ----------------------------------------------------------------

    def notify(self, kind: str, event: ev.Event) -> None:
        """Queue one notification; never blocks (a full inbox drops its oldest entry)."""
        with self._cond:
            if self._deadline is not None:
                return
            if len(self._inbox) >= self.queue_size:
                self._inbox.popleft()
                self._count_drop()
            self._inbox.append((kind, event))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="conveyor-notify", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def close(self, flush_timeout: float) -> None:
        """Deliver what is queued (held aggregates included) within ``flush_timeout`` seconds
        in total, then stop; what is left is logged as undelivered."""
        with self._cond:
            self._deadline = self.clock() + max(0.0, flush_timeout)
            thread = self._thread
            self._cond.notify_all()  # a send in flight stops being waited for at the deadline
        if thread is None:
            return
        thread.join(max(0.0, flush_timeout) + 1.0)
        if thread.is_alive():  # cannot happen unless the clock misleads: still, say so
            self._report_leftovers(in_flight=1)

    # --- the sender thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                delivery = self._next_delivery()
                if delivery is None:
                    break
            self._deliver(delivery)
        self._report_leftovers()

    def _next_delivery(self) -> _Delivery | None:
        """Wait (holding the condition) for the next delivery that is due; None to stop."""
        while True:
            now = self.clock()
            while self._inbox:
                kind, event = self._inbox.popleft()
                self._admit(kind, event, now)
            if self._held and (now >= self._window_end or self._deadline is not None):
                self._enqueue(self._aggregate(self._held))
                self._held = []
            closing = self._deadline is not None
            if self._deliveries:
                first = self._deliveries[0]
                if closing and first.due > self._deadline:  # type: ignore[operator]
                    return None
                if first.due <= now:
                    return heapq.heappop(self._deliveries)
            elif closing:
                return None
            wake = [d.due for d in self._deliveries[:1]]
            if self._held:
                wake.append(self._window_end)
            if closing:
                wake.append(self._deadline)  # type: ignore[arg-type]
            self._cond.wait(max(0.0, min(wake) - now) if wake else None)

    def _admit(self, kind: str, event: ev.Event, now: float) -> None:
        message = compose(kind, event, self.command)
        if kind == "run_finished":
            self._enqueue(message)
            return
        if now >= self._window_end:
            if self._held:
                self._enqueue(self._aggregate(self._held))
                self._held = []
            self._window_end = now + self.aggregate_window
            self._in_window = 0
        self._in_window += 1
        if self._in_window <= self.aggregate_after:
            self._enqueue(message)
        else:
            self._held.append(message)

    def _aggregate(self, held: list[Message]) -> Message:
        if len(held) == 1:
            return held[0]
        return aggregate(held)

    def _enqueue(self, message: Message) -> None:
        now = self.clock()
        for target in self.targets:
            if len(self._deliveries) >= self.queue_size:
                oldest = min(self._deliveries, key=lambda d: d.seq)
                self._deliveries.remove(oldest)
                heapq.heapify(self._deliveries)
                self._count_drop()
            heapq.heappush(self._deliveries, _Delivery(now, next(self._seq), message, target))

    def _deliver(self, delivery: _Delivery) -> None:
        target = delivery.target
        timeout = target.timeout
        with self._cond:
            if self._deadline is not None:
                timeout = min(timeout, max(0.0, self._deadline - self.clock()))
        error = self._send_within(target.notifier, delivery.message, timeout)
        if error is None:
            with self._cond:
                self.delivered += 1
            return
        self._log_failure(target, error)
        with self._cond:
            if delivery.attempt >= target.retries:
                self.given_up += 1
                log.warning(
                    "a notification was dropped after its retries",
                    notifier=target.name,
                    kind=delivery.message.kind,
                    attempts=delivery.attempt + 1,
                )
                return
            delivery.attempt += 1
            if isinstance(error, RetryAfter):
                wait = error.seconds
            else:
                wait = _BACKOFF.delay(delivery.attempt, self.rand)
            delivery.due = self.clock() + wait
            delivery.seq = next(self._seq)
            heapq.heappush(self._deliveries, delivery)

    def _log_failure(self, target: _Target, error: BaseException) -> None:
        target.failures += 1
        now = self.clock()
        if now - target.logged_at < FAILURE_LOG_INTERVAL:
            return
        target.logged_at = now
        text = _scrub(f"{type(error).__name__}: {error}", target.secrets)
        log.warning(
            "a notifier failed to send",
            notifier=target.name,
            error=text[:500],
            failures=target.failures,
        )

    def _count_drop(self) -> None:
        self.dropped += 1
        now = self.clock()
        if now - self._dropped_logged >= FAILURE_LOG_INTERVAL:
            self._dropped_logged = now
            log.warning("the notification queue is full: dropped the oldest", dropped=self.dropped)

    def _send_within(self, notifier: Any, message: Message, timeout: float) -> BaseException | None:
        """Call ``notifier.send(message)`` on its own thread; what it raised, or None. It is
        abandoned (TimeoutError) after ``timeout``, or at the close deadline if that is sooner."""
        outcome: list[BaseException | None] = []

        def send() -> None:
            try:
                notifier.send(message)
            except BaseException as exc:  # a notifier's failure is never the worker's
                result: BaseException | None = exc
            else:
                result = None
            with self._cond:
                outcome.append(result)
                self._cond.notify_all()

        thread = threading.Thread(target=send, name="conveyor-notify-send", daemon=True)
        give_up = self.clock() + timeout
        with self._cond:
            thread.start()
            while not outcome:
                end = give_up if self._deadline is None else min(give_up, self._deadline)
                left = end - self.clock()
                if left <= 0:
                    return TimeoutError(f"send() did not return within {timeout:g} s")
                self._cond.wait(left)
        return outcome[0]

    def _report_leftovers(self, in_flight: int = 0) -> None:
        with self._cond:
            left = len(self._deliveries) + len(self._inbox) + len(self._held) + in_flight
            self._deliveries.clear()
            self._inbox.clear()
            self._held = []
        if left:
            log.warning(
                "notifications not delivered before the worker exited (flush_timeout)",
                undelivered=left,
            )


def _target(name: str, notifier: Any, settings: Mapping[str, Any]) -> _Target:
    timeout = float(settings.get("timeout") or DEFAULT_TIMEOUT)
    retries = int(settings.get("max_retries", DEFAULT_RETRIES))
    hidden = []
    for key, value in settings.items():
        if isinstance(value, str) and value and (is_secret_setting(key) or "url" in key.lower()):
            hidden.append(value)
    return _Target(name, notifier, timeout, retries, tuple(hidden))


def _scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return redact_text(text)


# --- composing messages ----------------------------------------------------------------------


def label(event: ev.Event) -> str:
    """``Family(p=v, ...)`` with secret-named values hidden (one line)."""
    shown = ", ".join(
        f"{name}={REDACTED if is_secret_name(name) else value}"
        for name, value in event.params.items()
    )
    return _one_line(f"{event.family}({shown})" if shown else event.family)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _outcome(kind: str, event: ev.Event) -> str:
    if isinstance(event, ev.TaskTimedOut):
        return f"timed out after {event.timeout:g} s (its process tree was killed)"
    if isinstance(event, ev.ProcessDied):
        signum, code = event.signal, event.exitcode
        how = f"signal {signum}" if signum is not None else f"exit code {code}"
        return f"process died ({how}) without reporting a result"
    if isinstance(event, ev.TaskBroken):
        return f"broken (while calling {event.phase}())"
    if isinstance(event, ev.TaskFailed):
        return f"failed ({event.exception_type})" if event.exception_type else "failed"
    return _DESCRIBED.get(kind, kind)


def compose(kind: str, event: ev.Event, command: str = "") -> Message:
    """The message for one notification: subject and text redacted, explanation truncated."""
    params = event.params
    if isinstance(event, ev.WorkerStopped):
        verdict = "succeeded" if event.ok else "did not succeed"
        subject = f"[conveyor] run {verdict} on {event.host}"
        lines = [f"The run of worker {event.worker_id} on {event.host} {verdict}.", ""]
        lines += [f"Command: {command}", "", event.summary]
    else:
        what = label(event)
        subject = f"[conveyor] {what} {_DESCRIBED.get(kind, kind)} on {event.host}"
        lines = [
            f"{what} {_DESCRIBED.get(kind, kind)}.",
            "",
            f"Task id:    {event.task_id}",
            f"Outcome:    {_outcome(kind, event)}",
            f"Parameters: {', '.join(f'{k}={v}' for k, v in params.items()) or '(none)'}",
            f"Host:       {event.host}",
            f"Worker:     {event.worker_id}",
            f"Command:    {command}",
        ]
        explanation = getattr(event, "error", "")
        if isinstance(event, ev.TaskSucceeded):
            lines.append(f"Duration:   {event.duration:.3f} s")
        if explanation:
            if len(explanation) > MAX_EXPLANATION:
                cut = len(explanation) - MAX_EXPLANATION
                explanation = f"[... {cut} characters cut ...]\n{explanation[-MAX_EXPLANATION:]}"
            lines += ["", "Explanation:", explanation]
    text = _hide("\n".join(lines), params)
    return Message(
        kind=kind,
        subject=_hide(_one_line(subject), params)[:MAX_SUBJECT],
        text=text,
        events=(event,),
        recipients=tuple(event.owner_email),
        worker_id=event.worker_id,
        host=event.host,
    )


def _hide(text: str, params: Mapping[str, str]) -> str:
    hidden = hide_secret_params(text, params)
    # the Parameters line shows values by name: hide the secret ones there too
    for name, value in params.items():
        if is_secret_name(name):
            hidden = hidden.replace(f"{name}={value}", f"{name}={REDACTED}")
    return hidden


def aggregate(messages: Sequence[Message]) -> Message:
    """One ``aggregate`` message covering ``messages``: counts per kind, one line per task."""
    counts = Counter(m.kind for m in messages)
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.most_common())
    first = messages[0]
    events = tuple(e for m in messages for e in m.events)
    lines = [f"{len(messages)} notifications from worker {first.worker_id}: {summary}", ""]
    for message in messages[:MAX_LISTED]:
        for event in message.events:
            lines.append(f"- {message.kind}: {event.task_id} {message.subject.split('] ', 1)[-1]}")
    if len(messages) > MAX_LISTED:
        rest = messages[MAX_LISTED:]
        more = " ".join(e.task_id for m in rest for e in m.events)
        lines.append(f"... and {len(rest)} more: {more}")
    recipients = tuple(dict.fromkeys(r for m in messages for r in m.recipients))
    return Message(
        kind="aggregate",
        subject=f"[conveyor] {len(messages)} notifications on {first.host}: {summary}"[
            :MAX_SUBJECT
        ],
        text="\n".join(lines),
        events=events,
        recipients=recipients,
        worker_id=first.worker_id,
        host=first.host,
    )


class NotifyPlugin:
    """The worker's hook plugin that hands the selected events to a :class:`Dispatcher`."""

    name = "conveyor.notify"

    def __init__(self, dispatcher: Dispatcher, on: Iterable[str]) -> None:
        """Forward the kinds in ``on`` (``failed``, ``timed_out``, ... ``run_finished``)."""
        self.dispatcher = dispatcher
        self.on = frozenset(on)

    def _send(self, kind: str, event: ev.Event) -> None:
        if kind in self.on:
            self.dispatcher.notify(kind, event)

    @hookimpl
    def conveyor_task_failed(self, event: ev.TaskFailed) -> None:
        """A failed attempt."""
        self._send("failed", event)

    @hookimpl
    def conveyor_task_timed_out(self, event: ev.TaskTimedOut) -> None:
        """A timed-out attempt."""
        self._send("timed_out", event)

    @hookimpl
    def conveyor_task_process_died(self, event: ev.ProcessDied) -> None:
        """An attempt whose process died."""
        self._send("process_died", event)

    @hookimpl
    def conveyor_task_broken(self, event: ev.TaskBroken) -> None:
        """A task whose complete()/requires() failed while scheduling."""
        self._send("broken", event)

    @hookimpl
    def conveyor_task_succeeded(self, event: ev.TaskSucceeded) -> None:
        """A successful attempt."""
        self._send("succeeded", event)

    @hookimpl
    def conveyor_worker_stopped(self, event: ev.WorkerStopped) -> None:
        """The end of a run: its summary."""
        self._send("run_finished", event)


def build_dispatcher(config: Config) -> Dispatcher | None:
    """The dispatcher for ``[notifiers] enabled`` (None when it is empty): every notifier built
    once as ``cls(settings)`` from its validated table (BackendNotFound / ConfigError)."""
    settings = config.notifiers
    if not settings.enabled:
        return None
    targets = []
    for name in dict.fromkeys(settings.enabled):
        cls = load_backend("conveyor.notifiers", name)
        table = config.backend_settings("notifiers", name, schema_of(cls))
        targets.append((name, cls(table), table))
    return Dispatcher(
        targets,
        aggregate_after=settings.aggregate_after,
        aggregate_window=settings.aggregate_window,
    )
