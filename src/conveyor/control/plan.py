"""``conveyor plan`` and :func:`conveyor.plan`: a dry run, with the reason for each task.

Theory of operation: the plan walks the graph with the worker's own
:class:`~conveyor.worker.walk.GraphWalk` (the same ``complete()`` checks, sequential or under
``[worker] parallel_scheduling``, the same flattening of ``requires()``, the same handling of
external, disabled and broken tasks and of cycles), registering nothing: its registrations are
dropped and no hook plugin sees its events. As in a run, a task found complete is not looked
into further (Luigi's rule: its dependencies are neither checked nor run, whatever they are).
Then each task of the graph gets a :class:`Verdict` and a reason, dependencies first:

* ``output missing: PATH`` (the first missing output, ``+N more``) for a task that will run;
* ``upstream X will run`` for one whose outputs exist (or that has none, a wrapper) but is
  incomplete while a dependency will run;
* ``external data missing: PATH`` for an incomplete external task (it never runs);
* a task that needs a broken, disabled or missing-external one is *blocked*: the run would
  not start it either (its summary says "upstream failed" or "upstream missing").

With the central scheduler (``[scheduler] transport = "http"``), one ``statuses`` request
says which of the tasks that would run are RUNNING on another worker right now.
``run()`` is never called; a task whose ``run()`` is a generator is said to possibly yield
more dependencies, which only running it would tell.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..clock import SYSTEM
from ..config import Config, resolve_config
from ..core.states import TaskState
from ..core.summary import first_line
from ..errors import ConveyorError
from ..plugins import HookRelay
from ..protocol import TaskSpec, TaskStatus
from ..reasons import failure_reason
from ..secrets import REDACTED, hide_secret_params, is_secret_name, redact_text
from ..task import Task, TaskDefaults, as_task, flatten, take_id_style_in_use
from ..tasklike import TaskLike
from ..worker.graph import Node, label
from ..worker.transitions import Transitions
from ..worker.walk import GraphWalk

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Plan", "PlannedTask", "Verdict", "plan"]


class Verdict(enum.StrEnum):
    """What a run would do with a task."""

    COMPLETE = "complete"
    """Its ``complete()`` is True: the run leaves it (and what it needs) alone."""
    WILL_RUN = "will run"
    """Incomplete, and nothing stands in its way: the run would run it."""
    RUNNING_ELSEWHERE = "running elsewhere"
    """The central scheduler has it RUNNING on another worker: the run would wait for it."""
    MISSING_EXTERNAL = "missing external data"
    """An incomplete external task: nothing makes its data, the run waits or gives up."""
    BLOCKED = "blocked"
    """Incomplete, but it needs a task that is broken, disabled or missing external data
    (or it is past ``[worker] task_limit``): the run would not start it."""
    DISABLED = "disabled"
    """Incomplete, and disabled (on its class, or on the central scheduler: a cancel, too
    many failures): it does not run."""
    FAILED = "failed"
    """Incomplete, and ``FAILED`` on the central scheduler: it runs again when its retry is
    due, not in this run."""
    BROKEN = "broken"
    """Its ``complete()`` or ``requires()`` raised (or answered something that is not a
    bool), or it is in a dependency cycle."""


_INCOMPLETE_UPSTREAM = {
    Verdict.BROKEN: "is broken",
    Verdict.DISABLED: "is disabled",
    Verdict.FAILED: "failed",
    Verdict.MISSING_EXTERNAL: "is missing external data",
    Verdict.BLOCKED: "is blocked",
}
"""The verdicts of a dependency that keep a task from running, as its reason says them."""


@dataclass(frozen=True, slots=True)
class PlannedTask:
    """One task of a :class:`Plan`: who it is, its verdict and why.

    ``params`` are the string parameters with secret-named values hidden; ``label`` is how
    people see the task (``Family(p=v)``); ``reason`` is "" for a complete task; ``deps`` are
    the ids of the dependencies the walk found (none for a complete task: they are not
    looked at).
    """

    task_id: str
    family: str
    module: str
    params: Mapping[str, str]
    verdict: Verdict
    reason: str
    deps: tuple[str, ...] = ()
    label: str = ""

    def to_json(self) -> dict[str, Any]:
        """This task as a plain dict (stable keys)."""
        return {
            "task_id": self.task_id,
            "family": self.family,
            "module": self.module,
            "params": dict(self.params),
            "verdict": str(self.verdict),
            "reason": self.reason,
            "deps": list(self.deps),
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run of ``root`` would do: every task of its graph with a :class:`Verdict`.

    ``tasks`` come dependencies first, each once, in the order a run takes them (a task's
    requirements in ``requires()`` order); ``scheduler`` is the URL of the central scheduler
    asked about running tasks ("" when none was).
    """

    root: str
    tasks: tuple[PlannedTask, ...]
    scheduler: str = ""
    _by_id: dict[str, PlannedTask] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        """Index the tasks by id."""
        self._by_id.update((t.task_id, t) for t in self.tasks)

    def __getitem__(self, task_id: str) -> PlannedTask:
        """The planned task of ``task_id`` (KeyError if it is not in the plan)."""
        return self._by_id[task_id]

    @property
    def will_run(self) -> tuple[PlannedTask, ...]:
        """The tasks the run would run."""
        return tuple(t for t in self.tasks if t.verdict is Verdict.WILL_RUN)

    @property
    def broken(self) -> tuple[PlannedTask, ...]:
        """The tasks whose ``complete()`` or ``requires()`` failed."""
        return tuple(t for t in self.tasks if t.verdict is Verdict.BROKEN)

    @property
    def nothing_to_do(self) -> bool:
        """True when a run would run nothing: every task is complete, or what is not cannot
        run (missing external data, blocked, disabled, failed, broken, running elsewhere)."""
        return not self.will_run

    @property
    def up_to_date(self) -> bool:
        """True when every task is complete."""
        return all(t.verdict is Verdict.COMPLETE for t in self.tasks)

    @property
    def exit_code(self) -> int:
        """``conveyor plan``'s exit code: 0 when nothing would run, 1 when something would."""
        return 0 if self.nothing_to_do else 1

    def counts(self) -> dict[str, int]:
        """How many tasks have each verdict (verdicts that no task has left out)."""
        counted = {str(v): sum(1 for t in self.tasks if t.verdict is v) for v in Verdict}
        return {verdict: n for verdict, n in counted.items() if n}

    def summary(self) -> str:
        """One line: the number of tasks and of each verdict."""
        counts = ", ".join(f"{n} {verdict}" for verdict, n in self.counts().items())
        total = len(self.tasks)
        head = f"{total} task{'' if total == 1 else 's'}"
        if self.up_to_date:
            tail = "nothing to do"
        else:
            tail = f"{len(self.will_run) or 'nothing'} would run"
        return f"{head}: {counts}; {tail}"

    def to_json(self) -> dict[str, Any]:
        """The plan as a plain dict (stable keys): root, nothing_to_do, will_run (ids),
        counts, scheduler (None when none was asked) and tasks."""
        return {
            "root": self.root,
            "nothing_to_do": self.nothing_to_do,
            "will_run": [t.task_id for t in self.will_run],
            "counts": self.counts(),
            "scheduler": self.scheduler or None,
            "tasks": [t.to_json() for t in self.tasks],
        }

    def tree(self) -> str:
        """The graph as an indented tree from the root, one task a line with its verdict and
        reason; a task met again is printed once, later mentions say "(see above)"."""
        return "\n".join(self._tree_lines())

    def _tree_lines(self) -> Iterator[str]:
        shown: set[str] = set()
        stack: list[tuple[str, int]] = [(self.root, 0)]
        while stack:
            task_id, depth = stack.pop()
            task = self._by_id[task_id]
            indent = "  " * depth
            if task_id in shown:
                yield f"{indent}{task.label} (see above)"
                continue
            shown.add(task_id)
            reason = f": {task.reason}" if task.reason else ""
            yield f"{indent}{task.label} [{task.verdict}]{reason}"
            stack.extend((dep, depth + 1) for dep in reversed(task.deps) if dep in self._by_id)


