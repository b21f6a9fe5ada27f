"""The worker's view of its task graph: one :class:`Node` per task, and cycle detection."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.states import TaskState
from ..executors.base import Outcome
from ..tasklike import TaskLike, TaskPolicy

__all__ = ["Node", "find_cycle", "label"]


@dataclass(slots=True, eq=False)
class Node:
    """One task as this worker tracks it."""

    task: TaskLike
    """The task: a :class:`conveyor.Task` or any other :class:`~conveyor.TaskLike`."""
    task_id: str
    params: Mapping[str, str]
    state: TaskState = TaskState.NEW
    deps: tuple[str, ...] = ()
    dynamic: dict[str, None] | None = None
    """Ids of the dependencies run() yielded, in order (a dict used as an ordered set); None
    until run() yields one (most tasks never do: no dict made for them)."""
    attempts: int = 0
    hand_out: int = 0
    """The scheduler's id of the current attempt (``Work.attempt``), named in its report."""
    executor: str = ""
    """The name of the executor running (or that last ran) this worker's current attempt."""
    succeeded: bool = False
    """An attempt of this worker succeeded (the summary's "completed")."""
    found_complete: bool = False
    """That attempt found the task complete and did not call run() (the summary says so)."""
    last: Outcome | None = None
    """How this worker's last attempt ended, unless it succeeded (the summary says it for a
    failed task)."""
    external: bool = False
    limited: bool = False
    reschedules: Mapping[str, int] | None = None
    """How many times each missing dependency rescheduled the task (None: never yet)."""
    error: str = ""
    notes: dict[str, Any] | None = None
    """The last status message, progress and tracking URL of a run() now suspended at a
    yield: sent to the scheduler again when it resumes (a hand-out clears them there)."""
    policy: TaskPolicy | None = None
    """The task's :class:`~conveyor.TaskPolicy`, read once (see :meth:`task_policy`)."""

    def task_policy(self) -> TaskPolicy:
        """The task's policy, asked of the task the first time only."""
        if self.policy is None:
            self.policy = self.task.task_policy()
        return self.policy

    def all_deps(self) -> tuple[str, ...]:
        """Static and dynamic dependency ids."""
        return (*self.deps, *self.dynamic) if self.dynamic else self.deps


def label(task: TaskLike) -> str:
    """A short human label: ``Family`` or ``Family(p=v, ...)`` (secret values hidden)."""
    text = repr(task)
    return text[:-2] if text.endswith("()") else text


def find_cycle(start: Iterable[str], nodes: Mapping[str, Node]) -> list[str] | None:
    """A dependency cycle among PENDING nodes reachable from ``start``, as ids (first repeated
    last), or None. Iterative depth-first search: O(nodes + edges), each edge looked at once."""
    pending = TaskState.PENDING
    done: set[str] = set()
    for root in start:
        if root in done or nodes[root].state is not pending:
            continue  # (a task already broken by an earlier cycle is no start)
        path = [root]
        on_path = {root}
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(nodes[root].all_deps()))]
        while stack:
            task_id, deps = stack[-1]
            for dep in deps:  # resumes where this node's walk left off
                if dep in on_path:
                    return [*path[path.index(dep) :], dep]
                if dep in done:
                    continue
                node = nodes.get(dep)
                if node is not None and node.state is pending:
                    path.append(dep)
                    on_path.add(dep)
                    stack.append((dep, iter(node.all_deps())))
                    break
            else:  # every dependency looked at: no cycle through this node
                stack.pop()
                path.pop()
                on_path.discard(task_id)
                done.add(task_id)
    return None
