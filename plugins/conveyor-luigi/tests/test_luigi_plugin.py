"""Unmodified Luigi tasks run by conveyor through the ``luigi`` loader and adapter.

The tasks are in :mod:`luigi_tasks_for_tests` (real ``luigi`` package, real processes): the
same graph under ``conveyor.build()`` with every executor and under ``conveyor run`` in a
subprocess, Luigi's events counted against a run of Luigi's own worker, timeouts, the
explanation of ``on_failure()``, status messages, and graphs mixing Luigi and conveyor tasks.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import luigi
import luigi.task
import pytest
from conveyor.errors import TaskLoadError
from conveyor.testing import RecordingPlugin
from conveyor.testing.processes import SchedulerProcess, child_env, wait_for

import luigi_tasks_for_tests as lt
from conveyor_luigi import LuigiLoader
from conveyor_luigi.adapter import LuigiTask, adapted
from luigi_marker_for_tests import MARKER_VARIABLE

pytestmark = pytest.mark.timeout(120)

EXECUTORS = ["inline", "thread", "fork", "subprocess"]
DAY = datetime.date(2024, 1, 1)
MISSING_EXTERNAL_EXIT = 4
USAGE_EXIT = 2
SIGTERM_EXIT = 143


@pytest.fixture
def events(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file Luigi's event handlers of the test tasks append to (in every process)."""
    path = workdir / "events.log"
    monkeypatch.setenv(lt.EVENTS_VARIABLE, str(path))
    yield path


def event_lines(path: Path) -> list[str]:
    """The lines the handlers wrote, in order (none if no event fired)."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def conveyor_run(cwd: Path, *words: str) -> subprocess.CompletedProcess[str]:
    """``conveyor run WORDS`` in ``cwd`` (JSON log lines on stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "conveyor", "run", *words, "--log-format", "json"],
        cwd=cwd, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip


def logged_task_ids(stderr: str) -> set[str]:
    """The task ids of the JSON log records in ``stderr``."""
    found = set()
    for line in stderr.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "task_id" in record:
                found.add(record["task_id"])
    return found


def graph_ids(root: Path, **params: Any) -> set[str]:
    """Luigi's task ids of the ``All`` graph (as Luigi itself computes them)."""
    top = lt.All(root=str(root), **params)
    report, marker = top.requires()
    squares = report.requires()["squares"]
    return {
        t.task_id
        for t in (top, report, marker, squares, squares.requires(), report.requires()["raw"])
    }


# --- the adapter and the loader ---------------------------------------------------------------


def test_the_adapter_keeps_luigis_identity_and_scheduling_attributes(workdir: Path) -> None:
    """Task id, family, module and string params are Luigi's; the policy has Luigi's
    worker_timeout, priority, resources, retry_count, owner_email and external-ness."""
    task = lt.Policied(root=str(workdir))
    wrapped = adapted(task)
    assert adapted(task) is wrapped and isinstance(wrapped, conveyor.TaskLike)
    assert isinstance(wrapped, conveyor.ReportsNotes)
    assert (wrapped.task_id, wrapped.task_family, wrapped.task_module) == (
        task.task_id, "Policied", "luigi_tasks_for_tests",
    )  # fmt: skip
    assert dict(wrapped.task_params) == {"root": str(workdir), "secret": "s3cret"}
    policy = wrapped.task_policy()
    assert (policy.timeout, policy.priority, dict(policy.resources), policy.retry_count) == (
        30.0, 7, {"db": 2}, 4,
    )  # fmt: skip
    assert policy.owners == ("a@example.com", "b@example.com")
    assert (policy.loader, policy.external, policy.disabled) == ("luigi", False, False)
    assert adapted(lt.Raw(root=str(workdir))).task_policy().external
    assert repr(wrapped) == repr(task) and wrapped == adapted(lt.Policied(root=str(workdir)))


def test_the_loader_rebuilds_luigi_tasks_and_delegates_conveyor_ones(workdir: Path) -> None:
    """``load`` rebuilds a Luigi task from its string params (same task id); a conveyor task
    of the module goes to conveyor's loader; a bad value is a TaskLoadError."""
    loader = LuigiLoader()
    original = adapted(lt.Squares(root=str(workdir), date=DAY, labels=["x", "y"], loud=True))
    again = loader.load("luigi_tasks_for_tests", "Squares", original.task_params)
    assert again.task_id == original.task_id and isinstance(again, LuigiTask)
    leaf = loader.load("luigi_tasks_for_tests", "ConveyorLeaf", {"root": str(workdir)})
    assert isinstance(leaf, conveyor.Task)
    with pytest.raises(TaskLoadError, match="Numbers"):
        loader.load("luigi_tasks_for_tests", "Numbers", {"root": "r", "date": "not a date"})
    assert loader.adapt("Numbers") is None and loader.adapt(lt.ConveyorLeaf(root="r")) is None


