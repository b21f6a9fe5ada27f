"""The deadline policy (``conveyor.executors.deadline``) and a fake clock driving real timeouts.

The first half tests the policy as plain function calls on a ``FakeClock``: the escalation
steps RUNNING → TERMINATE → KILL (and FINISHING → KILL once a process reported its outcome),
the table of legal moves, the supervisor's waits, and the worker's question "which executor can
enforce this timeout". The second half runs real attempt processes (``fork``, ``subprocess``,
and ``inline``, whose timed attempts go to a process executor) in a Worker whose clock is a
FakeClock: an attempt with a one-hour timeout times out when the test moves the fake clock past
the hour, within seconds of real time, and its process tree is gone. A task tells the test how
far it got through status messages (hook events), so nothing waits on wall time except the
bounded waits for those events.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import conveyor
from conveyor.clock import SYSTEM
from conveyor.executors.base import ExecutorContext
from conveyor.executors.deadline import (
    MOVES,
    POLL_UNANNOUNCED,
    Announcing,
    Deadline,
    DeadlinePolicy,
    Step,
)
from conveyor.executors.inline import InlineExecutor
from conveyor.executors.subproc import SubprocessExecutor
from conveyor.testing import FakeClock, RecordingPlugin
from conveyor.testing.processes import alive, gone_within, kill_tree

WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

HOUR = 3600.0
WAIT = 30.0  # real seconds: bounds a wait for an event that comes at once when all is well

TASKS = '''
import os
import signal
import subprocess
import sys
import time

import conveyor


class Sleeper(conveyor.Task):
    """Starts a helper process (which ignores SIGTERM), says both pids, then sleeps far past
    any test's time limit; with ``notice_term`` it says when it gets SIGTERM and sleeps on
    (only SIGKILL ends it)."""

    root = conveyor.Parameter()
    notice_term = conveyor.BoolParameter(default=False)
    worker_timeout = 3600

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "never-written"))

    def run(self):
        if self.notice_term:
            signal.signal(signal.SIGTERM, lambda signum, frame: self.set_status_message("TERM"))
        helper = subprocess.Popen(
            [sys.executable, "-c", "import signal, time; "
             "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
             "time.sleep(3600)"],
            stdout=subprocess.PIPE,
        )
        helper.stdout.readline()  # it ignores SIGTERM from now on
        self.set_status_message(f"running {os.getpid()} {helper.pid}")
        while True:
            time.sleep(3600)
'''


# --- the policy, as plain function calls -----------------------------------------------------


def test_a_timeout_escalates_terminate_then_kill_on_the_fake_clock() -> None:
    """RUNNING until the timeout; TERMINATE due exactly at it; KILL due exactly kill_grace
    after TERMINATE was taken; nothing after KILL."""
    clock = FakeClock()
    policy = DeadlinePolicy(kill_grace=5.0, clock=clock)
    deadline = policy.start(10.0)
    assert (deadline.step, deadline.next_at) == (Step.RUNNING, clock.now + 10.0)
    clock.advance(9.5)
    assert deadline.due(policy.now()) is None
    clock.advance(0.5)
    assert deadline.due(policy.now()) is Step.TERMINATE
    assert deadline.enter(Step.TERMINATE, policy.now()) is True
    assert deadline.next_at == clock.now + 5.0
    clock.advance(4.9)
    assert deadline.due(policy.now()) is None
    clock.advance(0.1)
    assert deadline.due(policy.now()) is Step.KILL
    assert deadline.enter(Step.KILL, policy.now()) is True
    clock.advance(HOUR)
    assert deadline.due(policy.now()) is None
    assert deadline.next_at == float("inf")
    assert deadline.elapsed(policy.now()) == pytest.approx(15.0 + HOUR)


def test_a_reported_outcome_gives_kill_grace_and_the_timeout_no_longer_applies() -> None:
    """A process that reported its outcome (FINISHING) is not timed out when its timeout
    passes; it gets kill_grace seconds from the report to exit, then KILL."""
    clock = FakeClock()
    policy = DeadlinePolicy(kill_grace=5.0, clock=clock)
    deadline = policy.start(10.0)
    clock.advance(8.0)
    assert deadline.enter(Step.FINISHING, policy.now()) is True
    clock.advance(4.0)  # past the timeout (12 s), within the grace (8 + 5 = 13 s)
    assert deadline.due(policy.now()) is None
    clock.advance(1.0)
    assert deadline.due(policy.now()) is Step.KILL


def test_no_timeout_means_nothing_is_ever_due() -> None:
    """A timeout of 0 is none: however far the clock moves, no step is due."""
    clock = FakeClock()
    deadline = DeadlinePolicy(clock=clock).start(0.0)
    clock.advance(10 * HOUR)
    assert deadline.due(clock.now) is None
    assert deadline.expires == deadline.next_at == float("inf")


@pytest.mark.parametrize(("start", "to"), list(itertools.product(Step, Step)))
def test_only_the_moves_of_the_table_are_taken(start: Step, to: Step) -> None:
    """enter() takes exactly the moves MOVES lists; a refused one changes nothing."""
    deadline = Deadline(kill_grace=5.0, started=0.0, timeout=10.0, step=start, kill_at=7.0)
    taken = deadline.enter(to, 1.0)
    assert taken is (to in MOVES[start])
    if taken:
        assert deadline.step is to
        assert deadline.kill_at == (float("inf") if to is Step.KILL else 6.0)
    else:
        assert (deadline.step, deadline.kill_at) == (start, 7.0)


def test_every_step_is_in_the_table_and_kill_is_the_end() -> None:
    """MOVES names every step; KILL leads nowhere and every other step can reach it."""
    assert set(MOVES) == set(Step)
    assert MOVES[Step.KILL] == frozenset()
    assert all(Step.KILL in MOVES[s] for s in Step if s is not Step.KILL)


def test_a_supervisor_waits_as_its_clock_allows() -> None:
    """On the system clock it waits for the time left; on a FakeClock (which announces its
    moves) until it is woken; on a non-blocking clock that does not announce, it polls; with
    nothing due, it waits until woken."""
    assert DeadlinePolicy(clock=SYSTEM).wait(SYSTEM.monotonic() + 50) == pytest.approx(50, abs=1)
    assert DeadlinePolicy(clock=SYSTEM).wait(SYSTEM.monotonic() - 1) == 0.0
    fake = FakeClock()
    assert isinstance(fake, Announcing)
    assert DeadlinePolicy(clock=fake).wait(fake.now + 50) is None
    assert DeadlinePolicy(clock=_SilentClock()).wait(50.0) == POLL_UNANNOUNCED
    assert DeadlinePolicy(clock=SYSTEM).wait(float("inf")) is None


class _SilentClock:
    """A clock that does not block and does not announce its moves."""

    blocks = False

    def time(self) -> float:
        return 0.0

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        pass


def test_a_fake_clock_calls_its_listeners_on_every_move_until_removed() -> None:
    """advance() and sleep() call each listener once; after its remover ran, no more."""
    clock = FakeClock()
    calls: list[float] = []
    remove = clock.on_advance(lambda: calls.append(clock.now))
    clock.advance(2.0)
    clock.sleep(3.0)
    assert calls == [clock.now - 3.0, clock.now]
    remove()
    remove()  # (twice is harmless)
    clock.advance(1.0)
    assert len(calls) == 2


def test_the_policy_says_which_executor_can_enforce_a_timeout() -> None:
    """A timeout needs isolation only with an executor that cannot kill; no timeout never."""
    inline = InlineExecutor(ExecutorContext())
    killer = SubprocessExecutor(ExecutorContext())
    try:
        assert DeadlinePolicy.needs_isolation(inline, 3.0) is True
        assert DeadlinePolicy.needs_isolation(inline, 0.0) is False
        assert DeadlinePolicy.needs_isolation(killer, 3.0) is False
        assert DeadlinePolicy.any_needs_isolation(inline, [0.0, 0.0, 2.0]) is True
        assert DeadlinePolicy.any_needs_isolation(inline, [0.0]) is False
        assert DeadlinePolicy.any_needs_isolation(killer, iter(_explodes, None)) is False
    finally:
        inline.close()
        killer.close()


def _explodes() -> float:
    raise AssertionError("the timeouts were looked at although the executor can kill")


# --- real processes on a fake clock ----------------------------------------------------------


class Said:
    """A hook plugin handing every status message over to the test, in order."""

    name = "test-deadline.said"

    def __init__(self) -> None:
        """Nothing said yet."""
        self.messages: queue.SimpleQueue[str] = queue.SimpleQueue()

    @conveyor.hookimpl
    def conveyor_task_status_message(self, event: Any) -> None:
        """Hand the message over."""
        self.messages.put(event.message)

    def next(self) -> str:
        """The next message (AssertionError if none comes within WAIT seconds)."""
        try:
            return self.messages.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no status message within {WAIT} s") from None


class Running:
    """``worker.run()`` on a thread of its own (the test thread moves the clock)."""

    def __init__(self, worker: conveyor.Worker) -> None:
        """Start the run."""
        self.result: list[bool] = []
        self.thread = threading.Thread(target=lambda: self.result.append(worker.run()))
        self.thread.start()

    def finished(self) -> bool:
        """What run() returned (AssertionError if it does not end within WAIT seconds)."""
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), f"the run did not end within {WAIT} s"
        return self.result[0]


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Pids of the processes a test started; whatever is left of them is killed afterwards."""
    started: list[int] = []
    yield started
    for pid in started:
        kill_tree(pid)


