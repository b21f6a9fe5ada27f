"""Bad input from users, task authors and plugin authors: clear errors, right exit codes.

Every case goes through the real CLI (``python -m conveyor run`` in a subprocess) and, where
the API has an equivalent, through ``conveyor.build()`` / ``conveyor.Worker``. Scheduling errors
(exit 3) must leave independent branches of the graph running; usage and configuration errors
(exit 2) must be one clear ``conveyor: error:`` message without a traceback.
"""

from __future__ import annotations

import importlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import conveyor
from conveyor.testing import RecordingPlugin, hook_names

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

TASKS = '''
import threading

import conveyor

RELEASE = threading.Event()


class Leaf(conveyor.Task):
    """An independent branch: writes its output file."""

    out = conveyor.Parameter()
    size = conveyor.IntParameter(default=1)

    def output(self):
        return conveyor.LocalTarget(self.out)

    def run(self):
        with self.output().open("w") as f:
            f.write("leaf")


class Raises(conveyor.Task):
    def complete(self):
        raise ValueError("disk on fire")


class Returns(conveyor.Task):
    value = conveyor.Parameter()

    def complete(self):
        return {"yes": "yes", "none": None, "one": 1}[self.value]


class Hangs(conveyor.Task):
    def complete(self):
        RELEASE.wait()
        return True


class BadRequires(conveyor.Task):
    kind = conveyor.Parameter()

    def requires(self):
        if self.kind == "raise":
            raise OSError("no inventory")
        garbage = {
            "str": "hello",
            "int": 5,
            "target": conveyor.LocalTarget("some-file.txt"),
            "none": [None],
        }
        return garbage[self.kind]

    def output(self):
        return conveyor.LocalTarget("never-made-" + self.kind)


class A(conveyor.Task):
    def requires(self):
        return B()

    def output(self):
        return conveyor.LocalTarget("never-made-a")


class B(conveyor.Task):
    def requires(self):
        return A()

    def output(self):
        return conveyor.LocalTarget("never-made-b")


def bad(case):
    return {
        "complete-raises": lambda: Raises(),
        "complete-str": lambda: Returns(value="yes"),
        "complete-none": lambda: Returns(value="none"),
        "complete-int": lambda: Returns(value="one"),
        "requires-str": lambda: BadRequires(kind="str"),
        "requires-int": lambda: BadRequires(kind="int"),
        "requires-target": lambda: BadRequires(kind="target"),
        "requires-none": lambda: BadRequires(kind="none"),
        "requires-raises": lambda: BadRequires(kind="raise"),
        "cycle": lambda: A(),
        "hang": lambda: Hangs(),
    }[case]()


class Top(conveyor.Task):
    """Requires one bad task (chosen by ``case``) and an independent Leaf."""

    case = conveyor.Parameter()
    out = conveyor.Parameter()

    def requires(self):
        return [bad(self.case), Leaf(out=self.out)]

    def output(self):
        return conveyor.LocalTarget(self.out + ".top")
'''

# case -> (culprit family, fragments the explanation must contain)
SCHEDULING_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "complete-raises": ("Raises", ("Raises", "complete()", "ValueError", "disk on fire")),
    "complete-str": ("Returns", ("Returns", "complete()", "'yes'", "expected", "bool")),
    "complete-none": ("Returns", ("Returns", "complete()", "None", "expected", "bool")),
    "complete-int": ("Returns", ("Returns", "complete()", "returned 1", "expected", "bool")),
    "requires-str": ("BadRequires", ("BadRequires", "requires()", "'hello'", "expected", "Task")),
    "requires-int": ("BadRequires", ("BadRequires", "requires()", "returned 5", "expected")),
    "requires-target": ("BadRequires", ("BadRequires", "requires()", "LocalTarget", "expected")),
    "requires-none": ("BadRequires", ("BadRequires", "requires()", "None", "expected")),
    "requires-raises": ("BadRequires", ("BadRequires", "requires()", "OSError", "no inventory")),
    "cycle": ("A", ("A -> B -> A",)),
}


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


