"""``conveyor invalidate`` and :func:`conveyor.invalidate`: remove a task's outputs, and those of
every task downstream of it within a root's graph, so that the next run makes them again.

Theory of operation. Which tasks: TASK alone, or -- with ``downstream_of=ROOT`` -- TASK and
every task of ROOT's graph that has TASK among its requirements, directly or not. ROOT's graph
is walked through ``requires()`` only (:func:`conveyor.task.requirements`, as the worker walks
it, so a task of another framework that a task loader adapts is walked too): no ``complete()``
is called, no output needs to exist and no ``run()`` is called. Dependencies a ``run()``
*yields* (dynamic dependencies) cannot be known without running it, so a task reached only
that way is not found. The tasks come in the order a run takes them: dependencies before
dependents.

Which outputs: each task's ``output()``, flattened. An output that does not exist is
``absent`` (nothing to remove). One that exists is removed through its ``remove()``; one
without ``remove()``, one whose ``remove()`` raises and one that still exists afterwards is
``unremovable``, with the reason -- reported, never silently kept. The outputs of an
*external* task (made elsewhere: conveyor could not make them again) are never removed; they
are listed as ``external``, which is not a failure, so that ``downstream_of`` from a task of
raw data re-runs everything made from it while keeping the data.

:func:`invalidate` with ``dry_run=True`` looks without removing: its :class:`Invalidation`
lists in ``removed`` what would be removed, and :meth:`Invalidation.apply` removes it later
(what the command does between its listing and its question). Task ids and paths in an
:class:`Invalidation` are as people may see them: the values of secret-named parameters and
credentials in URLs are shown as ``***``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConveyorError
from ..secrets import hide_secret_params
from ..task import Task, as_task, flatten, is_external, requirements
from ..tasklike import TaskLike

__all__ = [
    "GraphError",
    "InvalidatedTask",
    "Invalidation",
    "InvalidationError",
    "NotInGraph",
    "Unremovable",
    "invalidate",
]


class InvalidationError(ConveyorError):
    """What to invalidate could not be worked out; nothing was removed."""


class NotInGraph(InvalidationError):
    """TASK is not in ROOT's graph (as ``requires()`` makes it): nothing is downstream of it
    there. ``task_id`` and ``root_id`` name both."""

    def __init__(self, message: str, *, task_id: str, root_id: str) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.root_id = root_id


class GraphError(InvalidationError):
    """ROOT's graph could not be walked: a ``requires()`` raised or returned something that is
    not a task. ``task_id`` names the task whose ``requires()`` it was."""

    def __init__(self, message: str, *, task_id: str) -> None:
        super().__init__(message)
        self.task_id = task_id


@dataclass(frozen=True)
class Unremovable:
    """An output that exists and stays: whose task (``task_id``), where (``path``) and why
    (``reason``: it has no ``remove()``, ``remove()`` raised, ...)."""

    task_id: str
    path: str
    reason: str


@dataclass(frozen=True)
class InvalidatedTask:
    """One task's outputs: ``removed`` (their paths; in a dry run, those that would be),
    ``absent`` (did not exist: nothing to remove), ``unremovable`` (exist and stay, with the
    reason) and ``external`` (outputs of an external task: kept on purpose)."""

    task_id: str
    family: str
    removed: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    unremovable: tuple[Unremovable, ...] = ()
    external: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """This task as a plain dict (stable keys)."""
        return {
            "task_id": self.task_id,
            "family": self.family,
            "removed": list(self.removed),
            "absent": list(self.absent),
            "unremovable": [{"path": u.path, "reason": u.reason} for u in self.unremovable],
            "external": list(self.external),
        }


@dataclass(frozen=True)
class Invalidation:
    """What :func:`invalidate` removed (or, with ``dry_run``, would remove).

    ``task_id`` is TASK's id, ``root_id`` ROOT's (None without ``downstream_of``); ``tasks``
    are the tasks whose outputs were looked at, dependencies before dependents, TASK first.
    ``removed`` and ``unremovable`` gather every task's; ``ok`` is True when no output that
    exists had to stay. :meth:`apply` carries out a dry run.
    """

    task_id: str
    root_id: str | None
    tasks: tuple[InvalidatedTask, ...]
    dry_run: bool = False
    _found: tuple[TaskLike, ...] = field(default=(), repr=False, compare=False)
    _needs: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)
    """Each found task's id -> the ids of the found tasks it requires."""

    @property
    def removed(self) -> tuple[str, ...]:
        """Every removed output's path (in a dry run: every output that would be removed)."""
        return tuple(path for task in self.tasks for path in task.removed)

    @property
    def unremovable(self) -> tuple[Unremovable, ...]:
        """Every output that exists and could not (or cannot) be removed, with the reason."""
        return tuple(item for task in self.tasks for item in task.unremovable)

    @property
    def ok(self) -> bool:
        """True when no output that exists had to stay (external data aside)."""
        return not self.unremovable

    @property
    def nothing_to_remove(self) -> bool:
        """True when none of the outputs exists (external data aside)."""
        return not self.removed and not self.unremovable

    def apply(self) -> Invalidation:
        """Remove what this dry run found; each output is looked at again first (one gone
        meanwhile is ``absent``). ValueError when this is not a dry run.

        Dependents go first. When one keeps an output (no ``remove()``, a failure), the tasks
        it needs, directly or not, keep theirs too (reported with the reason), so that no task
        is left complete over inputs that are gone, which the next run would not notice; the
        others are removed. Once all is removed, a task still ``complete()`` (its
        ``complete()`` does not look at its outputs) is reported: the next run would not run
        it."""
        if not self.dry_run:
            raise ValueError("Invalidation.apply(): already applied; expected a dry run")
        tasks = _settle(self._found, self._needs, remove=True)
        return replace(self, tasks=tasks, dry_run=False)

    def to_json(self) -> dict[str, Any]:
        """The invalidation as a plain dict (stable keys)."""
        return {
            "task_id": self.task_id,
            "root_id": self.root_id,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "tasks": [task.to_json() for task in self.tasks],
        }


