"""The execution summary and the exit code, computed from plain facts (no I/O).

The worker classifies every task of its graph into one :class:`Category`; this module turns
those classes into the summary text (as Luigi's: counts per category, grouped by family, and a
final verdict line with the run's duration) and into the exit code (docs/cli.md, Exit codes).

Lists are in natural order (``n=2`` before ``n=10``): by family, then by the task's parameter
values with their digit runs compared as numbers. Failed and broken tasks get a line each with
the reason; the others are grouped by family, a few labels each.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from ..events import Event
from ..reasons import REASON_MAX, failure_reason
from ..secrets import is_secret_name

__all__ = [
    "Category",
    "SummaryFacts",
    "WorkerSummary",
    "exit_code",
    "first_line",
    "format_duration",
    "natural_key",
    "render_summary",
    "shorten",
]

_SHOWN_PER_FAMILY = 5
_SHOWN_FAILED = 20


class Category(Enum):
    """Where a task of the graph ended, as the summary reports it."""

    ALREADY_DONE = "were already complete"
    COMPLETED = "ran successfully"
    FOUND_COMPLETE = (
        "were complete when their turn came (made meanwhile by another worker or task); "
        "run() was not called"
    )
    DONE_ELSEWHERE = "were completed by other workers"
    FAILED = "failed"
    BROKEN = "failed scheduling"
    MISSING_EXTERNAL = "are missing external data"
    DISABLED = "are disabled"
    UPSTREAM_FAILED = "were left pending because an upstream task failed"
    UPSTREAM_MISSING = "were left pending because upstream external data is missing"
    RUNNING_ELSEWHERE = "are running on other workers"
    NOT_SCHEDULED = "were not scheduled (task_limit reached)"
    PENDING = "are still pending"

    __hash__ = object.__hash__  # members are singletons; identity hashing keeps counting fast


@dataclass(frozen=True, slots=True)
class SummaryFacts:
    """Everything the summary needs: each task's category and family, and a labeller.

    ``label`` is called only for the few tasks the summary names, not for every task.
    """

    categories: Mapping[str, Category]
    families: Mapping[str, str]
    label: Callable[[str], str]
    requested: Sequence[str]
    interrupted: str = ""
    reasons: Mapping[str, str] = field(default_factory=dict)
    """task_id → one line saying how a failed task ended (failed: ..., timed out after N s,
    process died with signal S), for the tasks of the FAILED category, or why a task is broken
    (broken: complete() returned ...), for the tasks of the BROKEN category."""
    stopped: int = 0
    """How many running attempts an interruption stopped (reported failed, interrupted)."""
    running: int = 0
    """How many attempts were running when the interruption came."""
    unreachable: str = ""
    """Why the run stopped asking for work: the scheduler did not answer (or answered what
    does not fit the protocol) within its retries."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """task_id → one line a task has to say about its run (its ``summary_note()``, e.g. how
    many dates of a range were already complete)."""
    params: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """task_id → the task's string parameters, which order the lists naturally (a task missing
    here is ordered by its id)."""
    duration: float | None = None
    """The run's wall time in seconds, said in the verdict (None: not said)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSummary(Event):
    """A ``Worker.run()`` has finished: the facts its execution summary is made of.

    Delivered to ``conveyor_worker_summary`` (which returns the summary text) before
    ``conveyor_worker_stopped``; the task fields are empty, as for every worker-level event.
    """

    hook: ClassVar[str] = "conveyor_worker_summary"
    facts: SummaryFacts


_INTERRUPT_CODES = {"SIGINT": 130, "SIGTERM": 143}


def exit_code(facts: SummaryFacts) -> int:
    """The exit code (docs/cli.md): 130/143 interrupted, 2 the scheduler stopped answering,
    3 scheduling error, 1 failure, 4 missing data, 5 incomplete, else 0."""
    if facts.interrupted in _INTERRUPT_CODES:
        return _INTERRUPT_CODES[facts.interrupted]
    if facts.unreachable:
        return 2
    present = set(facts.categories.values())
    if Category.BROKEN in present:
        return 3
    if present & {Category.FAILED, Category.DISABLED}:
        return 1
    if Category.MISSING_EXTERNAL in present:
        return 4
    done = {
        Category.ALREADY_DONE,
        Category.COMPLETED,
        Category.FOUND_COMPLETE,
        Category.DONE_ELSEWHERE,
    }
    if any(facts.categories.get(t) not in done for t in facts.requested):
        return 5
    return 0


_VERDICTS = {
    0: ("succeeded", "every requested task is complete."),
    1: ("failed", "at least one task failed or is disabled."),
    3: ("failed", "at least one task failed scheduling (broken requires()/complete())."),
    4: ("incomplete", "external data is missing."),
    5: ("incomplete", "a requested task is still incomplete."),
}