def plan(
    task: object,
    *,
    config: Config | str | None = None,
    scheduler_url: str | None = None,
    local_scheduler: bool = False,
) -> Plan:
    """The dry run of ``task`` (a :class:`conveyor.Task`, another :class:`~conveyor.TaskLike`,
    or an object an installed loader adapts, such as a ``luigi.Task``): each task of its graph
    with what a run would do and why. Only ``complete()`` and ``requires()`` are called.

    ``config`` is a :class:`~conveyor.Config` or the path of a worker.toml (default: the one
    :func:`~conveyor.load_config` finds); its ``[worker]`` settings rule the walk and its
    ``[tasks.*]`` defaults the tasks it makes. With a central scheduler (``scheduler_url``, or
    the config's ``[scheduler]`` with transport ``http``) it is asked, once, which of the tasks
    that would run are running elsewhere, failed or disabled there (SchedulerUnavailable once
    it was tried again for 30 s, as :class:`~conveyor.Client` does);
    ``local_scheduler`` asks none. TypeError for something that is not a task.
    """
    resolved = resolve_config(config)
    if scheduler_url:
        resolved = resolved.with_overrides(scheduler_url=scheduler_url)
    elif local_scheduler:
        resolved = resolved.with_overrides(local_scheduler=True)
    root = as_task(task)
    if root is None:
        raise TypeError(
            f"plan() takes a task (conveyor.Task or conveyor.TaskLike), got {type(task).__name__}"
        )
    worker = resolved.worker
    defaults = TaskDefaults(resolved.tasks, resolved.task_sources, worker.task_id_style)
    with defaults.applied():
        if isinstance(root, Task):  # (made before this configuration set its id style)
            take_id_style_in_use(root)
        graph = _walk(root, resolved)
        order = _dependencies_first(root.task_id, graph)
        url, said = _scheduler_says(resolved, graph, order)
        planned = _judge(graph, order, said, worker.task_limit)
    return Plan(root.task_id, tuple(planned[t] for t in order), url)