def _assert_real_suggestion(message: str) -> None:
    """If ``message`` suggests a hook ("did you mean 'x'?"), 'x' must be a hook that exists."""
    if "did you mean" in message:
        suggestion = message.split("did you mean", 1)[1].split("'")[1]
        assert suggestion in hook_names(), message


def _error_line(stderr: str) -> str:
    """The one ``conveyor: error:`` line of a usage/configuration error."""
    lines = [line for line in stderr.splitlines() if line.startswith("conveyor: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def tasks(task_module: WriteModule) -> str:
    """The module holding the bad tasks above, written into tmp_path."""
    return task_module(TASKS)


@pytest.fixture
def tasks_mod(tasks: str) -> ModuleType:
    """The bad-task module imported in this process."""
    return importlib.import_module(tasks)


def write_toml(directory: Path, text: str, name: str = "worker.toml") -> Path:
    """Write a worker.toml (or another file) into ``directory``."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# --- scheduling errors: complete() / requires() / cycles ----------------------------------------


@pytest.mark.parametrize("case", list(SCHEDULING_CASES))
def test_cli_scheduling_error_exits_3_and_other_branch_runs(
    case: str, tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A broken complete()/requires() or a cycle exits 3, names the culprit, and Leaf still runs."""
    leaf = tmp_path / "leaf.txt"
    proc = run_cli("run", f"{tasks}.Top", "--case", case, "--out", str(leaf), cwd=tmp_path)
    family, fragments = SCHEDULING_CASES[case]
    output = proc.stdout + proc.stderr
    assert proc.returncode == 3, output
    for fragment in fragments:
        assert fragment in output, (fragment, output)
    assert family in proc.stdout  # the summary lists the culprit
    assert leaf.read_text() == "leaf"
    assert not (tmp_path / "leaf.txt.top").exists()


@pytest.mark.parametrize("case", list(SCHEDULING_CASES))
def test_build_scheduling_error_result(case: str, tasks_mod: ModuleType, tmp_path: Path) -> None:
    """build() reports the culprit UNKNOWN with an explanation, exit code 3, Leaf DONE."""
    leaf = tmp_path / "leaf.txt"
    top = tasks_mod.Top(case=case, out=str(leaf))
    culprit = tasks_mod.bad(case)
    result = conveyor.build(top, config=conveyor.Config())
    family, fragments = SCHEDULING_CASES[case]
    assert culprit.task_family == family
    assert result.exit_code == 3
    assert not result.ok
    assert result.states[culprit.task_id] == "UNKNOWN"
    for fragment in fragments:
        assert fragment in result.errors[culprit.task_id], result.errors
    assert result.states[tasks_mod.Leaf(out=str(leaf)).task_id] == "DONE"
    assert result.states[top.task_id] == "PENDING"
    assert leaf.read_text() == "leaf"


@pytest.mark.parametrize(
    ("case", "phase"),
    [
        ("complete-raises", "complete"),
        ("complete-str", "complete"),
        ("complete-none", "complete"),
        ("complete-int", "complete"),
        ("requires-str", "requires"),
        ("requires-int", "requires"),
        ("requires-target", "requires"),
        ("requires-none", "requires"),
        ("requires-raises", "requires"),
    ],
)
def test_worker_add_false_and_broken_hook(
    case: str, phase: str, tasks_mod: ModuleType, tmp_path: Path
) -> None:
    """Worker.add() returns False and conveyor_task_broken fires once with the right phase."""
    recorder = RecordingPlugin()
    culprit = tasks_mod.bad(case)
    top = tasks_mod.Top(case=case, out=str(tmp_path / "leaf.txt"))
    with conveyor.Worker(config=conveyor.Config(), plugins=[recorder]) as worker:
        assert worker.add(top) is False
        worker.run()
    broken = recorder.events("task_broken")
    assert [event.task_id for event in broken] == [culprit.task_id]
    assert broken[0].phase == phase
    assert culprit.task_family in broken[0].error
    assert (tmp_path / "leaf.txt").exists()


def test_cycle_raises_nothing_and_names_the_path_in_every_member(
    tasks_mod: ModuleType, tmp_path: Path
) -> None:
    """Both members of the cycle A -> B -> A are UNKNOWN with the cycle's path as explanation."""
    result = conveyor.build(tasks_mod.A(), config=conveyor.Config())
    assert result.exit_code == 3
    for member in (tasks_mod.A(), tasks_mod.B()):
        assert result.states[member.task_id] == "UNKNOWN"
        assert "A -> B -> A" in result.errors[member.task_id]


def test_cli_hanging_complete_times_out_and_process_exits(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A complete() that never returns is reported after complete_check_timeout; the CLI exits."""
    write_toml(tmp_path, "[worker]\nparallel_scheduling = true\ncomplete_check_timeout = 1.5\n")
    leaf = tmp_path / "leaf.txt"
    proc = run_cli(
        "run", f"{tasks}.Top", "--case", "hang", "--out", str(leaf), cwd=tmp_path, timeout=30
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 3, output
    assert "Hangs" in proc.stdout
    assert "Hangs().complete()" in proc.stderr
    assert "1.5" in proc.stderr
    assert leaf.read_text() == "leaf"


def test_build_hanging_complete_times_out(tasks_mod: ModuleType, tmp_path: Path) -> None:
    """build() reports a hung complete() as UNKNOWN naming the timeout, and Leaf still runs."""
    leaf = tmp_path / "leaf.txt"
    try:
        result = conveyor.build(
            tasks_mod.Top(case="hang", out=str(leaf)),
            config=conveyor.Config(),
            parallel_scheduling=True,
            complete_check_timeout=1.0,
        )
    finally:
        tasks_mod.RELEASE.set()  # let the abandoned checker thread finish
    hung = tasks_mod.Hangs().task_id
    assert result.exit_code == 3
    assert result.states[hung] == "UNKNOWN"
    assert "complete_check_timeout" in result.errors[hung]
    assert leaf.read_text() == "leaf"


# --- command-line usage errors ------------------------------------------------------------------


def test_unknown_task_parameter_exits_2_naming_it_and_the_valid_ones(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """An unknown task flag exits 2 naming the flag and the parameters the task does take."""
    leaf = tmp_path / "leaf.txt"
    proc = run_cli("run", f"{tasks}.Leaf", "--out", str(leaf), "--colour", "red", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    assert "--colour" in line
    assert "--size" in line or "size" in line.split("--colour", 1)[1], line
    assert not leaf.exists()


def test_unparsable_parameter_value_exits_2_naming_parameter_and_expectation(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """An IntParameter given 'abc' exits 2 naming the task, the parameter, value and 'integer'."""
    leaf = tmp_path / "leaf.txt"
    proc = run_cli("run", f"{tasks}.Leaf", "--out", str(leaf), "--size", "abc", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    for fragment in ("Leaf", "size", "abc", "integer"):
        assert fragment in line, line
    assert not leaf.exists()


def test_missing_required_parameter_exits_2(tasks: str, run_cli: RunCli, tmp_path: Path) -> None:
    """Leaving out a required parameter exits 2 naming the task and the parameter."""
    proc = run_cli("run", f"{tasks}.Leaf", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    assert "Leaf" in line
    assert "out" in line


def test_missing_task_module_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    """A TASK whose module does not exist exits 2 naming the module."""
    proc = run_cli("run", "no_such_module_xyz.Family", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    assert "no_such_module_xyz" in _error_line(proc.stderr)


def test_task_module_raising_at_import_exits_2(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """A task module that raises while being imported exits 2 with the module and its error."""
    module = task_module('raise RuntimeError("broken at import time")\n')
    proc = run_cli("run", f"{module}.Anything", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    assert module in line
    assert "RuntimeError" in line
    assert "broken at import time" in line


def test_unknown_task_family_exits_2_listing_the_known_ones(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A family the module does not define exits 2 and lists the families it does define."""
    proc = run_cli("run", f"{tasks}.Nope", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    assert "Nope" in line
    assert "Leaf" in line


# --- configuration errors -----------------------------------------------------------------------


def test_toml_syntax_error_names_file_line_and_column(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A discovered worker.toml with a syntax error exits 2 with worker.toml:line:column."""
    write_toml(tmp_path, "[worker]\nworkers = \n")
    leaf = tmp_path / "leaf.txt"
    proc = run_cli("run", f"{tasks}.Leaf", "--out", str(leaf), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    assert proc.stderr.strip().splitlines() == [_error_line(proc.stderr)]
    assert "worker.toml:2:11" in proc.stderr
    assert not leaf.exists()


def test_unknown_config_key_suggests_the_closest(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """An unknown [worker] key exits 2 naming section and key and suggesting 'workers'."""
    config = write_toml(tmp_path, "[worker]\nworkerz = 2\n", name="custom.toml")
    leaf = tmp_path / "leaf.txt"
    proc = run_cli(
        "run", f"{tasks}.Leaf", "--out", str(leaf), "--config", str(config), cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    assert proc.stderr.strip().splitlines() == [_error_line(proc.stderr)]
    assert "custom.toml" in proc.stderr
    assert "worker.workerz" in proc.stderr
    assert "'workers'" in proc.stderr
    assert not leaf.exists()


@pytest.mark.parametrize("where", ["file", "flag"])
def test_unknown_executor_exits_2_listing_installed(
    where: str, tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """executor = "nope" (file or --executor) exits 2 and lists the installed executors."""
    leaf = tmp_path / "leaf.txt"
    args = ["run", f"{tasks}.Leaf", "--out", str(leaf)]
    if where == "file":
        write_toml(tmp_path, '[worker]\nexecutor = "nope"\n')
    else:
        args += ["--executor", "nope"]
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    assert "'nope'" in line
    assert "inline" in line
    assert "thread" in line
    assert not leaf.exists()


def test_build_unknown_executor_raises_backend_not_found(
    tasks_mod: ModuleType, tmp_path: Path
) -> None:
    """build(executor="nope") raises BackendNotFound carrying the installed names."""
    leaf = tmp_path / "leaf.txt"
    with pytest.raises(conveyor.BackendNotFound) as info:
        conveyor.build(tasks_mod.Leaf(out=str(leaf)), config=conveyor.Config(), executor="nope")
    assert isinstance(info.value, conveyor.PluginError)
    assert {"inline", "thread"} <= set(info.value.installed)
    assert "nope" in str(info.value)
    assert not leaf.exists()


# --- plugins ------------------------------------------------------------------------------------


def test_plugin_failing_to_import_is_reported_and_skipped(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """With the fragile plugin broken the run succeeds; stderr names plugin and distribution."""
    leaf = tmp_path / "leaf.txt"
    proc = run_cli(
        "run",
        f"{tasks}.Leaf",
        "--out",
        str(leaf),
        cwd=tmp_path,
        env={"CONVEYOR_BREAK_FRAGILE_PLUGIN": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert leaf.read_text() == "leaf"
    reports = [line for line in proc.stderr.splitlines() if "fragile" in line]
    assert reports, proc.stderr
    assert any("conveyor-recorder-plugin" in line for line in reports), reports
    assert any("told to break" in line for line in reports), reports


def test_required_plugin_failing_to_import_exits_2(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """[plugins] required = ["fragile"] with the fragile plugin broken exits 2 naming it."""
    write_toml(tmp_path, '[plugins]\nrequired = ["fragile"]\n')
    leaf = tmp_path / "leaf.txt"
    proc = run_cli(
        "run",
        f"{tasks}.Leaf",
        "--out",
        str(leaf),
        cwd=tmp_path,
        env={"CONVEYOR_BREAK_FRAGILE_PLUGIN": "1"},
    )
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    assert "'fragile'" in line
    assert "told to break" in line
    assert not leaf.exists()


UNKNOWN_HOOK_PLUGIN = """
import conveyor


@conveyor.hookimpl
def conveyor_task_exploded(event):
    pass
"""


def test_local_plugin_with_unknown_hook_exits_2(
    tasks: str, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """A [plugins] local module implementing a hook that does not exist exits 2 naming both."""
    plugin = task_module(UNKNOWN_HOOK_PLUGIN)
    write_toml(tmp_path, f'[plugins]\nlocal = ["{plugin}"]\n')
    leaf = tmp_path / "leaf.txt"
    proc = run_cli("run", f"{tasks}.Leaf", "--out", str(leaf), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    _no_traceback(proc.stderr)
    line = _error_line(proc.stderr)
    assert plugin in line
    assert "conveyor_task_exploded" in line
    _assert_real_suggestion(line)
    assert not leaf.exists()


def test_worker_plugin_with_unknown_hook_raises_plugin_error() -> None:
    """Worker(plugins=[obj]) with an unknown hook raises PluginError naming plugin and hook."""

    class Exploder:
        @conveyor.hookimpl
        def conveyor_task_exploded(self, event: object) -> None:
            """Not a conveyor hook."""

    with pytest.raises(conveyor.PluginError) as info:
        conveyor.Worker(config=conveyor.Config(), plugins=[Exploder()])
    assert info.value.hook == "conveyor_task_exploded"
    assert "Exploder" in info.value.plugin
    assert "conveyor_task_exploded" in str(info.value)
    assert "Exploder" in str(info.value)
    _assert_real_suggestion(str(info.value))


def test_build_local_plugin_with_unknown_hook_raises_plugin_error(
    tasks_mod: ModuleType, task_module: WriteModule, tmp_path: Path
) -> None:
    """build() with a [plugins] local module implementing an unknown hook raises PluginError."""
    plugin = task_module(UNKNOWN_HOOK_PLUGIN)
    config = conveyor.Config().with_section("plugins", local=[plugin])
    leaf = tmp_path / "leaf.txt"
    with pytest.raises(conveyor.PluginError) as info:
        conveyor.build(tasks_mod.Leaf(out=str(leaf)), config=config)
    assert info.value.plugin == plugin
    assert info.value.hook == "conveyor_task_exploded"
    assert not leaf.exists()


RAISING_PLUGIN = """
import conveyor


@conveyor.hookimpl
def conveyor_task_started(event):
    raise RuntimeError("plugin bug in started")


@conveyor.hookimpl
def conveyor_task_succeeded(event):
    raise RuntimeError("plugin bug in succeeded")
"""


def test_raising_hook_is_logged_and_the_run_succeeds(
    tasks: str, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """A hook that raises is logged with its plugin's name; the task, run and recorder go on."""
    plugin = task_module(RAISING_PLUGIN)
    write_toml(tmp_path, f'[plugins]\nlocal = ["{plugin}"]\n')
    leaf = tmp_path / "leaf.txt"
    recorded = tmp_path / "recorded.jsonl"
    proc = run_cli(
        "run",
        f"{tasks}.Leaf",
        "--out",
        str(leaf),
        cwd=tmp_path,
        env={"CONVEYOR_RECORDER_OUT": str(recorded)},
    )
    assert proc.returncode == 0, proc.stderr
    assert leaf.read_text() == "leaf"
    complaints = [line for line in proc.stderr.splitlines() if "plugin bug in" in line]
    assert len(complaints) == 2, proc.stderr
    assert all(plugin in line for line in complaints), complaints
    hooks = [json.loads(line)["hook"] for line in recorded.read_text().splitlines()]
    assert "conveyor_task_started" in hooks
    assert "conveyor_task_succeeded" in hooks


def test_raising_hook_does_not_stop_other_implementations(
    tasks_mod: ModuleType, tmp_path: Path
) -> None:
    """In-process, a raising plugin leaves the run ok and another plugin sees every event."""

    class Raiser:
        name = "raiser"

        @conveyor.hookimpl
        def conveyor_task_started(self, event: object) -> None:
            """Fail on purpose."""
            raise RuntimeError("plugin bug")

    recorder = RecordingPlugin()
    leaf = tmp_path / "leaf.txt"
    with conveyor.Worker(config=conveyor.Config(), plugins=[Raiser(), recorder]) as worker:
        assert worker.add(tasks_mod.Leaf(out=str(leaf)))
        assert worker.run() is True
    hooks = recorder.hooks()
    assert "conveyor_task_started" in hooks
    assert "conveyor_task_succeeded" in hooks
    assert leaf.read_text() == "leaf"
