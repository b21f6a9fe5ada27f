"""The worker's decisions (conveyor.core.machine), tested as plain function calls."""

from __future__ import annotations

import pytest

from conveyor.core.machine import HandOut, on_hand_out, on_outcome, registration
from conveyor.core.states import EVENT_OF, HOOK_OF, TaskState, Trigger
from conveyor.protocol import AttemptOutcome, TaskStatus


def _registration(**facts: object) -> object:
    base = {
        "external": False,
        "disabled": False,
        "retry_external": False,
        "task_limit": 0,
        "scheduled": 0,
        "attempts": 0,
        "label": "T(x=1)",
    }
    return registration(**{**base, **facts})  # type: ignore[arg-type]


def test_an_ordinary_task_is_registered_runnable_and_walked() -> None:
    """An incomplete task with no special rule is PENDING, runnable, and its requirements are
    asked for."""
    decided = _registration()
    assert (decided.status, decided.runnable, decided.walk, decided.limited) == (
        TaskStatus.PENDING,
        True,
        True,
        False,
    )


@pytest.mark.parametrize("retry", [False, True])
def test_an_external_task_waits_and_runs_only_to_be_rechecked(retry: bool) -> None:
    """An external task is PENDING, never walked, runnable only with retry_external_tasks."""
    decided = _registration(external=True, retry_external=retry)
    assert (decided.status, decided.runnable, decided.walk) == (TaskStatus.PENDING, retry, False)


def test_a_disabled_task_is_registered_disabled_with_its_reason() -> None:
    """disabled = True: DISABLED, never runnable, not walked, the explanation names the task."""
    decided = _registration(disabled=True)
    assert (decided.status, decided.runnable, decided.walk) == (TaskStatus.DISABLED, False, False)
    assert "T(x=1) is disabled" in decided.error


def test_task_limit_holds_back_new_tasks_but_not_ones_already_attempted() -> None:
    """Past task_limit a task never attempted is held back; one attempted before is walked."""
    held = _registration(task_limit=2, scheduled=2)
    assert (held.status, held.runnable, held.walk, held.limited) == (
        TaskStatus.PENDING,
        False,
        False,
        True,
    )
    assert _registration(task_limit=2, scheduled=2, attempts=1).walk is True
    assert _registration(task_limit=2, scheduled=1).walk is True
    assert _registration(task_limit=0, scheduled=10_000).walk is True


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (TaskState.PENDING, HandOut.START),
        (TaskState.FAILED, HandOut.START),
        (TaskState.DONE, HandOut.RECHECK),
        (TaskState.COMPLETE, HandOut.RECHECK),
        (TaskState.RUNNING, HandOut.IGNORE),
        (TaskState.UNKNOWN, HandOut.IGNORE),
        (TaskState.NEW, HandOut.IGNORE),
        (None, HandOut.ADOPT),
        (TaskState.CHECKED, HandOut.IGNORE),
    ],
)
def test_a_hand_out_is_started_rechecked_or_ignored(state: TaskState, expected: HandOut) -> None:
    """Runnable states start; complete ones are checked again (reopened); others are ignored."""
    assert on_hand_out(state) is expected


@pytest.mark.parametrize(
    ("kind", "trigger"),
    [
        (AttemptOutcome.SUCCEEDED, Trigger.SUCCEEDED),
        (AttemptOutcome.FAILED, Trigger.FAILED),
        (AttemptOutcome.TIMED_OUT, Trigger.TIMED_OUT),
        (AttemptOutcome.PROCESS_DIED, Trigger.PROCESS_DIED),
        (AttemptOutcome.NEEDS_DEPS, Trigger.DEPS_YIELDED),
    ],
)
def test_each_outcome_names_its_trigger(kind: AttemptOutcome, trigger: Trigger) -> None:
    """Every attempt outcome maps to one trigger, and nothing is rescheduled by itself."""
    decided = on_outcome(kind)
    assert decided.trigger is trigger
    assert decided.reschedule is False


def test_a_vanished_dependency_is_rescheduled_max_reschedules_times_then_reported() -> None:
    """A failure naming missing dependencies is rescheduled while each was missing at most
    max_reschedules times; the counts are returned, the input is not changed."""
    counts: dict[str, int] = {}
    first = on_outcome(AttemptOutcome.FAILED, ("dep",), counts, max_reschedules=2)
    assert first.reschedule is True and dict(first.reschedules) == {"dep": 1}
    assert counts == {}
    second = on_outcome(AttemptOutcome.FAILED, ("dep",), first.reschedules, max_reschedules=2)
    assert second.reschedule is True
    third = on_outcome(AttemptOutcome.FAILED, ("dep",), second.reschedules, max_reschedules=2)
    assert third.reschedule is False and dict(third.reschedules) == {"dep": 3}
    other = on_outcome(AttemptOutcome.FAILED, ("dep", "new"), second.reschedules, 2)
    assert other.reschedule is False  # one of them is past its budget


def test_a_timeout_is_never_rescheduled() -> None:
    """Only a plain failure with missing dependencies may be rescheduled."""
    assert on_outcome(AttemptOutcome.TIMED_OUT, ("dep",)).reschedule is False


def test_every_trigger_names_one_event_and_its_hook() -> None:
    """EVENT_OF covers every trigger; HOOK_OF is derived from it."""
    assert set(EVENT_OF) == set(Trigger)
    assert all(HOOK_OF[t] == EVENT_OF[t].hook for t in Trigger)
