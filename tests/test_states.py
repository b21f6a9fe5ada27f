"""Tests for the worker's pure core: the transition table (core.states) and the summary."""

from __future__ import annotations

import inspect
import re
from collections import deque
from collections.abc import Mapping

import pytest

import conveyor
from conveyor import hookspecs
from conveyor.core.states import (
    HOOK_OF,
    TRANSITIONS,
    TaskState,
    Trigger,
    advance,
    mermaid_diagram,
)
from conveyor.core.summary import Category, SummaryFacts, exit_code, render_summary

S, T = TaskState, Trigger
WORKER_HOOKS = {
    "conveyor_worker_started",
    "conveyor_worker_stopped",
    "conveyor_worker_summary",
    "conveyor_configure",
    "conveyor_unconfigure",
    # an attempt's own hooks (called by the worker loop and where the attempt runs) and the
    # notifier dispatch's: no transition of a task fires them
    "conveyor_attempt_environment",
    "conveyor_attempt_begin",
    "conveyor_attempt_end",
    "conveyor_notification_sent",
}
ALL_PAIRS = [(state, trigger) for state in TaskState for trigger in Trigger]
ILLEGAL_PAIRS = [pair for pair in ALL_PAIRS if pair not in TRANSITIONS]


def _hookspec_names() -> set[str]:
    """Every function of conveyor.hookspecs marked as a pluggy hook spec."""
    return {
        name
        for name, obj in inspect.getmembers(hookspecs, inspect.isfunction)
        if getattr(obj, "conveyor_spec", None) is not None
    }


def _walk(state: TaskState, *triggers: Trigger) -> TaskState:
    """Apply ``triggers`` in order starting from ``state``."""
    for trigger in triggers:
        state = advance(state, trigger)
    return state


# --- advance() ------------------------------------------------------------------------------


def _name(member: TaskState | Trigger) -> str:
    """A readable test id for an enum member."""
    return member.name


@pytest.mark.parametrize(
    ("state", "trigger", "target"),
    [(state, trigger, target) for (state, trigger), target in TRANSITIONS.items()],
    ids=_name,
)
def test_advance_applies_every_table_move(state: TaskState, trigger: Trigger, target: TaskState):
    """advance() returns exactly the table's target state for every legal move."""
    assert advance(state, trigger) is target


@pytest.mark.parametrize(("state", "trigger"), ILLEGAL_PAIRS, ids=_name)
def test_advance_rejects_moves_missing_from_the_table(state: TaskState, trigger: Trigger):
    """An illegal move raises InvalidTransition naming state and trigger, and changes nothing."""
    current = state
    with pytest.raises(conveyor.InvalidTransition) as info:
        current = advance(current, trigger)
    assert current is state
    assert isinstance(info.value, conveyor.ConveyorError)
    assert (info.value.state, info.value.event) == (state.name, trigger.name)
    assert state.name in str(info.value) and trigger.name in str(info.value)


def test_successful_lifecycle_walks_new_to_done():
    """check → deps → start → report → succeed walks NEW to DONE."""
    steps = (
        T.CHECKED_INCOMPLETE,
        T.DEPS_FOUND,
        T.STARTED,
        T.STATUS_MESSAGE,
        T.PROGRESS,
        T.TRACKING_URL,
        T.SUCCEEDED,
    )
    assert _walk(S.NEW, *steps) is S.DONE


@pytest.mark.parametrize("outcome", [T.FAILED, T.TIMED_OUT, T.PROCESS_DIED])
def test_every_failed_attempt_outcome_leaves_the_task_failed_and_retryable(outcome: Trigger):
    """Failed, timed-out and died attempts all end FAILED, from which a new attempt may start."""
    assert advance(S.RUNNING, outcome) is S.FAILED
    assert advance(S.FAILED, T.STARTED) is S.RUNNING


