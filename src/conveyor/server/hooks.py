"""The central server's hook plugins: loading, event collection and ordered delivery.

The server loads plugins as the worker does (:func:`conveyor.plugins.load_hook_plugins`: the
``conveyor.plugins`` entry points, ``[plugins] local``, ``disable`` lists) into a
:class:`~conveyor.plugins.LifecycleRelay` of its own, which isolates each implementation and
calls ``conveyor_configure`` once the state is loaded and ``conveyor_unconfigure`` at shutdown.

Theory of operation. The scheduling policy tells :class:`ServerHooks` about status moves and
workers through its observers (``on_move``, ``on_worker``), under the service's lock; the
events are only *collected* then. When the call's changes are committed, they move to an
outbox, in commit order (still under the lock); when they are rolled back, they are dropped.
After the lock is released, a thread of the pool (for a call made in a thread, that thread)
drains the outbox before the call is answered, one delivery at a time, so plugins see the
events in commit order, never one that was rolled back, and a slow plugin holds up responses
but never the scheduler's lock. An observer is only installed for a
hook some plugin implements: with no plugin, no event object is ever built.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from starlette.routing import BaseRoute, Route

from ..config import Config, PluginSettings
from ..errors import PluginError
from ..events import (
    Event,
    Params,
    SchedulerReportRefused,
    SchedulerRequest,
    SchedulerTaskChanged,
    SchedulerUiAction,
    SchedulerWorkerLost,
    SchedulerWorkerSeen,
)
from ..plugins import START_REFUSALS, LifecycleRelay, load_hook_plugins
from ..scheduler.policy import RUNNING, Cause, SchedulerCore, StatusMove

__all__ = ["ServerHooks", "check_routes", "load_server_hooks"]

TASK_CHANGED = SchedulerTaskChanged.hook
WORKER_SEEN = SchedulerWorkerSeen.hook
WORKER_LOST = SchedulerWorkerLost.hook
REPORT_REFUSED = SchedulerReportRefused.hook
UI_ACTION = SchedulerUiAction.hook
REQUEST = SchedulerRequest.hook
ROUTES = "conveyor_scheduler_routes"


def load_server_hooks(
    settings: PluginSettings, environ: Mapping[str, str] | None = None
) -> ServerHooks:
    """The server's plugins, loaded by the worker's rules from ``settings`` (its ``[plugins]``);
    PluginError (exit 2) for a ``local`` entry that fails or a required plugin missing."""
    relay = LifecycleRelay(START_REFUSALS)  # (a plugin's ConfigError: exit 2, as a worker's)
    sources, _failures = load_hook_plugins(settings, environ)
    for source in sources:
        relay.register(source.plugin, source.name)
    return ServerHooks(relay)


class ServerHooks:
    """Collects the server's events while a call runs and delivers the committed ones."""

    def __init__(self, relay: LifecycleRelay | None = None) -> None:
        """Deliver through ``relay`` (None: no plugin; nothing is ever collected)."""
        self.relay = relay or LifecycleRelay()
        self._pending: list[Event] = []  # collected under the service lock, not yet committed
        self._outbox: collections.deque[Event] = collections.deque()
        self._delivering = threading.Lock()
        self._core: SchedulerCore | None = None

    def wants(self, hook: str) -> bool:
        """True if a plugin implements ``hook``."""
        return self.relay.wants(hook)

    def attach(self, core: SchedulerCore) -> None:
        """Observe ``core``'s moves and workers, for the hooks some plugin implements (again
        after the plugins changed: one that left is observed for no more)."""
        self._core = core
        if self.wants(TASK_CHANGED):
            core.on_move = self._moved
        elif core.on_move == self._moved:
            core.on_move = None
        if self.wants(WORKER_SEEN) or self.wants(WORKER_LOST):
            core.on_worker = self._worker
        elif core.on_worker == self._worker:
            core.on_worker = None

    def configure(self, config: Config) -> None:
        """Configure the plugins (``conveyor_configure``: a refusal is raised), then observe
        the core again for those that stayed (a plugin returning False left)."""
        self.relay.configure(config)
        if self._core is not None:
            self.attach(self._core)

    def _moved(self, task_id: str, move: StatusMove) -> None:
        """``on_move``: collect a task-changed event (under the scheduler's lock)."""
        core = self._core
        assert core is not None
        rec = core.peek(task_id)
        if rec is None:  # (cannot happen: a move is of a known record)
            return
        worker = rec.worker or ""
        outcome, duration = "", None
        if rec.attempts and rec.attempts[-1].attempt == rec.attempt:
            latest = rec.attempts[-1]
            if not worker:
                worker = latest.worker  # the attempt that just ended
            if move.source == RUNNING and latest.outcome is not None and latest.ended is not None:
                outcome, duration = str(latest.outcome), max(0.0, latest.ended - latest.started)
        self._pending.append(
            SchedulerTaskChanged(
                task_id=task_id,
                family=rec.family,
                module=rec.module,
                params=Params(rec.params),
                worker_id=worker,
                timestamp=core.clock(),
                state=str(move.target),
                old_status=str(move.source),
                new_status=str(move.target),
                cause=move.cause.value,
                attempt=rec.attempt,
                waited=core.waited(rec) if move.cause is Cause.HANDED_OUT else None,
                outcome=outcome,
                duration=duration,
            )
        )

    def _worker(self, worker_id: str, kind: str, running: tuple[str, ...]) -> None:
        """``on_worker``: collect a worker seen / lost event (under the scheduler's lock)."""
        core = self._core
        assert core is not None
        now = core.clock()
        if kind == "lost":
            if self.wants(WORKER_LOST):
                self._pending.append(
                    SchedulerWorkerLost(worker_id=worker_id, timestamp=now, running=running)
                )
        elif self.wants(WORKER_SEEN):
            self._pending.append(
                SchedulerWorkerSeen(worker_id=worker_id, timestamp=now, returned=kind == "back")
            )

    def committed(self) -> None:
        """The call's changes are stored: queue its events (under the service lock)."""
        if self._pending:
            self._outbox.extend(self._pending)
            self._pending.clear()

    def discard(self) -> None:
        """The call's changes were rolled back: its events never happened."""
        self._pending.clear()

    def emit(self, event: Event) -> None:
        """Queue ``event`` (of something already committed) and deliver what is queued."""
        self._outbox.append(event)
        self.deliver()

    def pending(self) -> bool:
        """Whether events wait for :meth:`deliver`."""
        return bool(self._outbox)

    def deliver(self) -> None:
        """Deliver every queued event, in order, one delivery at a time (never call this
        holding the service lock). A thread that finds another delivering leaves its events
        to it and goes on: a slow hook holds up one thread, never every request."""
        while self._outbox:
            if not self._delivering.acquire(blocking=False):
                return
            try:
                while self._outbox:
                    self.relay.fire(self._outbox.popleft())
            finally:
                self._delivering.release()

    def refused(self, route: str, worker_id: str, task_id: str, attempt: int, why: str) -> None:
        """Deliver a report-refused event, if a plugin wants it."""
        if self.wants(REPORT_REFUSED):
            core = self._core
            rec = core.peek(task_id) if core is not None else None
            self.emit(
                SchedulerReportRefused(
                    task_id=task_id,
                    family=rec.family if rec is not None else "",
                    worker_id=worker_id,
                    timestamp=core.clock() if core is not None else 0.0,
                    route=route,
                    attempt=attempt,
                    reason=why,
                )
            )

    def ui_action(
        self, action: str, changed: Sequence[str], skipped: int, who: str, limit: int
    ) -> None:
        """Deliver a UI-action event, if a plugin wants it (``changed`` cut to ``limit``)."""
        if self.wants(UI_ACTION):
            core = self._core
            self.emit(
                SchedulerUiAction(
                    timestamp=core.clock() if core is not None else 0.0,
                    action=action,
                    task_ids=tuple(changed[:limit]),
                    changed=len(changed),
                    skipped=skipped,
                    who=who,
                )
            )

    def request(self, route: str, method: str, code: int, duration: float) -> None:
        """Deliver a request event at once (on the event loop: nothing is committed by it,
        so it does not wait in the outbox)."""
        self.relay.fire(
            SchedulerRequest(
                timestamp=time.time(), route=route, method=method, code=code, duration=duration
            )
        )

    def routes(self, builtin: Iterable[BaseRoute], server: object = None) -> list[BaseRoute]:
        """Every plugin's routes, checked against ``builtin`` and each other (PluginError,
        naming the plugin, for a route that is not one or whose path is already served);
        ``server`` (a :class:`~.view.SchedulerView`) is passed to the implementations that
        take it."""
        taken = [r for r in builtin if isinstance(r, Route)]
        owners: dict[int, str] = {}
        out: list[BaseRoute] = []
        for impl in reversed(getattr(self.relay.pm.hook, ROUTES).get_hookimpls()):
            name = impl.plugin_name
            try:
                contributed = impl.function(server) if impl.argnames else impl.function()
            except Exception as exc:
                raise PluginError(
                    f"plugin {name!r}: {ROUTES}() raised {type(exc).__name__}: {exc}",
                    plugin=name,
                ) from None
            for route in contributed or ():
                check_routes(name, route, taken, owners)
                taken.append(route)
                owners[id(route)] = name
                out.append(route)
        return out


def check_routes(name: str, route: Any, taken: Sequence[Route], owners: Mapping[int, str]) -> None:
    """PluginError unless ``route`` (of plugin ``name``) is a Starlette ``Route`` with a path
    that none of ``taken`` (built-in, or another plugin's per ``owners``) serves."""
    if not isinstance(route, Route):
        raise PluginError(
            f"plugin {name!r}: {ROUTES}() returned {route!r}, not a starlette.routing.Route",
            plugin=name,
        )
    for other in taken:
        if other.path_regex.match(route.path) or route.path_regex.match(other.path):
            whose = owners.get(id(other))
            what = f"plugin {whose!r}'s route" if whose else "the built-in route"
            raise PluginError(
                f"plugin {name!r}: route {route.path!r} collides with {what} {other.path!r}; "
                "a plugin route must use a path of its own (e.g. /api/v1/<plugin>/… or "
                "/plugins/<plugin>/…)",
                plugin=name,
            )
