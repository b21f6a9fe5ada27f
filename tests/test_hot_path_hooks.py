"""What the worker's hot path looks up once instead of per task (issue 25): which hooks have
implementations (asked again whenever the registered plugins change), the natural order of
the summary's lists (only the ids that may come first get a whole key), and pings (none
while the scheduler answered within the interval)."""

from __future__ import annotations

import random
import threading
import time
from typing import Any, ClassVar

import pytest

import conveyor
from conveyor import protocol as p
from conveyor.core.summary import Category, SummaryFacts, _Order
from conveyor.plugins import HookRelay
from conveyor.testing import FakeClock
from conveyor.testing.processes import wait_for

pytestmark = pytest.mark.timeout(60)


class HookedTask(conveyor.Task):
    """Complete once it ran (in this process)."""

    n = conveyor.IntParameter()
    ran: ClassVar[set[str]] = set()

    def complete(self) -> bool:
        return self.task_id in HookedTask.ran

    def run(self) -> None:
        HookedTask.ran.add(self.task_id)


class _Started:
    """Counts task_started events."""

    def __init__(self) -> None:
        self.started: list[str] = []

    @conveyor.hookimpl
    def conveyor_task_started(self, event: Any) -> None:
        self.started.append(event.task_id)


def _config(**overrides: Any) -> conveyor.Config:
    return conveyor.Config().with_overrides(executor="inline", log_level="warning", **overrides)


def test_the_relay_generation_grows_with_each_registration() -> None:
    """Registering a plugin changes the relay's generation (what callers cache by)."""
    relay = HookRelay()
    before = relay.generation
    relay.register(_Started(), "one")
    assert relay.generation > before
    assert relay.wants("conveyor_task_started")


def test_a_plugin_registered_after_a_run_is_called_in_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker looks up which hooks are implemented once per set of plugins: a plugin
    registered between two runs gets the second run's events, although nobody implemented
    that hook in the first run (no plugin is loaded but the late one: the built-in ones
    that implement it are blocked, entry points are not loaded)."""
    monkeypatch.setenv("CONVEYOR_DISABLE_PLUGIN_AUTOLOAD", "1")
    builtin = "conveyor.transition-log,conveyor.failure-log,conveyor.summary"
    monkeypatch.setenv("CONVEYOR_DISABLE_PLUGINS", builtin)
    late = _Started()
    with conveyor.Worker(config=_config()) as worker:
        assert worker.add(HookedTask(n=1))
        assert worker.run() is True
        worker.hooks.register(late, "late")
        assert worker.add(HookedTask(n=2))
        assert worker.run() is True
    assert late.started == [HookedTask(n=2).task_id]


def _facts(seed: int, count: int) -> SummaryFacts:
    rng = random.Random(seed)
    categories: dict[str, Category] = {}
    families: dict[str, str] = {}
    params: dict[str, dict[str, str]] = {}
    for k in range(count):
        family = rng.choice(["A", "ns.B10", "ns.B2"])
        task_id = f"{family}_{k}"
        categories[task_id] = Category.COMPLETED
        families[task_id] = family
        shape = rng.random()
        if shape < 0.1:
            continue  # (no parameters known: ordered by the id)
        values = {
            "day": rng.choice([str(rng.randint(0, 40)), f"x{rng.randint(0, 9)}", "", "2026-1-3"]),
            "secret_token": str(rng.randint(0, 3)),
            "z": rng.choice(["1", "10", "2", "a10b2", "a9b"]),
        }
        params[task_id] = {} if shape < 0.2 else values
    return SummaryFacts(
        categories=categories,
        families=families,
        label=lambda t: t,
        requested=[],
        params=params,
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("count", [1, 5, 20])
def test_the_first_ids_are_those_of_a_full_sort(seed: int, count: int) -> None:
    """``first`` (which makes whole keys only for the ids whose lead may put them first)
    names exactly the first ``count`` ids of a full sort by the key."""
    facts = _facts(seed, 600)
    ids = list(facts.categories)
    expected = sorted(ids, key=_Order(facts).key)[:count]
    assert _Order(facts).first(ids, count) == expected
    one_family = [t for t in ids if facts.families[t] == "ns.B2"]
    expected = sorted(one_family, key=_Order(facts).key)[:count]
    assert _Order(facts).first(one_family, count) == expected


class _CountingScheduler:
    """The in-process scheduler behind a transport of its own, counting pings."""

    def __init__(self, clock: FakeClock) -> None:
        self.scheduler = conveyor.Scheduler(clock=clock)
        self.pings = 0

    def call(self, request: Any) -> Any:
        if isinstance(request, p.Ping):
            self.pings += 1
        return self.scheduler.call(request)


class Blocking(conveyor.Task):
    """Runs until ``release`` is set."""

    started: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()
    ran: ClassVar[bool] = False

    def complete(self) -> bool:
        return Blocking.ran

    def run(self) -> None:
        Blocking.started.set()
        assert Blocking.release.wait(30)
        Blocking.ran = True


def test_no_ping_while_the_scheduler_answered_within_the_interval() -> None:
    """On a clock that does not move, the last answer is always within the ping interval:
    the pinger sends nothing. Once the clock moves past the interval, it pings again (an
    attempt that runs long keeps its worker alive)."""
    clock = FakeClock()
    transport = _CountingScheduler(clock)
    config = _config(ping_interval=0.02)
    outcome: list[bool] = []
    with conveyor.Worker(transport, config=config, clock=clock) as worker:
        assert worker.add(Blocking())
        runner = threading.Thread(target=lambda: outcome.append(worker.run()))
        runner.start()
        try:
            assert Blocking.started.wait(30)
            time.sleep(0.2)  # (ten intervals: a negative can only be waited out)
            assert transport.pings == 0
            clock.advance(1.0)
            wait_for(lambda: transport.pings >= 1, 30, "a ping once the clock moved")
        finally:
            Blocking.release.set()
            runner.join(30)
    assert outcome == [True]
