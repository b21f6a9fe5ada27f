"""Dispatching notifications: a hook plugin of the worker feeding one sender thread.

:class:`NotifyPlugin` is registered like any plugin (by name, ``conveyor.notify``, from
:data:`conveyor.plugins.BUILTIN_PLUGINS`), sets itself up in ``conveyor_configure`` and sees
exactly the events every plugin sees. Its hooks only append ``(kind, event)`` to a bounded
inbox — the worker's loop never waits for a notifier. The :class:`Dispatcher`'s sender thread
turns them into :class:`~conveyor.notifiers.Message` objects (redacted, truncated),
aggregates bursts, and delivers each message to every enabled notifier with a timeout on every
send, bounded retries with backoff (a notifier's ``RetryAfter`` sets the wait), and a failure
log line per notifier at most once per :data:`FAILURE_LOG_INTERVAL`. At exit,
:meth:`Dispatcher.close` delivers what is queued within ``flush_timeout`` in total.

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
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from .. import events as ev
from ..backends import load_backend
from ..backoff import Backoff
from ..errors import ConfigError, PluginError
from ..hookspecs import hookimpl
from ..protocol import NotifyKind
from ..secrets import REDACTED, is_secret_setting, redact_argv, redact_text
from ..settings import check_backend_settings, schema_of
from . import Message, RetryAfter
from .messages import MAX_HELD_EVENTS, Held, aggregate, compose

if TYPE_CHECKING:
    from ..config import Config
    from ..plugins import HookRelay

__all__ = ["FAILURE_LOG_INTERVAL", "Dispatcher", "NotifyPlugin", "build_dispatcher"]

FAILURE_LOG_INTERVAL = 60.0  # seconds between two log lines about the same failing notifier
DEFAULT_TIMEOUT = 10.0  # per send, when a notifier's table declares no `timeout`
DEFAULT_RETRIES = 3  # retries after a failed send, when its table declares no `max_retries`
QUEUE_SIZE = 1000  # notifications (and deliveries) held at most; beyond, the oldest is dropped
MAX_RETRY_AFTER = 3600.0  # a longer RetryAfter is taken as this long
_BUSY_WAIT = 1.0  # seconds before trying a notifier whose abandoned send() still runs
_BACKOFF = Backoff(first=1.0, cap=30.0)
_WORK = object()  # _next(): the inbox has notifications to compose
log = structlog.get_logger("conveyor.notifiers")


@dataclass(slots=True)
class _Target:
    """One enabled notifier, with what the dispatcher takes from its table."""

    name: str
    notifier: Any
    timeout: float
    retries: int
    secrets: tuple[str, ...]
    failures: int = 0
    dropped: int = 0
    logged_at: float = float("-inf")
    dropped_logged_at: float = float("-inf")
    abandoned: tuple[threading.Thread, list[BaseException | None], _Delivery] | None = None
    """A send() that did not return in time and may still be running: no other send of this
    notifier starts before it ends (one send per notifier at a time)."""


@dataclass(order=True, slots=True)
class _Delivery:
    """One message for one notifier, due at ``due`` (monotonic seconds)."""

    due: float
    seq: int
    message: Message = field(compare=False)
    target: _Target = field(compare=False)
    attempt: int = field(default=0, compare=False)


_SENT, _FAILED, _DROPPED = "sent", "failed", "dropped"
_BLANK = ev.Event()


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
        """Notifications pushed out of the full queue (the oldest first)."""
        self.delivered = 0
        self.given_up = 0
        """Messages dropped after their last retry (per notifier)."""
        self.undelivered = 0
        """Messages still queued or held when the close deadline came."""
        self._total_logged = False
        self._inbox: deque[tuple[str, ev.Event]] = deque()
        self._deliveries: list[_Delivery] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._started = False  # start() was called: the sender thread may run
        self._deadline: float | None = None  # set by close(): deliver until then, then stop
        self._window_end = float("-inf")
        self._in_window = 0
        self._held: list[Held] = []
        self._dropped_logged = float("-inf")
        self._results: deque[tuple[str, str, str, Message | None]] = deque()
        self.on_result: Callable[[str, str, str, Message | None], None] | None = None
        """Told ``(notifier, kind, result, message)`` after each try of a delivery (result
        ``sent``, ``failed`` or ``dropped``), in order, on the sender thread (a notification
        pushed out of the full queue is told at its next step)."""

    # --- the worker's side ----------------------------------------------------------------

    def start(self) -> None:
        """Let the sender thread run (the worker calls this when its run starts, after its
        fork server exists; notifications before that wait in the inbox)."""
        with self._cond:
            self._started = True
            if self._inbox and self._deadline is None:
                self._start_thread()

    def notify(self, kind: str, event: ev.Event) -> None:
        """Queue one notification; never blocks (a full inbox drops its oldest entry)."""
        with self._cond:
            if self._deadline is not None:
                return
            if len(self._inbox) >= self.queue_size:
                lost_kind, _lost = self._inbox.popleft()
                self._count_drop()
                for target in self.targets:
                    self._result(target.name, lost_kind, _DROPPED, None)
            self._inbox.append((kind, event))
            if self._started:
                self._start_thread()
            self._cond.notify()

    def close(self, flush_timeout: float) -> None:
        """Deliver what is queued (held aggregates included) within ``flush_timeout`` seconds
        in total, then stop; what is left is logged as undelivered, and the total dropped
        during the run (if any) once."""
        with self._cond:
            self._deadline = self.clock() + max(0.0, flush_timeout)
            if self._inbox or self._deliveries or self._held:
                self._start_thread()
            thread = self._thread
            self._cond.notify_all()  # a send in flight stops being waited for at the deadline
        if thread is not None:
            thread.join(max(0.0, flush_timeout) + 1.0)
            if thread.is_alive():  # cannot happen unless the clock misleads: still, say so
                self._report_leftovers(in_flight=1)
                self._tell_results()
        self._log_total_dropped()

    def _log_total_dropped(self) -> None:
        """One warning at exit with every notification lost during the run, by cause."""
        with self._cond:
            if self._total_logged:
                return
            self._total_logged = True
            causes = {
                "queue_full": self.dropped,
                "after_retries": self.given_up,
                "past_flush_timeout": self.undelivered,
            }
        total = sum(causes.values())
        if total:
            log.warning("notifications dropped during this run", total=total, **causes)

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="conveyor-notify", daemon=True)
            self._thread.start()

    # --- the sender thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                with self._cond:
                    step = self._next()
                if step is None:
                    break
                if step is _WORK:
                    self._compose_inbox()
                else:
                    assert isinstance(step, _Delivery)
                    self._deliver(step)
                self._tell_results()
            except Exception as exc:  # the sender must survive its own bugs too
                log.error("notification dispatch failed", error=_describe(exc))
        self._report_leftovers()
        self._tell_results()

    def _next(self) -> object:
        """Wait (holding the condition) for work: ``_WORK`` when the inbox has notifications,
        the next due delivery, or None to stop."""
        while True:
            if self._inbox:
                return _WORK
            now = self.clock()
            closing = self._deadline is not None
            if self._held and (now >= self._window_end or closing):
                self._enqueue(aggregate(self._held))
                self._held = []
            if closing and now >= self._deadline:  # type: ignore[operator]
                return None
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
            wait = min(max(0.0, min(wake) - now), threading.TIMEOUT_MAX) if wake else None
            self._cond.wait(wait)

    def _compose_inbox(self) -> None:
        """Turn what the hooks queued into messages — outside the lock, so that notify() never
        waits for it — then admit them."""
        with self._cond:
            batch = list(self._inbox)
            self._inbox.clear()
        messages = [(kind, compose(kind, event, self.command)) for kind, event in batch]
        with self._cond:
            for kind, message in messages:
                self._admit(kind, message, self.clock())

    def _admit(self, kind: str, message: Message, now: float) -> None:
        if kind == NotifyKind.RUN_FINISHED:  # after the burst it summarises
            if self._held:
                self._enqueue(aggregate(self._held))
                self._held = []
            self._enqueue(message)
            return
        if now >= self._window_end:
            if self._held:
                self._enqueue(aggregate(self._held))
                self._held = []
            self._window_end = now + self.aggregate_window
            self._in_window = 0
        self._in_window += 1
        if self._in_window <= self.aggregate_after:
            self._enqueue(message)
        else:
            self._held.append(Held.of(message, keep_event=len(self._held) < MAX_HELD_EVENTS))

    def _enqueue(self, message: Message) -> None:
        now = self.clock()
        for target in self.targets:
            if len(self._deliveries) >= self.queue_size:
                oldest = min(self._deliveries, key=lambda d: d.seq)
                self._deliveries.remove(oldest)
                heapq.heapify(self._deliveries)
                self._count_drop()
                self._result(oldest.target.name, oldest.message.kind, _DROPPED, oldest.message)
            heapq.heappush(self._deliveries, _Delivery(now, next(self._seq), message, target))

    def _deliver(self, delivery: _Delivery) -> None:
        target = delivery.target
        if target.abandoned is not None:
            thread, outcome, owner = target.abandoned
            if thread.is_alive():  # one send per notifier at a time: wait for it
                self._reschedule(delivery, _BUSY_WAIT)
                return
            target.abandoned = None
            if owner is delivery and outcome and outcome[0] is None:
                with self._cond:  # the send given up on did deliver it after all
                    self.delivered += 1
                self._result(target.name, delivery.message.kind, _SENT, delivery.message)
                return
        with self._cond:
            timeout = target.timeout
            if self._deadline is not None:
                timeout = min(timeout, self._deadline - self.clock())
        if timeout <= 0:  # past the close deadline: left for the undelivered count
            self._reschedule(delivery, 0.0)
            return
        error = self._send_within(delivery, timeout)
        if error is None:
            with self._cond:
                self.delivered += 1
            self._result(target.name, delivery.message.kind, _SENT, delivery.message)
            return
        self._log_failure(target, error)
        self._result(target.name, delivery.message.kind, _FAILED, delivery.message)
        if delivery.attempt >= target.retries:
            self._give_up(delivery)
            return
        delivery.attempt += 1
        if isinstance(error, RetryAfter):
            wait = min(error.seconds, MAX_RETRY_AFTER)
        else:
            wait = _BACKOFF.delay(delivery.attempt, self.rand)
        self._reschedule(delivery, wait)

    def _reschedule(self, delivery: _Delivery, wait: float) -> None:
        with self._cond:
            delivery.due = self.clock() + wait
            delivery.seq = next(self._seq)
            heapq.heappush(self._deliveries, delivery)

    def _give_up(self, delivery: _Delivery) -> None:
        target = delivery.target
        self._result(target.name, delivery.message.kind, _DROPPED, delivery.message)
        now = self.clock()
        with self._cond:
            self.given_up += 1
            target.dropped += 1
            if now - target.dropped_logged_at < FAILURE_LOG_INTERVAL:
                return
            target.dropped_logged_at = now
        log.warning(
            "a notification was dropped after its retries",
            notifier=target.name,
            kind=delivery.message.kind,
            attempts=delivery.attempt + 1,
            dropped=target.dropped,
        )

    def _send_within(self, delivery: _Delivery, timeout: float) -> BaseException | None:
        """Call ``send`` on its own thread; what it raised, or None. It is abandoned
        (TimeoutError) after ``timeout``, or at the close deadline if that comes first."""
        target = delivery.target
        outcome: list[BaseException | None] = []

        def send() -> None:
            try:
                target.notifier.send(delivery.message)
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
                    target.abandoned = (thread, outcome, delivery)
                    return TimeoutError(f"send() did not return within {timeout:g} s")
                self._cond.wait(min(left, threading.TIMEOUT_MAX))
        return outcome[0]

    def _log_failure(self, target: _Target, error: BaseException) -> None:
        target.failures += 1
        now = self.clock()
        if now - target.logged_at < FAILURE_LOG_INTERVAL:
            return
        target.logged_at = now
        log.warning(
            "a notifier failed to send",
            notifier=target.name,
            error=_scrub(_describe(error), target.secrets)[:500],
            failures=target.failures,
        )

    def _result(self, notifier: str, kind: str, result: str, message: Message | None) -> None:
        """Note a result for :attr:`on_result` (told by :meth:`_tell_results`, which the
        sender thread runs after each step, holding no lock: an observer never stalls
        ``notify()``)."""
        if self.on_result is not None:
            self._results.append((notifier, kind, result, message))

    def _tell_results(self) -> None:
        """Tell :attr:`on_result` the noted results, in order (call holding no lock; a
        failure there is logged, never the dispatch's)."""
        observer = self.on_result
        while observer is not None and self._results:
            try:
                observer(*self._results.popleft())
            except IndexError:  # (another thread took the last one)
                return
            except Exception as exc:
                log.error("notification result observer failed", error=_describe(exc))

    def _count_drop(self) -> None:
        self.dropped += 1
        now = self.clock()
        if now - self._dropped_logged >= FAILURE_LOG_INTERVAL:
            self._dropped_logged = now
            log.warning("the notification queue is full: dropped the oldest", dropped=self.dropped)

    def _report_leftovers(self, in_flight: int = 0) -> None:
        with self._cond:
            left = len(self._deliveries) + len(self._inbox) + len(self._held) + in_flight
            for delivery in self._deliveries:  # (queued for a notifier: dropped there)
                message = delivery.message
                self._result(delivery.target.name, message.kind, _DROPPED, message)
            self._deliveries.clear()
            self._inbox.clear()
            self._held = []
            self.undelivered += left
        if left:
            log.warning(
                "notifications not delivered before the worker exited (flush_timeout)",
                undelivered=left,
            )


def _describe(error: BaseException) -> str:
    """``Type: message``, even for an exception whose ``str()`` raises."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return type(error).__name__


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


class NotifyPlugin:
    """The notifier dispatch as a hook plugin of the worker (``conveyor.notify``), registered
    from :data:`conveyor.plugins.BUILTIN_PLUGINS` like conveyor's other built-ins.

    Its life follows the worker's lifecycle hooks: ``conveyor_configure`` builds the notifiers
    of ``[notifiers] enabled`` and the :class:`Dispatcher` (a notifier that is not installed
    or whose table cannot work refuses the start: BackendNotFound / ConfigError, exit 2);
    ``conveyor_worker_started`` lets its sender thread run — a thread must not be alive when
    a process executor forks its fork server, and the worker starts those before that event;
    ``conveyor_unconfigure`` delivers what is queued within ``flush_timeout`` and stops. In
    between, the selected events are queued for the sender thread (never sent on the worker's
    loop). Given a ``dispatcher``, it uses that one instead of building its own.
    """

    name = "conveyor.notify"

    def __init__(self, dispatcher: Dispatcher | None = None, on: Iterable[str] = ()) -> None:
        """Forward the kinds in ``on`` (``failed``, ``timed_out``, ... ``run_finished``) to
        ``dispatcher``; without one, both come from the configuration at configure time."""
        self.dispatcher = dispatcher
        self.on = frozenset(on)

    relay: HookRelay | None = None
    """The worker's relay, through which each delivery's result is told
    (``conveyor_notification_sent``)."""

    @classmethod
    def for_config(cls, config: Config, relay: HookRelay | None = None) -> NotifyPlugin | None:
        """The plugin for a worker with this configuration, which tells ``relay``'s plugins
        how each delivery went: None when ``[notifiers] enabled`` is empty (nothing to
        dispatch; the plugin then costs nothing per event)."""
        if not config.notifiers.enabled:
            return None
        plugin = cls()
        plugin.relay = relay
        return plugin

    @hookimpl
    def conveyor_configure(self, config: Config) -> None:
        """Build the notifiers and the dispatcher (BackendNotFound / ConfigError refuse the
        start); no thread starts yet."""
        if self.dispatcher is None:
            self.dispatcher = build_dispatcher(config)
            self.on = frozenset(config.notifiers.on)
        if self.dispatcher is not None and self.relay is not None:
            self.dispatcher.on_result = self._tell

    def _tell(self, notifier: str, kind: str, result: str, message: Message | None) -> None:
        """Fire ``conveyor_notification_sent`` (on the sender thread), if a plugin wants it."""
        relay = self.relay
        if relay is not None and relay.wants(ev.NotificationSent.hook):
            event = message.events[0] if message is not None and message.events else _BLANK
            relay.fire(
                ev.NotificationSent(
                    task_id=event.task_id,
                    family=event.family,
                    module=event.module,
                    worker_id=event.worker_id,
                    timestamp=time.time(),
                    host=event.host,
                    notifier=notifier,
                    kind=kind,
                    result=result,
                )
            )

    @hookimpl
    def conveyor_worker_started(self, event: ev.WorkerStarted) -> None:
        """A run starts (after the worker's fork servers): the sender thread may run."""
        if self.dispatcher is not None:
            self.dispatcher.start()

    def _send(self, kind: str, event: ev.Event) -> None:
        if kind in self.on and self.dispatcher is not None:
            self.dispatcher.notify(kind, event)

    @hookimpl
    def conveyor_unconfigure(self, flush_timeout: float) -> None:
        """The worker closes: deliver what is queued within ``flush_timeout``, then stop."""
        if self.dispatcher is not None:
            self.dispatcher.close(flush_timeout)

    @hookimpl
    def conveyor_task_failed(self, event: ev.TaskFailed) -> None:
        """A failed attempt."""
        self._send(NotifyKind.FAILED, event)

    @hookimpl
    def conveyor_task_timed_out(self, event: ev.TaskTimedOut) -> None:
        """A timed-out attempt."""
        self._send(NotifyKind.TIMED_OUT, event)

    @hookimpl
    def conveyor_task_process_died(self, event: ev.ProcessDied) -> None:
        """An attempt whose process died."""
        self._send(NotifyKind.PROCESS_DIED, event)

    @hookimpl
    def conveyor_task_broken(self, event: ev.TaskBroken) -> None:
        """A task whose complete()/requires() failed while scheduling."""
        self._send(NotifyKind.BROKEN, event)

    @hookimpl
    def conveyor_task_succeeded(self, event: ev.TaskSucceeded) -> None:
        """A successful attempt."""
        self._send(NotifyKind.SUCCEEDED, event)

    @hookimpl
    def conveyor_worker_stopped(self, event: ev.WorkerStopped) -> None:
        """The end of a run: its summary."""
        self._send(NotifyKind.RUN_FINISHED, event)


def build_dispatcher(config: Config) -> Dispatcher | None:
    """The dispatcher for ``[notifiers] enabled`` (None when it is empty): every notifier built
    once as ``cls(settings)`` from its validated table (BackendNotFound / ConfigError; any
    other error the notifier's constructor raises becomes a ConfigError naming it)."""
    settings = config.notifiers
    if not settings.enabled:
        return None
    targets = []
    for name in dict.fromkeys(settings.enabled):
        cls = load_backend("conveyor.notifiers", name)
        table = config.backend_settings("notifiers", name, schema_of(cls))
        check_backend_settings(cls, table, config.source or "")
        try:
            notifier = cls(table)
        except (ConfigError, PluginError):
            raise
        except Exception as exc:  # a notifier that cannot be built refuses the start too
            secrets = _target(name, None, table).secrets
            raise ConfigError(
                f"the notifier {name!r} of [notifiers] enabled could not be built: "
                + _scrub(_describe(exc), secrets)
            ) from None  # (its text may hold a secret: only the scrubbed one is kept)
        targets.append((name, notifier, table))
    return Dispatcher(
        targets,
        aggregate_after=settings.aggregate_after,
        aggregate_window=settings.aggregate_window,
    )