def test_yielded_dependencies_send_a_running_task_back_to_pending():
    """A run() that yields incomplete dependencies goes back to PENDING and may start again."""
    assert _walk(S.RUNNING, T.DEPS_YIELDED, T.STARTED) is S.RUNNING


@pytest.mark.parametrize(
    ("state", "trigger"),
    [
        (S.NEW, T.STARTED),
        (S.CHECKED, T.STARTED),
        (S.PENDING, T.SUCCEEDED),
        (S.DONE, T.SUCCEEDED),
        (S.COMPLETE, T.STARTED),
        (S.UNKNOWN, T.STARTED),
        (S.RUNNING, T.BROKEN),
    ],
    ids=_name,
)
def test_moves_that_make_no_sense_are_illegal(state: TaskState, trigger: Trigger):
    """Starting an unregistered task, succeeding without running, reviving BROKEN are refused."""
    with pytest.raises(conveyor.InvalidTransition):
        advance(state, trigger)


# --- meta-tests over the table and the hooks ------------------------------------------------


@pytest.mark.parametrize("trigger", list(Trigger), ids=_name)
def test_every_trigger_is_delivered_to_an_existing_hookspec(trigger: Trigger):
    """Each Trigger's hook is a pluggy hook spec defined in conveyor.hookspecs."""
    assert trigger in HOOK_OF
    assert trigger.hook in _hookspec_names()


def test_every_task_hookspec_is_the_hook_of_some_trigger():
    """Every hook spec except the worker lifecycle pair is fired by at least one Trigger."""
    delivered = {trigger.hook for trigger in Trigger}
    server = {n for n in _hookspec_names() if n.startswith("conveyor_scheduler_")}  # (not tasks')
    assert _hookspec_names() - WORKER_HOOKS - server == delivered
    assert _hookspec_names() >= WORKER_HOOKS


def test_every_hookspec_is_documented():
    """Every hook spec carries a docstring saying when it fires."""
    for name in _hookspec_names():
        assert (getattr(hookspecs, name).__doc__ or "").strip(), name


def test_every_state_is_reachable_from_new():
    """A breadth-first walk of the table from NEW reaches every TaskState."""
    seen = {S.NEW}
    queue = deque([S.NEW])
    while queue:
        state = queue.popleft()
        for (source, _), target in TRANSITIONS.items():
            if source is state and target not in seen:
                seen.add(target)
                queue.append(target)
    assert seen == set(TaskState)


def test_only_broken_is_a_dead_end():
    """Every state except BROKEN (a scheduling error, final) has at least one outgoing move."""
    has_exit = {source for source, _ in TRANSITIONS}
    assert set(TaskState) - has_exit == {S.UNKNOWN}


def test_table_uses_only_enum_members():
    """Keys and values of TRANSITIONS are TaskState/Trigger members, never strings."""
    for (source, trigger), target in TRANSITIONS.items():
        assert isinstance(source, TaskState)
        assert isinstance(trigger, Trigger)
        assert isinstance(target, TaskState)


def test_mermaid_diagram_draws_every_transition_and_nothing_else():
    """mermaid_diagram() has one labelled arrow per table entry, starting from [*] --> NEW."""
    text = mermaid_diagram()
    lines = text.splitlines()
    assert lines[0].strip() == "stateDiagram-v2"
    assert "[*] --> NEW" in text
    arrow = re.compile(r"^\s*(\w+) --> (\w+): (\w+)\s*$")
    drawn = {m.groups() for line in lines if (m := arrow.match(line))}
    expected = {
        (source.name, target.name, trigger.name.lower())
        for (source, trigger), target in TRANSITIONS.items()
    }
    assert drawn == expected


# --- summary --------------------------------------------------------------------------------

C = Category


def _facts(
    categories: Mapping[str, Category], requested: list[str], interrupted: str = ""
) -> SummaryFacts:
    """SummaryFacts where every task's family is its id's prefix before ``_``."""
    return SummaryFacts(
        categories=dict(categories),
        families={task_id: task_id.split("_")[0] for task_id in categories},
        label=lambda task_id: f"<{task_id}>",
        requested=requested,
        interrupted=interrupted,
    )


