"""Applying a transition: the one place where a task's state changes and its hook fires."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from ..clock import Clock
from ..core.states import EVENT_OF, TRANSITIONS, TaskState, Trigger, advance
from ..events import Event
from ..plugins import HookRelay
from .graph import Node

E = TypeVar("E", bound=Event)

__all__ = ["Transitions"]

_STATE_NAMES = {state: state.name for state in TaskState}


class Transitions:
    """Moves nodes through the state machine and fires the event each trigger names.

    Shared by the graph walk and the worker loop; an event nobody listens to is not built.
    Which triggers' hooks have implementations is looked up once per set of registered
    plugins (:attr:`~conveyor.plugins.HookRelay.generation`), not once per transition.
    """

    def __init__(self, worker_id: str, hooks: HookRelay, clock: Clock, host: str = "") -> None:
        """Fire through ``hooks``, with ``worker_id``, ``host`` and ``clock`` in every event."""
        self.worker_id = worker_id
        self.hooks = hooks
        self.clock = clock
        self.host = host
        self._generation = -1  # the relay's generation _wanted was made for
        self._wanted: dict[Trigger, type[Event] | None] = {}

    def wanted(self) -> dict[Trigger, type[Event] | None]:
        """Each trigger's event class if some plugin implements its hook, else None (for the
        plugins registered now)."""
        hooks = self.hooks
        generation = hooks.generation  # (first: a plugin registered meanwhile makes it stale)
        if self._generation != generation:
            self._wanted = {
                trigger: cls if hooks.wants(cls.hook) else None for trigger, cls in EVENT_OF.items()
            }
            self._generation = generation
        return self._wanted

    def move(self, node: Node, trigger: Trigger) -> type[Event] | None:
        """Apply ``trigger`` to ``node`` (InvalidTransition if the table forbids it) without
        firing: the class of the event to fire (:meth:`fire`), or None when nobody wants it
        (so that the caller need not gather the event's fields)."""
        state = TRANSITIONS.get((node.state, trigger))
        if state is None:
            state = advance(node.state, trigger)  # raises InvalidTransition
        node.state = state
        if self._generation != self.hooks.generation:
            return self.wanted()[trigger]
        return self._wanted[trigger]

    def fire(self, node: Node, event_cls: type[E], **fields: Any) -> E:
        """Build the ``event_cls`` event of ``node`` (just moved by :meth:`move`) with
        ``fields`` and fire it; the event."""
        event = self.event(node, event_cls, **fields)
        self.hooks.fire(event)
        return event

    def __call__(self, node: Node, trigger: Trigger, **fields: Any) -> Event | None:
        """Apply ``trigger`` to ``node`` (InvalidTransition if the table forbids it) and fire
        its event with ``fields``; the event, or None when nobody wanted it (not built)."""
        state = TRANSITIONS.get((node.state, trigger))
        if state is None:
            state = advance(node.state, trigger)  # raises InvalidTransition
        node.state = state
        if self._generation != self.hooks.generation:
            self.wanted()
        event_cls = self._wanted[trigger]
        if event_cls is None:
            return None
        event = self.event(node, event_cls, **fields)
        self.hooks.fire(event)
        return event

    def event(self, node: Node, event_cls: type[E], **fields: Any) -> E:
        """The ``event_cls`` event of ``node`` in its current state, with ``fields``."""
        task = node.task
        plan = _PLANS.get(event_cls)
        if plan is None:
            plan = _PLANS[event_cls] = _plan(event_cls)
        if plan and plan[2].issuperset(fields) and plan[3].issubset(fields):
            # (every field it must be given, none unknown: built directly, see _plan)
            event: E = _new(event_cls)
            set_task_id, set_family, set_module, set_params, set_worker_id = plan[0][:5]
            set_timestamp, set_state, set_owner_email, set_host = plan[0][5:]
            set_task_id(event, node.task_id)
            set_family(event, task.task_family)
            set_module(event, task.task_module)
            set_params(event, node.params)
            set_worker_id(event, self.worker_id)
            set_timestamp(event, self.clock.time())
            set_state(event, _STATE_NAMES[node.state])
            set_owner_email(event, (node.policy or node.task_policy()).owners)
            set_host(event, self.host)
            for name, set_field, default in plan[1]:
                set_field(event, fields.get(name, default))
            return event
        return event_cls(
            task_id=node.task_id,
            family=task.task_family,
            module=task.task_module,
            params=node.params,
            worker_id=self.worker_id,
            timestamp=self.clock.time(),
            state=_STATE_NAMES[node.state],
            owner_email=(node.policy or node.task_policy()).owners,  # (read once per node)
            host=self.host,
            **fields,
        )


_Setter = Callable[[Any, Any], None]
#: How to build an event of a class directly: the slot setters of the fields every event has
#: (in :class:`~conveyor.events.Event`'s order); the class's own fields, each with its setter
#: and default; the names of those, and of those without a default (which must be given);
#: () for a class built by its constructor only.
_Plan = (
    tuple[
        tuple[_Setter, ...],
        tuple[tuple[str, _Setter, Any], ...],
        frozenset[str],
        frozenset[str],
    ]
    | tuple[()]
)
_PLANS: dict[type, _Plan] = {}
_COMMON = tuple(f.name for f in dataclasses.fields(Event))
_new = object.__new__


def _plan(event_cls: type[Event]) -> _Plan:
    """How :meth:`Transitions.event` may build an ``event_cls`` without its generated
    ``__init__`` (whose ``object.__setattr__`` per field costs microseconds per event, and a
    worker may fire four per task): by writing each field's slot directly. Only for a frozen
    dataclass with slots, every field set by ``__init__``, no ``__post_init__``, the fields
    of :class:`~conveyor.events.Event` first and no default made by a factory among its own
    (the common fields are always given); and only when the fields given are its own and
    include every one without a default: else the constructor builds it, and says what is
    wrong with what it was given."""
    if not dataclasses.is_dataclass(event_cls):
        return ()
    fields = dataclasses.fields(event_cls)
    names = tuple(f.name for f in fields)
    own = fields[len(_COMMON) :]
    if (
        "__slots__" not in vars(event_cls)
        or not event_cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        or hasattr(event_cls, "__post_init__")
        or names[: len(_COMMON)] != _COMMON
        or not all(f.init for f in fields)
        or any(f.default_factory is not dataclasses.MISSING for f in own)
    ):
        return ()
    return (
        tuple(getattr(event_cls, name).__set__ for name in _COMMON),
        tuple((f.name, getattr(event_cls, f.name).__set__, f.default) for f in own),
        frozenset(f.name for f in own),
        frozenset(f.name for f in own if f.default is dataclasses.MISSING),
    )
