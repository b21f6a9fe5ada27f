"""What a finished ``Worker.run()`` reports: final states, errors, summary, exit code."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass

from ..core.states import TaskState
from ..core.summary import (
    Category,
    SummaryFacts,
    exit_code,
    first_line,
    render_summary,
    shorten,
)
from ..errors import SchedulerUnavailable
from ..executors.base import MEMORY_REASON, Outcome
from ..protocol import AttemptOutcome, Explanation, Statuses, TaskStatus
from ..secrets import hide_secret_params, is_secret_name, redact_text
from ..transports.base import SchedulerTransport
from .graph import Node, label

__all__ = ["RunReport", "build_report"]

_BAD = (TaskStatus.FAILED, TaskStatus.DISABLED, TaskStatus.UNKNOWN)


@dataclass(frozen=True, slots=True)
class RunReport:
    """The outcome of one ``Worker.run()``."""

    ok: bool
    exit_code: int
    summary: str
    states: Mapping[str, TaskStatus]
    errors: Mapping[str, str]


def build_report(
    graph: Mapping[str, Node],
    requested: Sequence[str],
    transport: SchedulerTransport,
    interrupted: str = "",
    unreported: Set[str] = frozenset(),
    running_at_interrupt: int = 0,
    *,
    unreachable: str = "",
    duration: float | None = None,
    render: Callable[[SummaryFacts], str] = render_summary,
) -> RunReport:
    """Ask the scheduler for final states and classify every task of the graph.

    When the scheduler cannot be reached, the worker's own view stands in; ``unreported`` tasks
    (results the scheduler never received) count as failed. ``duration`` (seconds, from the
    worker_started event to the worker_stopped one) is said in the verdict. ``render`` turns
    the facts into the summary text: the worker asks its plugins' ``conveyor_worker_summary``
    (:meth:`~conveyor.plugins.HookRelay.summary`), whose built-in answer is
    :func:`~conveyor.core.summary.render_summary`; the exit code comes from the facts.
    """
    try:
        statuses = dict(transport.call(Statuses(tuple(graph))).statuses)
    except SchedulerUnavailable:
        statuses = {t: _LOCAL.get(node.state, TaskStatus.PENDING) for t, node in graph.items()}
    if len(statuses) < len(graph):  # pruned since an earlier run() of this worker released it
        statuses = {
            t: statuses.get(t) or _LOCAL.get(n.state, TaskStatus.PENDING) for t, n in graph.items()
        }
    for task_id in unreported:
        statuses[task_id] = TaskStatus.FAILED
        graph[task_id].error = "its result could not be reported: the scheduler was unreachable"
    unknown = TaskStatus.UNKNOWN  # (_state, inlined: this runs for every task of the graph)
    broken = TaskState.UNKNOWN
    states = {
        t: unknown if node.state is broken else statuses.get(t, unknown)
        for t, node in graph.items()
    }
    upstream = _upstream_problems(graph, states)
    categories = {t: _categorize(node, states[t], upstream.get(t, "")) for t, node in graph.items()}
    errors = {
        t: node.error or _explanation(transport, t)
        for t, node in graph.items()
        if states[t] in _BAD
    }
    reasons = {
        t: _reason(graph[t], errors[t])
        if category is Category.FAILED
        else _broken_reason(graph[t], errors[t])
        for t, category in categories.items()
        if category in (Category.FAILED, Category.BROKEN)
    }
    facts = SummaryFacts(
        categories=categories,
        families={t: node.task.task_family for t, node in graph.items()},
        label=lambda t: _summary_label(graph[t]),
        requested=list(dict.fromkeys(requested)),
        interrupted=interrupted,
        reasons=reasons,
        stopped=sum([1 for node in graph.values() if node.last and _interrupted(node.last)]),
        running=running_at_interrupt,
        unreachable=unreachable,
        notes=_notes(graph),
        params={t: node.params for t, node in graph.items()},
        duration=duration,
    )
    # what this worker ran all succeeded (a broken task elsewhere in the graph is add()'s
    # concern and the exit code's, not run()'s, as in Luigi)
    done = TaskStatus.DONE
    ok = all([states.get(t) == done for t, node in graph.items() if node.attempts])
    return RunReport(ok, exit_code(facts), render(facts), states, errors)


def _notes(graph: Mapping[str, Node]) -> dict[str, str]:
    """task_id → the first line of ``task.summary_note()`` for each task whose class defines
    it and says something (a range: how many dates were already complete); secrets hidden.

    A note that raises says so instead: it is the task author's text, not the run's outcome.
    """
    methods: dict[type, Callable[[object], object] | None] = {}
    notes: dict[str, str] = {}
    for task_id, node in graph.items():
        cls = type(node.task)
        if cls not in methods:  # looked up once per class: graphs may be large
            methods[cls] = getattr(cls, "summary_note", None)
        method = methods[cls]
        if method is None:
            continue
        try:
            note = method(node.task)
        except Exception as exc:
            note = f"summary_note() raised {type(exc).__name__}: {exc}"
        if isinstance(note, str) and note.strip():
            notes[task_id] = first_line(hide_secret_params(note, node.params))
    return notes


_VALUE_LIMIT = 40  # characters of a parameter value in a summary label


def _summary_label(node: Node) -> str:
    """The task's label (:func:`~conveyor.worker.graph.label`) with every parameter value
    longer than 40 characters shortened to 40, ``…`` in the middle, and credentials in URLs
    hidden.

    Each value is redacted *before* it is cut (a cut could split the ``user:pass@`` that the
    redaction recognises) and put back where the label shows it as ``name=value``.
    """
    text = label(node.task)
    for name, value in node.params.items():
        if is_secret_name(name):
            continue  # the label shows *** already
        shown = shorten(redact_text(value), _VALUE_LIMIT)
        if shown != value:
            text = text.replace(f"{name}={value}", f"{name}={shown}")
    return redact_text(text)


def _broken_reason(node: Node, explanation: str) -> str:
    """Why a task is broken, in one line, without its own label (the summary line starts with
    it): ``broken: complete() returned 'yes' (str); expected a bool (True or False)``,
    ``broken: requires() raised ValueError: no way``, ``broken: dependency cycle: A -> B -> A``.

    Secrets are hidden before the line is cut, as for a failure.
    """
    text = _without_own_label(hide_secret_params(explanation, node.params).strip(), node)
    head, _, rest = text.partition("\n")
    if head.endswith(" raised:") and rest.strip():  # "complete() raised:" + its traceback
        line = f"{head.removesuffix(':')} {first_line(rest)}"
    else:
        line = first_line(text)  # (a traceback: its exception's line)
    return f"broken: {first_line(line)}" if line else "broken"


def _without_own_label(text: str, node: Node) -> str:
    """``text`` without the task's own ``repr`` at its start (``Family(...).`` or
    ``Family(...): ``), which the summary line already starts with."""
    own = repr(node.task)
    for prefix in (own + ".", own + ": "):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def _reason(node: Node, explanation: str) -> str:
    """How a failed task ended, in one line: ``failed: ValueError: boom``, ``timed out after
    N s``, ``process died with signal SIGKILL (9)``; from this worker's last attempt.

    Secrets are hidden: credentials in URLs and the values of the task's secret parameters.
    """
    last = node.last
    if last is not None and last.kind == AttemptOutcome.TIMED_OUT:
        if last.before_run:
            return f"timed out after {last.timeout:g} s, before run() started ({last.before_run})"
        return f"timed out after {last.timeout:g} s"
    if last is not None and last.kind == AttemptOutcome.PROCESS_DIED:
        if last.error.startswith(MEMORY_REASON):
            return last.error  # (killed for its memory: the signal is the supervisor's)
        if last.signal is not None:
            return f"process died with signal {_signal_name(last.signal)}"
        return f"process died with exit code {last.exitcode}"
    # the explanation of a timeout or a dead process says no more than the lines above
    hidden = hide_secret_params(explanation, node.params).strip()  # hide, then cut
    line = first_line(_without_own_label(hidden, node))
    return f"failed: {line}" if line else "failed"


def _interrupted(last: Outcome | None) -> bool:
    """True if the attempt was stopped by the worker's interruption (SIGTERM/SIGINT)."""
    return last is not None and last.interrupted


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)


