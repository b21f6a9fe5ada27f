"""Leadership of a shared state store (conveyor.server.leadership, SchedulerService's roles),
on a fake clock.

Two servers share one store here the way two schedulers share a PostgreSQL database: one
``MemoryStore`` holds the state, and :class:`Lot` is the lease row both see, with the store's
clock a :class:`~conveyor.testing.FakeClock`. What PostgreSQL itself does (the lease row, the
term checked inside each save's transaction) is tested against a real server in
plugins/conveyor-postgres; this checks what a server does with the answers: when it leads, when
it stops acknowledging, what a standby answers, and that the state it leads with is the one
stored after it took the lease.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from conveyor import Scheduler
from conveyor.protocol import AddTasks, GetWork, TaskSpec, TaskStatus
from conveyor.server.app import LEADER, STANDBY, NotLeader, SchedulerService
from conveyor.server.leadership import Campaign
from conveyor.server.stores import Deposed, Lease, MemoryStore
from conveyor.testing import FakeClock

LEASE = 10.0


@dataclass
class Lot:
    """The lease both servers see (PostgreSQL's lease row)."""

    clock: FakeClock
    term: int = 0
    holder: str = ""
    expires: float = 0.0


class SharedStore:
    """One server's handle on the shared state: the store's reads and writes, its saves fenced
    by the term it took, as :class:`~conveyor.server.stores.CanLead` says."""

    def __init__(self, state: MemoryStore, lot: Lot) -> None:
        self.state = state
        self.lot = lot
        self.term: int | None = None  # the term of the lease it holds
        self.armed: int | None = None  # the term its saves carry (None: unfenced, 0: none)
        self.fail_load = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.state, name)

    def lead(self, holder: str, lease: float) -> Lease:
        if self.armed is None:
            self.armed = 0
        lot, now = self.lot, self.lot.clock()
        mine = self.term == lot.term and lot.holder == holder
        if mine or lot.expires <= now:
            if not mine:
                lot.term += 1
                self.term = lot.term
            lot.holder, lot.expires = holder, now + lease
        live = lot.expires > now
        held = self.term == lot.term and live
        if not held:
            self.armed = 0
        return Lease(lot.term, lot.holder if live else "", held, max(0.0, lot.expires - now))

    def fence(self, term: int) -> None:
        self.armed = term

    def resign(self) -> None:
        if self.term == self.lot.term:
            self.lot.holder, self.lot.expires = "", 0.0
        self.term = -1
        self.armed = 0

    def save(self, rows: Iterable[dict[str, Any]], workers: Any, **gone: Any) -> None:
        if self.armed is not None and self.armed != self.lot.term:
            raise Deposed(f"term {self.armed} is over: {self.lot.term} is current")
        self.state.save(rows, workers, **gone)

    def load(self) -> Any:
        if self.fail_load:
            raise OSError("the store cannot be read")
        return self.state.load()

    def close(self) -> None:
        """(The shared state outlives each server's handle.)"""


@dataclass
class Server:
    service: SchedulerService
    campaign: Campaign
    store: SharedStore

    def call(self, request: Any) -> Any:
        return self.service.call(self.service.core.call, request)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def shared(clock: FakeClock) -> Iterable[tuple[MemoryStore, Lot]]:
    state = MemoryStore()
    yield state, Lot(clock)
    state.close()


def server(shared: tuple[MemoryStore, Lot], clock: FakeClock, url: str) -> Server:
    """A server of the shared store, standing by, as ``build_service`` makes one."""
    store = SharedStore(*shared)
    core = Scheduler(clock=clock)
    service = SchedulerService(core, store)  # type: ignore[arg-type]
    service.public_url = url
    service.role = STANDBY
    core.frozen = True
    store.fence(0)

    def load() -> Any:
        from conveyor.server.stores import from_row

        rows, workers = store.load()
        return [from_row(r) for r in rows], workers

    campaign = Campaign(service, store, lease=LEASE, load=load, clock=clock)
    service.campaign = campaign
    return Server(service, campaign, store)


def add(srv: Server, *task_ids: str) -> None:
    srv.call(AddTasks("w1", tuple(TaskSpec(t, family="F", module="m") for t in task_ids)))