def test_the_loader_does_not_import_luigi_for_others(tmp_path: Path) -> None:
    """A process without Luigi tasks never imports luigi through the loader."""
    code = (
        "import sys; from conveyor_luigi import LuigiLoader; "
        "assert LuigiLoader().adapt(object()) is None; "
        "assert 'luigi' not in sys.modules, 'imported'; print('clean')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "clean", proc.stderr


LEAVING_SCRIPT = """
import sys
import conveyor

def kept(**worker):
    with conveyor.Worker(config=conveyor.Config().with_overrides(**worker)) as built:
        return built.hooks.pm.get_plugin("luigi-events") is not None

print("luigi" in sys.modules, kept(), kept(assistant=True))
import luigi
print(kept())
"""


def test_luigi_events_leaves_a_worker_built_without_luigi(tmp_path: Path) -> None:
    """In a process that has not imported luigi (no Luigi task can exist in it), a worker's
    ``luigi-events`` leaves it at once (``conveyor_configure`` returns False), so none of its
    events is built; an assistant (handed Luigi tasks later) keeps it, and so does a worker
    built once luigi is imported."""
    proc = subprocess.run(
        [sys.executable, "-c", LEAVING_SCRIPT], cwd=tmp_path, capture_output=True, text=True,
        timeout=100,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "False", "True", "True"]


# --- one graph, every executor ----------------------------------------------------------------


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_luigi_graph_runs_under_every_executor(executor: str, workdir: Path) -> None:
    """All -> Report (inherits) -> Squares (requires) -> Numbers, Report -> Raw (external,
    present), All -> Marker (own complete()): every task done, ids are Luigi's."""
    (workdir / "raw.txt").write_text("RAW\n", encoding="utf-8")
    top = lt.All(root=str(workdir), labels=["p", "q"], loud=True)
    result = conveyor.build(top, executor=executor, workers=1 if executor == "inline" else 2)
    assert result.ok, result.summary
    assert set(result.states) == graph_ids(workdir, labels=["p", "q"], loud=True)
    assert set(result.states.values()) == {"DONE"}
    assert (workdir / "squares-20240101.txt").read_text() == "1! p,q\n4! p,q\n9! p,q\n"
    assert (workdir / "report-20240101.txt").read_text() == "total=14 raw=RAW\n"
    assert (workdir / "marker").exists()
    if executor in ("fork", "subprocess"):  # run in an attempt's process
        assert int((workdir / "marker").read_text()) != os.getpid()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_dynamic_dependencies_under_every_executor(executor: str, workdir: Path) -> None:
    """A yielded task and a yielded luigi.DynamicRequirements run; each yield evaluates to
    what Luigi sends back (the outputs)."""
    task = lt.Dynamic(root=str(workdir))
    result = conveyor.build(task, executor=executor, workers=1)
    assert result.ok, result.summary
    assert len(result.states) == 5
    expected = "piece 100\npiece 0\npiece 1\npiece 2\n"
    assert (workdir / "dynamic.txt").read_text(encoding="utf-8") == expected


def test_a_missing_external_task_is_missing_data(workdir: Path) -> None:
    """Without raw.txt the external Raw is missing: conveyor's exit code for missing data."""
    result = conveyor.build(lt.All(root=str(workdir)), executor="inline")
    assert result.exit_code == MISSING_EXTERNAL_EXIT, result.summary
    assert result.states[lt.Raw(root=str(workdir)).task_id] == "PENDING"
    assert (workdir / "marker").exists()  # the other branch ran


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_luigi_tools_range_runs_the_missing_days(executor: str, workdir: Path) -> None:
    """A luigi.tools.range.RangeDaily of a task of this module: the attempt's process rebuilds
    it (its TaskParameter names the class's module; its None parameters stay None)."""
    from luigi.tools.range import RangeDaily

    (workdir / "daily-20240102.txt").write_text("made before\n", encoding="utf-8")
    task = RangeDaily(
        of=lt.Daily, of_params={"root": str(workdir)}, param_name="date",
        start=DAY, stop=datetime.date(2024, 1, 4), days_back=100_000,
    )  # fmt: skip
    wrapped = adapted(task)
    assert wrapped.task_params["of"] == "luigi_tasks_for_tests:Daily"
    again = LuigiLoader().load(wrapped.task_module, wrapped.task_family, wrapped.task_params)
    assert again.task_id == task.task_id
    result = conveyor.build(task, executor=executor)
    assert result.ok, result.summary
    assert len(result.states) == 3  # the range and the two missing days
    days = sorted(p.name for p in workdir.glob("daily-*.txt"))
    assert days == ["daily-20240101.txt", "daily-20240102.txt", "daily-20240103.txt"]
    assert (workdir / "daily-20240102.txt").read_text(encoding="utf-8") == "made before\n"


# --- conveyor run -----------------------------------------------------------------------------


def test_conveyor_run_parses_luigis_flags_and_reads_luigi_cfg(workdir: Path) -> None:
    """``conveyor run`` with Luigi's flags (a date, a list, a bool flag), a default from
    luigi.cfg in the current directory and conveyor run's own options mixed in."""
    (workdir / "raw.txt").write_text("RAW\n", encoding="utf-8")
    (workdir / "luigi.cfg").write_text("[Report]\ncount = 4\n", encoding="utf-8")
    proc = conveyor_run(
        workdir, "luigi_tasks_for_tests.All", "--root", str(workdir), "--date", "2024-02-03",
        "--workers", "2", "--labels", '["x"]', "--loud", "--executor", "subprocess",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "squares-20240203.txt").read_text() == "1! x\n4! x\n9! x\n16! x\n"
    day = datetime.date(2024, 2, 3)
    ids = graph_ids(workdir, date=day, labels=["x"], loud=True)
    top = lt.All(root=str(workdir), date=day, labels=["x"], loud=True)
    squares = lt.Squares(root=str(workdir), date=day, count=4, labels=["x"], loud=True)
    assert top.task_id in ids and squares.task_id in logged_task_ids(proc.stderr)
    assert top.task_id in logged_task_ids(proc.stderr)


def test_conveyor_run_takes_luigis_global_flag_form(workdir: Path) -> None:
    """``--Report-count 2`` (Luigi's ``--Family-param`` form) reaches a task made in
    ``requires()``, in the worker and in an attempt's process."""
    (workdir / "raw.txt").write_text("RAW\n", encoding="utf-8")
    proc = conveyor_run(
        workdir, "luigi_tasks_for_tests.All", "--root", str(workdir), "--Report-count", "2",
        "--executor", "subprocess",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "numbers-20240101.txt").read_text() == "1\n2\n"


def test_the_command_line_is_in_force_in_the_attempts_process(workdir: Path) -> None:
    """``--Numbers-count 2`` decides the count of a Numbers made by ``requires()`` without it,
    in the worker and again in the attempt's process, where ``run()`` calls ``requires()``."""
    proc = conveyor_run(
        workdir, "luigi_tasks_for_tests.Total", "--root", str(workdir), "--Numbers-count", "2",
        "--executor", "subprocess",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "numbers-20240101.txt").read_text() == "1\n2\n"
    assert (workdir / "total.txt").read_text() == "count=2\n"


def test_conveyor_run_of_a_missing_external_exits_4(workdir: Path) -> None:
    """No raw.txt: the run ends with the exit code for missing external data."""
    proc = conveyor_run(workdir, "luigi_tasks_for_tests.All", "--root", str(workdir))
    assert proc.returncode == MISSING_EXTERNAL_EXIT, proc.stderr[-3000:]


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--root", "r", "--date", "notadate"], "bad value 'notadate' for --date"),
        (["--root", "r", "--bogus", "1"], "unrecognized arguments: --bogus 1"),
        (["--root", "r", "--count", "many"], None),
        ([], "'root'"),
    ],
)
def test_conveyor_run_refuses_bad_words_in_one_line(
    words: list[str], said: str | None, workdir: Path
) -> None:
    """A value that does not parse, an unknown flag or a missing parameter: exit 2, one
    line naming it, no traceback."""
    family = "Numbers" if "--count" in words else "All"
    proc = conveyor_run(workdir, f"luigi_tasks_for_tests.{family}", *words)
    assert proc.returncode == USAGE_EXIT, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("conveyor: error: conveyor run: ")
    assert (said or "--count") in lines[0]