def _explanation(transport: SchedulerTransport, task_id: str) -> str:
    try:
        answer: str = transport.call(Explanation(task_id)).explanation
        return answer
    except SchedulerUnavailable:
        return ""


_LOCAL = {
    TaskState.COMPLETE: TaskStatus.DONE,
    TaskState.DONE: TaskStatus.DONE,
    TaskState.FAILED: TaskStatus.FAILED,
    TaskState.UNKNOWN: TaskStatus.UNKNOWN,
    TaskState.RUNNING: TaskStatus.RUNNING,
}


def _state(node: Node, status: TaskStatus) -> TaskStatus:
    if node.state is TaskState.UNKNOWN:
        return TaskStatus.UNKNOWN
    return status


def _categorize(node: Node, state: TaskStatus, upstream: str) -> Category:
    if state == TaskStatus.UNKNOWN:
        return Category.BROKEN
    if state == TaskStatus.DONE:
        if node.succeeded:
            return Category.FOUND_COMPLETE if node.found_complete else Category.COMPLETED
        # found complete by its last check, before this worker ran it
        if node.state is TaskState.COMPLETE:
            return Category.ALREADY_DONE
        return Category.DONE_ELSEWHERE
    if node.external and state in (TaskStatus.FAILED, TaskStatus.PENDING):
        return Category.MISSING_EXTERNAL
    if state == TaskStatus.FAILED:
        return Category.FAILED
    if state == TaskStatus.DISABLED:
        return Category.DISABLED
    if state == TaskStatus.RUNNING:
        return Category.RUNNING_ELSEWHERE
    if upstream:
        return Category(upstream)
    return Category.NOT_SCHEDULED if node.limited else Category.PENDING


