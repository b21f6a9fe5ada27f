"""conveyor's own features as plugins of its hooks (SPEC §10, issue 21 item 5): the execution
summary (``conveyor.summary``, the ``conveyor_worker_summary`` hook) and the notifier dispatch
(``conveyor.notify``: set up in ``conveyor_configure``, started on ``conveyor_worker_started``,
flushed in ``conveyor_unconfigure``), registered by name like a third party's, on real Workers."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

import conveyor
from conveyor import events
from conveyor.core.summary import Category, SummaryFacts, WorkerSummary, render_summary
from conveyor.plugins import BUILTIN_PLUGINS, START_REFUSALS


class Ok(conveyor.Task):
    """Writes ``<root>/ok-<tag>``."""

    root = conveyor.Parameter()
    tag = conveyor.Parameter(default="a")

    def output(self) -> conveyor.LocalTarget:
        """The file it writes."""
        return conveyor.LocalTarget(f"{self.root}/ok-{self.tag}")

    def run(self) -> None:
        """Write it."""
        with self.output().open("w") as out:
            out.write("ok")


class Bad(conveyor.Task):
    """Raises in run()."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        """A file never written."""
        return conveyor.LocalTarget(f"{self.root}/bad")

    def run(self) -> None:
        """Fail."""
        raise ValueError("bad on purpose")


class Broken(conveyor.Task):
    """Its complete() raises: broken during add(), which is notified (kind ``broken``)."""

    def complete(self) -> bool:
        """Fail."""
        raise RuntimeError("cannot tell")


class SummaryWatcher:
    """Observes the facts the summary is made of, and answers nothing (None)."""

    name = "summary-watcher"

    def __init__(self) -> None:
        """No facts yet."""
        self.facts: list[SummaryFacts] = []
        self.worker_ids: list[str] = []
        self.stopped: list[events.WorkerStopped] = []

    @conveyor.hookimpl
    def conveyor_worker_summary(self, event: WorkerSummary) -> None:
        """Keep the facts."""
        self.facts.append(event.facts)
        self.worker_ids.append(event.worker_id)

    @conveyor.hookimpl
    def conveyor_worker_stopped(self, event: events.WorkerStopped) -> None:
        """Keep the event (its summary)."""
        self.stopped.append(event)


class SummaryReplacer:
    """Replaces the summary with its own text."""

    name = "summary-replacer"

    @conveyor.hookimpl
    def conveyor_worker_summary(self, event: WorkerSummary) -> str:
        """One line: how many tasks."""
        return f"{len(event.facts.categories)} task(s), my way"


class SummaryExtender:
    """Adds one line to conveyor's summary."""

    name = "summary-extender"

    @conveyor.hookimpl
    def conveyor_worker_summary(self, event: WorkerSummary) -> str:
        """conveyor's text and a line of its own."""
        return render_summary(event.facts) + "\nand one more line"


class FixedSummary:
    """A summary implementation without the event argument (pluggy allows fewer arguments)."""

    name = "summary-fixed"

    @conveyor.hookimpl
    def conveyor_worker_summary(self) -> str:
        """The same text whatever the run."""
        return "a summary of my own"


class SummaryRaiser:
    """A summary implementation that raises (the next one answers)."""

    name = "summary-raiser"

    @conveyor.hookimpl
    def conveyor_worker_summary(self, event: WorkerSummary) -> str:
        """Fail."""
        raise RuntimeError("no summary from me")


class Lifecycle:
    """Records its lifecycle calls."""

    def __init__(self, name: str) -> None:
        """Named ``name``, with no records."""
        self.name = name
        self.calls: list[tuple[str, Any]] = []

    @conveyor.hookimpl
    def conveyor_configure(self, config: conveyor.Config) -> None:
        """Record the call."""
        self.calls.append(("configure", config))

    @conveyor.hookimpl
    def conveyor_unconfigure(self, flush_timeout: float) -> None:
        """Record the call."""
        self.calls.append(("unconfigure", flush_timeout))


class Refuser(Lifecycle):
    """Refuses the configuration, as the notifier dispatch refuses an unusable notifier."""

    @conveyor.hookimpl
    def conveyor_configure(self, config: conveyor.Config) -> None:
        """Refuse."""
        self.calls.append(("configure", config))
        raise conveyor.ConfigError("this plugin cannot work with that configuration")


