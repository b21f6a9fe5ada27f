"""Parameter defaults from the configuration (SPEC §5 ``[tasks."module.Family"]``, §2.6):
the parameter's default < the configuration < an explicit value; ``[tasks.Family]`` and
``[tasks."module.Family"]`` over it; native TOML values parsed by the parameter; an unknown
parameter or a bad value is an error naming the file, the section and the key when the family
is used; dependencies made during a run take them too; ``conveyor config`` shows them.

Real task modules in tmp_path, the real CLI in subprocesses, ``conveyor.build()`` in-process.
"""

from __future__ import annotations

import datetime
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import conveyor
from conveyor.config import load_config
from conveyor.errors import ConfigError
from conveyor.task import use_task_defaults

WriteModule = Callable[..., str]

TASKS = """
    import conveyor

    class Report(conveyor.Task):
        region = conveyor.Parameter(default="us")
        day = conveyor.DateParameter(default="2026-01-01")
        shards = conveyor.IntParameter(default=1)
        tags = conveyor.ListParameter(default=[])
        api_token = conveyor.Parameter(default="")
        out = conveyor.Parameter(default="")

        def output(self):
            return conveyor.LocalTarget(self.out) if self.out else None

        def run(self):
            with self.output().open("w") as f:
                f.write(f"{self.region} {self.day} {self.shards} {list(self.tags)}")

    class Needs(conveyor.Task):
        owner = conveyor.Parameter()  # required: the configuration may supply it

    class Top(conveyor.WrapperTask):
        out = conveyor.Parameter()

        def requires(self):
            return Report(out=self.out)
"""


@pytest.fixture(autouse=True)
def _fresh_defaults() -> Iterator[None]:
    """Each test starts, and leaves, with no configured defaults."""
    use_task_defaults({})
    yield
    use_task_defaults({})


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _use(path: Path) -> None:
    config = load_config(path)
    use_task_defaults(config.tasks, config.task_sources)