def _worker(clock: FakeClock, executor: str, *plugins: object, kill_grace: float = 5.0) -> Any:
    config = conveyor.Config().with_overrides(
        executor=executor, kill_grace=kill_grace, install_signal_handlers=False
    )
    # the scheduler on the same clock, with a lease far longer than any move of the clock
    scheduler = conveyor.Scheduler(clock=clock, worker_disconnect_delay=100 * HOUR)
    return conveyor.Worker(scheduler, config=config, plugins=list(plugins), clock=clock)


@contextlib.contextmanager
def _unstuck(clock: FakeClock) -> Iterator[None]:
    """On the way out, move the clock far on: an attempt left running by a failed assertion
    is then killed, so that closing the worker does not wait for it forever."""
    try:
        yield
    finally:
        clock.advance(100 * HOUR)


def _started(said: Said, pids: list[int]) -> list[psutil.Process]:
    """The task's process and its helper, once the task says it runs."""
    word, *numbers = said.next().split()
    assert word == "running"
    pids.extend(int(n) for n in numbers)
    return [psutil.Process(int(n)) for n in numbers]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("executor", ["fork", "subprocess", "inline"])
def test_moving_a_fake_clock_past_the_timeout_times_the_attempt_out(
    executor: str, tmp_path: Path, task_module: WriteModule, pids: list[int]
) -> None:
    """A real attempt with a one-hour timeout (under ``inline`` it goes to a process executor,
    which gets the worker's clock too) times out when the fake clock is moved past the hour:
    the run ends within seconds with the attempt timed out after 3600 s, a duration in fake
    time, and its whole process tree gone."""
    tasks = importlib.import_module(task_module(TASKS))
    task = tasks.Sleeper(root=str(tmp_path))
    clock, said, recorder = FakeClock(), Said(), RecordingPlugin()
    with _worker(clock, executor, said, recorder) as worker, _unstuck(clock):
        worker.add(task)
        run = Running(worker)
        procs = _started(said, pids)
        clock.advance(HOUR - 1)
        assert all(alive(p) for p in procs)  # (a check, not proof: it did not fire early)
        clock.advance(2)
        assert run.finished() is False
    (timed_out,) = recorder.events("task_timed_out", task.task_id)
    assert timed_out.timeout == HOUR
    assert HOUR <= timed_out.duration < HOUR + 60  # fake seconds: the clock moved 3601
    assert not recorder.events("task_failed", task.task_id)
    assert gone_within(procs, WAIT) == []