class NotifyThreadWatcher:
    """At worker_started (asked before conveyor.notify, registered first), whether the
    notifier dispatch's sender thread was alive."""

    name = "notify-thread-watcher"

    def __init__(self) -> None:
        """Nothing seen yet."""
        self.alive_at_start: list[bool] = []

    @conveyor.hookimpl
    def conveyor_worker_started(self, event: events.WorkerStarted) -> None:
        """Look for the thread."""
        self.alive_at_start.append(_notify_thread_alive())


def _notify_thread_alive() -> bool:
    return any(t.name == "conveyor-notify" for t in threading.enumerate())


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in tmp_path, so no ./worker.toml is found."""
    monkeypatch.chdir(tmp_path)


def _config(directory: Path, body: str = "") -> conveyor.Config:
    path = directory / "worker-builtin.toml"
    path.write_text('[worker]\nexecutor = "inline"\n' + body, encoding="utf-8")
    return conveyor.load_config(path)


def _jsonl(directory: Path, on: str = '["failed", "broken", "run_finished"]') -> str:
    """[notifiers] with the jsonl notifier of tests/thirdparty-plugin."""
    return (
        f'[notifiers]\nenabled = ["jsonl"]\non = {on}\nflush_timeout = 10\n'
        f'[notifiers.jsonl]\npath = "{directory / "messages.jsonl"}"\n'
    )


def _run(directory: Path, tasks: list[conveyor.Task], *plugins: object, body: str = "") -> Any:
    with conveyor.Worker(config=_config(directory, body), plugins=plugins) as worker:
        for task in tasks:
            worker.add(task)
        worker.run()
    return worker


# --- registration by name -------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_builtin_plugins_are_registered_by_name_first(tmp_path: Path) -> None:
    """Every worker has conveyor.summary, registered before any plugin handed to it;
    conveyor.notify joins only when [notifiers] enabled names a notifier."""
    watcher = SummaryWatcher()
    with conveyor.Worker(config=_config(tmp_path), plugins=[watcher]) as plain:
        names = plain.hooks.names()
    assert "conveyor.summary" in names and "conveyor.notify" not in names
    assert names.index("conveyor.summary") < names.index("summary-watcher")
    with conveyor.Worker(config=_config(tmp_path, _jsonl(tmp_path))) as notifying:
        assert "conveyor.notify" in notifying.hooks.names()
    assert {name for name, _ in BUILTIN_PLUGINS} >= {"conveyor.summary", "conveyor.notify"}


@pytest.mark.timeout(60)
def test_a_disabled_builtin_plugin_is_not_registered(tmp_path: Path) -> None:
    """[plugins] disable blocks conveyor's own plugins by name too: without conveyor.summary
    (and nothing else answering) the summary is empty, while the exit code still follows
    the facts."""
    body = '[plugins]\ndisable = ["conveyor.summary"]\n'
    worker = _run(tmp_path, [Bad(root=str(tmp_path))], body=body)
    assert "conveyor.summary" not in worker.hooks.names()
    assert worker.report is not None
    assert worker.report.summary == ""
    assert worker.report.exit_code == 1 and worker.report.ok is False


# --- the execution summary ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_third_party_sees_the_facts_the_summary_is_made_of(tmp_path: Path) -> None:
    """A plugin answering None to conveyor_worker_summary gets the same frozen facts
    conveyor.summary renders; the summary is conveyor's text, byte for byte."""
    watcher = SummaryWatcher()
    ok, bad = Ok(root=str(tmp_path)), Bad(root=str(tmp_path))
    worker = _run(tmp_path, [ok, bad], watcher)
    [facts] = watcher.facts
    assert dict(facts.categories) == {ok.task_id: Category.COMPLETED, bad.task_id: Category.FAILED}
    assert facts.reasons[bad.task_id] == "failed: ValueError: bad on purpose"
    assert list(facts.requested) == [ok.task_id, bad.task_id]
    assert worker.report.summary == render_summary(facts)
    assert "===== conveyor execution summary =====" in worker.report.summary
    assert [event.summary for event in watcher.stopped] == [worker.report.summary]
    assert watcher.worker_ids == [worker.id]


@pytest.mark.timeout(60)
def test_a_plugin_replaces_the_summary(tmp_path: Path) -> None:
    """The first string returned is the summary (the plugin registered last is asked first):
    RunReport.summary and worker_stopped's summary are the replacement; ok and the exit code
    are unchanged."""
    watcher = SummaryWatcher()
    worker = _run(tmp_path, [Bad(root=str(tmp_path))], watcher, SummaryReplacer())
    assert worker.report.summary == "1 task(s), my way"
    assert watcher.stopped[0].summary == "1 task(s), my way"
    assert (worker.report.ok, worker.report.exit_code) == (False, 1)