EXIT_CASES = [
    pytest.param(
        {"A_1": C.BROKEN, "B_1": C.FAILED, "C_1": C.MISSING_EXTERNAL, "D_1": C.PENDING},
        ["D_1"],
        3,
        id="broken-beats-everything",
    ),
    pytest.param(
        {"B_1": C.FAILED, "C_1": C.MISSING_EXTERNAL, "D_1": C.NOT_SCHEDULED},
        ["D_1"],
        1,
        id="failed-beats-missing-and-incomplete",
    ),
    pytest.param(
        {"B_1": C.DISABLED, "C_1": C.MISSING_EXTERNAL, "D_1": C.UPSTREAM_MISSING},
        ["D_1"],
        1,
        id="disabled-counts-as-failed",
    ),
    pytest.param(
        {"C_1": C.MISSING_EXTERNAL, "D_1": C.UPSTREAM_MISSING},
        ["D_1"],
        4,
        id="missing-beats-incomplete",
    ),
    pytest.param(
        {"D_1": C.RUNNING_ELSEWHERE, "E_1": C.COMPLETED},
        ["D_1", "E_1"],
        5,
        id="requested-running-elsewhere",
    ),
    pytest.param({"D_1": C.NOT_SCHEDULED}, ["D_1"], 5, id="requested-not-scheduled"),
    pytest.param(
        {"D_1": C.COMPLETED, "E_1": C.ALREADY_DONE, "F_1": C.DONE_ELSEWHERE, "G_1": C.PENDING},
        ["D_1", "E_1", "F_1"],
        0,
        id="requested-all-done",
    ),
]


@pytest.mark.parametrize(("categories", "requested", "code"), EXIT_CASES)
def test_exit_code_follows_the_priority_3_1_4_5_0(
    categories: dict[str, Category], requested: list[str], code: int
):
    """When several outcomes apply, the exit code is the first of 3, 1, 4, 5, else 0."""
    assert exit_code(_facts(categories, requested)) == code


@pytest.mark.parametrize(("categories", "requested", "code"), EXIT_CASES)
def test_summary_ends_with_its_verdict(
    categories: dict[str, Category], requested: list[str], code: int
):
    """The summary's last line is the verdict: it says 'succeeded' exactly when the code is 0."""
    text = render_summary(_facts(categories, requested, interrupted="SIGUSR1"))
    last = text.splitlines()[-1]
    assert last.strip()
    assert ("succeeded" in last.lower()) is (code == 0)
    assert "Verdict" in last and text.count("Verdict") == 1


def test_verdicts_differ_per_exit_code():
    """Each distinct exit code gets its own verdict line."""
    verdicts = {}
    for case in EXIT_CASES:
        categories, requested, code = case.values
        verdicts[code] = render_summary(_facts(categories, requested)).splitlines()[-1]
    assert len(set(verdicts.values())) == len(verdicts) == 5


def test_summary_counts_categories_and_names_at_most_five_per_family():
    """The summary counts each category and labels only the first few tasks of a family."""
    categories = {f"Big_{i}": C.COMPLETED for i in range(12)} | {"Bad_1": C.FAILED}
    labelled: list[str] = []

    def label(task_id: str) -> str:
        labelled.append(task_id)
        return f"<{task_id}>"

    facts = SummaryFacts(
        categories=categories,
        families={task_id: task_id.split("_")[0] for task_id in categories},
        label=label,
        requested=["Big_0"],
    )
    text = render_summary(facts)
    assert "13 task(s)" in text
    assert "12 ran successfully" in text and "1 failed" in text
    assert "and 7 more" in text
    assert "<Bad_1>" in text and "<Big_0>" in text
    assert len(labelled) == 6