# --- Luigi's events ---------------------------------------------------------------------------


def luigi_events_of(root: Path, events: Path) -> Counter[str]:
    """The event lines of a run of ``Outcomes`` by Luigi's own worker (local scheduler), in a
    subprocess; outputs it made are removed afterwards."""
    code = (
        "import luigi, luigi_tasks_for_tests as lt, sys; "
        "luigi.build([lt.Outcomes(root=sys.argv[1])], local_scheduler=True, workers=1, "
        "log_level='ERROR')"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(root)], cwd=root, capture_output=True, timeout=100,
        check=True,
    )  # fmt: skip
    found = Counter(event_lines(events))
    events.unlink()
    for name in ("piece-0.txt", "piece-1.txt"):
        (root / name).unlink()
    return found


@pytest.mark.parametrize("executor", ["inline", "fork", "subprocess"])
def test_luigis_events_fire_as_under_luigi(executor: str, workdir: Path, events: Path) -> None:
    """Two succeed, one fails, one external is missing: the same events, with the same
    arguments, as Luigi's own worker fires for the same graph."""
    expected = luigi_events_of(workdir, events)
    result = conveyor.build(lt.Outcomes(root=str(workdir)), executor=executor, workers=1)
    assert not result.ok
    got = Counter(event_lines(events))
    kinds = Counter(line.split()[0] for line in got.elements())
    assert kinds == {
        "DEPENDENCY_DISCOVERED": 4, "DEPENDENCY_MISSING": 1, "START": 3, "SUCCESS": 2,
        "PROCESSING_TIME": 2, "FAILURE": 1,
    }  # fmt: skip
    assert got == expected
    fails = lt.Fails(root=str(workdir)).task_id
    assert f"FAILURE {fails} RuntimeError" in got