def invalidate(
    task: object, downstream_of: object = None, *, dry_run: bool = False
) -> Invalidation:
    """Remove ``task``'s outputs and, with ``downstream_of=root``, those of every task of
    ``root``'s graph that needs ``task`` (directly or not); return what was removed.

    ``task`` and ``root`` are :class:`conveyor.Task` objects, or tasks of another framework an
    installed task loader adapts (a ``luigi.Task``). ``root``'s graph is walked through
    ``requires()`` only (never ``complete()`` nor ``run()``; dependencies a ``run()`` yields
    are not known). With ``dry_run`` nothing is removed: the result says what would be, and
    its :meth:`~Invalidation.apply` removes it. Outputs without ``remove()``, or whose
    ``remove()`` fails, are reported in ``unremovable`` and the others still removed (``ok``
    is then False). Raises :class:`NotInGraph` when ``task`` is not in ``root``'s graph and
    :class:`GraphError` when a ``requires()`` there raises; nothing is removed then.
    """
    target_task = _as_task(task, "task")
    root = None if downstream_of is None else _as_task(downstream_of, "downstream_of")
    found, needs = ([target_task], {}) if root is None else _downstream(target_task, root)
    preview = Invalidation(
        task_id=_label(target_task),
        root_id=None if root is None else _label(root),
        tasks=_settle(found, needs, remove=False),
        dry_run=True,
        _found=tuple(found),
        _needs=needs,
    )
    return preview if dry_run else preview.apply()


# --- which tasks ------------------------------------------------------------------------------


def _as_task(value: object, what: str) -> TaskLike:
    """``value`` as a task (adapted if it is another framework's); TypeError if it is none."""
    task = as_task(value)
    if task is None:
        raise TypeError(
            f"invalidate(): {what} {value!r} ({type(value).__name__}) is not a task; expected "
            "a conveyor.Task, or a task of another framework an installed task loader adapts"
        )
    return task


