"""The scheduler's status moves (policy.STATUS_MOVES): each is made, nothing else is, and the
table in docs/concepts.md says the same."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor.errors import InvalidTransition
from conveyor.protocol import TaskSpec, TaskStatus
from conveyor.scheduler import policy
from conveyor.scheduler.policy import (
    STATUS_MOVES,
    Cause,
    InvalidStatusMove,
    SchedulerCore,
    StatusMove,
)
from conveyor.testing import FakeClock

PENDING, RUNNING, DONE, FAILED, DISABLED, UNKNOWN = TaskStatus
C = Cause
RETRY_DELAY = 10.0
DISABLE_PERSIST = 1000.0
DISCONNECT = 60.0
W, OTHER, TASK = "w", "w2", "t"
DOCS = Path(__file__).resolve().parent.parent / "docs"
_FAILING = (C.FAILED, C.FAILED_UNFENCED, C.WORKER_GONE)

Made = list[tuple[str, StatusMove]]


def spec(task_id: str = TASK, **fields: Any) -> TaskSpec:
    """A TaskSpec whose family and params are derived from its id."""
    return TaskSpec(task_id=task_id, family="Fam", module="m", params={"id": task_id}, **fields)


@pytest.fixture
def clock() -> FakeClock:
    """A manual clock."""
    return FakeClock()


def recording_core(clock: FakeClock) -> tuple[SchedulerCore, Made]:
    """A SchedulerCore on ``clock`` and the list its ``on_move`` fills with (task id, move)."""
    core = SchedulerCore(
        retry_delay=RETRY_DELAY,
        retry_count=3,
        disable_window=100.0,
        disable_persist=DISABLE_PERSIST,
        worker_disconnect_delay=DISCONNECT,
        clock=clock,
    )
    made: Made = []
    core.on_move = lambda task_id, move: made.append((task_id, move))
    return core, made


def status(core: SchedulerCore, task_id: str = TASK) -> TaskStatus:
    """The scheduler's status of one task."""
    return core.statuses([task_id])[task_id]


def reach(
    core: SchedulerCore, source: TaskStatus, retry_count: int | None, by_failing: bool
) -> int:
    """Bring TASK to ``source`` through the public API (``by_failing``: DISABLED by failures,
    not by registration); the attempt id of its hand-out, 0 if it was not handed out."""
    if source in (DONE, DISABLED, UNKNOWN) and not by_failing:
        core.add_tasks(W, [spec(status=source, retry_count=retry_count)])
        return 0
    core.add_tasks(W, [spec(retry_count=retry_count)])
    if source == PENDING:
        return 0
    work = core.get_work(W)
    assert work is not None and work.task_id == TASK
    if source != RUNNING:
        assert core.task_failed(W, TASK, "boom", work.attempt) == source
    return work.attempt


def set_up(move: StatusMove) -> tuple[int | None, bool]:
    """The task's retry_count, and whether DISABLED is reached by failing, for ``move``."""
    if move.cause in _FAILING and move.target == DISABLED:
        return (2 if move.source == FAILED else 1), False  # this failure is the one that disables
    if move.cause is C.RETRY_DUE and move.source == DISABLED:
        return 1, True  # only a task disabled by failures wakes after disable_persist
    return None, False


def make(core: SchedulerCore, clock: FakeClock, move: StatusMove, attempt: int) -> None:
    """Do what ``move.cause`` names to TASK (which is ``move.source`` now)."""
    acts: dict[Cause, Callable[[], object]] = {
        C.REGISTERED: lambda: core.add_tasks(OTHER, [spec(status=move.target)]),
        C.HANDED_OUT: lambda: core.get_work(W),
        C.DEPS_YIELDED: lambda: core.add_tasks(W, [spec(deps=("dep",)), spec("dep")]),
        C.RECLAIMED: lambda: core.get_work(W, running=()),
        C.DONE: lambda: core.task_done(W, TASK, attempt if move.source == RUNNING else 0),
        C.FAILED: lambda: core.task_failed(W, TASK, "boom", attempt),
        C.FAILED_UNFENCED: lambda: core.task_failed(W, TASK, "boom"),
        C.RETRIED: lambda: core.retry_now([TASK]),
        C.REENABLED: lambda: core.reenable([TASK]),
        C.SUBMITTED: lambda: core.submit(spec()),
        C.CANCELLED: lambda: core.cancel(TASK),
    }
    if move.cause is C.WORKER_GONE:
        clock.advance(DISCONNECT + 1)
        core.statuses([TASK])
    elif move.cause is C.RETRY_DUE:
        clock.advance(DISABLE_PERSIST if move.source == DISABLED else RETRY_DELAY)
        core.statuses([TASK])
    else:
        acts[move.cause]()