def test_a_complete_task_is_dependency_present(workdir: Path, events: Path) -> None:
    """A second run finds the pieces complete: DEPENDENCY_PRESENT for each, no START."""
    tasks = [lt.Piece(root=str(workdir), index=i) for i in range(2)]
    assert conveyor.build(tasks, executor="inline").ok
    events.unlink()
    assert conveyor.build(tasks, executor="inline").ok
    assert sorted(event_lines(events)) == sorted(f"DEPENDENCY_PRESENT {t.task_id}" for t in tasks)


def test_requires_that_raises_is_a_broken_task(workdir: Path, events: Path) -> None:
    """``requires()`` raising is BROKEN_TASK with the exception, as in Luigi's worker."""

    class Broken(luigi.Task):
        root = luigi.Parameter()

        def requires(self) -> Any:
            raise KeyError("no such thing")

        def output(self) -> luigi.LocalTarget:
            return luigi.LocalTarget(os.path.join(self.root, "broken.txt"))

    task = Broken(root=str(workdir))
    result = conveyor.build(task, executor="inline")
    assert not result.ok
    assert event_lines(events) == [f"BROKEN_TASK {task.task_id} KeyError"]


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_a_luigi_worker_timeout_kills_the_attempt(
    executor: str, workdir: Path, events: Path
) -> None:
    """``worker_timeout = 10``: the attempt is killed and reported timed out, and Luigi's
    TIMEOUT event fires with Luigi's message."""
    task = lt.Sleepy(root=str(workdir))
    recorder = RecordingPlugin()
    config = conveyor.load_config().with_overrides(executor=executor, workers=1)
    with conveyor.Worker(config=config, plugins=[recorder]) as worker:
        worker.add(task)  # type: ignore[arg-type]
        assert worker.run() is False
    [timed_out] = recorder.events("task_timed_out", task.task_id)
    assert timed_out.timeout == 10.0
    lines = event_lines(events)
    assert f"TIMEOUT {task.task_id} Task {task.task_id} timed out after 10 seconds" in "\n".join(
        lines
    )
    assert f"START {task.task_id}" in lines and not (workdir / "sleepy.txt").exists()
    result = conveyor.build(task, executor=executor)
    assert result.exit_code == 1 and result.states[task.task_id] == "FAILED"


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_a_process_killed_by_a_signal_is_luigis_process_failure(
    executor: str, workdir: Path, events: Path
) -> None:
    """An attempt's process killed by SIGKILL: PROCESS_FAILURE says "exit code -9", as
    Luigi's worker does (multiprocessing's exitcode)."""
    task = lt.Killed(root=str(workdir))
    result = conveyor.build(task, executor=executor)
    assert result.states[task.task_id] == "FAILED"
    expected = f"PROCESS_FAILURE {task.task_id} Task {task.task_id} died unexpectedly with "
    assert expected + f"exit code -{int(signal.SIGKILL)}" in event_lines(events)


# --- explanations and reporting ---------------------------------------------------------------


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_on_failure_text_is_the_explanation(executor: str, workdir: Path) -> None:
    """What Luigi's ``on_failure()`` returns is the failure explanation."""
    task = lt.Fails(root=str(workdir))
    result = conveyor.build(task, executor=executor)
    assert result.errors[task.task_id] == "explained by on_failure: fails on purpose"


@pytest.mark.parametrize("executor", ["thread", "subprocess"])
def test_status_message_progress_and_tracking_url_reach_conveyor(
    executor: str, workdir: Path
) -> None:
    """Luigi's ``set_status_message``, ``set_progress_percentage`` and ``set_tracking_url``
    called in ``run()`` reach conveyor's hooks."""
    task = lt.Chatty(root=str(workdir))
    recorder = RecordingPlugin()
    config = conveyor.load_config().with_overrides(executor=executor, workers=1)
    with conveyor.Worker(config=config, plugins=[recorder]) as worker:
        worker.add(task)  # type: ignore[arg-type]
        assert worker.run()
    assert [e.message for e in recorder.events("task_status_message")] == ["halfway there"]
    assert [e.percentage for e in recorder.events("task_progress")] == [50.0]
    assert [e.url for e in recorder.events("task_tracking_url")] == [
        "http://tracking.invalid/chatty"
    ]


# --- mixed graphs -----------------------------------------------------------------------------


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_luigi_and_conveyor_tasks_require_each_other(executor: str, workdir: Path) -> None:
    """conveyor task -> Luigi task -> conveyor task: porting one task at a time works."""
    top = lt.ConveyorOnLuigi(root=str(workdir))
    result = conveyor.build(top, executor=executor)
    assert result.ok, result.summary
    assert len(result.states) == 3
    text = (workdir / "conveyor-on-luigi.txt").read_text(encoding="utf-8")
    assert text == "conveyor got: luigi got: from conveyor\n"