@pytest.mark.timeout(60)
def test_a_summary_implementation_without_the_event_argument_answers(tmp_path: Path) -> None:
    """conveyor_worker_summary implemented without ``event`` is called without it, and its
    text is the summary (not logged as raising a TypeError)."""
    with structlog.testing.capture_logs() as logs:
        worker = _run(tmp_path, [Ok(root=str(tmp_path))], FixedSummary())
    assert worker.report.summary == "a summary of my own"
    assert not [e for e in logs if e["event"] == "hook implementation raised"], logs


@pytest.mark.timeout(60)
def test_a_plugin_adds_to_the_summary(tmp_path: Path) -> None:
    """A plugin returning conveyor's text plus a line of its own extends the summary (the
    watcher, registered after it, is asked first and answers None)."""
    watcher = SummaryWatcher()
    worker = _run(tmp_path, [Ok(root=str(tmp_path))], SummaryExtender(), watcher)
    [facts] = watcher.facts
    assert worker.report.summary == render_summary(facts) + "\nand one more line"


@pytest.mark.timeout(60)
def test_a_failing_summary_plugin_falls_back_to_conveyors(tmp_path: Path) -> None:
    """A conveyor_worker_summary implementation that raises is logged and skipped: the summary is
    conveyor's own, and the run's result is unchanged."""
    watcher = SummaryWatcher()
    worker = _run(tmp_path, [Ok(root=str(tmp_path))], watcher, SummaryRaiser())
    [facts] = watcher.facts
    assert worker.report.summary == render_summary(facts)
    assert worker.report.ok is True and worker.report.exit_code == 0


# --- refusing a configuration ---------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_configure_refusal_fails_the_worker_and_unconfigures_the_others(
    tmp_path: Path,
) -> None:
    """A conveyor_configure raising ConfigError refuses the start: Worker() raises it, the plugin
    configured before is unconfigured with flush_timeout 0, the refuser is not unconfigured."""
    assert conveyor.ConfigError in START_REFUSALS
    before, refuser = Lifecycle("before"), Refuser("refuser")
    # the plugin registered last is called first: `before` is configured before `refuser`
    with pytest.raises(conveyor.ConfigError, match="cannot work with that configuration"):
        conveyor.Worker(config=_config(tmp_path), plugins=[refuser, before])
    assert [call for call, _ in before.calls] == ["configure", "unconfigure"]
    assert before.calls[1] == ("unconfigure", 0.0)
    assert [call for call, _ in refuser.calls] == ["configure"]


@pytest.mark.timeout(60)
def test_a_late_plugin_that_refuses_is_not_registered(tmp_path: Path) -> None:
    """A plugin registered after the worker was configured that refuses: register() raises the
    refusal and the plugin is not left registered; the worker carries on."""
    with conveyor.Worker(config=_config(tmp_path)) as worker:
        with pytest.raises(conveyor.ConfigError):
            worker.hooks.register(Refuser("late-refuser"), "late-refuser")
        assert "late-refuser" not in worker.hooks.names()
        worker.add(Ok(root=str(tmp_path)))
        assert worker.run() is True


@pytest.mark.timeout(60)
def test_an_unknown_notifier_refuses_the_start_through_the_plugin(tmp_path: Path) -> None:
    """conveyor.notify builds the notifiers in conveyor_configure: one that is not installed is
    BackendNotFound from Worker(), and the plugins configured before are unconfigured."""
    before = Lifecycle("before")
    body = '[notifiers]\nenabled = ["no-such-notifier"]\n'
    with pytest.raises(conveyor.BackendNotFound, match="no-such-notifier"):
        conveyor.Worker(config=_config(tmp_path, body), plugins=[before])
    assert [call for call, _ in before.calls] == ["configure", "unconfigure"]


# --- the notifier dispatch ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_dispatch_thread_starts_on_worker_started_not_before(tmp_path: Path) -> None:
    """A notification queued during add() (a broken task) waits: the sender thread is not alive
    before run(), nor when worker_started reaches a plugin asked before conveyor.notify (the
    fork servers are made before that event); the message is delivered by the end."""
    watcher = NotifyThreadWatcher()
    config = _config(tmp_path, _jsonl(tmp_path))
    with conveyor.Worker(config=config, plugins=[watcher]) as worker:
        worker.add(Broken())
        assert not _notify_thread_alive()
        worker.run()
    assert watcher.alive_at_start == [False]
    lines = (tmp_path / "messages.jsonl").read_text(encoding="utf-8").splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds == ["broken", "run_finished"], kinds