# categories listed one task a line, with the reason (the others: a few labels per family)
_ONE_PER_LINE = (Category.FAILED, Category.BROKEN)


def render_summary(facts: SummaryFacts) -> str:
    """The human execution summary; its last line is the verdict."""
    grouped: dict[Category, list[str]] = {}
    for task_id, category in facts.categories.items():
        grouped.setdefault(category, []).append(task_id)
    lines = ["", "===== conveyor execution summary =====", ""]
    if facts.categories:
        lines.append(f"Scheduled {len(facts.categories)} task(s), of which:")
    else:
        lines.append("No task was scheduled.")
    order = _Order(facts)
    for category in Category:
        ids = grouped.get(category)
        if ids:
            lines.append(f"* {len(ids)} {category.value}:")
            if category in _ONE_PER_LINE:
                lines.extend(_reason_lines(ids, facts, order))
            else:
                lines.extend(_family_lines(ids, facts, order))
    if facts.notes:
        lines.append("Notes:")
        lines.extend(_note_lines(facts, order))
    if facts.interrupted:
        lines.append(f"The run was interrupted by {facts.interrupted}.")
    lines.append("")
    lines.append(_verdict(facts))
    return "\n".join(lines)


def _verdict(facts: SummaryFacts) -> str:
    """``Verdict: <outcome> in|after <duration> - <why>``: "in" for a run that succeeded or
    failed, "after" for one that was left incomplete or interrupted."""
    outcome, why = _verdict_parts(facts)
    if facts.duration is None:
        return f"Verdict: {outcome} - {why}"
    spent = "in" if outcome in ("succeeded", "failed") else "after"
    return f"Verdict: {outcome} {spent} {format_duration(facts.duration)} - {why}"


def _verdict_parts(facts: SummaryFacts) -> tuple[str, str]:
    code = exit_code(facts)
    if code in (130, 143):
        running, stopped = max(facts.running, facts.stopped), facts.stopped
        if not running:
            what = "no task was running"
        elif stopped == running:
            what = f"{stopped} running task(s) were stopped and reported failed"
        else:  # a thread attempt cannot be stopped: it runs to its end
            what = (
                f"{running} task(s) were running: {stopped} stopped and reported failed, "
                f"{running - stopped} left to finish"
            )
        return f"interrupted by {facts.interrupted}", f"{what}."
    if code == 2:
        return "failed", f"the scheduler stopped answering: {facts.unreachable}"
    if code == 0 and not facts.requested:
        if facts.categories:
            return "succeeded", "every task this worker ran succeeded."
        return "succeeded", "there was nothing to do."
    return _VERDICTS[code]


def format_duration(seconds: float) -> str:
    """A duration for people: ``0.4 s``, ``3.2 s``, ``42 s``, ``2 min 5 s``, ``1 h 3 min``."""
    seconds = max(0.0, seconds)
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def shorten(text: str, limit: int = 40) -> str:
    """``text``, or at most ``limit`` characters of it with ``…`` in the middle when it is
    longer: its start and its end both tell (``/data/exports/2026/…/part-00017.csv``).

    Cut a value only after its secrets are hidden: a cut may split what the redaction would
    have recognised (a URL's ``user:pass@``).
    """
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[str | int, ...]:
    """A sort key comparing runs of digits as numbers: ``n=2`` sorts before ``n=10``.

    The parts alternate text, number, text, ... (``re.split`` with a group), so two keys
    never compare a number with a text.
    """
    parts: list[str | int] = list(_DIGITS.split(text))
    parts[1::2] = [int(part) for part in parts[1::2]]
    return tuple(parts)