# --- an assistant on a central scheduler ------------------------------------------------------


@pytest.fixture
def server(workdir: Path, luigi_environment: str) -> Iterator[SchedulerProcess]:
    """A real ``conveyor scheduler`` on a free loopback port."""
    config = workdir / "server.toml"
    config.write_text("[scheduler]\nretry_delay = 3600\n", encoding="utf-8")
    proc = SchedulerProcess(workdir, config, child_env(workdir, MARKER_VARIABLE, luigi_environment))
    proc.start()
    yield proc
    proc.kill()


def test_an_assistant_runs_luigi_tasks_another_worker_registered(
    workdir: Path, server: SchedulerProcess, luigi_environment: str
) -> None:
    """A worker registers a Luigi graph on ``conveyor scheduler``; a ``conveyor worker``
    assistant that never saw it rebuilds each task with the luigi loader and runs it."""
    top = lt.Squares(root=str(workdir), date=DAY, count=2, labels=["z"])
    config = conveyor.load_config().with_overrides(scheduler_url=server.url)
    registrar = conveyor.Worker(config=config, worker_id="registrar")
    try:
        assert registrar.add(top)  # type: ignore[arg-type]
        toml = workdir / "assistant.toml"
        toml.write_text('[worker]\nassistant = true\ntask_modules = ["luigi_tasks_for_tests"]\n')
        env = child_env(
            workdir, MARKER_VARIABLE, luigi_environment,
            CONVEYOR_WORKER__WAIT_INTERVAL="0.1", CONVEYOR_WORKER__WAIT_JITTER="0",
        )  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor", "worker", "--scheduler-url", server.url,
             "--config", str(toml), "--log-level", "warning"],
            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            squares = workdir / "squares-20240101.txt"
            wait_for(squares.exists, 60, "the assistant to run the Luigi graph")
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    finally:
        registrar.close()
    assert squares.read_text(encoding="utf-8") == "1 z\n4 z\n"
    assert (workdir / "numbers-20240101.txt").read_text(encoding="utf-8") == "1\n2\n"
    assert "Traceback" not in err, err
    assert proc.returncode == SIGTERM_EXIT and "ran successfully" in out, out + err


def test_an_assistant_refuses_a_task_parameter_naming_a_module_outside_task_modules(
    workdir: Path, server: SchedulerProcess, luigi_environment: str
) -> None:
    """A registered Luigi task whose ``TaskParameter`` names a class of a module that the
    assistant's ``[worker] task_modules`` does not list: the task fails with that reason, and
    the assistant never imports the module."""
    import luigi_outside_for_tests as outside

    top = lt.Wrapping(root=str(workdir), inner=outside.Outside)
    marker = workdir / "imported-by.txt"
    config = conveyor.load_config().with_overrides(scheduler_url=server.url)
    registrar = conveyor.Worker(config=config, worker_id="registrar")
    try:
        assert registrar.add(top)  # type: ignore[arg-type]
        toml = workdir / "assistant.toml"
        toml.write_text('[worker]\nassistant = true\ntask_modules = ["luigi_tasks_for_tests"]\n')
        env = child_env(
            workdir, MARKER_VARIABLE, luigi_environment,
            CONVEYOR_WORKER__WAIT_INTERVAL="0.1", CONVEYOR_WORKER__WAIT_JITTER="0",
            **{outside.MARKER_VARIABLE: str(marker)},
        )  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor", "worker", "--scheduler-url", server.url,
             "--config", str(toml), "--log-level", "warning"],
            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:

            def ended() -> dict[str, Any] | None:
                reply = server.request("GET", "/api/v1/tasks")
                for task in reply.json()["tasks"]:
                    if task["task_id"] == top.task_id and task["status"] in ("FAILED", "DONE"):
                        return dict(task)
                return None

            wait_for(lambda: ended() is not None, 60, "the assistant to end the task")
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    finally:
        registrar.close()
    said = json.dumps(ended())
    assert '"status": "FAILED"' in said, said
    assert "luigi_outside_for_tests" in said and "not in [worker] task_modules" in said, said
    assert "refused without importing it" in said, said
    assert not marker.exists(), marker.read_text(encoding="utf-8")
    assert not (workdir / "wrapping.txt").exists() and "Traceback" not in err, err


# --- the dask executor ------------------------------------------------------------------------


