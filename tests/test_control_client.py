"""``conveyor.Client`` (issue 26, item 5) against a real ``conveyor scheduler`` with a token and
no assistant (so what is submitted stays ``PENDING``): submit, status, the task list and its
filters, ``wait`` and its time-out, cancel, and the errors a caller sees (an unknown task, a
missing token, a scheduler out of reach).

How an assistant then runs a submitted task is in test_submit_cancel.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import conveyor
from control_support import MARKER, TOKEN, scheduler
from conveyor.control.client import SETTLED
from conveyor.errors import ConveyorError, SchedulerUnavailable, UnknownTask
from conveyor.protocol import TaskStatus
from conveyor.testing.processes import SchedulerProcess, child_env, free_port, kill_marked


class ClientProbe(conveyor.Task):
    """A task only submitted here, never run (no assistant is started)."""

    n = conveyor.Parameter()

    def run(self) -> None:
        """Never called."""
        raise AssertionError("no assistant runs it")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedulerProcess]:
    """One ``conveyor scheduler`` with a token for the module's tests."""
    with scheduler(tmp_path_factory.mktemp("client"), token=True) as started:
        yield started


@pytest.fixture
def client(server: SchedulerProcess) -> Iterator[conveyor.Client]:
    """A client of ``server`` with its token."""
    with conveyor.Client(server.url, TOKEN, give_up_after=20) as made:
        yield made


def test_submit_status_tasks_and_cancel(client: conveyor.Client) -> None:
    """The id is the task's; it is PENDING (nobody runs it) in ``status`` and the task list,
    with who submitted it; ``tasks`` filters by any field; ``cancel`` disables it, after which
    ``status`` and ``wait`` say DISABLED at once."""
    task = ClientProbe(n="1")
    answer = client.submit_answer(task, by="grace")
    assert (answer.task_id, answer.status) == (task.task_id, TaskStatus.PENDING)
    assert client.status(task.task_id) == TaskStatus.PENDING
    [info] = client.tasks(task_id=task.task_id)
    assert (info.family, info.status, info.params) == ("ClientProbe", "PENDING", {"n": "1"})
    assert info.submitted_by == "grace via API token"
    assert task.task_id in {t.task_id for t in client.tasks(status="PENDING")}
    assert task.task_id not in {t.task_id for t in client.tasks(status="DONE")}
    assert client.tasks(family="ClientProbe", status="DONE") == []

    assert client.cancel(task.task_id) == (task.task_id,)
    assert client.status(task.task_id) == TaskStatus.DISABLED
    assert client.wait(task.task_id, timeout=5) == TaskStatus.DISABLED
    [info] = client.tasks(task_id=task.task_id)
    assert (info.status, info.explanation) == ("DISABLED", "cancelled")
    again = client.submit(task)  # (re-submitting a cancelled task: PENDING again)
    assert (again, client.status(again)) == (task.task_id, TaskStatus.PENDING)
    [info] = client.tasks(task_id=task.task_id)
    assert info.submitted_by == "API token"  # (nobody named: how it was let in)


def test_wait_times_out_naming_the_last_status(client: conveyor.Client) -> None:
    """Nothing runs the task: TimeoutError after the time-out, naming PENDING; the sleeps
    between polls never pass the deadline (a test clock counts them)."""
    task_id = client.submit(ClientProbe(n="2"))
    slept: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    client.sleep, client.clock = sleep, lambda: now[0]
    with pytest.raises(TimeoutError, match=r"still PENDING after 2 s"):
        client.wait(task_id, timeout=2, poll=0.5)
    assert slept == [0.5, 0.5, 0.5, 0.5]
    assert TaskStatus.PENDING not in SETTLED and TaskStatus.DONE in SETTLED


