"""The ``conveyor`` command line (SPEC §6), always run as a real subprocess.

Task modules are files written into tmp_path; the ``run_cli`` fixture puts tmp_path on the
child's PYTHONPATH. The third-party ``recorder`` plugin (tests/thirdparty-plugin) is installed
and found through its entry point; it writes every hook event to ``$CONVEYOR_RECORDER_OUT``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.testing import hook_names

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

REPO = Path(__file__).resolve().parents[1]

TASKS = '''
import json

import conveyor


class Echo(conveyor.Task):
    """Writes its parameters as JSON to ``out``."""

    out = conveyor.Parameter()
    max_size = conveyor.IntParameter(default=1)
    verbose = conveyor.BoolParameter(default=False)
    colour = conveyor.BoolParameter(default=True)

    def output(self):
        return conveyor.LocalTarget(self.out)

    def run(self):
        values = {"max_size": self.max_size, "verbose": self.verbose, "colour": self.colour}
        with self.output().open("w") as f:
            json.dump(values, f)


class Workers(conveyor.Task):
    """A task with a parameter named like conveyor's own --workers option."""

    out = conveyor.Parameter()
    workers = conveyor.IntParameter(default=1)

    def output(self):
        return conveyor.LocalTarget(self.out)

    def run(self):
        with self.output().open("w") as f:
            f.write(str(self.workers))


class Fails(conveyor.Task):
    """A task whose run() raises."""

    out = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(self.out)

    def run(self):
        raise RuntimeError("deliberate failure")
'''

HOOKS_TASKS = '''
import conveyor


class Leaf(conveyor.Task):
    """Writes its letter, reporting a status message, progress and a tracking URL."""

    workdir = conveyor.Parameter()
    letter = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.workdir}/{self.letter}.txt")

    def run(self):
        self.set_status_message("writing " + self.letter)
        self.set_progress_percentage(50)
        self.set_tracking_url("http://example.invalid/" + self.letter)
        with self.output().open("w") as f:
            f.write(self.letter)


class Dynamic(conveyor.Task):
    """Requires Leaf a statically and yields Leaf b at run time."""

    workdir = conveyor.Parameter()

    def requires(self):
        return Leaf(workdir=self.workdir, letter="a")

    def output(self):
        return conveyor.LocalTarget(f"{self.workdir}/dynamic.txt")

    def run(self):
        yield Leaf(workdir=self.workdir, letter="b")
        with self.output().open("w") as f:
            f.write("done")


class Fails(conveyor.Task):
    workdir = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.workdir}/never.txt")

    def run(self):
        raise RuntimeError("deliberate failure")


class Broken(conveyor.Task):
    def complete(self):
        return "maybe"


class Everything(conveyor.WrapperTask):
    """A graph that succeeds, fails, breaks and yields dynamic dependencies."""

    workdir = conveyor.Parameter()

    def requires(self):
        return [Dynamic(workdir=self.workdir), Fails(workdir=self.workdir), Broken()]