@pytest.mark.timeout(240)  # a LocalCluster starting and closing on a loaded 2-core machine
def test_a_luigi_graph_with_dynamic_dependencies_runs_on_dask(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, events: Path
) -> None:
    """The ``dask`` executor (conveyor-dask, a LocalCluster of its own): the attempts are
    rebuilt by the luigi loader on the Dask worker, dynamic dependencies included, and
    Luigi's attempt events fire there."""
    pytest.importorskip("conveyor_dask")
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)  # Dask's comms talk to loopback directly
    config = workdir / "worker.toml"
    config.write_text(
        '[worker]\nexecutor = "dask"\nworkers = 2\n[executors.dask]\nn_workers = 1\n',
        encoding="utf-8",
    )
    task = lt.Dynamic(root=str(workdir))
    result = conveyor.build(task, config=config)
    assert result.ok, result.summary
    expected = "piece 100\npiece 0\npiece 1\npiece 2\n"
    assert (workdir / "dynamic.txt").read_text(encoding="utf-8") == expected
    lines = event_lines(events)
    assert sum(line.startswith("SUCCESS ") for line in lines) == 5
    assert f"SUCCESS {task.task_id}" in lines


# --- review fixes -----------------------------------------------------------------------------

CMDLINE_MODULE = "luigi_cmdline_tasks_for_tests"


