r"""The graph walk: complete() checks, requires(), registration, cycle detection.

:class:`GraphWalk` is the part of the :class:`~conveyor.worker.loop.Worker` that turns tasks
into registered :class:`~conveyor.worker.graph.Node`\ s, and the one place where a task's state
changes (:meth:`GraphWalk._transit`, which also fires the transition's hook).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Mapping, Set
from typing import Any

from .. import events as ev
from ..clock import Clock
from ..config import WorkerSettings
from ..core.machine import registration
from ..core.states import EVENT_OF, RECHECKABLE, TRANSITIONS, TaskState, Trigger, advance
from ..errors import ConveyorError, DependencyCycle
from ..plugins import HookRelay
from ..protocol import TaskSpec, TaskStatus
from ..task import Task
from ..transports.base import SchedulerTransport
from .checks import ParallelChecks, SequentialChecks
from .graph import Node, find_cycle, label
from .outbox import Outbox

__all__ = ["GraphWalk"]

_STATE_NAMES = {state: state.name for state in TaskState}


class GraphWalk:
    """Walking and registering task graphs; mixed into the Worker."""

    id: str
    settings: WorkerSettings
    clock: Clock
    hooks: HookRelay
    _graph: dict[str, Node]
    _requested: list[str]
    _running: dict[str, Node]
    _scheduled: int
    _transport: SchedulerTransport
    _outbox: Outbox
    _in_run: bool = False

    # --- transitions ----------------------------------------------------------------------

    def _transit(self, node: Node, trigger: Trigger, **fields: Any) -> None:
        """Apply one transition to ``node`` and fire the event its trigger names (the only way
        states change)."""
        state = TRANSITIONS.get((node.state, trigger))
        if state is None:
            state = advance(node.state, trigger)  # raises InvalidTransition
        node.state = state
        event_cls = EVENT_OF[trigger]
        if not self.hooks.wants(event_cls.hook):
            return
        task = node.task
        self.hooks.fire(
            event_cls(
                task_id=node.task_id,
                family=task.task_family,
                module=task.task_module,
                params=node.params,
                worker_id=self.id,
                timestamp=self.clock.time(),
                state=_STATE_NAMES[state],
                **fields,
            )
        )

    # --- the graph walk -------------------------------------------------------------------

    def add(self, task: Task) -> bool:
        """Walk ``task``'s graph and register it; False if any task in it is broken."""
        if not isinstance(task, Task):
            raise TypeError(f"Worker.add() takes a conveyor.Task, got {type(task).__name__}")
        self._requested.append(task.task_id)
        return self._walk([task])

    def _walk(self, roots: Iterable[Task], recheck: Iterable[str] = ()) -> bool:
        recheck_ids = frozenset(recheck)
        checks = self._checks()
        visited: set[str] = set()
        specs: list[TaskSpec] = []
        pending: list[str] = []
        new = True  # every edge so far led to a task never seen before: the walk is a tree
        try:
            # reversed: the sequential walk is LIFO, so the first root is registered first
            for root in reversed(list(roots)):
                new &= self._submit(root, checks, visited, recheck_ids)
            while checks.outstanding():
                task, complete, error = checks.next()
                node = self._graph[task.task_id]
                if error:
                    self._broken(node, error, "complete", specs)
                    continue
                # reversed: the sequential walk is depth-first (LIFO), so the first
                # requirement is visited (and registered) first
                for dep in reversed(self._visit(node, complete, specs, pending)):
                    new &= self._submit(dep, checks, visited, recheck_ids)
        finally:
            checks.close()
        if not new:  # a cycle needs an edge back to a task already seen
            self._break_cycles(pending, specs)
        if self._in_run:  # mid-run: must survive an outage, in order with the results
            self._outbox.send("add_tasks", self.id, specs, self.settings.assistant)
        else:
            self._transport.add_tasks(self.id, specs, self.settings.assistant)
        graph = self._graph
        return not any(graph[t].state is TaskState.BROKEN for t in visited)

    def _checks(self) -> SequentialChecks | ParallelChecks:
        if self.settings.parallel_scheduling:
            threads = max(2, self.settings.workers)
            return ParallelChecks(threads, self.settings.complete_check_timeout)
        return SequentialChecks()

    def _submit(
        self,
        task: Task,
        checks: SequentialChecks | ParallelChecks,
        visited: set[str],
        recheck: Set[str],
    ) -> bool:
        """Queue ``task``'s complete() check if it is new (or to re-check); True if new."""
        task_id = task.task_id
        if task_id in visited:
            return False
        visited.add(task_id)
        node = self._graph.get(task_id)
        if node is None:
            params = ev.Params(task.to_str_params())  # read-only for every plugin
            node = Node(task, task_id, params, external=task.is_external())
            self._graph[task_id] = node
            checks.submit(task)
            return True
        if task_id in recheck and node.state in RECHECKABLE:
            checks.submit(node.task)
        return False

    def _visit(
        self, node: Node, complete: bool, specs: list[TaskSpec], pending: list[str]
    ) -> list[Task]:
        """Record a check result; register the task; return the dependencies to walk."""
        if complete:
            self._transit(node, Trigger.CHECKED_COMPLETE, complete=True)
            specs.append(TaskSpec(node.task_id, *self._identity(node), status=TaskStatus.DONE))
            return []
        self._transit(node, Trigger.CHECKED_INCOMPLETE, complete=False)
        if node.state is TaskState.PENDING:  # an external task re-checked
            return []
        deps, status, runnable = self._requirements(node, specs)
        if deps is None:
            return []
        node.deps = tuple(dep.task_id for dep in deps)
        self._transit(
            node,
            Trigger.DEPS_FOUND,
            dependencies=node.deps,
            dynamic=False,
        )
        specs.append(self._spec(node, status, runnable))
        pending.append(node.task_id)
        return deps

    def _requirements(
        self, node: Node, specs: list[TaskSpec]
    ) -> tuple[list[Task] | None, TaskStatus, bool]:
        """The dependencies to walk, the status to register and whether it may run here."""
        task = node.task
        settings = self.settings
        decided = registration(
            external=node.external,
            disabled=task.disabled,
            retry_external=settings.retry_external_tasks,
            task_limit=settings.task_limit,
            scheduled=self._scheduled,
            attempts=node.attempts,
            label=repr(task) if task.disabled else "",  # repr() costs: only when shown
        )
        if not decided.walk:
            node.limited = decided.limited
            node.error = decided.error or node.error
            return [], decided.status, decided.runnable
        try:
            deps = task.deps()
        except Exception as exc:
            self._broken(node, _requires_error(task, exc), "requires", specs)
            return None, TaskStatus.UNKNOWN, False
        self._scheduled += 1
        return deps, TaskStatus.PENDING, True

    def _broken(self, node: Node, error: str, phase: str, specs: list[TaskSpec]) -> None:
        node.error = error
        self._transit(node, Trigger.BROKEN, error=error, phase=phase)
        specs.append(self._spec(node, TaskStatus.UNKNOWN, False, explanation=error))

    def _break_cycles(self, pending: list[str], specs: list[TaskSpec]) -> None:
        while (cycle := find_cycle(pending, self._graph)) is not None:
            error = str(DependencyCycle([label(self._graph[t].task) for t in cycle]))
            for task_id in dict.fromkeys(cycle):
                self._broken(self._graph[task_id], error, "requires", specs)

    def _identity(self, node: Node) -> tuple[str, str, Mapping[str, str]]:
        task = node.task
        return task.task_family, task.task_module, node.params

    def _spec(
        self,
        node: Node,
        status: TaskStatus,
        runnable: bool,
        explanation: str = "",
        deps: tuple[str, ...] | None = None,
    ) -> TaskSpec:
        """The registration of ``node``; ``deps`` defaults to all its dependencies (the
        scheduler merges the dependencies of a task it knows, so fewer may be named)."""
        task = node.task
        return TaskSpec(
            node.task_id,
            *self._identity(node),
            status=status,
            deps=node.all_deps() if deps is None else deps,
            priority=task.priority,
            resources=task.resources,
            runnable=runnable,
            retry_count=task.retry_count,
            explanation=explanation,
        )


def _requires_error(task: Task, exc: Exception) -> str:
    if isinstance(exc, ConveyorError):
        return str(exc)
    return f"{task!r}.requires() raised:\n{traceback.format_exc()}"