@pytest.mark.timeout(90)
@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_kill_follows_terminate_after_kill_grace_on_the_fake_clock(
    executor: str, tmp_path: Path, task_module: WriteModule, pids: list[int]
) -> None:
    """A task that survives SIGTERM: at the timeout it gets SIGTERM (it says so) and lives on
    through the fake kill_grace; moving the clock past the grace kills its tree with SIGKILL,
    and the attempt is reported timed out."""
    tasks = importlib.import_module(task_module(TASKS))
    task = tasks.Sleeper(root=str(tmp_path), notice_term=True)
    clock, said, recorder = FakeClock(), Said(), RecordingPlugin()
    with _worker(clock, executor, said, recorder, kill_grace=600) as worker, _unstuck(clock):
        worker.add(task)
        run = Running(worker)
        procs = _started(said, pids)
        clock.advance(HOUR + 1)
        assert said.next() == "TERM"
        clock.advance(598)  # within the grace: the tree that ignores SIGTERM lives on
        assert all(alive(p) for p in procs)
        assert run.thread.is_alive()
        clock.advance(3)
        assert run.finished() is False
    (timed_out,) = recorder.events("task_timed_out", task.task_id)
    assert timed_out.timeout == HOUR
    assert HOUR + 600 <= timed_out.duration < HOUR + 660
    assert gone_within(procs, WAIT) == []
