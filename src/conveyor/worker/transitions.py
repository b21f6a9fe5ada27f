"""Applying a transition: the one place where a task's state changes and its hook fires."""

from __future__ import annotations

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