def _walk(root: TaskLike, config: Config) -> dict[str, Node]:
    """Walk ``root``'s graph as a worker would, registering nothing; the nodes by id."""
    graph: dict[str, Node] = {}
    transit = Transitions("plan", HookRelay(), SYSTEM)  # no plugin: no event is even built

    def dropped(_specs: list[TaskSpec]) -> None:
        """Registrations go nowhere: a plan tells no scheduler about the graph."""

    GraphWalk(config.worker, graph, transit, dropped).walk([root])
    return graph


def _dependencies_first(root: str, graph: Mapping[str, Node]) -> list[str]:
    """The ids of ``root``'s graph in post-order (each once, dependencies first, a task's in
    ``requires()`` order); iterative, and safe on the cycles the walk marked broken."""
    order: list[str] = []
    seen = {root}
    stack: list[tuple[str, Iterator[str]]] = [(root, iter(graph[root].deps))]
    while stack:
        task_id, deps = stack[-1]
        for dep in deps:
            if dep not in seen and dep in graph:
                seen.add(dep)
                stack.append((dep, iter(graph[dep].deps)))
                break
        else:
            stack.pop()
            order.append(task_id)
    return order


def _judge(
    graph: Mapping[str, Node],
    order: Sequence[str],
    said: Mapping[str, tuple[Verdict, str]],
    task_limit: int,
) -> dict[str, PlannedTask]:
    """Each task's verdict and reason, dependencies first (a reason may name one)."""
    planned: dict[str, PlannedTask] = {}
    for task_id in order:
        node = graph[task_id]
        verdict, reason = _verdict(node, graph, planned, said, task_limit)
        task = node.task
        params = node.params
        planned[task_id] = PlannedTask(
            task_id,
            task.task_family,
            task.task_module,
            {k: REDACTED if v and is_secret_name(k) else v for k, v in params.items()},
            verdict,
            hide_secret_params(reason, params),
            node.deps,
            hide_secret_params(label(task), params),
        )
    return planned


def _verdict(
    node: Node,
    graph: Mapping[str, Node],
    planned: Mapping[str, PlannedTask],
    said: Mapping[str, tuple[Verdict, str]],
    task_limit: int,
) -> tuple[Verdict, str]:
    """The verdict of one task and its reason, its dependencies being judged already; what
    the central scheduler ``said`` of it (failed, disabled, running elsewhere) counts."""
    if node.state is TaskState.COMPLETE:
        return Verdict.COMPLETE, ""
    if node.state is TaskState.UNKNOWN:
        return Verdict.BROKEN, _broken_reason(node.error, node.params)
    if node.external:
        missing = _missing_outputs(node.task)
        return Verdict.MISSING_EXTERNAL, "external data missing" + (
            f": {missing}" if missing else ""
        )
    if node.task_policy().disabled:
        return Verdict.DISABLED, "disabled = True on its class: it never runs"
    if node.limited:
        return Verdict.BLOCKED, f"not scheduled: [worker] task_limit = {task_limit} reached"
    told = said.get(node.task_id)
    if told is not None and told[0] is not Verdict.RUNNING_ELSEWHERE:
        return told  # (failed or disabled there: the run leaves it so)
    deps = [planned[d] for d in node.deps if d in planned]
    for dep in deps:
        if dep.verdict in _INCOMPLETE_UPSTREAM:
            return Verdict.BLOCKED, f"upstream {dep.label} {_INCOMPLETE_UPSTREAM[dep.verdict]}"
    if told is not None:
        return told
    reason = _own_reason(node.task, deps)
    if _yields(node.task):
        reason += "; may yield more dependencies when it runs"
    return Verdict.WILL_RUN, reason