def test_unknown_tasks_and_filters(client: conveyor.Client) -> None:
    """``cancel`` and ``status`` of an id the scheduler does not know raise UnknownTask (a
    ConveyorError and a LookupError); a filter that is no field is a TypeError."""
    with pytest.raises(UnknownTask, match="'no-such-task'") as raised:
        client.cancel("no-such-task")
    assert isinstance(raised.value, LookupError) and raised.value.task_id == "no-such-task"
    with pytest.raises(UnknownTask):
        client.status("no-such-task")
    with pytest.raises(TypeError, match="unknown filter 'colour'"):
        client.tasks(colour="red")


def test_a_client_without_the_token_is_refused(server: SchedulerProcess) -> None:
    """The server has a token: a client without it gets a ConveyorError naming 401, and
    nothing is submitted."""
    task = ClientProbe(n="3")
    anonymous = conveyor.Client(server.url, give_up_after=20)
    with anonymous, pytest.raises(ConveyorError, match="401") as raised:
        anonymous.submit(task)
    assert not isinstance(raised.value, SchedulerUnavailable)
    with conveyor.Client(server.url, TOKEN) as client, pytest.raises(UnknownTask):
        client.status(task.task_id)


def _quick(give_up_after: float) -> conveyor.Client:
    """A client of a port nothing listens on, whose every try fails at once (one attempt)."""
    config = conveyor.Config().with_section("scheduler", rpc_retries=1)
    url = f"http://127.0.0.1:{free_port()}"
    return conveyor.Client(url, config=config, give_up_after=give_up_after)


@pytest.mark.timeout(120)
def test_a_scheduler_out_of_reach_raises_once_give_up_after_has_passed() -> None:
    """Nothing listens at the URL: the call keeps trying for ``give_up_after`` seconds, then
    raises SchedulerUnavailable (a test clock counts the pauses between tries; the real time is
    bounded generously: the machine may be slow)."""
    client = _quick(give_up_after=3)
    paused: list[float] = []
    real_sleep = client.sleep

    def sleep(seconds: float) -> None:
        paused.append(seconds)
        real_sleep(seconds)

    client.sleep = sleep
    started = time.monotonic()
    with client, pytest.raises(SchedulerUnavailable):
        client.status("anything")
    took = time.monotonic() - started
    assert 3 <= took < 60, took
    assert len(paused) >= 2 and all(0 < p <= 0.5 for p in paused), paused


@pytest.mark.timeout(180)
def test_a_call_reaches_a_scheduler_that_comes_up_within_give_up_after(tmp_path: Path) -> None:
    """The call starts while nothing listens; a scheduler started on that port meanwhile
    answers it (here: the task is unknown), well before ``give_up_after``."""
    client = _quick(give_up_after=150)
    port = int(client.config.scheduler.url.rsplit(":", 1)[1])
    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            client.status("anything")
            outcome.append(None)
        except BaseException as exc:  # (handed to the test's thread)
            outcome.append(exc)

    caller = threading.Thread(target=ask, daemon=True)
    caller.start()
    config = tmp_path / "server.toml"
    config.write_text("", encoding="utf-8")
    late = SchedulerProcess(tmp_path, config, child_env(tmp_path, MARKER, tmp_path.name), port)
    try:
        late.start(timeout=90)
        caller.join(timeout=120)
        assert not caller.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], UnknownTask), outcome
    finally:
        kill_marked(MARKER, tmp_path.name)
        client.close()


def test_from_config_takes_the_url_and_token_of_a_worker_toml(
    server: SchedulerProcess, tmp_path: Path
) -> None:
    """``Client.from_config`` uses the ``[scheduler]`` table: its url and token."""
    path = tmp_path / "worker.toml"
    path.write_text(
        f'[scheduler]\ntransport = "http"\nurl = "{server.url}"\ntoken = "{TOKEN}"\n',
        encoding="utf-8",
    )
    with conveyor.Client.from_config(conveyor.load_config(path, env={})) as client:
        task_id = client.submit(ClientProbe(n="4"))
        assert client.status(task_id) == TaskStatus.PENDING


def test_a_bad_url_is_a_config_error() -> None:
    """Nothing is contacted; the URL is refused at once."""
    with pytest.raises(conveyor.ConfigError):
        conveyor.Client("ftp://example.invalid/")