def _upstream_problems(
    graph: Mapping[str, Node], states: Mapping[str, TaskStatus]
) -> dict[str, str]:
    """For each task, the category value of a problem upstream ('' if none).

    Iterative post-order depth-first search with memoisation: O(nodes + edges); nothing to
    search when no task failed and no external data is missing (the common case).
    """
    if not any(
        [
            state in _BAD or (state != TaskStatus.DONE and graph[t].external)
            for t, state in states.items()
        ]
    ):
        return {}
    memo: dict[str, str] = {}
    visiting: set[str] = set()  # guards against cycles (their members are already broken)
    for root in graph:
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            task_id, expanded = stack.pop()
            if task_id in memo:
                continue
            deps = [d for d in graph[task_id].all_deps() if d in graph]
            if not expanded:
                memo_missing = [d for d in deps if d not in memo and d not in visiting]
                if memo_missing:
                    visiting.add(task_id)
                    stack.append((task_id, True))
                    stack.extend((d, False) for d in memo_missing)
                    continue
            visiting.discard(task_id)
            memo[task_id] = _problem_from(deps, graph, states, memo)
    return memo


def _problem_from(
    deps: Sequence[str],
    graph: Mapping[str, Node],
    states: Mapping[str, TaskStatus],
    memo: dict[str, str],
) -> str:
    found = ""
    for dep in deps:
        state = states[dep]
        if state in _BAD or memo.get(dep) == Category.UPSTREAM_FAILED.value:
            return Category.UPSTREAM_FAILED.value
        if state != TaskStatus.DONE and (graph[dep].external or memo.get(dep)):
            found = Category.UPSTREAM_MISSING.value
    return found