class _Order:
    """Natural order of the tasks of one summary: by family, then by parameter values (secret
    ones left out), then by task id.

    A summary of a large graph orders every task of a category to name its first few, so this
    is kept cheap: the natural key of a text is computed once per text (families and many
    values repeat), a value that is all digits skips the regular expression, and which
    parameters are secret is decided once per family.
    """

    def __init__(self, facts: SummaryFacts) -> None:
        self.facts = facts
        self._texts: dict[str, tuple[str | int, ...]] = {}
        self._shown: dict[str, list[str]] = {}  # family -> its parameters that are not secret

    def _natural(self, text: str) -> tuple[str | int, ...]:
        found = self._texts.get(text)
        if found is None:
            found = ("", int(text), "") if text.isdecimal() else natural_key(text)
            self._texts[text] = found
        return found

    def key(self, task_id: str) -> tuple[object, ...]:
        """The sort key of ``task_id`` (computed once: a task is in one category)."""
        facts = self.facts
        family = facts.families.get(task_id, "")
        params = facts.params.get(task_id)
        if not params:  # the id is all there is to go by
            return (self._natural(family), (), natural_key(task_id))
        shown = self._shown.get(family)
        if shown is None:
            shown = self._shown[family] = [n for n in params if not is_secret_name(n)]
        texts = self._texts
        values = []
        for name in shown:  # (inlined _natural: this runs for every task of a long list)
            value = params.get(name, "")
            found = texts.get(value)
            if found is None:
                if value.isdecimal():  # (not kept: a number is usually one task's own)
                    found = ("", int(value), "")
                else:
                    found = texts[value] = natural_key(value)
            values.append(found)
        return (texts.get(family) or self._natural(family), tuple(values), (task_id,))

    def lead(self, task_id: str) -> tuple[object, ...]:
        """The start of ``task_id``'s :meth:`key`: its family, then its first parameter value
        shown (nothing when it has none). When one lead is less than another, so is the whole
        key; so the first ``count`` keys are among the ids whose lead is at most the
        ``count``-th smallest lead (:meth:`first`)."""
        facts = self.facts
        family = facts.families.get(task_id, "")
        texts = self._texts
        natural = texts.get(family) or self._natural(family)
        params = facts.params.get(task_id)
        if not params:
            return (natural, ())
        shown = self._shown.get(family)
        if shown is None:
            shown = self._shown[family] = [n for n in params if not is_secret_name(n)]
        if not shown:
            return (natural, ())
        value = params.get(shown[0], "")
        found = texts.get(value)
        if found is None:
            found = ("", int(value), "") if value.isdecimal() else self._natural(value)
        return (natural, found)

    def _lead_in(self, family: str) -> Callable[[str], tuple[object, ...]]:
        """:meth:`lead` for tasks all of ``family``, without the family (the same for all)."""
        params_of = self.facts.params.get
        texts = self._texts
        shown = self._shown.get(family)

        def lead(task_id: str) -> tuple[object, ...]:
            nonlocal shown
            params = params_of(task_id)
            if not params:
                return ()
            if shown is None:
                shown = self._shown.setdefault(family, [n for n in params if not is_secret_name(n)])
            if not shown:
                return ()
            value = params.get(shown[0], "")
            found = texts.get(value)
            if found is None:
                found = ("", int(value), "") if value.isdecimal() else self._natural(value)
            return found

        return lead

    def first(self, ids: Sequence[str], count: int, family: str | None = None) -> list[str]:
        """The first ``count`` of ``ids`` (all of ``family``, when given) in this order,
        without sorting all of them, nor making the whole key of each: only of those whose
        :meth:`lead` may put them first."""
        if len(ids) <= count:
            return sorted(ids, key=self.key)
        if count > 0 and len(ids) > 4 * count:
            lead = self.lead if family is None else self._lead_in(family)
            leads = list(map(lead, ids))
            last = heapq.nsmallest(count, leads)[-1]
            ids = [t for t, one in zip(ids, leads, strict=True) if one <= last]
        return heapq.nsmallest(count, ids, key=self.key)


def first_line(explanation: str, limit: int = REASON_MAX) -> str:
    """What went wrong, in one line of at most ``limit`` characters: the reason the web UI
    shows too (:func:`conveyor.reasons.failure_reason`; for a Python traceback its final
    exception's line, ``ValueError: boom``; any other text folded onto one line)."""
    return failure_reason(explanation, limit=limit)


def _reason_lines(ids: Sequence[str], facts: SummaryFacts, order: _Order) -> list[str]:
    """One line per failed or broken task (in natural order): its label and its reason."""
    shown = order.first(ids, _SHOWN_FAILED)
    lines = [f"    - {facts.label(t)}: {facts.reasons.get(t) or 'failed'}" for t in shown]
    if len(ids) > _SHOWN_FAILED:
        lines.append(f"    ... and {len(ids) - _SHOWN_FAILED} more")
    return lines


def _family_lines(ids: Sequence[str], facts: SummaryFacts, order: _Order) -> list[str]:
    """One line per family (in natural order): its count and its first few labels."""
    by_family: dict[str, list[str]] = {}
    for task_id in ids:
        by_family.setdefault(facts.families[task_id], []).append(task_id)
    lines = []
    for family in sorted(by_family, key=natural_key):
        members = by_family[family]
        first = order.first(members, _SHOWN_PER_FAMILY, family)
        shown = ", ".join(facts.label(t) for t in first)
        count = len(members)
        more = f" ... and {count - _SHOWN_PER_FAMILY} more" if count > _SHOWN_PER_FAMILY else ""
        lines.append(f"    - {count} {family}: {shown}{more}")
    return lines


def _note_lines(facts: SummaryFacts, order: _Order) -> list[str]:
    """One line per task note (in natural order): the task's label and its note."""
    notes = list(facts.notes)
    lines = [f"    - {facts.label(t)}: {facts.notes[t]}" for t in order.first(notes, _SHOWN_FAILED)]
    if len(notes) > _SHOWN_FAILED:
        lines.append(f"    ... and {len(notes) - _SHOWN_FAILED} more")
    return lines