def test_precedence_default_then_configuration_then_explicit(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """The class default applies without configuration; the configuration replaces it
    (native TOML values parsed by the parameter); a keyword replaces both."""
    name = task_module(TASKS)
    module = __import__(name)
    assert module.Report().region == "us"
    _use(
        _config(
            tmp_path,
            f"""
            [tasks.Report]
            region = "eu"
            shards = 4

            [tasks."{name}.Report"]
            day = 2026-11-30
            tags = ["a", "b"]
            """,
        )
    )
    report = module.Report()
    assert (report.region, report.shards, report.day, report.tags) == (
        "eu",
        4,
        datetime.date(2026, 11, 30),
        ("a", "b"),
    )
    assert module.Report(region="ap").region == "ap"
    assert module.Report(region="ap").task_id != report.task_id


def test_the_module_qualified_table_wins_over_the_bare_family(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Both tables apply; for a key both set, ``[tasks."module.Family"]`` wins."""
    name = task_module(TASKS)
    module = __import__(name)
    _use(
        _config(
            tmp_path,
            f"""
            [tasks.Report]
            region = "bare"
            shards = 2

            [tasks."{name}.Report"]
            region = "qualified"
            """,
        )
    )
    report = module.Report()
    assert (report.region, report.shards) == ("qualified", 2)


def test_a_required_parameter_may_come_from_the_configuration(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Without the configuration a required parameter is missing; with it, it is set."""
    name = task_module(TASKS)
    module = __import__(name)
    with pytest.raises(conveyor.ParameterError, match="owner"):
        module.Needs()
    _use(_config(tmp_path, '[tasks.Needs]\nowner = "ops"\n'))
    assert module.Needs().owner == "ops"


def test_an_unknown_parameter_names_the_file_section_and_key(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Loading the file does not know the family; making a task of it does."""
    name = task_module(TASKS)
    module = __import__(name)
    path = _config(tmp_path, f'[tasks."{name}.Report"]\nregoin = "eu"\n')
    _use(path)
    with pytest.raises(ConfigError) as caught:
        module.Report()
    message = str(caught.value)
    assert str(path) in message and f'[tasks."{name}.Report"]' in message
    assert "'regoin'" in message and "region" in message


def test_a_bad_value_names_the_file_section_and_key_but_not_a_secret(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """A value the parameter refuses is an error naming where it was set; a secret-named
    parameter's value is not shown."""
    name = task_module(TASKS)
    module = __import__(name)
    path = _config(tmp_path, '[tasks.Report]\nshards = "many"\n')
    _use(path)
    with pytest.raises(ConfigError) as caught:
        module.Report()
    assert str(path) in str(caught.value) and "[tasks.Report] shards" in str(caught.value)
    _use(_config(tmp_path, "[tasks.Report]\napi_token = 1234567\n"))
    with pytest.raises(ConfigError) as caught:
        module.Report()
    assert "[tasks.Report] api_token = ***: expected str" in str(caught.value)
    assert "1234567" not in str(caught.value)


def test_dependencies_made_during_a_run_take_the_configuration(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """build(config=...) makes the worker use the file's [tasks.*] for the tasks it makes
    (here Report, made by Top.requires() during the walk)."""
    name = task_module(TASKS)
    module = __import__(name)
    path = _config(tmp_path, '[tasks.Report]\nregion = "eu"\nshards = 3\n')
    out = tmp_path / "report.txt"
    result = conveyor.build(module.Top(out=str(out)), config=str(path))
    assert result.ok, result.summary
    assert out.read_text().startswith("eu 2026-01-01 3")


def test_the_cli_uses_the_configuration_and_a_flag_overrides_it(
    task_module: WriteModule, tmp_path: Path, run_cli: Callable[..., object]
) -> None:
    """``conveyor run --config``: the file's default applies; a flag wins; an unknown key
    is one error line and exit code 2, without a traceback."""
    name = task_module(TASKS)
    path = _config(tmp_path, f'[tasks."{name}.Report"]\nregion = "eu"\nshards = 2\n')
    out = tmp_path / "cli.txt"
    done = run_cli("run", f"{name}.Report", "--out", str(out), "--config", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("eu 2026-01-01 2")
    out2 = tmp_path / "cli2.txt"
    flagged = run_cli(
        "run",
        f"{name}.Report",
        "--out",
        str(out2),
        "--region",
        "ap",
        "--config",
        str(path),
        cwd=tmp_path,
    )
    assert flagged.returncode == 0, flagged.stderr
    assert out2.read_text().startswith("ap 2026-01-01 2")
    bad = _config(tmp_path, f'[tasks."{name}.Report"]\nregoin = "eu"\n')
    refused = run_cli("run", f"{name}.Report", "--config", str(bad), cwd=tmp_path)
    assert refused.returncode == 2
    assert "regoin" in refused.stderr and "Traceback" not in refused.stderr


def test_conveyor_config_shows_them_with_secrets_hidden(
    tmp_path: Path, run_cli: Callable[..., object]
) -> None:
    """``conveyor config`` prints the [tasks.*] tables; a secret-named key's value is ***."""
    path = _config(
        tmp_path,
        """
        [tasks."mypkg.tasks.DailyReport"]
        region = "eu"
        api_token = "t0ps3cret"
        """,
    )
    shown = run_cli("config", "--config", str(path), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "mypkg.tasks.DailyReport" in shown.stdout and '"eu"' in shown.stdout
    assert "t0ps3cret" not in shown.stdout


def test_an_environment_variable_sets_a_default(task_module: WriteModule) -> None:
    """``CONVEYOR_TASKS__<family>__<param>`` sets one default (the family matched without
    regard to case, since variable names are read lower-case)."""
    name = task_module(TASKS)
    module = __import__(name)
    config = load_config(env={"CONVEYOR_TASKS__REPORT__REGION": "sa"}, cwd=Path("/nonexistent"))
    use_task_defaults(config.tasks, config.task_sources)
    assert module.Report().region == "sa"


PIPE = """
    import conveyor

    class Extract(conveyor.Task):
        day = conveyor.DateParameter()
        region = conveyor.Parameter(default="us")
        root = conveyor.Parameter(default="")

        def output(self):
            return conveyor.LocalTarget(f"{self.root}/extract-{self.region}-{self.day}")

        def run(self):
            with self.output().open("w") as f:
                f.write(f"from {self.region}")

    class Report(conveyor.Task):
        day = conveyor.DateParameter()
        root = conveyor.Parameter(default="")

        def requires(self):
            return Extract(day=self.day, root=self.root)

        def output(self):
            return conveyor.LocalTarget(f"{self.root}/report-{self.day}")

        def run(self):
            with self.input().open("r") as src, self.output().open("w") as out:
                out.write(src.read())
"""


@pytest.mark.parametrize("executor", ["subprocess", "fork"])
def test_an_attempt_process_makes_its_requirements_with_the_configured_defaults(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """Under a process executor the attempt rebuilds the task and calls input(): it takes
    the worker's [tasks.*] defaults too, so it reads what the worker made, not the class
    default's file (which exists here, to make the mistake visible)."""
    name = task_module(PIPE)
    module = __import__(name)
    (tmp_path / "extract-us-2026-01-01").write_text("from us")
    path = _config(tmp_path, '[tasks.Extract]\nregion = "eu"\n')
    config = load_config(path).with_overrides(executor=executor, workers=2)
    result = conveyor.build(module.Report(day="2026-01-01", root=str(tmp_path)), config=config)
    assert result.ok, result.summary
    assert (tmp_path / "report-2026-01-01").read_text() == "from eu"


def test_a_variable_refines_the_files_table(task_module: WriteModule, tmp_path: Path) -> None:
    """Environment over file, for [tasks.*] as for every section: the variable's (lower-case)
    family refines the file's table of that family."""
    name = task_module(TASKS)
    module = __import__(name)
    path = _config(tmp_path, '[tasks.Report]\nregion = "eu"\nshards = 2\n')
    config = load_config(path, env={"CONVEYOR_TASKS__REPORT__REGION": "asia"})
    assert list(config.tasks) == ["Report"]
    use_task_defaults(config.tasks, config.task_sources)
    report = module.Report()
    assert (report.region, report.shards) == ("asia", 2)


def test_a_worker_puts_back_the_defaults_it_replaced(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """A Worker uses its file's [tasks.*] while it lives and restores what was in use when it
    closes, so tasks made afterwards are not changed by a worker that has gone."""
    name = task_module(TASKS)
    module = __import__(name)
    path = _config(tmp_path, '[tasks.Report]\nregion = "eu"\n')
    with conveyor.Worker(config=str(path)):
        assert module.Report().region == "eu"
    assert module.Report().region == "us"


def test_a_bad_table_of_a_dependency_is_a_configuration_error(
    task_module: WriteModule, tmp_path: Path, run_cli: Callable[..., object]
) -> None:
    """The family first made as a dependency (during the walk) has a key that is not its
    parameter: exit code 2 and one line naming the file, not a broken task (exit 3)."""
    name = task_module(PIPE)
    path = _config(tmp_path, '[tasks.Extract]\nregoin = "eu"\n')
    done = run_cli(
        "run",
        f"{name}.Report",
        "--day",
        "2026-01-01",
        "--root",
        str(tmp_path),
        "--config",
        str(path),
        cwd=tmp_path,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "regoin" in done.stderr and str(path) in done.stderr
    assert "Traceback" not in done.stderr
