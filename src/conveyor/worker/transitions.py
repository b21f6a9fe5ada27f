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
    """

    def __init__(self, worker_id: str, hooks: HookRelay, clock: Clock, host: str = "") -> None:
        """Fire through ``hooks``, with ``worker_id``, ``host`` and ``clock`` in every event."""
        self.worker_id = worker_id
        self.hooks = hooks
        self.clock = clock
        self.host = host

    def __call__(self, node: Node, trigger: Trigger, **fields: Any) -> Event | None:
        """Apply ``trigger`` to ``node`` (InvalidTransition if the table forbids it) and fire
        its event with ``fields``; the event, or None when nobody wanted it (not built)."""
        state = TRANSITIONS.get((node.state, trigger))
        if state is None:
            state = advance(node.state, trigger)  # raises InvalidTransition
        node.state = state
        event_cls = EVENT_OF[trigger]
        hooks = self.hooks
        if not hooks.wants(event_cls.hook):
            return None
        event = self.event(node, event_cls, **fields)
        hooks.fire(event)
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
