"""Every built-in scheduler transport and state store passes the conformance checks shipped in
conveyor.testing, and the checks catch broken ones."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.backends import load_backend
from conveyor.protocol import Statuses, StatusesAnswer, TaskStatus, encode
from conveyor.server.stores import SqliteStore, StoreContext
from conveyor.testing.processes import SchedulerProcess, child_env, kill_marked
from conveyor.testing.stores import READ_CHECKS, check_state_store
from conveyor.testing.transports import check_transport
from conveyor.transports.base import TransportContext

TOKEN = "conformance-token"
MARKER = "CONFORMANCE_MARKER"
TRANSPORT_CHECKS = [
    "ping", "add_tasks", "get_work", "work_left", "annotate", "task_list", "merge", "task_done",
    "task_failed", "attempts", "explanation", "statuses", "release",
]  # fmt: skip


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SchedulerProcess]:
    """A real ``conveyor scheduler`` with a token, on loopback."""
    marker = uuid.uuid4().hex
    config = tmp_path / "server.toml"
    config.write_text(f'[server]\ntoken = "{TOKEN}"\n', encoding="utf-8")
    proc = SchedulerProcess(tmp_path, config, child_env(tmp_path, MARKER, marker))
    proc.start()
    yield proc
    proc.kill()
    kill_marked(MARKER, marker)


def test_the_local_transport_conforms() -> None:
    """The in-process scheduler, as the ``local`` transport builds it, passes every check."""
    transport = load_backend("conveyor.schedulers", "local")(TransportContext.of(conveyor.Config()))
    assert check_transport(transport, transport.task_list) == TRANSPORT_CHECKS
    without_list = [name for name in TRANSPORT_CHECKS if name not in ("task_list", "merge")]
    assert check_transport(transport) == without_list  # (the task list is a read, not a call)


def test_the_http_transport_conforms_against_a_real_server(server: SchedulerProcess) -> None:
    """The ``http`` transport talking to a real server passes every check, twice (the second
    run against a scheduler that already holds the first run's tasks)."""
    config = conveyor.Config().with_overrides(scheduler_url=server.url)
    config = config.with_section("scheduler", token=TOKEN)
    transport = load_backend("conveyor.schedulers", "http")(TransportContext.of(config))
    assert check_transport(transport, transport.task_list) == TRANSPORT_CHECKS
    assert check_transport(transport, transport.task_list) == TRANSPORT_CHECKS


class _StringlyStatuses:
    """A broken transport: answers statuses with lower-case strings."""

    def __init__(self) -> None:
        self.inner = conveyor.Scheduler()

    def call(self, request: Any) -> Any:
        answer = self.inner.call(request)
        if isinstance(request, Statuses):
            return StatusesAnswer({k: v.lower() for k, v in answer.statuses.items()})
        return answer


class _UntypedAnswers:
    """A broken transport: answers with plain JSON data instead of the protocol's values."""

    def __init__(self) -> None:
        self.inner = conveyor.Scheduler()

    def call(self, request: Any) -> Any:
        return encode(self.inner.call(request))


def test_the_transport_check_catches_a_broken_transport() -> None:
    """A transport whose statuses are not the protocol's fails the check with a message."""
    with pytest.raises(AssertionError, match="done"):
        check_transport(_StringlyStatuses())


def test_the_transport_check_catches_answers_of_the_wrong_type() -> None:
    """A transport answering plain dicts instead of the route's answer type fails the check,
    naming the request and the type expected."""
    expected = (
        r"call\(Ping\) answered \{'ok': True, 'stop': \[\]\}, expected an answer of type PingAnswer"
    )
    with pytest.raises(AssertionError, match=expected):
        check_transport(_UntypedAnswers())


def test_the_memory_store_conforms() -> None:
    """``memory`` passes every check except durability, which it does not promise."""
    store_cls = load_backend("conveyor.state_stores", "memory")
    assert check_state_store(lambda: store_cls(StoreContext()), durable=False) == [
        "empty", "save-load", "upsert", "workers", "round-trip", "remove", *READ_CHECKS,
        "stakeholders",
    ]  # fmt: skip


def test_the_sqlite_store_conforms(tmp_path: Path) -> None:
    """``sqlite`` passes every check, including loading what it saved after being reopened."""
    store_cls = load_backend("conveyor.state_stores", "sqlite")
    path = str(tmp_path / "state.db")
    checks = check_state_store(lambda: store_cls(StoreContext(path, {"synchronous": "full"})))
    assert checks[-1] == "reopen"


class _AppendOnlyStore:
    """A broken store: keeps every saved row instead of replacing a task's row."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.workers: dict[str, bool] = {}

    def load(self) -> tuple[list[dict[str, Any]], list[tuple[str, bool]]]:
        return list(self.rows), list(self.workers.items())

    def save(self, rows: Any, workers: Any) -> None:
        self.rows.extend(rows)
        self.workers.update(workers)

    def close(self) -> None:
        pass


class _ListsIgnored(SqliteStore):
    """A broken store: takes stakeholders apart (CanSaveStakeholders) but never sets them."""

    def save_stakeholders(self, rows: Any, workers: Any, stakeholders: Any, **gone: Any) -> None:
        super().save_stakeholders(rows, workers, (), **gone)


class _ListsSwapped(SqliteStore):
    """A broken store: sets a task's stakeholders as its runners and the other way round."""

    def save_stakeholders(self, rows: Any, workers: Any, stakeholders: Any, **gone: Any) -> None:
        swapped = [(t, r, s) for t, s, r in stakeholders]
        super().save_stakeholders(rows, workers, swapped, **gone)


@pytest.mark.parametrize("broken", [_ListsIgnored, _ListsSwapped])
def test_the_store_check_catches_stakeholders_not_set_apart(
    tmp_path: Path, broken: type[SqliteStore]
) -> None:
    """A store that takes stakeholders apart but does not set them as told fails the check."""
    path = str(tmp_path / "state.db")
    with pytest.raises(AssertionError, match="stakeholders and runners"):
        check_state_store(lambda: broken(StoreContext(path)), durable=False)


def test_the_store_check_catches_a_store_that_does_not_upsert() -> None:
    """A store that appends instead of replacing fails the upsert check."""
    with pytest.raises(AssertionError, match="replace"):
        check_state_store(_AppendOnlyStore, durable=False)


# --- one way to build every backend ---------------------------------------------------------


class _Fam(conveyor.Task):
    """A task with nothing to do but to be run once."""

    def run(self) -> None:
        _RAN.append(self.task_id)

    def complete(self) -> bool:
        return self.task_id in _RAN


_RAN: list[str] = []


def test_a_third_party_transport_is_built_from_its_validated_table(tmp_path: Path) -> None:
    """The worker builds a transport like every backend: ``cls(TransportContext)`` with its
    ``[schedulers.<name>]`` table validated (defaults filled in), and then uses it."""
    from conveyor_recorder_plugin.transport import LabelledTransport

    config_file = tmp_path / "worker.toml"
    config_file.write_text(
        '[scheduler]\ntransport = "labelled"\nretry_delay = 7\n'
        '[schedulers.labelled]\nlabel = "blue"\n',
        encoding="utf-8",
    )
    LabelledTransport.built.clear()
    result = conveyor.build(_Fam(), config=conveyor.load_config(config_file))
    assert result.ok
    [transport] = LabelledTransport.built
    assert transport.label == "blue" and transport.retry_delay == 7
    assert transport.statuses([_Fam().task_id]) == {_Fam().task_id: TaskStatus.DONE}

    config_file.write_text('[scheduler]\ntransport = "labelled"\n', encoding="utf-8")
    LabelledTransport.built.clear()
    conveyor.Worker(config=conveyor.load_config(config_file)).close()
    assert LabelledTransport.built[0].label == "unlabelled"  # the schema's default


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[schedulers.labelled]\ncolour = 'red'\n", "unknown key 'schedulers.labelled.colour'"),
        ("[schedulers.labelled]\nlabel = 3\n", "schedulers.labelled.label"),
        ("[schedulers.local]\nsurprise = 1\n", "unknown key 'schedulers.local.surprise'"),
        ("[executors.inline]\nsurprise = 1\n", "unknown key 'executors.inline.surprise'"),
    ],
)
def test_a_bad_backend_table_is_a_config_error_naming_file_and_key(
    tmp_path: Path, table: str, message: str
) -> None:
    """Every kind's own table is checked against its schema when the backend is built."""
    config_file = tmp_path / "worker.toml"
    transport = "labelled" if "labelled" in table else "local"
    config_file.write_text(f'[scheduler]\ntransport = "{transport}"\n{table}', encoding="utf-8")
    with pytest.raises(conveyor.ConfigError, match=message) as caught:
        conveyor.Worker(config=conveyor.load_config(config_file))
    assert str(config_file) in str(caught.value)


def test_a_state_store_is_built_from_its_context(tmp_path: Path) -> None:
    """The server's store is built by the same function: ``cls(StoreContext)`` with the
    ``[state_stores.sqlite]`` table validated; a bad value names the key."""
    from conveyor.backends import build_backend

    path = str(tmp_path / "state.db")
    config = conveyor.Config().with_section("server", state_path=path)
    store = build_backend(
        "conveyor.state_stores", "sqlite", config, lambda s: StoreContext(path, s)
    )
    store.save([], [("w1", False)])
    store.close()
    assert (tmp_path / "state.db").exists()
    config_file = tmp_path / "server.toml"
    config_file.write_text("[state_stores.sqlite]\nsynchronous = 'sometimes'\n", encoding="utf-8")
    with pytest.raises(conveyor.ConfigError, match=r"state_stores\.sqlite\.synchronous"):
        build_backend(
            "conveyor.state_stores",
            "sqlite",
            conveyor.load_config(config_file),
            lambda s: StoreContext(path, s),
        )