def drive(move: StatusMove) -> tuple[Made, Made]:
    """Make ``move`` on a fresh scheduler: (every move made, the moves the last step made)."""
    clock = FakeClock()
    core, made = recording_core(clock)
    retry_count, by_failing = set_up(move)
    attempt = reach(core, move.source, retry_count, by_failing)
    assert status(core) == move.source
    before = len(made)
    make(core, clock, move, attempt)
    return made, made[before:]


@pytest.mark.parametrize("move", STATUS_MOVES, ids=lambda m: f"{m[0]}-{m[1]}-{m[2].value}")
def test_each_move_of_the_table_is_made_by_the_call_its_cause_names(move: StatusMove):
    """Brought to the move's source status, the task makes the move when its cause happens."""
    _, step = drive(move)
    assert [m for task_id, m in step if task_id == TASK][:1] == [move]


def test_the_moves_made_are_exactly_the_table():
    """Every move made by the scenarios above, set-up included, is in the table, and every
    entry of the table is made."""
    made = {m for move in STATUS_MOVES for _, m in drive(move)[0]}
    assert made == set(STATUS_MOVES)


def test_the_table_lists_each_move_once_and_none_from_a_status_to_itself():
    """No duplicate entries, no self-moves, and only a hand-out makes a task RUNNING."""
    assert len(set(STATUS_MOVES)) == len(STATUS_MOVES)
    assert all(m.source != m.target for m in STATUS_MOVES)
    assert {m for m in STATUS_MOVES if m.target == RUNNING} == {
        StatusMove(PENDING, RUNNING, C.HANDED_OUT)
    }
    assert {m.cause for m in STATUS_MOVES} == set(Cause)


# --- scenarios as a worker and an operator see them ------------------------------------------


def test_a_task_that_keeps_failing_is_disabled_and_comes_back(clock: FakeClock):
    """Hand-outs and failures alternate with retries until retry_count failures disable the
    task; disable_persist later it is PENDING again and may succeed."""
    core, made = recording_core(clock)
    core.add_tasks(W, [spec(retry_count=2)])
    for _ in range(2):
        work = core.get_work(W)
        assert work is not None
        core.task_failed(W, TASK, "boom", work.attempt)
        clock.advance(RETRY_DELAY)
    assert status(core) == DISABLED
    clock.advance(DISABLE_PERSIST)
    work = core.get_work(W)
    assert work is not None
    core.task_done(W, TASK, work.attempt)
    assert [m for _, m in made] == [
        StatusMove(PENDING, RUNNING, C.HANDED_OUT),
        StatusMove(RUNNING, FAILED, C.FAILED),
        StatusMove(FAILED, PENDING, C.RETRY_DUE),
        StatusMove(PENDING, RUNNING, C.HANDED_OUT),
        StatusMove(RUNNING, DISABLED, C.FAILED),
        StatusMove(DISABLED, PENDING, C.RETRY_DUE),
        StatusMove(PENDING, RUNNING, C.HANDED_OUT),
        StatusMove(RUNNING, DONE, C.DONE),
    ]


def test_a_success_reported_after_the_worker_was_declared_gone_still_counts(clock: FakeClock):
    """The scheduler fails a silent worker's task; its late success of the same attempt
    makes it DONE, while its late failure moves nothing (the failure was counted already)."""
    core, made = recording_core(clock)
    core.add_tasks(W, [spec(), spec("u")])
    first, second = core.get_work(W), core.get_work(W)
    assert first is not None and second is not None
    clock.advance(DISCONNECT + 1)
    core.ping(OTHER)
    assert core.statuses([first.task_id, second.task_id]) == {"t": FAILED, "u": FAILED}
    core.task_done(W, first.task_id, first.attempt)
    assert core.task_failed(W, second.task_id, "late", second.attempt) == FAILED
    gone, late = made[2:4], made[4:]
    assert sorted(gone) == [
        ("t", StatusMove(RUNNING, FAILED, C.WORKER_GONE)),
        ("u", StatusMove(RUNNING, FAILED, C.WORKER_GONE)),
    ]
    assert late == [("t", StatusMove(FAILED, DONE, C.DONE))]