def _broken_reason(error: str, params: Mapping[str, str]) -> str:
    """One line of a broken task's explanation (the walk's own text): for a traceback its
    last line, after the method that raised (``requires() raised`` is the summary's own)."""
    reason = failure_reason(error, params)
    head = error.split("\n", 1)[0]
    if head.endswith(".complete() raised:"):
        return f"complete() raised {reason}"
    return reason


def _own_reason(task: TaskLike, deps: Sequence[PlannedTask]) -> str:
    """Why an incomplete task that nothing blocks would run."""
    missing = _missing_outputs(task)
    if missing:
        return f"output missing: {missing}"
    upstream = [d for d in deps if d.verdict in (Verdict.WILL_RUN, Verdict.RUNNING_ELSEWHERE)]
    if upstream:
        more = f" (+{len(upstream) - 1} more)" if len(upstream) > 1 else ""
        verb = "will run" if upstream[0].verdict is Verdict.WILL_RUN else "is running elsewhere"
        return f"upstream {upstream[0].label} {verb}{more}"
    return "not complete (complete() returned False)"


def _missing_outputs(task: TaskLike) -> str:
    """The first missing output of ``task`` (its ``path``, else its repr) and ``+N more``;
    "" when it has no outputs, all of them exist, or asking fails (complete() decided)."""
    output = getattr(task, "output", None)
    if not callable(output):
        return ""
    try:
        missing = [t for t in flatten(output()) if not t.exists()]
    except Exception:  # (complete() answered; a failing output() is not the plan's to judge)
        return ""
    if not missing:
        return ""
    first = missing[0]
    path = getattr(first, "path", None)
    shown = str(path) if path is not None else repr(first)
    return shown + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else "")


def _yields(task: TaskLike) -> bool:
    """Whether ``task``'s ``run()`` is a generator function (it may yield dependencies); the
    task a loader wraps (``luigi_task``, the luigi plugin's) is looked at too."""
    for candidate in (task, getattr(task, "luigi_task", None)):
        run = getattr(type(candidate), "run", None) if candidate is not None else None
        if run is not None and inspect.isgeneratorfunction(run):
            return True
    return False


def _scheduler_says(
    config: Config, graph: Mapping[str, Node], order: Sequence[str]
) -> tuple[str, dict[str, tuple[Verdict, str]]]:
    """With a central scheduler: its URL, and the verdict and reason of each task that would
    run but that it holds otherwise (``RUNNING`` elsewhere, ``FAILED`` until its retry is
    due, ``DISABLED``: the run would not run those); ("", {}) without one (no network)."""
    if config.scheduler.transport != "http":
        return "", {}
    candidates = tuple(
        t
        for t in order
        if graph[t].state is TaskState.PENDING
        and not graph[t].external
        and not graph[t].task_policy().disabled
    )
    url = redact_text(config.scheduler.url)  # (credentials in it are not shown)
    if not candidates:
        return url, {}
    from .client import Client

    said: dict[str, tuple[Verdict, str]] = {}
    with Client.from_config(config) as client:
        statuses = client.statuses(candidates)
        running = {t for t, s in statuses.items() if s == TaskStatus.RUNNING}
        workers = _workers_of(client, running) if running else {}
        for task_id, status in statuses.items():
            if status == TaskStatus.RUNNING:
                said[task_id] = Verdict.RUNNING_ELSEWHERE, _running_reason(workers.get(task_id, ""))
            elif status in (TaskStatus.FAILED, TaskStatus.DISABLED):
                why = first_line(client.explanation(task_id), 120)
                verdict = Verdict.FAILED if status == TaskStatus.FAILED else Verdict.DISABLED
                where = f"{status} on the scheduler" + (f": {why}" if why else "")
                said[task_id] = verdict, where
    return url, said


def _workers_of(client: Client, running: Set[str]) -> dict[str, str]:
    """The worker running each of ``running``, from the scheduler's task list; {} when the
    list cannot be had (the worker's name is a nicety: the statuses said enough)."""
    try:
        listed = client.tasks()
    except ConveyorError:
        return {}
    return {i.task_id: i.worker or "" for i in listed if i.task_id in running}


def _running_reason(worker: str) -> str:
    """The reason of a task running elsewhere."""
    return f"running on worker {worker}" if worker else "running on another worker"