def _downstream(
    task: TaskLike, root: TaskLike
) -> tuple[list[TaskLike], dict[str, tuple[str, ...]]]:
    """``task`` and every task of ``root``'s graph that needs it, dependencies first, and
    for each of them the ids of those among them it requires."""
    graph, edges = _graph(root)
    if task.task_id not in graph:
        raise NotInGraph(
            f"{_label(task)} is not in the graph of {_label(root)} (as requires() makes it; "
            "dependencies yielded by run() are not known); expected a task ROOT needs",
            task_id=_label(task),
            root_id=_label(root),
        )
    needed_by: dict[str, list[str]] = {task_id: [] for task_id in graph}
    for task_id, deps in edges.items():
        for dep in deps:
            needed_by[dep].append(task_id)
    reached = {task.task_id}
    stack = [task.task_id]
    while stack:
        for dependent in needed_by[stack.pop()]:
            if dependent not in reached:
                reached.add(dependent)
                stack.append(dependent)
    found = [each for task_id, each in graph.items() if task_id in reached]
    needs = {t: tuple(d for d in edges.get(t, ()) if d in reached) for t in reached}
    return found, needs


def _graph(root: TaskLike) -> tuple[dict[str, TaskLike], dict[str, list[str]]]:
    """``root``'s graph through ``requires()``: its tasks by id in post-order (dependencies
    before dependents, in ``requires()`` order), and each one's requirement ids. Iterative: a
    long chain needs no deep recursion; a cycle ends where it meets a task already seen."""
    order: dict[str, TaskLike] = {}
    edges: dict[str, list[str]] = {}
    seen = {root.task_id}
    stack: list[tuple[TaskLike, Iterator[TaskLike]]] = [(root, _requirements(root, edges))]
    while stack:
        node, deps = stack[-1]
        for dep in deps:
            if dep.task_id not in seen:
                seen.add(dep.task_id)
                stack.append((dep, _requirements(dep, edges)))
                break
        else:
            stack.pop()
            order[node.task_id] = node
    return order, edges


def _requirements(task: TaskLike, edges: dict[str, list[str]]) -> Iterator[TaskLike]:
    """``task``'s requirements (recorded in ``edges``); GraphError if ``requires()`` fails."""
    try:
        deps = requirements(task)
    except Exception as exc:  # user code: requires() raised, or returned something odd
        text = hide_secret_params(f"{type(exc).__name__}: {exc}", task.task_params)
        raise GraphError(
            f"the graph cannot be walked: requires() of {_label(task)} failed: {text}",
            task_id=_label(task),
        ) from None
    edges[task.task_id] = [dep.task_id for dep in deps]
    return iter(deps)


# --- which outputs --------------------------------------------------------------------------


def _examine(task: TaskLike, *, remove: bool) -> InvalidatedTask:
    """Look at each of ``task``'s outputs and, with ``remove``, remove those that exist."""
    label = _label(task)
    removed: list[str] = []
    absent: list[str] = []
    kept: list[Unremovable] = []
    external: list[str] = []
    try:
        outputs = _outputs(task)
    except Exception as exc:  # user code: output() raised
        reason = f"output() raised {_error(exc, task)}"
        broken = Unremovable(label, "(its outputs)", reason)
        return InvalidatedTask(label, task.task_family, unremovable=(broken,))
    outside = is_external(task)
    for target in outputs:
        path = _path(target, task)
        state = _state(target, task)
        if state == "absent":
            absent.append(path)
        elif state != "present":
            kept.append(Unremovable(label, path, state))
        elif outside:
            external.append(path)
        elif not callable(getattr(target, "remove", None)):
            kept.append(Unremovable(label, path, "it has no remove()"))
        elif not remove:
            removed.append(path)
        else:
            failure = _remove(target, task)
            if failure:
                kept.append(Unremovable(label, path, failure))
            else:
                removed.append(path)
    return InvalidatedTask(
        label, task.task_family, tuple(removed), tuple(absent), tuple(kept), tuple(external)
    )