'''


@pytest.fixture
def tasks(task_module: WriteModule) -> str:
    """The CLI test tasks, written into tmp_path as a module."""
    return task_module(TASKS)


def log_events(stderr: str) -> list[dict[str, Any]]:
    """The JSON log lines of stderr, parsed (every non-empty line must be JSON)."""
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


def started_executors(stderr: str) -> list[str]:
    """The executor named by each task_started log event."""
    return [e["executor"] for e in log_events(stderr) if e.get("event") == "task_started"]


def write_toml(directory: Path, text: str, name: str = "worker.toml") -> Path:
    """Write a TOML file into ``directory`` and return its path."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# --- version, help, entry points ----------------------------------------------------------------


def test_version(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor --version`` prints the package version and exits 0."""
    proc = run_cli("--version", cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"conveyor {conveyor.__version__}"


def test_help_lists_commands(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor --help`` exits 0 and names the run, plugins and config commands."""
    proc = run_cli("--help", cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    for command in ("run", "plugins", "config"):
        assert command in proc.stdout


def test_python_dash_m_without_arguments_shows_usage(run_cli: RunCli, tmp_path: Path) -> None:
    """``python -m conveyor`` alone prints usage, exits 2 (usage error) and has no traceback."""
    proc = run_cli(cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    assert "usage" in (proc.stdout + proc.stderr).lower()
    assert "Traceback" not in proc.stderr


def test_console_script_runs(tmp_path: Path) -> None:
    """The installed ``conveyor`` console script answers --version like ``python -m conveyor``."""
    script = Path(sys.executable).parent / "conveyor"
    proc = subprocess.run(
        [str(script), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"conveyor {conveyor.__version__}"


def test_run_help_lists_run_options(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor run --help`` exits 0 and lists run's own options."""
    proc = run_cli("run", "--help", cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    for option in ("--module", "--workers", "--local-scheduler", "--log-format"):
        assert option in proc.stdout


def test_unknown_command_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    """An unknown command exits 2 naming it and the valid commands, without a traceback."""
    proc = run_cli("frobnicate", cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    assert "frobnicate" in proc.stderr
    assert "run" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- conveyor run: naming the task and its parameters --------------------------------------------


def test_run_dotted_task_in_a_package(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """``conveyor run pkg.mod.Family --param value`` runs the task with that parameter."""
    module = task_module(TASKS, package=True)
    out = tmp_path / "echo.json"
    proc = run_cli("run", f"{module}.Echo", "--out", str(out), "--max-size", "5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["max_size"] == 5


@pytest.mark.parametrize("position", ["after", "before"])
def test_run_family_with_module_option(
    position: str, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """``conveyor run Family --module pkg.mod`` (option before or after TASK) runs the task."""
    module = task_module(TASKS, package=True)
    out = tmp_path / "echo.json"
    where = ["--module", module]
    task = ["Echo", "--out", str(out)]
    args = [*task, *where] if position == "after" else [*where, *task]
    proc = run_cli("run", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.exists()


def test_bare_family_without_module_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    """A TASK without a module and without --module exits 2 and says how to name it."""
    proc = run_cli("run", "Echo", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--module" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_kebab_case_flag_sets_snake_case_parameter(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """The parameter ``max_size`` is set with ``--max-size``."""
    out = tmp_path / "echo.json"
    proc = run_cli("run", f"{tasks}.Echo", "--out", str(out), "--max-size", "42", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["max_size"] == 42


@pytest.mark.parametrize(
    ("flags", "verbose", "colour"),
    [
        ((), False, True),
        (("--verbose",), True, True),
        (("--no-colour",), False, False),
        (("--verbose", "--no-colour"), True, False),
        (("--no-verbose", "--colour"), False, True),
    ],
)
def test_bool_parameter_flags(
    flags: tuple[str, ...],
    verbose: bool,
    colour: bool,
    tasks: str,
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    """A BoolParameter is set by ``--name`` and cleared by ``--no-name``."""
    out = tmp_path / "echo.json"
    proc = run_cli("run", f"{tasks}.Echo", "--out", str(out), *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    values = json.loads(out.read_text())
    assert values["verbose"] is verbose
    assert values["colour"] is colour


# --- conveyor run: its own options ---------------------------------------------------------------


@pytest.mark.parametrize("position", ["after", "before"])
def test_executor_option_before_or_after_task(
    position: str, tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """``--executor thread`` takes effect whether it comes before or after TASK."""
    out = tmp_path / "echo.json"
    task = [f"{tasks}.Echo", "--out", str(out)]
    option = ["--executor", "thread", "--log-format", "json"]
    args = [*task, *option] if position == "after" else [*option, *task]
    proc = run_cli("run", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert started_executors(proc.stderr) == ["thread"]


@pytest.mark.parametrize("position", ["after", "before"])
def test_log_level_option_before_or_after_task(
    position: str, tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """``--log-level warning`` silences info events whether it comes before or after TASK."""
    out = tmp_path / "echo.json"
    task = [f"{tasks}.Echo", "--out", str(out)]
    option = ["--log-level", "warning"]
    args = [*task, *option] if position == "after" else [*option, *task]
    proc = run_cli("run", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.exists()
    assert "task_started" not in proc.stderr
    assert '"level": "info"' not in proc.stderr


def test_task_parameter_named_like_an_option_wins_after_task(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """After TASK, ``--workers 3`` sets the task's ``workers`` parameter, not conveyor's."""
    out = tmp_path / "workers.txt"
    proc = run_cli("run", f"{tasks}.Workers", "--out", str(out), "--workers", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "3"
    assert started_executors(proc.stderr) == ["inline"]  # conveyor still has 1 worker


def test_same_named_option_before_task_stays_conveyors(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """``--workers 2`` before TASK is conveyor's option; ``--workers 3`` after it is the task's."""
    out = tmp_path / "workers.txt"
    args = ["--workers", "2", f"{tasks}.Workers", "--out", str(out), "--workers", "3"]
    proc = run_cli("run", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "3"
    assert started_executors(proc.stderr) == ["fork"]  # auto with 2 workers forks


@pytest.mark.parametrize("position", ["after", "before"])
def test_scheduler_url_and_local_scheduler_together_exit_2(
    position: str, tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """``--scheduler-url X --local-scheduler`` is a usage error (exit 2) naming both options."""
    out = tmp_path / "echo.json"
    task = [f"{tasks}.Echo", "--out", str(out)]
    options = ["--scheduler-url", "http://127.0.0.1:1", "--local-scheduler"]
    args = [*task, *options] if position == "after" else [*options, *task]
    proc = run_cli("run", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--scheduler-url" in proc.stderr
    assert "--local-scheduler" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_unknown_option_before_task_exits_2(tasks: str, run_cli: RunCli, tmp_path: Path) -> None:
    """An option conveyor does not know, given before TASK, exits 2 naming it."""
    proc = run_cli("run", "--frobnicate", f"{tasks}.Echo", "--out", "x", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--frobnicate" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- conveyor run: output streams ----------------------------------------------------------------


def test_summary_on_stdout_verdict_last_and_logs_on_stderr(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A successful run prints the summary on stdout ending with the verdict; logs go to stderr."""
    out = tmp_path / "echo.json"
    proc = run_cli("run", f"{tasks}.Echo", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.rstrip().splitlines()
    assert "Echo" in proc.stdout
    assert "verdict" in lines[-1].lower()
    assert "succeeded" in lines[-1]
    assert "task_started" not in proc.stdout
    assert "task_started" in proc.stderr


def test_failed_run_exits_1_with_failed_verdict(
    tasks: str, run_cli: RunCli, tmp_path: Path
) -> None:
    """A task whose run() raises exits 1 and the last stdout line says the run failed."""
    out = tmp_path / "never.txt"
    proc = run_cli("run", f"{tasks}.Fails", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    last = proc.stdout.rstrip().splitlines()[-1]
    assert "failed" in last.lower()
    assert "Fails" in proc.stdout
    assert "deliberate failure" in proc.stderr


def test_log_format_json_gives_json_lines(tasks: str, run_cli: RunCli, tmp_path: Path) -> None:
    """With ``--log-format json`` every stderr line is a JSON object; transitions carry ids."""
    out = tmp_path / "echo.json"
    proc = run_cli("run", f"{tasks}.Echo", "--out", str(out), "--log-format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = log_events(proc.stderr)
    succeeded = [e for e in events if e.get("event") == "task_succeeded"]
    assert len(succeeded) == 1
    assert succeeded[0]["family"] == "Echo"
    assert succeeded[0]["state"] == "DONE"
    assert {"task_id", "worker_id"} <= succeeded[0].keys()


def test_log_format_console_is_not_json(tasks: str, run_cli: RunCli, tmp_path: Path) -> None:
    """With ``--log-format console`` stderr holds human lines, not JSON objects."""
    out = tmp_path / "echo.json"
    args = ["run", f"{tasks}.Echo", "--out", str(out), "--log-format", "console"]
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert any("task_succeeded" in line for line in lines), proc.stderr
    assert not any(line.lstrip().startswith("{") for line in lines), proc.stderr


# --- conveyor config -----------------------------------------------------------------------------


def test_config_prints_parseable_toml_with_secrets_redacted(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """``conveyor config`` prints TOML that tomllib reads, with the scheduler token hidden."""
    config = write_toml(tmp_path, '[worker]\nworkers = 3\n\n[scheduler]\ntoken = "s3cret"\n')
    proc = run_cli("config", "--config", str(config), cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "s3cret" not in proc.stdout
    assert "s3cret" not in proc.stderr
    parsed = tomllib.loads(proc.stdout)
    assert parsed["worker"]["workers"] == 3
    assert parsed["scheduler"]["token"] != "s3cret"
    assert parsed["scheduler"]["transport"] == "local"


def test_config_discovers_worker_toml_in_cwd(run_cli: RunCli, tmp_path: Path) -> None:
    """Without --config, ``conveyor config`` reads ./worker.toml."""
    write_toml(tmp_path, "[worker]\nmax_reschedules = 4\n")
    proc = run_cli("config", cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert tomllib.loads(proc.stdout)["worker"]["max_reschedules"] == 4


def test_config_bad_file_exits_2_with_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor config --config bad.toml`` exits 2 with one line naming file:line:column."""
    write_toml(tmp_path, "[worker]\nworkers = \n", name="bad.toml")
    proc = run_cli("config", "--config", "bad.toml", cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "bad.toml:2:11" in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_config_missing_file_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor config --config missing.toml`` exits 2 naming the file."""
    proc = run_cli("config", "--config", "missing.toml", cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    assert "missing.toml" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_environment_override_shows_in_config(run_cli: RunCli, tmp_path: Path) -> None:
    """CONVEYOR_WORKER__WORKERS=2 overrides the file and shows in ``conveyor config``."""
    write_toml(tmp_path, "[worker]\nworkers = 5\n")
    proc = run_cli("config", cwd=tmp_path, env={"CONVEYOR_WORKER__WORKERS": "2"}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert tomllib.loads(proc.stdout)["worker"]["workers"] == 2


def test_bad_environment_override_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    """An unknown CONVEYOR_WORKER__* key exits 2 naming the variable."""
    env = {"CONVEYOR_WORKER__WORKERZ": "2"}
    proc = run_cli("config", cwd=tmp_path, env=env, timeout=30)
    assert proc.returncode == 2
    assert "CONVEYOR_WORKER__WORKERZ" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- conveyor plugins ----------------------------------------------------------------------------


def _plugins_json(run_cli: RunCli, cwd: Path, env: dict[str, str] | None = None) -> Any:
    proc = run_cli("plugins", "--json", cwd=cwd, env=env, timeout=30)
    return proc, json.loads(proc.stdout)


def test_plugins_table_lists_builtins_and_third_party(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor plugins`` lists inline, thread, local and recorder (with its dist) and exits 0."""
    proc = run_cli("plugins", cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:] if line.strip()]
    by_name = {(row[0], row[1]): row for row in rows}
    for group, name in [
        ("conveyor.executors", "inline"),
        ("conveyor.executors", "thread"),
        ("conveyor.schedulers", "local"),
    ]:
        assert by_name[(group, name)][2] == "conveyor"
        assert by_name[(group, name)][-1] == "ok"
    recorder = by_name[("conveyor.plugins", "recorder")]
    assert recorder[2:] == ["conveyor-recorder-plugin", "1.2.3", "ok"]


def test_plugins_json_parses(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor plugins --json`` is a JSON list with group, name, distribution, version."""
    proc, rows = _plugins_json(run_cli, tmp_path)
    assert proc.returncode == 0, proc.stderr
    recorder = [r for r in rows if r["name"] == "recorder"]
    assert recorder == [
        {
            "group": "conveyor.plugins",
            "name": "recorder",
            "distribution": "conveyor-recorder-plugin",
            "version": "1.2.3",
            "loads": True,
            "error": "",
            "warning": "",
        }
    ]
    executors = {r["name"] for r in rows if r["group"] == "conveyor.executors"}
    assert {"inline", "thread"} <= executors


def test_plugins_with_broken_plugin_exits_1_and_shows_error(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """With the fragile plugin broken, ``conveyor plugins`` exits 1 and shows its error."""
    env = {"CONVEYOR_BREAK_FRAGILE_PLUGIN": "1"}
    proc = run_cli("plugins", cwd=tmp_path, env=env, timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fragile = [line for line in proc.stdout.splitlines() if " fragile " in line]
    assert len(fragile) == 1, proc.stdout
    assert "told to break" in fragile[0]
    proc, rows = _plugins_json(run_cli, tmp_path, env)
    assert proc.returncode == 1
    (row,) = [r for r in rows if r["name"] == "fragile"]
    assert row["loads"] is False
    assert "told to break" in row["error"]
    assert row["distribution"] == "conveyor-recorder-plugin"


# --- the third-party recorder plugin -------------------------------------------------------------


def test_third_party_plugin_receives_every_hook(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """The entry-point plugin ``recorder`` sees worker_started … worker_stopped and every hook
    this run can fire (all but timed_out/process_died, which need a killing executor)."""
    module = task_module(HOOKS_TASKS)
    recorded = tmp_path / "events.jsonl"
    workdir = tmp_path / "work"
    proc = run_cli(
        "run",
        f"{module}.Everything",
        "--workdir",
        str(workdir),
        cwd=tmp_path,
        env={"CONVEYOR_RECORDER_OUT": str(recorded)},
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr  # Broken wins over Fails
    records = [json.loads(line) for line in recorded.read_text().splitlines()]
    hooks = [r["hook"] for r in records]
    # complete() checks happen in Worker.add(), before run() fires worker_started
    assert hooks.index("conveyor_worker_started") < hooks.index("conveyor_task_started")
    assert hooks[-1] == "conveyor_worker_stopped"
    assert hooks.count("conveyor_worker_started") == 1
    unreachable = {"conveyor_task_timed_out", "conveyor_task_process_died"}
    unreachable |= {h for h in hook_names() if h.startswith("conveyor_scheduler_")}  # (server's)
    unreachable |= {"conveyor_configure", "conveyor_unconfigure"}  # (no event: not recorded)
    # (the attempt's own hooks take no event; no notifier is enabled in this run)
    unreachable |= {"conveyor_attempt_begin", "conveyor_attempt_end", "conveyor_notification_sent"}
    assert set(hooks) == set(hook_names()) - unreachable
    assert records[-1]["ok"] is False
    assert "Verdict" in records[-1]["summary"]
    assert len({r["worker_id"] for r in records}) == 1
    dynamic = [r for r in records if r["hook"] == "conveyor_task_dependencies_discovered"]
    assert any(r["dynamic"] for r in dynamic)
    progress = [r for r in records if r["hook"] == "conveyor_task_progress"]
    assert {r["percentage"] for r in progress} == {50}
    assert (workdir / "dynamic.txt").exists()


@pytest.mark.parametrize(
    ("env", "toml", "expect_records"),
    [
        ({}, "", True),
        ({"CONVEYOR_DISABLE_PLUGINS": "recorder"}, "", False),
        ({"CONVEYOR_DISABLE_PLUGINS": "fragile, recorder"}, "", False),
        ({"CONVEYOR_DISABLE_PLUGIN_AUTOLOAD": "1"}, "", False),
        ({}, '[plugins]\ndisable = ["recorder"]\n', False),
    ],
    ids=["enabled", "env-disable", "env-disable-list", "env-no-autoload", "toml-disable"],
)
def test_recorder_can_be_disabled(
    env: dict[str, str],
    toml: str,
    expect_records: bool,
    tasks: str,
    run_cli: RunCli,
    tmp_path: Path,
) -> None:
    """Disabling the recorder (by env var, autoload off or [plugins] disable) stops its records."""
    if toml:
        write_toml(tmp_path, toml)
    recorded = tmp_path / "events.jsonl"
    out = tmp_path / "echo.json"
    proc = run_cli(
        "run",
        f"{tasks}.Echo",
        "--out",
        str(out),
        cwd=tmp_path,
        env={"CONVEYOR_RECORDER_OUT": str(recorded), **env},
    )
    assert proc.returncode == 0, proc.stderr
    assert out.exists()
    text = recorded.read_text() if recorded.exists() else ""
    if expect_records:
        assert "conveyor_task_succeeded" in text
    else:
        assert text == ""


def test_disabled_plugin_is_not_imported(tasks: str, run_cli: RunCli, tmp_path: Path) -> None:
    """A disabled plugin is blocked before import: a broken fragile plugin then goes unreported."""
    out = tmp_path / "echo.json"
    env = {"CONVEYOR_BREAK_FRAGILE_PLUGIN": "1", "CONVEYOR_DISABLE_PLUGINS": "fragile"}
    proc = run_cli("run", f"{tasks}.Echo", "--out", str(out), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "told to break" not in proc.stderr


# --- the README example --------------------------------------------------------------------------


def test_readme_wordcount_example(run_cli: RunCli, tmp_path: Path) -> None:
    """``conveyor run examples.wordcount.Report --workdir <tmp>`` from the repo root exits 0."""
    workdir = tmp_path / "wordcount"
    proc = run_cli("run", "examples.wordcount.Report", "--workdir", str(workdir), cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (workdir / "report.txt").read_text()
    assert report.strip()
    assert (workdir / "counts.json").exists()
    assert sorted(p.name for p in (workdir / "letters").iterdir())
    assert "succeeded" in proc.stdout.rstrip().splitlines()[-1]