def test_the_first_to_look_leads_and_the_other_stands_by_naming_it(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    a, b = server(shared, clock, "http://a:1"), server(shared, clock, "http://b:1")
    assert a.campaign.step() == pytest.approx(LEASE / 3)
    wait = b.campaign.step()
    assert (a.service.role, a.service.leader) == (LEADER, "http://a:1")
    assert (b.service.role, b.service.leader) == (STANDBY, "http://a:1")
    assert wait <= LEASE / 3  # a standby looks again by the time the lease could run out
    add(a, "t1")
    with pytest.raises(NotLeader) as refused:
        add(b, "t2")
    assert refused.value.leader == "http://a:1"
    assert "standby" in str(refused.value)
    assert [r["task_id"] for r in shared[0].load()[0]] == ["t1"]


def test_a_leader_whose_lease_ran_out_stops_acknowledging_before_anyone_takes_over(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    a = server(shared, clock, "http://a:1")
    a.campaign.step()
    add(a, "t1")
    clock.advance(LEASE + 0.1)  # no renewal meanwhile (the store could not be reached)
    assert not a.service.leading()  # (what /health says, before any call comes)
    assert a.service.role == STANDBY
    with pytest.raises(NotLeader):
        add(a, "t2")
    assert a.service.role == STANDBY
    assert [r["task_id"] for r in shared[0].load()[0]] == ["t1"]


def test_a_standby_takes_over_when_the_lease_runs_out_with_the_stored_state(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    a, b = server(shared, clock, "http://a:1"), server(shared, clock, "http://b:1")
    a.campaign.step()
    add(a, "t1", "t2")
    handed = a.call(GetWork("w1")).work.task_id
    b.campaign.step()
    assert b.service.role == STANDBY
    clock.advance(LEASE)  # a stopped renewing (paused, or dead)
    b.campaign.step()
    assert (b.service.role, b.service.leader) == (LEADER, "http://b:1")
    assert shared[1].term == 2
    statuses = {t.task_id: t.status for t in b.service.core.task_list()}
    assert statuses[handed] == TaskStatus.RUNNING  # on its worker still: not handed again
    assert b.call(GetWork("w1", running=(handed,))).work.task_id == ({"t1", "t2"} - {handed}).pop()
    # a, resumed, still believes it leads by its own lease... which ran out: refused at once;
    # and were its clock wrong, its save would be refused by the term (fenced):
    a.service.lease_deadline = clock() + LEASE
    with pytest.raises(NotLeader):
        add(a, "t3")
    assert a.service.role == STANDBY
    assert "t3" not in {r["task_id"] for r in shared[0].load()[0]}
    a.campaign.step()
    assert (a.service.role, a.service.leader) == (STANDBY, "http://b:1")


def test_a_stopping_leader_gives_the_lease_up_for_the_standby_to_take_at_once(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    a, b = server(shared, clock, "http://a:1"), server(shared, clock, "http://b:1")
    a.campaign.step()
    add(a, "t1")
    a.campaign.stop()
    assert a.service.role == STANDBY
    b.campaign.step()  # no time has passed
    assert b.service.role == LEADER
    assert {t.task_id for t in b.service.core.task_list()} == {"t1"}


def test_a_server_that_cannot_load_the_state_gives_the_lease_up(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    a, b = server(shared, clock, "http://a:1"), server(shared, clock, "http://b:1")
    a.store.fail_load = True
    a.campaign.step()
    assert a.service.role == STANDBY
    b.campaign.step()
    assert b.service.role == LEADER


def test_a_leader_renews_before_its_lease_runs_out_and_keeps_leading(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    a, b = server(shared, clock, "http://a:1"), server(shared, clock, "http://b:1")
    for _ in range(10):
        clock.advance(a.campaign.step())
        b.campaign.step()
    assert (a.service.role, b.service.role) == (LEADER, STANDBY)
    assert shared[1].term == 1
    add(a, "t1")


def test_a_leader_that_takes_the_lease_afresh_reloads_before_leading_again(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    """a is paused past its lease, b leads and stops; a resumes and its look at the lease
    comes first: it takes a new term, and must not lead on with what it held before."""
    a, b = server(shared, clock, "http://a:1"), server(shared, clock, "http://b:1")
    a.campaign.step()
    add(a, "t1")
    clock.advance(LEASE)
    b.campaign.step()
    handed = b.call(GetWork("w1")).work.task_id
    b.campaign.stop()
    a.campaign.step()
    assert (a.service.role, a.service.term, shared[1].term) == (LEADER, 3, 3)
    core = a.service.core
    assert {t.task_id: t.status for t in core.task_list()} == {handed: TaskStatus.RUNNING}
    assert a.call(GetWork("w1", running=(handed,))).work is None  # not handed out twice


def test_a_call_under_way_never_commits_under_a_term_taken_after_it_began(
    shared: tuple[MemoryStore, Lot], clock: FakeClock
) -> None:
    """A call that began under term 1 and saves once the store took term 3 (another server
    led in between) is refused: a new term is armed only once the state is reloaded."""
    a, b = server(shared, clock, "http://a:1"), server(shared, clock, "http://b:1")
    a.campaign.step()
    add(a, "t1")
    clock.advance(LEASE)
    b.campaign.step()
    b.campaign.stop()
    assert a.store.lead("http://a:1", LEASE).term == 3  # (its campaign, mid-look)
    a.service.lease_deadline = clock() + LEASE  # (as if its own clock had not noticed)
    with pytest.raises(NotLeader):
        add(a, "t-stale")
    assert "t-stale" not in {r["task_id"] for r in shared[0].load()[0]}
    a.campaign.step()
    assert a.service.role == LEADER
    add(a, "t2")