def _settle(
    found: Sequence[TaskLike], needs: Mapping[str, tuple[str, ...]], *, remove: bool
) -> tuple[InvalidatedTask, ...]:
    """Each of ``found`` (dependencies first) examined, dependents first, and with
    ``remove`` its outputs removed; what a task that keeps an output needs keeps its own
    (see :meth:`Invalidation.apply`); after a removal, a task still complete is reported."""
    keep: dict[str, str] = {}  # task id -> why its outputs stay
    done: list[InvalidatedTask] = []
    for task in reversed(found):
        task_id = task.task_id
        if task_id in keep:
            done.append(_kept(task, keep[task_id]))
            continue
        examined = _examine(task, remove=remove)
        done.append(examined)
        if examined.unremovable:
            why = f"kept: the outputs of {examined.task_id}, which needs it, stay"
            stack = list(needs.get(task_id, ()))
            while stack:
                dep = stack.pop()
                if dep not in keep:
                    keep[dep] = why
                    stack.extend(needs.get(dep, ()))
    done.reverse()
    if remove:  # (once everything is removed: a complete() may look at what a task needs)
        done = [
            _still_complete(task, examined)
            if task.task_id not in keep and not examined.unremovable
            else examined
            for task, examined in zip(found, done, strict=True)
        ]
    return tuple(done)


def _kept(task: TaskLike, reason: str) -> InvalidatedTask:
    """``task`` left as it is (its outputs that exist stay, with ``reason``)."""
    label = _label(task)
    examined = _examine(task, remove=False)
    kept = (*examined.unremovable, *(Unremovable(label, path, reason) for path in examined.removed))
    return replace(examined, removed=(), unremovable=kept)


def _still_complete(task: TaskLike, examined: InvalidatedTask) -> InvalidatedTask:
    """``examined`` with one more unremovable entry if ``task`` (not external) is still
    complete now that its outputs are gone: the next run would not run it."""
    if examined.external or is_external(task):
        return examined
    try:
        complete = task.complete()
    except Exception:  # (the next run reports a complete() that raises: not this one's to say)
        return examined
    if complete is not True:
        return examined
    why = "complete() is still True without its outputs, so the next run would not run it"
    stays = Unremovable(examined.task_id, "(the task)", why)
    return replace(examined, unremovable=(*examined.unremovable, stays))


def _outputs(task: TaskLike) -> list[Any]:
    """``task``'s outputs, flattened (none for a task without ``output()``)."""
    if isinstance(task, Task):
        return flatten(task.output())
    output = getattr(task, "output", None)
    return flatten(output()) if callable(output) else []


def _state(target: Any, task: TaskLike) -> str:
    """``"present"``, ``"absent"``, or why it cannot be known (an Unremovable's reason)."""
    exists = getattr(target, "exists", None)
    if not callable(exists):
        return f"it is not a target (no exists()): {type(target).__name__}"
    try:
        return "present" if exists() else "absent"
    except Exception as exc:  # user code, or storage: say so, keep going
        return f"exists() raised {_error(exc, task)}"


def _remove(target: Any, task: TaskLike) -> str:
    """Remove ``target``; the reason it is still there ('' when it is gone)."""
    try:
        target.remove()
    except Exception as exc:  # user code, or storage: reported, the others still removed
        return f"remove() raised {_error(exc, task)}"
    state = _state(target, task)
    if state == "present":
        return "it still exists after remove()"
    return "" if state == "absent" else state


def _path(target: Any, task: TaskLike) -> str:
    """How people see ``target``: its ``url``, else its ``path``, else its repr (secrets
    hidden)."""
    for name in ("url", "path"):
        value = getattr(target, name, None)
        if isinstance(value, str) and value:
            return hide_secret_params(value, task.task_params)
    return hide_secret_params(repr(target), task.task_params)


def _label(task: TaskLike) -> str:
    """``task``'s id with the values of its secret-named parameters hidden."""
    return hide_secret_params(task.task_id, task.task_params)


def _error(exc: Exception, task: TaskLike) -> str:
    """``Type: message`` of ``exc``, on one line, secrets hidden."""
    text = " ".join(str(exc).split())
    return hide_secret_params(f"{type(exc).__name__}: {text}", task.task_params)
