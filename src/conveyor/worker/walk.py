r"""The graph walk: complete() checks, requires(), registration, cycle detection.

:class:`GraphWalk` turns tasks into registered :class:`~conveyor.worker.graph.Node`\ s; what
to register is decided by :func:`conveyor.core.machine.registration`, and every state change
goes through the shared :class:`~conveyor.worker.transitions.Transitions`.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping, Set

from ..config import WorkerSettings
from ..core.machine import registration
from ..core.states import RECHECKABLE, TaskState, Trigger
from ..errors import ConfigError, ConveyorError, DependencyCycle
from ..protocol import BatchSpec, TaskSpec, TaskStatus, make_task_spec
from ..task import Task, batch_key, requirements
from ..tasklike import TaskLike, TaskPolicy
from .checks import ParallelChecks, SequentialChecks, check_complete
from .graph import Node, find_cycle, label
from .transitions import Transitions

__all__ = ["GraphWalk", "requires_error", "task_spec"]


class GraphWalk:
    r"""Walks task graphs into :class:`~conveyor.worker.graph.Node`\ s and registers them.

    A collaborator of the :class:`~conveyor.worker.loop.Worker`: it shares the worker's graph
    and its :class:`~conveyor.worker.transitions.Transitions`, and hands every registration to
    one callable (the worker sends it to the scheduler directly before the run, through its
    outbox during it).
    """

    def __init__(
        self,
        settings: WorkerSettings,
        graph: dict[str, Node],
        transit: Transitions,
        register: Callable[[list[TaskSpec]], None],
    ) -> None:
        """Walk into ``graph``, moving nodes with ``transit`` and registering with ``register``."""
        self.settings = settings
        self.graph = graph
        self.transit = transit
        self.register = register
        self.scheduled = 0  # tasks this worker walked into (for task_limit)

    def walk(self, roots: Iterable[TaskLike], recheck: Iterable[str] = ()) -> bool:
        """Check, walk and register ``roots`` and what they need; False if any is broken.

        Tasks already in the graph are not walked again unless their id is in ``recheck``.
        """
        recheck_ids = frozenset(recheck)
        checks = self._checks()
        visited: set[str] = set()
        specs: list[TaskSpec] = []
        pending: list[str] = []
        new = True  # every edge so far led to a task never seen before: the walk is a tree
        graph = self.graph
        submit = self._submit
        # the sequential checks' results, read directly (no outstanding()/next() calls)
        results = checks.results if isinstance(checks, SequentialChecks) else None
        try:
            # reversed: the sequential walk is LIFO, so the first root is registered first
            for root in reversed(list(roots)):
                new &= submit(root, checks, visited, recheck_ids)
            while results if results is not None else checks.outstanding():
                task, complete, error = results.pop() if results is not None else checks.next()
                node = graph[task.task_id]
                if error:
                    self._broken(node, error, "complete", specs)
                    continue
                deps = self._visit(node, complete, specs, pending)
                if deps:
                    # reversed: the sequential walk is depth-first (LIFO), so the first
                    # requirement is visited (and registered) first
                    for dep in reversed(deps):
                        new &= submit(dep, checks, visited, recheck_ids)
        finally:
            checks.close()
        if not new:  # a cycle needs an edge back to a task already seen
            self._break_cycles(pending, specs)
        self.register(specs)
        graph = self.graph
        return TaskState.UNKNOWN not in {graph[t].state for t in visited}

    def _checks(self) -> SequentialChecks | ParallelChecks:
        if self.settings.parallel_scheduling:
            threads = max(2, self.settings.workers)
            return ParallelChecks(threads, self.settings.complete_check_timeout)
        return SequentialChecks()

    def _submit(
        self,
        task: TaskLike,
        checks: SequentialChecks | ParallelChecks,
        visited: set[str],
        recheck: Set[str],
    ) -> bool:
        """Queue ``task``'s complete() check if it is new (or to re-check); True if new."""
        task_id = task.task_id
        if task_id in visited:
            return False
        visited.add(task_id)
        graph = self.graph
        node = graph.get(task_id)
        if node is None:
            policy = task.task_policy()  # (read once per task: see Node.task_policy)
            # task_params is read-only, so shared with every plugin as is
            node = Node(task, task_id, task.task_params, external=policy.external, policy=policy)
            graph[task_id] = node
            if type(checks) is SequentialChecks:  # (its submit(), without the call)
                checks.results.append(check_complete(task))
            else:
                checks.submit(task)
            return True
        if task_id in recheck and node.state in RECHECKABLE:
            checks.submit(node.task)
        return False

    def _visit(
        self, node: Node, complete: bool, specs: list[TaskSpec], pending: list[str]
    ) -> list[TaskLike]:
        """Record a check result; register the task; return the dependencies to walk."""
        transit = self.transit
        if complete:
            transit(node, Trigger.CHECKED_COMPLETE, complete=True)
            task = node.task  # (few are complete when found: the constructor, its defaults)
            specs.append(
                TaskSpec(
                    node.task_id,
                    task.task_family,
                    task.task_module,
                    node.params,
                    status=TaskStatus.DONE,
                )
            )
            return []
        event_cls = transit.move(node, Trigger.CHECKED_INCOMPLETE)
        if event_cls is not None:
            transit.fire(node, event_cls, complete=False)
        if node.state is TaskState.PENDING:  # an external task re-checked
            return []
        deps, status, runnable = self._requirements(node, specs)
        if deps is None:
            return []
        node.deps = tuple([dep.task_id for dep in deps]) if deps else ()
        event_cls = transit.move(node, Trigger.DEPS_FOUND)
        if event_cls is not None:
            transit.fire(node, event_cls, dependencies=node.deps, dynamic=False)
        specs.append(
            _spec(
                node.task,
                node.task_id,
                node.params,
                node.policy or node.task_policy(),
                status,
                runnable,
                node.all_deps() if node.dynamic else node.deps,
            )
        )
        pending.append(node.task_id)
        return deps

    def _requirements(
        self, node: Node, specs: list[TaskSpec]
    ) -> tuple[list[TaskLike] | None, TaskStatus, bool]:
        """The dependencies to walk, the status to register and whether it may run here."""
        task = node.task
        settings = self.settings
        disabled = (node.policy or node.task_policy()).disabled
        decided = registration(
            external=node.external,
            disabled=disabled,
            retry_external=settings.retry_external_tasks,
            task_limit=settings.task_limit,
            scheduled=self.scheduled,
            attempts=node.attempts,
            label=repr(task) if disabled else "",  # repr() costs: only when shown
        )
        if not decided.walk:
            node.limited = decided.limited
            node.error = decided.error or node.error
            return [], decided.status, decided.runnable
        try:
            deps = requirements(task)
        except ConfigError:  # a [tasks.*] table the dependency's family refuses: the file's
            raise  # mistake, not the task's (exit code 2, as for any configuration error)
        except Exception as exc:
            self._broken(node, requires_error(task, exc), "requires", specs)
            return None, TaskStatus.UNKNOWN, False
        self.scheduled += 1
        return deps, TaskStatus.PENDING, True

    def _broken(self, node: Node, error: str, phase: str, specs: list[TaskSpec]) -> None:
        node.error = error
        self.transit(node, Trigger.BROKEN, error=error, phase=phase)
        specs.append(self.spec(node, TaskStatus.UNKNOWN, False, explanation=error))

    def break_cycles_from(self, start: list[str]) -> bool:
        """Find dependency cycles reachable from ``start``, mark their tasks broken and register
        them; True if there was one (a run() that yielded a task already in the graph)."""
        specs: list[TaskSpec] = []
        self._break_cycles(start, specs)
        if specs:
            self.register(specs)
        return bool(specs)

    def _break_cycles(self, pending: list[str], specs: list[TaskSpec]) -> None:
        while (cycle := find_cycle(pending, self.graph)) is not None:
            error = str(DependencyCycle([label(self.graph[t].task) for t in cycle]))
            for task_id in dict.fromkeys(cycle):
                self._broken(self.graph[task_id], error, "requires", specs)

    def spec(
        self,
        node: Node,
        status: TaskStatus,
        runnable: bool,
        explanation: str = "",
        deps: tuple[str, ...] | None = None,
    ) -> TaskSpec:
        """The registration of ``node``; ``deps`` defaults to all its dependencies (the
        scheduler merges the dependencies of a task it knows, so fewer may be named)."""
        return task_spec(
            node.task,
            status,
            runnable,
            deps=node.all_deps() if deps is None else deps,
            explanation=explanation,
            policy=node.task_policy(),
            params=node.params,
        )