def one_line_usage_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line of a ``conveyor run`` refused with exit 2 (asserted: no traceback)."""
    assert proc.returncode == USAGE_EXIT, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("conveyor: error: conveyor run: "), lines[0]
    return lines[0]


def test_the_command_line_reaches_attempts_of_tasks_of_another_module(workdir: Path) -> None:
    """The root task's module (which the dependency's module does not import) is imported in
    the attempt's process before the command line is put in force there: the dependency
    loads, and ``--Numbers-count`` is in force for it."""
    proc = conveyor_run(
        workdir, f"{CMDLINE_MODULE}.Summary", "--root", str(workdir), "--Numbers-count", "2",
        "--executor", "subprocess", "--workers", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "numbers-20240101.txt").read_text(encoding="utf-8") == "1\n2\n"
    assert (workdir / "summary.txt").read_text(encoding="utf-8") == "sum=3\n"
    assert "not in force" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_the_command_line_is_in_force_below_a_conveyor_task(executor: str, workdir: Path) -> None:
    """Luigi -> conveyor -> Luigi: the conveyor task's attempt (rebuilt by conveyor's loader)
    makes Counted in its requires() under ``--Counted-n`` too."""
    proc = conveyor_run(
        workdir, f"{CMDLINE_MODULE}.MixedRoot", "--root", str(workdir), "--Counted-n", "5",
        "--executor", executor, "--workers", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "counted-5.txt").read_text(encoding="utf-8") == "1\n2\n3\n4\n5\n"
    assert (workdir / "mixed-root.txt").read_text(encoding="utf-8") == "sum=15\n"


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_the_command_line_does_not_reach_processes_a_task_starts(
    executor: str, workdir: Path
) -> None:
    """A process that a task's run() starts inherits the variable, but is no attempt of the
    run: the loader there ignores ``--Numbers-count``."""
    proc = conveyor_run(
        workdir, f"{CMDLINE_MODULE}.Nested", "--root", str(workdir), "--Numbers-count", "7",
        "--executor", executor, "--workers", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "nested.txt").read_text(encoding="utf-8") == "3\n"


@pytest.mark.parametrize("value", ['["Summary"]', "{", '{"module": "m", "words": ["Summary"]}'])
def test_an_unusable_command_line_variable_is_a_warning_not_a_failed_load(
    value: str, workdir: Path
) -> None:
    """A variable in another form: the loader warns and rebuilds the task from its explicit
    parameters all the same."""
    code = (
        "import sys; from conveyor_luigi import LuigiLoader; "
        "task = LuigiLoader().load('luigi_tasks_for_tests', 'Numbers', "
        "{'root': 'r', 'date': '2024-01-01', 'count': '5'}); "
        "print(task.luigi_task.count)"
    )
    env = {**os.environ, "CONVEYOR_LUIGI_COMMAND_LINE": value}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "5", proc.stderr
    assert "not in force in this process" in proc.stderr and "Traceback" not in proc.stderr


def test_a_root_module_the_attempt_cannot_import_is_a_warning(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """An attempt process of this run (a runner child of this process) whose variable names a
    module that does not import: a warning there, and the task runs from its parameters."""
    given = {"module": "no_such_module_here", "words": ["Numbers"], "pid": os.getpid()}
    monkeypatch.setenv("CONVEYOR_LUIGI_COMMAND_LINE", json.dumps(given))
    task = lt.Numbers(root=str(workdir), date=DAY, count=2)
    result = conveyor.build(task, executor="subprocess")
    assert result.ok, result.summary
    assert (workdir / "numbers-20240101.txt").read_text(encoding="utf-8") == "1\n2\n"
    err = capfd.readouterr().err
    assert "not in force in this process" in err and "no_such_module_here" in err, err


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_private_parameters_reach_the_attempt(executor: str, workdir: Path) -> None:
    """A PRIVATE parameter (left out by Luigi's to_str_params()) is among the task's params,
    so the attempt's process rebuilds the task with its value, not the default."""
    task = lt.Private(root=str(workdir), level=5)
    assert adapted(task).task_params["level"] == "5"
    result = conveyor.build(task, executor=executor)
    assert result.ok, result.summary
    assert (workdir / "private.txt").read_text(encoding="utf-8") == "level=5\n"


@pytest.mark.filterwarnings("ignore:Parameter .* is not of type:UserWarning")  # Luigi's, of None
def test_none_values_round_trip(workdir: Path) -> None:
    """A None whose default is None is left out (the rebuilt task takes None, not "None");
    an explicit None for a parameter with another default is Luigi's "None", rebuilt as None
    when the parameter cannot parse it; the task id is unchanged either way."""
    task = lt.Optionals(root=str(workdir), count=None)
    params = adapted(task).task_params
    assert "note" not in params and params["count"] == "None"
    again = LuigiLoader().load("luigi_tasks_for_tests", "Optionals", params)
    assert isinstance(again, LuigiTask) and again.task_id == task.task_id
    assert (again.luigi_task.note, again.luigi_task.count) == (None, None)
    result = conveyor.build(task, executor="subprocess")
    assert result.ok, result.summary
    text = (workdir / "optionals.txt").read_text(encoding="utf-8")
    assert text == "note=None count=None\n"


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_an_adapted_task_can_pickle_itself(executor: str, workdir: Path) -> None:
    """``run()`` pickling ``self`` inside ``no_unpicklable_properties()`` (luigi.contrib's
    spark and hadoop tasks do) works: no adapter in the task's __dict__; the forwarded
    attributes are None again after ``run()``, as under Luigi."""
    task = lt.Pickles(root=str(workdir))
    result = conveyor.build(task, executor=executor)
    assert result.ok, result.summary
    assert (workdir / "pickles.txt").read_text(encoding="utf-8") == f"{task.task_id}\n"
    if executor == "inline":  # run() ran on this very object
        assert task.scheduler_messages is None and task.set_status_message is None
        assert pickle.loads(pickle.dumps(task)).task_id == task.task_id


def test_an_externalized_copy_gets_its_own_adapter(workdir: Path) -> None:
    """``luigi.task.externalize(obj)`` copies the task: its adapter is its own (external),
    not the original's, even while the original's adapter is alive."""
    piece = lt.Piece(root=str(workdir), index=7)
    held = adapted(piece)
    copy = luigi.task.externalize(piece)
    assert adapted(copy).luigi_task is copy and adapted(copy).task_policy().external
    assert held.luigi_task is piece and not held.task_policy().external
    result = conveyor.build(lt.NeedsExternal(root=str(workdir)), executor="inline")
    assert result.exit_code == MISSING_EXTERNAL_EXIT, result.summary
    assert not (workdir / "piece-7.txt").exists()


def test_complete_may_answer_what_luigi_accepts(workdir: Path) -> None:
    """``complete()`` returning 0 / 1 (Luigi accepts anything ``in (True, False)``) is a
    bool for conveyor."""
    task = lt.Truthy(root=str(workdir))
    wrapped = adapted(task)
    assert wrapped.complete() is False
    result = conveyor.build(task, executor="inline")
    assert result.ok, result.summary
    assert wrapped.complete() is True and (workdir / "truthy.txt").exists()


def test_on_success_text_is_returned(workdir: Path) -> None:
    """The adapter's ``on_success()`` returns what Luigi's ``on_success()`` returns."""
    task = lt.Polite(root=str(workdir))
    wrapped = adapted(task)
    wrapped.run()
    assert wrapped.on_success() == f"made {workdir / 'polite.txt'}"
    assert wrapped.on_success() is None  # no run() since: nothing to explain


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_on_success_text_is_the_schedulers_explanation(workdir: Path, executor: str) -> None:
    """What Luigi's on_success() returns is the done task's explanation, as Luigi's expl:
    in the succeeded event and in the scheduler, from the attempt's process too."""
    task = lt.Polite(root=str(workdir))
    scheduler = conveyor.Scheduler()
    recorder = RecordingPlugin()
    with conveyor.Worker(
        scheduler, config=conveyor.Config(), executor=executor, plugins=[recorder]
    ) as worker:
        assert worker.add(task)
        assert worker.run()
    expected = f"made {workdir / 'polite.txt'}"
    [done] = recorder.events("conveyor_task_succeeded", task.task_id)
    assert done.explanation == expected
    assert scheduler.explanation(task.task_id) == expected


def test_a_broken_tasks_exception_is_forgotten_once_fired(workdir: Path, events: Path) -> None:
    """BROKEN_TASK gets the exception ``requires()`` raised; the adapter does not keep it
    afterwards (nor hand it out again)."""

    class BrokenAgain(luigi.Task):
        root = luigi.Parameter()

        def requires(self) -> Any:
            raise KeyError("no such thing")

        def output(self) -> luigi.LocalTarget:
            return luigi.LocalTarget(os.path.join(self.root, "broken-again.txt"))

    task = BrokenAgain(root=str(workdir))
    wrapped = adapted(task)
    assert not conveyor.build(task, executor="inline").ok
    assert event_lines(events) == [f"BROKEN_TASK {task.task_id} KeyError"]
    later = wrapped.broken_by("conveyor's explanation")
    assert type(later) is RuntimeError and str(later) == "conveyor's explanation"


def test_conveyor_run_picks_the_class_of_the_named_module(workdir: Path) -> None:
    """``Total`` is defined by two imported modules (ambiguous for Luigi's register): the
    module named on the command line decides, and its flags parse."""
    proc = conveyor_run(workdir, f"{CMDLINE_MODULE}.Total", "--root", str(workdir), "--word", "x")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "own-total.txt").read_text(encoding="utf-8") == "x\n"


