"""The execution summary and the exit code, computed from plain facts (no I/O).

The worker classifies every task of its graph into one :class:`Category`; this module turns
those classes into the summary text (as Luigi's: counts per category, grouped by family, and a
final verdict line) and into the exit code of SPEC §6.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

__all__ = ["Category", "SummaryFacts", "exit_code", "first_line", "render_summary"]

_SHOWN_PER_FAMILY = 5
_SHOWN_FAILED = 20


class Category(Enum):
    """Where a task of the graph ended, as the summary reports it."""

    ALREADY_DONE = "were already complete"
    COMPLETED = "ran successfully"
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
    process died with signal S), for the tasks of the FAILED category."""
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


_INTERRUPT_CODES = {"SIGINT": 130, "SIGTERM": 143}


def exit_code(facts: SummaryFacts) -> int:
    """SPEC §6: 130/143 interrupted, 2 the scheduler stopped answering, 3 scheduling error,
    1 failure, 4 missing data, 5 incomplete, else 0."""
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
    done = {Category.ALREADY_DONE, Category.COMPLETED, Category.DONE_ELSEWHERE}
    if any(facts.categories.get(t) not in done for t in facts.requested):
        return 5
    return 0


_VERDICTS = {
    0: "Verdict: succeeded - every requested task is complete.",
    1: "Verdict: failed - at least one task failed or is disabled.",
    3: "Verdict: failed - at least one task failed scheduling (broken requires()/complete()).",
    4: "Verdict: incomplete - external data is missing.",
    5: "Verdict: incomplete - a requested task is still incomplete.",
}


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
    for category in Category:
        ids = grouped.get(category)
        if ids:
            lines.append(f"* {len(ids)} {category.value}:")
            if category is Category.FAILED:
                lines.extend(_failed_lines(ids, facts))
            else:
                lines.extend(_family_lines(ids, facts))
    if facts.notes:
        lines.append("Notes:")
        lines.extend(_note_lines(facts))
    if facts.interrupted:
        lines.append(f"The run was interrupted by {facts.interrupted}.")
    lines.append("")
    lines.append(_verdict(facts))
    return "\n".join(lines)


def _verdict(facts: SummaryFacts) -> str:
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
        return f"Verdict: interrupted by {facts.interrupted} - {what}."
    if code == 2:
        return f"Verdict: failed - the scheduler stopped answering: {facts.unreachable}"
    if code == 0 and not facts.requested:
        if facts.categories:
            return "Verdict: succeeded - every task this worker ran succeeded."
        return "Verdict: succeeded - there was nothing to do."
    return _VERDICTS[code]


def first_line(explanation: str, limit: int = 160) -> str:
    """The line of a failure explanation that says what went wrong, at most ``limit`` long.

    For a Python traceback that is the exception's line (``ValueError: boom``) of its last
    traceback; for any other text (an ``on_failure()`` explanation, a timeout) its first
    non-empty line.
    """
    lines = explanation.strip().splitlines()
    header = "Traceback (most recent call last)"
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    if starts:
        lines = [line for line in lines[starts[-1] + 1 :] if line and not line[0].isspace()]
    line = next((line.strip() for line in lines if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _failed_lines(ids: Sequence[str], facts: SummaryFacts) -> list[str]:
    """One line per failed task (in family, then id order): its label and how it ended."""
    ordered = sorted(ids, key=lambda t: (facts.families[t], t))
    lines = [
        f"    - {facts.label(t)}: {facts.reasons.get(t) or 'failed'}"
        for t in ordered[:_SHOWN_FAILED]
    ]
    if len(ordered) > _SHOWN_FAILED:
        lines.append(f"    ... and {len(ordered) - _SHOWN_FAILED} more")
    return lines


def _family_lines(ids: Sequence[str], facts: SummaryFacts) -> list[str]:
    by_family = Counter(facts.families[t] for t in ids)
    lines = []
    for family, count in sorted(by_family.items()):
        members = sorted(t for t in ids if facts.families[t] == family)[:_SHOWN_PER_FAMILY]
        shown = ", ".join(facts.label(t) for t in members)
        more = f" ... and {count - _SHOWN_PER_FAMILY} more" if count > _SHOWN_PER_FAMILY else ""
        lines.append(f"    - {count} {family}: {shown}{more}")
    return lines


def _note_lines(facts: SummaryFacts) -> list[str]:
    """One line per task note (in family, then id order): the task's label and its note."""
    ordered = sorted(facts.notes, key=lambda t: (facts.families.get(t, ""), t))
    lines = [f"    - {facts.label(t)}: {facts.notes[t]}" for t in ordered[:_SHOWN_FAILED]]
    if len(ordered) > _SHOWN_FAILED:
        lines.append(f"    ... and {len(ordered) - _SHOWN_FAILED} more")
    return lines