def task_spec(
    task: TaskLike,
    status: TaskStatus = TaskStatus.PENDING,
    runnable: bool = True,
    *,
    deps: tuple[str, ...] = (),
    explanation: str = "",
    policy: TaskPolicy | None = None,
    params: Mapping[str, str] | None = None,
) -> TaskSpec:
    """The registration of ``task`` (its ``policy`` and string ``params``, when already
    known, spare asking the task again): what a worker sends, and what ``conveyor submit``
    sends for a task it does not walk."""
    return _spec(
        task,
        task.task_id,
        task.task_params if params is None else params,
        task.task_policy() if policy is None else policy,
        status,
        runnable,
        deps,
        explanation,
    )


def _spec(
    task: TaskLike,
    task_id: str,
    params: Mapping[str, str],
    policy: TaskPolicy,
    status: TaskStatus,
    runnable: bool,
    deps: tuple[str, ...],
    explanation: str = "",
) -> TaskSpec:
    """:func:`task_spec` of a task whose id, string params and policy are known."""
    retry_count, own, retry = policy.retry_count, policy.retry_policy, None
    if own is not None:  # (rare: a task's own retry policy, whose count wins)
        if own.count is not None:
            retry_count = own.count
        retry = own.spec()
    batch = None
    # (a batchable Task class, or another framework's task, which may run in batches)
    if runnable and (getattr(task, "_batched", None) or not isinstance(task, Task)):
        found = batch_key(task)
        batch = None if found is None else BatchSpec(*found)
    return make_task_spec(  # (TaskSpec(...) of every field, in order, built directly)
        task_id,
        task.task_family,
        task.task_module,
        params,
        status,
        deps,
        policy.priority,
        policy.resources,
        runnable,
        retry_count,
        explanation,
        policy.loader,
        retry,
        policy.labels,
        batch,
    )


def requires_error(task: TaskLike, exc: Exception) -> str:
    """The explanation of a ``requires()`` that raised: the message of conveyor's own errors,
    else the traceback."""
    if isinstance(exc, ConveyorError):
        return str(exc)
    return f"{task!r}.requires() raised:\n{traceback.format_exc()}"
