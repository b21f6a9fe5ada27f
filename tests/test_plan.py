"""``conveyor plan`` and :func:`conveyor.plan` (issue 26, item 3): a dry run that says what a
run would do with each task of a graph, and why, calling ``complete()`` and ``requires()``
only.

Every task's ``run()`` here writes a ``RAN-<Family>`` marker and raises, so a plan that ran
anything leaves a marker behind. The command is always a real subprocess; the central
scheduler of the last tests is a real ``conveyor scheduler`` with a real ``conveyor run``
holding a task RUNNING.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.control.plan import Plan, Verdict
from conveyor.testing.processes import SchedulerProcess, child_env, kill_marked, wait_for

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

TASKS = '''
from pathlib import Path

import conveyor


class _Step(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/{type(self).__name__}.out")

    def run(self):
        Path(f"{self.root}/RAN-{type(self).__name__}").write_text("ran")
        raise RuntimeError("a plan must never call run()")


class Raw(conveyor.ExternalTask):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/raw.csv")


class Done(_Step):
    pass


class Clean(_Step):
    def requires(self):
        return Raw(root=self.root)


class Fetch(_Step):
    def run(self):
        Path(f"{self.root}/RAN-Fetch").write_text("ran")
        yield Done(root=self.root)


class Bad(_Step):
    def complete(self):
        raise ValueError("boom")


class Agg(_Step):
    def requires(self):
        return [Fetch(root=self.root), Done(root=self.root)]


class Pair(_Step):
    def output(self):
        return [conveyor.LocalTarget(f"{self.root}/pair.{end}") for end in "ab"]


class All(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        root = self.root
        return [Agg(root=root), Clean(root=root), Bad(root=root), Agg(root=root)]


class Group(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Done(root=self.root), Agg(root=self.root), Pair(root=self.root)]


class Stamped(_Step):
    """Complete only when its output is newer than Agg's: outputs exist, yet incomplete."""

    def requires(self):
        return Agg(root=self.root)

    def complete(self):
        return False


class Cranky(_Step):
    api_key = conveyor.Parameter(default="hunter2")

    def requires(self):
        raise KeyError("no such table")


class Off(_Step):
    disabled = True


class NeedsOff(_Step):
    def requires(self):
        return Off(root=self.root)