def test_help_of_an_ambiguous_family_prints_help_and_runs_nothing(workdir: Path) -> None:
    """``--help`` for the ``Total`` two modules define: Luigi's flags of that class, then
    conveyor run's options, exit 0, and the task is not run."""
    proc = conveyor_run(workdir, f"{CMDLINE_MODULE}.Total", "--root", str(workdir), "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--word" in proc.stdout and "conveyor run's own options" in proc.stdout
    assert not (workdir / "own-total.txt").exists()


@pytest.mark.parametrize(
    ("task", "words", "said"),
    [
        (f"{CMDLINE_MODULE}.Crowded", [], "clashes with a flag of Luigi's command line"),
        ("luigi_tasks_for_tests.Nope", [], "Luigi tasks: All, Chatty, Daily, Dynamic, Fails"),
        (f"{CMDLINE_MODULE}.Guarded", ["--api-token", "hunter2"], "bad value *** for"),
    ],
)
def test_conveyor_run_refuses_more_mistakes_in_one_line(
    task: str, words: list[str], said: str, workdir: Path
) -> None:
    """A parameter clashing with Luigi's ``--workers``, an unknown family of a Luigi module
    (its Luigi tasks listed), a bad value of a secret-named parameter (hidden): exit 2, one
    line."""
    proc = conveyor_run(workdir, task, "--root", str(workdir), *words)
    line = one_line_usage_error(proc)
    assert said in line and "hunter2" not in proc.stderr


def test_the_command_line_parses_again_in_one_process(workdir: Path) -> None:
    """A good command line, a bad one, then another good one in the same process: a clear
    ParameterError for the bad one (no AssertionError), and the last good one in force."""
    code = """
from conveyor.errors import ParameterError
from conveyor_luigi import LuigiLoader
from luigi.cmdline_parser import CmdlineParser

loader = LuigiLoader()
good = ["--root", "a", "--date", "2024-01-01"]
loader.task_from_command_line("luigi_tasks_for_tests", "Numbers", good)
try:
    loader.task_from_command_line("luigi_tasks_for_tests", "Numbers", ["--root", "b", "--bogus"])
except ParameterError as exc:
    print("refused:", exc)
task = loader.task_from_command_line(
    "luigi_tasks_for_tests", "Numbers", ["--root", "c", "--date", "2024-01-02", "--count", "4"]
)
print(task.luigi_task.root, task.luigi_task.count, CmdlineParser.get_instance().known_args.root)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "refused: Numbers: unrecognized arguments: --bogus", "c 4 c",
    ]  # fmt: skip


def test_a_refused_command_line_is_not_left_in_force(workdir: Path) -> None:
    """A command line that parses but whose value does not (``--date soon``): refused, and the
    command line in force before it (none, then a good one) stays in force."""
    code = """
from conveyor.errors import ParameterError
from conveyor_luigi import LuigiLoader
from luigi.cmdline_parser import CmdlineParser

loader = LuigiLoader()
bad = ["--root", "b", "--date", "soon"]
for _ in range(2):
    try:
        loader.task_from_command_line("luigi_tasks_for_tests", "Numbers", bad)
    except ParameterError:
        found = CmdlineParser.get_instance()
        print("refused;", "none" if found is None else found.known_args.root)
    good = ["--root", "a", "--date", "2024-01-01"]
    loader.task_from_command_line("luigi_tasks_for_tests", "Numbers", good)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["refused; none", "refused; a"]


def test_a_disabled_task_stops_the_walk(workdir: Path) -> None:
    """``disabled = True``: unlike Luigi's worker, conveyor neither walks nor runs the
    disabled task's dependencies (a documented difference); the run ends with exit code 1."""

    class Off(luigi.Task):
        root = luigi.Parameter()
        disabled = True

        def requires(self) -> luigi.Task:
            return lt.Piece(root=self.root, index=3)

        def output(self) -> luigi.LocalTarget:
            return luigi.LocalTarget(os.path.join(self.root, "off.txt"))

    result = conveyor.build(Off(root=str(workdir)), executor="inline")
    assert result.exit_code == 1 and list(result.states.values()) == ["DISABLED"]
    assert not (workdir / "piece-3.txt").exists()
