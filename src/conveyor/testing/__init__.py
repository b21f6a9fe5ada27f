"""Test kit for conveyor's own tests, plugin authors and embedders.

* :class:`RecordingPlugin` — a hook plugin that records every event it receives, in order.
* :class:`FakeClock` — a manual clock to inject into :class:`conveyor.Scheduler`.
* :func:`hook_names` — every hook conveyor defines.
* :func:`check_executor`, :func:`check_transport`, :func:`check_state_store`,
  :func:`check_notifier` — the conformance checks a backend of each kind runs against itself,
  each imported from its submodule (``executors``, ``transports``, ``stores``, ``notifiers``)
  the first time it is used.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import itertools
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import hookspecs
from ..events import Event

if TYPE_CHECKING:
    from .executors import check_executor
    from .notifiers import check_notifier
    from .stores import check_state_store
    from .transports import check_transport

__all__ = [
    "FakeClock",
    "Recorded",
    "RecordingPlugin",
    "check_executor",
    "check_notifier",
    "check_state_store",
    "check_transport",
    "hook_names",
    "timeless",
]

_CHECKS = {
    "check_executor": "executors",
    "check_notifier": "notifiers",
    "check_state_store": "stores",
    "check_transport": "transports",
}
"""Each conformance check and the submodule that defines it."""


_recorder_ids = itertools.count(1)


def timeless(summary: str) -> str:
    """``summary`` (an execution summary, or its verdict line) without the run's duration
    (``in 0.3 s``, ``after 2 min 5 s``), which differs from run to run."""
    return re.sub(r" (?:in|after) (?:[\d.]+ (?:h|min|s) )+- ", " - ", summary, count=1)


def hook_names() -> list[str]:
    """The names of every hook spec in :mod:`conveyor.hookspecs`."""
    return sorted(n for n in dir(hookspecs) if n.startswith("conveyor_"))


@dataclass(frozen=True, slots=True)
class Recorded:
    """One hook call: the hook's name and its event."""

    hook: str
    event: Event


class RecordingPlugin:
    """A hook plugin implementing every observer hook (each one that receives an ``event``);
    ``records`` keeps each call in order.

    Register it with ``Worker(plugins=[RecordingPlugin()])``; in a central server (``[plugins]
    local = ["module:Recorder"]`` naming a subclass or instance) it records the server's
    ``conveyor_scheduler_*`` events the same way (from several threads: each record is taken
    under a lock, in delivery order).
    """

    def __init__(self, name: str | None = None) -> None:
        """Start with no records; ``name`` (unique by default) is the plugin's name."""
        self.name = name or f"conveyor.testing.recorder-{next(_recorder_ids)}"
        self.records: list[Recorded] = []
        self._lock = threading.Lock()

    def _record(self, event: Event) -> None:
        with self._lock:
            self.records.append(Recorded(event.hook, event))

    def hooks(self) -> list[str]:
        """The hook names recorded, in order."""
        return [r.hook for r in self.records]

    def events(self, hook: str, task_id: str | None = None) -> list[Any]:
        """The events of one hook (optionally of one task), in order."""
        short = hook if hook.startswith("conveyor_") else f"conveyor_{hook}"
        return [
            r.event
            for r in self.records
            if r.hook == short and (task_id is None or r.event.task_id == task_id)
        ]

    def for_task(self, task_id: str) -> Iterator[Recorded]:
        """The records of one task, in order."""
        return (r for r in self.records if r.event.task_id == task_id)


def _make_recorder(name: str) -> Any:
    def record(self: RecordingPlugin, event: Event) -> None:
        self._record(event)

    record.__name__ = name
    record.__doc__ = f"Record a {name} event."
    return hookspecs.hookimpl(record)


def _observer_hooks() -> list[str]:
    """The hooks whose spec receives one ``event`` (``conveyor_scheduler_routes`` does not),
    but for ``conveyor_attempt_environment``, which answers (with the attempt's started event),
    and the server's per-request ``conveyor_scheduler_request``, which would drown the rest."""
    return [
        name
        for name in hook_names()
        if tuple(inspect.signature(getattr(hookspecs, name)).parameters) == ("event",)
        and name not in _NOT_RECORDED
    ]


_NOT_RECORDED = {"conveyor_attempt_environment", "conveyor_scheduler_request"}


for _name in _observer_hooks():
    setattr(RecordingPlugin, _name, _make_recorder(_name))


class FakeClock:
    """A clock that only moves when told.

    Pass it as ``clock=fake`` to ``conveyor.Scheduler`` (it is callable) and to
    ``conveyor.Worker`` (it is a :class:`conveyor.clock.Clock`): the worker's timed waits then
    advance it at once instead of sleeping, so a whole run with retry delays, disable windows
    or keep_alive waits finishes immediately and in the same order every time.

    The worker's process executors measure attempt timeouts on it too: an attempt's timeout
    fires when the clock is moved past it (:meth:`advance`, from any thread), which wakes their
    supervisors through :meth:`on_advance` (see :mod:`conveyor.executors.deadline`). So does
    everything after a timeout (SIGKILL ``kill_grace`` after SIGTERM, the grace after an
    outcome): a test whose attempt hangs or ignores SIGTERM must move the clock itself, or the
    run (and ``close()``) waits for it.
    """

    blocks = False

    def __init__(self, start: float = 1_000_000.0) -> None:
        """Start at ``start`` seconds."""
        self.now = start
        self.slept = 0.0
        """The total of every ``sleep()``: how long the run waited, in fake seconds."""
        self._listeners: list[Callable[[], None]] = []
        self._listening = threading.RLock()  # (a listener may remove itself)

    def __call__(self) -> float:
        """The current fake time."""
        return self.now

    def time(self) -> float:
        """The current fake time (wall clock)."""
        return self.now

    def monotonic(self) -> float:
        """The current fake time (monotonic)."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` at once."""
        self.slept += max(0.0, seconds)
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        """Move the clock forward, then call every :meth:`on_advance` listener (under the
        listeners' lock: once a listener's remover has returned, it is never called again)."""
        self.now += seconds
        with self._listening:
            for listener in tuple(self._listeners):
                listener()

    def on_advance(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (no arguments, on the advancing thread) after every move; returns
        a function that removes it (a supervisor wakes up this way to check its deadlines)."""
        with self._listening:
            self._listeners.append(listener)

        def remove() -> None:
            with self._listening, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove


def __getattr__(name: str) -> Any:
    """A conformance check, imported from its submodule on first use (each pulls in the
    protocol it checks, which a test using only the recorder or the clock does not need)."""
    submodule = _CHECKS.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    check = getattr(importlib.import_module(f".{submodule}", __name__), name)
    globals()[name] = check
    return check