'''

EXPECTED_TREE = """\
All(root=data) [blocked]: upstream Clean(root=data) is blocked
  Agg(root=data) [will run]: output missing: data/Agg.out
    Fetch(root=data) [will run]: output missing: data/Fetch.out; may yield more dependencies \
when it runs
    Done(root=data) [complete]
  Clean(root=data) [blocked]: upstream Raw(root=data) is missing external data
    Raw(root=data) [missing external data]: external data missing: data/raw.csv
  Bad(root=data) [broken]: complete() raised ValueError: boom
  Agg(root=data) (see above)
7 tasks: 1 complete, 2 will run, 1 missing external data, 2 blocked, 1 broken; 2 would run"""


def _ran(root: Path) -> list[str]:
    """The markers of the run()s that were called under ``root``."""
    return sorted(p.name for p in root.glob("RAN-*"))


@pytest.fixture
def graph(tmp_path: Path, task_module: WriteModule) -> tuple[str, Path]:
    """The task module (its name) and the data directory ``tmp_path/data`` with Done's
    output in it (every other output missing)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "Done.out").write_text("done")
    return task_module(TASKS), data


def _load(module: str) -> Any:
    return importlib.import_module(module)


# --- the command ---------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_cli_tree_json_and_exit_codes(
    graph: tuple[str, Path], run_cli: RunCli, tmp_path: Path
) -> None:
    """The tree names each task's verdict and reason, --json says the same as data, and the
    exit code is 1 while something would run, 0 once every output exists; nothing runs."""
    module, data = graph
    before = sorted(p.name for p in data.iterdir())
    tree = run_cli("plan", f"{module}.All", "--root", "data", cwd=tmp_path)
    assert (tree.returncode, tree.stderr) == (1, "")
    assert tree.stdout.rstrip("\n") == EXPECTED_TREE

    as_json = run_cli("plan", f"{module}.All", "--root", "data", "--json", cwd=tmp_path)
    assert as_json.returncode == 1, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert list(answer) == ["root", "nothing_to_do", "will_run", "counts", "scheduler", "tasks"]
    tasks = {t["family"]: t for t in answer["tasks"]}
    assert [t["family"] for t in answer["tasks"]] == [
        "Fetch", "Done", "Agg", "Raw", "Clean", "Bad", "All",
    ]  # fmt: skip
    assert answer["root"] == tasks["All"]["task_id"]
    assert answer["will_run"] == [tasks["Fetch"]["task_id"], tasks["Agg"]["task_id"]]
    assert answer["nothing_to_do"] is False and answer["scheduler"] is None
    assert tasks["Agg"] == {
        "task_id": tasks["Agg"]["task_id"],
        "family": "Agg",
        "module": module,
        "params": {"root": "data"},
        "verdict": "will run",
        "reason": "output missing: data/Agg.out",
        "deps": [tasks["Fetch"]["task_id"], tasks["Done"]["task_id"]],
    }
    assert tasks["Bad"]["verdict"] == "broken"
    assert tasks["Raw"]["reason"] == "external data missing: data/raw.csv"

    # no run() was called and no output made
    assert _ran(data) == []
    assert sorted(p.name for p in data.iterdir()) == before

    # every output there: Agg is complete, so nothing under it is even looked at
    for name in ("Agg.out", "Fetch.out", "raw.csv"):
        (data / name).write_text("x")
    done = run_cli("plan", f"{module}.Agg", "--root", "data", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "Agg(root=data) [complete]\n1 task: 1 complete; nothing to do\n"


@pytest.mark.timeout(120)
def test_cli_bad_input_is_one_line_exit_2(
    graph: tuple[str, Path], run_cli: RunCli, tmp_path: Path
) -> None:
    """An unknown task, an unknown parameter and a clash of options: exit 2, one line."""
    module, _ = graph
    for args, expected in [
        ((f"{module}.Nope", "--root", "data"), "has no task family 'Nope'"),
        ((f"{module}.All", "--rooot", "data"), "unknown argument '--rooot' for task All"),
        (
            (f"{module}.All", "--root", "d", "--local-scheduler", "--scheduler-url", "http://x"),
            "--scheduler-url and --local-scheduler exclude each other",
        ),
    ]:
        result = run_cli("plan", *args, cwd=tmp_path)
        assert result.returncode == 2, result
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("conveyor: error: "), result.stderr
        assert expected in lines[0]


@pytest.mark.timeout(120)
def test_cli_unreachable_scheduler_exit_3(
    graph: tuple[str, Path], run_cli: RunCli, tmp_path: Path
) -> None:
    """A central scheduler that does not answer: one error line, exit 3 (as conveyor run's
    scheduling error), after the configured retries."""
    module, data = graph
    config = tmp_path / "quick.toml"
    config.write_text("[scheduler]\nrpc_retries = 1\nrpc_give_up_after = 0\n", encoding="utf-8")
    from conveyor.testing.processes import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = run_cli(
        "plan", f"{module}.Agg", "--root", "data", "--scheduler-url", url, "--config", str(config),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor: error: "), result.stderr
    assert url in lines[0]
    assert _ran(data) == []


@pytest.mark.timeout(120)
def test_cli_plans_a_luigi_task(run_cli: RunCli, tmp_path: Path, task_module: WriteModule) -> None:
    """A luigi.Task, through the luigi plugin's loader, plans like a conveyor task."""
    pytest.importorskip("luigi")
    pytest.importorskip("conveyor_luigi")
    module = task_module(
        """
        import luigi

        class Up(luigi.Task):
            root = luigi.Parameter()
            def output(self):
                return luigi.LocalTarget(f"{self.root}/up.txt")
            def run(self):
                open(f"{self.root}/RAN-Up", "w").close()

        class Down(luigi.Task):
            root = luigi.Parameter()
            def requires(self):
                return Up(root=self.root)
            def output(self):
                return luigi.LocalTarget(f"{self.root}/down.txt")
            def run(self):
                open(f"{self.root}/RAN-Down", "w").close()
        """
    )
    (tmp_path / "d").mkdir()
    result = run_cli("plan", f"{module}.Down", "--root", "d", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[:2] == [
        "Down(root=d) [will run]: output missing: d/down.txt",
        "  Up(root=d) [will run]: output missing: d/up.txt",
    ]
    (tmp_path / "d" / "up.txt").write_text("x")
    result = run_cli("plan", f"{module}.Down", "--root", "d", "--json", cwd=tmp_path)
    verdicts = {t["family"]: t["verdict"] for t in json.loads(result.stdout)["tasks"]}
    assert verdicts == {"Down": "will run", "Up": "complete"}
    assert _ran(tmp_path / "d") == []


# --- the Python API ------------------------------------------------------------------------


def test_python_plan_same_graph(graph: tuple[str, Path]) -> None:
    """conveyor.plan() answers what the command prints: verdicts, reasons, order, no run."""
    module, data = graph
    tasks = _load(module)
    planned = conveyor.plan(tasks.All(root=str(data)), config=conveyor.Config())
    assert isinstance(planned, Plan)
    got = [(t.family, str(t.verdict), t.reason) for t in planned.tasks]
    assert got == [
        ("Fetch", "will run", f"output missing: {data}/Fetch.out; may yield more dependencies "
         "when it runs"),
        ("Done", "complete", ""),
        ("Agg", "will run", f"output missing: {data}/Agg.out"),
        ("Raw", "missing external data", f"external data missing: {data}/raw.csv"),
        ("Clean", "blocked", f"upstream Raw(root={data}) is missing external data"),
        ("Bad", "broken", "complete() raised ValueError: boom"),
        ("All", "blocked", f"upstream Clean(root={data}) is blocked"),
    ]  # fmt: skip
    assert [t.family for t in planned.will_run] == ["Fetch", "Agg"]
    assert [t.family for t in planned.broken] == ["Bad"]
    assert (planned.nothing_to_do, planned.exit_code) == (False, 1)
    assert planned.root == tasks.All(root=str(data)).task_id
    assert _ran(data) == []


def test_python_plan_parallel_checks_agree(graph: tuple[str, Path]) -> None:
    """Under [worker] parallel_scheduling the walk's checks run on threads; same plan."""
    module, data = graph
    tasks = _load(module)
    sequential = conveyor.plan(tasks.All(root=str(data)), config=conveyor.Config())
    config = conveyor.Config().with_section("worker", parallel_scheduling=True, workers=4)
    parallel = conveyor.plan(tasks.All(root=str(data)), config=config)
    assert parallel.to_json() == sequential.to_json()


def test_upstream_will_run_and_output_counts(graph: tuple[str, Path]) -> None:
    """A wrapper (no outputs) and a task whose outputs exist but whose complete() says no
    would run because of a dependency that will run; several missing outputs are counted.
    A task found complete is not looked into, as a run does not (Luigi's rule)."""
    module, data = graph
    tasks = _load(module)
    group = conveyor.plan(tasks.Group(root=str(data)), config=conveyor.Config())
    assert group[group.root].reason == f"upstream Agg(root={data}) will run (+1 more)"
    assert group[tasks.Pair(root=str(data)).task_id].reason == (
        f"output missing: {data}/pair.a (+1 more)"
    )
    (data / "Stamped.out").write_text("old")
    stamped = conveyor.plan(tasks.Stamped(root=str(data)), config=conveyor.Config())
    assert stamped[stamped.root].verdict is Verdict.WILL_RUN
    assert stamped[stamped.root].reason == f"upstream Agg(root={data}) will run"
    # Agg complete: Stamped has nothing upstream that would run, and Fetch is not looked at
    (data / "Agg.out").write_text("x")
    alone = conveyor.plan(tasks.Stamped(root=str(data)), config=conveyor.Config())
    assert [(t.family, t.verdict) for t in alone.tasks] == [
        ("Agg", Verdict.COMPLETE),
        ("Stamped", Verdict.WILL_RUN),
    ]
    assert alone[alone.root].reason == "not complete (complete() returned False)"
    assert _ran(data) == []


def test_broken_requires_disabled_and_secrets(graph: tuple[str, Path]) -> None:
    """A requires() that raises is broken (secret-named parameter values hidden in the plan);
    a disabled task never runs and blocks what needs it."""
    module, data = graph
    tasks = _load(module)
    cranky = conveyor.plan(tasks.Cranky(root=str(data)), config=conveyor.Config())
    (only,) = cranky.tasks
    assert only.verdict is Verdict.BROKEN
    assert only.reason == "requires() raised KeyError: 'no such table'"
    assert only.params == {"root": str(data), "api_key": "***"}
    assert "hunter2" not in json.dumps(cranky.to_json()) + cranky.tree()
    assert cranky.exit_code == 0  # (nothing would run: SPEC §14 exit codes)

    off = conveyor.plan(tasks.NeedsOff(root=str(data)), config=conveyor.Config())
    assert [(t.family, t.verdict) for t in off.tasks] == [
        ("Off", Verdict.DISABLED),
        ("NeedsOff", Verdict.BLOCKED),
    ]
    assert off[off.root].reason == f"upstream Off(root={data}) is disabled"
    assert off.will_run == ()
    assert off.exit_code == 0


def test_complete_root_is_nothing_to_do(graph: tuple[str, Path]) -> None:
    """A complete root: one task, nothing to do, exit code 0."""
    module, data = graph
    planned = conveyor.plan(_load(module).Done(root=str(data)), config=conveyor.Config())
    assert [t.verdict for t in planned.tasks] == [Verdict.COMPLETE]
    assert (planned.nothing_to_do, planned.exit_code, planned.will_run) == (True, 0, ())
    assert planned.summary() == "1 task: 1 complete; nothing to do"


def test_plan_refuses_what_is_not_a_task() -> None:
    """Something that is not a task: TypeError naming what was given."""
    with pytest.raises(TypeError, match="got int"):
        conveyor.plan(3, config=conveyor.Config())


# --- with a central scheduler ---------------------------------------------------------------

HELD = """
import time
from pathlib import Path

import conveyor


class Slow(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/slow.out")

    def run(self):
        root = Path(self.root)
        (root / "slow.started").write_text("yes")
        deadline = time.monotonic() + 100
        while (root / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.output().open("w").close()


class Top(conveyor.Task):
    root = conveyor.Parameter()

    def requires(self):
        return Slow(root=self.root)

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/top.out")

    def run(self):
        self.output().open("w").close()
"""

MARKER = "PLANTEST_MARKER"


@pytest.fixture
def central(tmp_path: Path) -> Iterator[SchedulerProcess]:
    """A real ``conveyor scheduler``; it and every process marked like it are killed after."""
    marker = "plan" + uuid.uuid4().hex[:10]
    config = tmp_path / "server.toml"
    config.write_text("[scheduler]\nworker_disconnect_delay = 60\n", encoding="utf-8")
    env = child_env(tmp_path, MARKER, marker)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    server = SchedulerProcess(tmp_path, config, env)
    try:
        server.start(timeout=60)
        yield server
    finally:
        kill_marked(MARKER, marker)


@pytest.mark.timeout(180)
def test_running_elsewhere_with_central_scheduler(
    central: SchedulerProcess, tmp_path: Path
) -> None:
    """A task another worker runs now is "running elsewhere (on worker W)", and the one that
    needs it is still said to run: the scheduler is asked, once, and nothing runs here."""
    module = f"plantasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(HELD, encoding="utf-8")
    data = tmp_path / "data"
    data.mkdir()
    (data / "hold").write_text("hold")
    env = central.env
    cli = [sys.executable, "-m", "conveyor"]
    with (tmp_path / "runner.err").open("wb") as err:
        runner = subprocess.Popen(
            [*cli, "run", f"{module}.Slow", "--root", str(data), "--scheduler-url", central.url],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        wait_for(lambda: (data / "slow.started").exists() or runner.poll() is not None, 90,
                 "Slow to start on the other worker")  # fmt: skip
        assert runner.poll() is None, (tmp_path / "runner.err").read_text()
        result = subprocess.run(
            [*cli, "plan", f"{module}.Top", "--root", str(data), "--json",
             "--scheduler-url", central.url],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert result.returncode == 1, result.stderr
        answer = json.loads(result.stdout)
        tasks = {t["family"]: t for t in answer["tasks"]}
        assert answer["scheduler"] == central.url
        assert tasks["Slow"]["verdict"] == "running elsewhere"
        assert tasks["Slow"]["reason"].startswith("running on worker ")
        assert len(tasks["Slow"]["reason"]) > len("running on worker ")
        assert tasks["Top"]["verdict"] == "will run"
        assert tasks["Top"]["reason"] == f"output missing: {data}/top.out"
        assert answer["will_run"] == [tasks["Top"]["task_id"]]
        # the same with --local-scheduler: no scheduler asked, Slow simply would run
        local = subprocess.run(
            [*cli, "plan", f"{module}.Top", "--root", str(data), "--json", "--local-scheduler"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        slow = {t["family"]: t for t in json.loads(local.stdout)["tasks"]}["Slow"]
        assert slow["verdict"] == "will run"
        assert not (data / "top.out").exists()
    finally:
        (data / "hold").unlink(missing_ok=True)
        try:
            runner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait(timeout=10)


@pytest.mark.timeout(180)
def test_a_task_cancelled_on_the_central_scheduler_is_not_said_to_run(
    central: SchedulerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task the scheduler holds DISABLED (cancelled) would not run, nor would what needs
    it: the plan says so with the scheduler's reason, and, nothing being left to run, exits 0
    (as a `conveyor run` would run nothing)."""
    module = f"plantasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(HELD, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks = importlib.import_module(module)
    data = tmp_path / "data"
    data.mkdir()
    slow = tasks.Slow(root=str(data))
    with conveyor.Client(central.url) as client:
        client.submit(slow, by="planner")
        assert client.cancel(slow.task_id) == (slow.task_id,)
    result = subprocess.run(
        [sys.executable, "-m", "conveyor", "plan", f"{module}.Top", "--root", str(data),
         "--json", "--scheduler-url", central.url],
        cwd=tmp_path, env=central.env, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    verdicts = {t["family"]: (t["verdict"], t["reason"]) for t in answer["tasks"]}
    assert verdicts["Slow"] == ("disabled", "DISABLED on the scheduler: cancelled")
    assert verdicts["Top"][0] == "blocked"
    assert answer["will_run"] == [] and answer["nothing_to_do"] is True