def test_operator_actions_and_a_lost_hand_out_move_without_counting_a_failure(
    clock: FakeClock,
):
    """reenable and retry_now make a task PENDING at once; a hand-out its worker does not
    list as running goes back to PENDING (and out again) without a failure."""
    core, made = recording_core(clock)
    core.add_tasks(W, [spec(retry_count=1)])
    work = core.get_work(W)
    assert work is not None
    core.task_failed(W, TASK, "boom", work.attempt)
    assert core.reenable([TASK]) == [TASK]
    lost = core.get_work(W, running=())
    again = core.get_work(W, running=())  # the worker never got `lost`
    assert lost is not None and again is not None and again.task_id == TASK
    core.task_done(W, TASK, again.attempt)
    core.add_tasks(W, [spec("u")])
    other = core.get_work(W)
    assert other is not None
    core.task_failed(W, "u", "boom", other.attempt)
    assert core.retry_now(["u", TASK]) == ["u"]
    assert made == [
        (TASK, StatusMove(PENDING, RUNNING, C.HANDED_OUT)),
        (TASK, StatusMove(RUNNING, DISABLED, C.FAILED)),
        (TASK, StatusMove(DISABLED, PENDING, C.REENABLED)),
        (TASK, StatusMove(PENDING, RUNNING, C.HANDED_OUT)),
        (TASK, StatusMove(RUNNING, PENDING, C.RECLAIMED)),
        (TASK, StatusMove(PENDING, RUNNING, C.HANDED_OUT)),
        (TASK, StatusMove(RUNNING, DONE, C.DONE)),
        ("u", StatusMove(PENDING, RUNNING, C.HANDED_OUT)),
        ("u", StatusMove(RUNNING, FAILED, C.FAILED)),
        ("u", StatusMove(FAILED, PENDING, C.RETRIED)),
    ]


# --- a move the table does not list -----------------------------------------------------------


def test_a_move_missing_from_the_table_is_refused_before_the_status_changes(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
):
    """With RECLAIMED taken out of the checked table, reclaiming raises InvalidStatusMove
    (an InvalidTransition) naming the task and the move, and the task stays RUNNING."""
    reclaim = StatusMove(RUNNING, PENDING, C.RECLAIMED)
    monkeypatch.setattr(policy, "_MOVES", frozenset(STATUS_MOVES) - {reclaim})
    core, made = recording_core(clock)
    core.add_tasks(W, [spec()])
    work = core.get_work(W)
    assert work is not None
    with pytest.raises(InvalidStatusMove) as raised:
        core.get_work(W, running=())
    assert isinstance(raised.value, InvalidTransition)
    assert (raised.value.task_id, raised.value.move) == (TASK, reclaim)
    assert str(raised.value) == (
        "no status move from RUNNING to PENDING on 'reclaimed' (task t): not in STATUS_MOVES"
    )
    assert status(core) == RUNNING
    assert [m for _, m in made] == [StatusMove(PENDING, RUNNING, C.HANDED_OUT)]
    core.task_done(W, TASK, work.attempt)  # the attempt is still the task's
    assert status(core) == DONE


# --- the documentation --------------------------------------------------------------------------


def _documented_moves() -> tuple[list[str], set[StatusMove]]:
    """The causes (in order) and the moves of docs/concepts.md's status-moves table."""
    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- status-moves:begin -->\n(.*?)<!-- status-moves:end -->", text, re.S)
    assert block is not None, "the status-moves markers are missing"
    causes, moves = [], set()
    for row in block.group(1).splitlines()[2:]:
        cause_cell, _, moves_cell = (cell.strip() for cell in row.strip("|").split("|"))
        cause = Cause(cause_cell.strip("`"))
        causes.append(cause.value)
        for group in moves_cell.split(";"):
            sources, target = group.split("→")
            names = re.findall(r"`(\w+)`", sources)
            assert names, f"no source status in {group!r}"
            for source in names:
                moves.add(StatusMove(TaskStatus(source), TaskStatus(target.strip(" `")), cause))
    return causes, moves


def test_the_table_in_the_docs_is_the_table_in_the_code():
    """docs/concepts.md lists each cause once and exactly the moves of STATUS_MOVES."""
    causes, moves = _documented_moves()
    assert sorted(causes) == sorted(c.value for c in Cause)
    assert moves == set(STATUS_MOVES)
