"""Luigi semantics that real pipelines rely on, written in the style those pipelines use.

Each test follows a pattern of public Luigi code (not copied from it): ``requires()`` written as
a generator, a ``WrapperTask`` whose own ``run()`` writes a manifest, an ``ExternalTask``
subclass that defines ``run()``, ``DynamicRequirements`` with a cheaper completeness check, a
settings class read as ``paths().data_dir``, and outputs named after Luigi's task ids.
Task classes live in modules written into tmp_path, so that the process executors and the CLI
import them by name.
"""

from __future__ import annotations

import datetime
import importlib
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.testing import RecordingPlugin

RunCli = Callable[..., subprocess.CompletedProcess[str]]
WriteModule = Callable[..., str]

EXECUTORS = ["inline", "fork"]


def _on(executor: str) -> dict[str, Any]:
    """build() overrides for ``executor`` (inline runs one task at a time)."""
    return {"executor": executor, "workers": 1 if executor == "inline" else 2}


GENERATORS = """
import conveyor


class Part(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/part-{self.n}.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write(f"part {self.n}\\n")


class Joined(conveyor.Task):
    root = conveyor.Parameter()

    def requires(self):  # the style Luigi's docs teach
        for n in range(3):
            yield Part(root=self.root, n=n)

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/joined.txt")

    def run(self):
        with self.output().open("w") as out:
            for target in self.input():
                with target.open("r") as src:
                    out.write(src.read())


class Keyed(conveyor.Task):
    root = conveyor.Parameter()

    def requires(self):
        return {"parts": (Part(root=self.root, n=n) for n in (7, 8))}

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/keyed.txt")

    def run(self):
        paths = [target.path for target in self.input()["parts"]]
        with self.output().open("w") as out:
            out.write("\\n".join(paths))


class YieldsGenerator(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/yielded.txt")

    def run(self):
        targets = yield (Part(root=self.root, n=n) for n in (20, 21))
        with self.output().open("w") as out:
            out.write(",".join(sorted(os.path.basename(t.path) for t in targets)))


class Numbers(conveyor.Task):
    def requires(self):
        return (n for n in range(2))


import os
"""


def _load(task_module: WriteModule, source: str) -> Any:
    return importlib.import_module(task_module(source))


# --- 1. requires() and yields may be any iterable ----------------------------------------------


@pytest.mark.parametrize("executor", EXECUTORS)
def test_requires_written_as_a_generator_runs_every_requirement(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """A requires() that yields its tasks schedules each, and input() gives their outputs."""
    mod = _load(task_module, GENERATORS)
    result = conveyor.build(mod.Joined(root=str(tmp_path)), **_on(executor))
    assert result.exit_code == 0, result.summary
    assert (tmp_path / "joined.txt").read_text() == "part 0\npart 1\npart 2\n"


def test_a_dict_of_generators_is_flattened_and_input_keeps_its_keys(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """A dict whose value is a generator of tasks is walked, and input() keeps the key."""
    mod = _load(task_module, GENERATORS)
    result = conveyor.build(mod.Keyed(root=str(tmp_path)))
    assert result.exit_code == 0, result.summary
    assert (tmp_path / "keyed.txt").read_text().splitlines() == [
        str(tmp_path / "part-7.txt"),
        str(tmp_path / "part-8.txt"),
    ]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_yielded_generator_is_a_dynamic_dependency(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """run() may yield a generator of tasks; the yield evaluates to the list of their outputs."""
    mod = _load(task_module, GENERATORS)
    result = conveyor.build(mod.YieldsGenerator(root=str(tmp_path)), **_on(executor))
    assert result.exit_code == 0, result.summary
    assert (tmp_path / "yielded.txt").read_text() == "part-20.txt,part-21.txt"


def test_a_generator_of_non_tasks_is_a_scheduling_error_naming_the_value(
    task_module: WriteModule,
) -> None:
    """A generator that yields something other than tasks is broken, with the value named."""
    mod = _load(task_module, GENERATORS)
    result = conveyor.build(mod.Numbers())
    assert result.exit_code == 3
    assert "returned 0 (int)" in result.errors[mod.Numbers().task_id]


def test_flatten_takes_any_iterable_as_luigi_does() -> None:
    """conveyor.flatten reads generators, ranges and dict values; strings stay whole."""
    assert conveyor.flatten(n for n in range(3)) == [0, 1, 2]
    assert conveyor.flatten({"a": iter(["x", "y"]), "b": "zz"}) == ["x", "y", "zz"]
    assert conveyor.flatten([range(2), None, "abc"]) == [0, 1, "abc"]


# --- 2. every task handed to a worker has its run() called ------------------------------------

RUNS_WHEN_COMPLETE = """
import os

import conveyor


class Made(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/made.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write("made")


class Manifest(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Made(root=self.root)]

    def run(self):  # a WrapperTask with work of its own: a manifest, a notification
        with open(f"{self.root}/manifest.txt", "w") as out:
            out.write("manifest of made.txt")


class Eager(conveyor.Task):
    # its requirement also makes this task's output: by the time it is handed out, it looks
    # complete; Luigi runs it all the same
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/eager.txt")

    def requires(self):
        return MakesBoth(root=self.root)

    def run(self):
        with open(f"{self.root}/eager-ran.txt", "w") as out:
            out.write(str(os.getpid()))


class MakesBoth(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/both.txt")

    def run(self):
        with open(f"{self.root}/eager.txt", "w") as out:
            out.write("made early")
        with self.output().open("w") as out:
            out.write("both")
"""


def test_a_wrapper_task_with_its_own_run_has_it_called(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """A WrapperTask's run() runs once its requirements are done, although it is complete."""
    mod = _load(task_module, RUNS_WHEN_COMPLETE)
    recorder = RecordingPlugin()
    with conveyor.Worker(plugins=[recorder]) as worker:
        assert worker.add(mod.Manifest(root=str(tmp_path)))
        assert worker.run()
    assert (tmp_path / "manifest.txt").read_text() == "manifest of made.txt"
    started = [e.family for e in recorder.events("conveyor_task_started")]
    assert started.count("Manifest") == 1


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_task_made_complete_before_its_attempt_is_not_run_again_and_says_so(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """A task with outputs made meanwhile is not run again, and the summary says so."""
    mod = _load(task_module, RUNS_WHEN_COMPLETE)
    result = conveyor.build(mod.Eager(root=str(tmp_path)), **_on(executor))
    assert result.exit_code == 0, result.summary
    assert not (tmp_path / "eager-ran.txt").exists()
    assert "1 were complete when their turn came" in result.summary
    assert "run() was not called" in result.summary


def test_a_task_found_complete_is_reported_skipped_to_plugins(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """conveyor_task_succeeded says skipped=True for it, and False for a task that ran."""
    mod = _load(task_module, RUNS_WHEN_COMPLETE)
    recorder = RecordingPlugin()
    with conveyor.Worker(plugins=[recorder]) as worker:
        assert worker.add(mod.Eager(root=str(tmp_path)))
        assert worker.run()
    skipped = {e.family: e.skipped for e in recorder.events("conveyor_task_succeeded")}
    assert skipped == {"MakesBoth": False, "Eager": True}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_wrapper_task_run_is_called_under_every_executor(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """Under a process executor too, the wrapper's run() writes its manifest."""
    mod = _load(task_module, RUNS_WHEN_COMPLETE)
    result = conveyor.build(mod.Manifest(root=str(tmp_path)), **_on(executor))
    assert result.exit_code == 0, result.summary
    assert (tmp_path / "manifest.txt").exists()


# --- 3. external means "has no run()" ----------------------------------------------------------

EXTERNALS = """
import conveyor


class Download(conveyor.ExternalTask):  # an ExternalTask subclass that fetches its own data
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/download.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write("fetched")


class Landed(conveyor.ExternalTask):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/landed.txt")


class NoRun(conveyor.Task):
    root = conveyor.Parameter()
    run = None

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/norun.txt")
"""


def test_an_external_task_subclass_that_defines_run_is_an_ordinary_task(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """An ExternalTask subclass with a run() is run like any task, not reported as missing."""
    mod = _load(task_module, EXTERNALS)
    result = conveyor.build(mod.Download(root=str(tmp_path)))
    assert result.exit_code == 0, result.summary
    assert (tmp_path / "download.txt").read_text() == "fetched"
    assert not mod.Download.is_external()


def test_a_task_without_run_is_external_data(task_module: WriteModule, tmp_path: Path) -> None:
    """An ExternalTask, or any task whose run is None, is missing data when incomplete."""
    mod = _load(task_module, EXTERNALS)
    assert mod.Landed.is_external() and mod.NoRun.is_external()
    for task in (mod.Landed(root=str(tmp_path)), mod.NoRun(root=str(tmp_path))):
        result = conveyor.build(task)
        assert result.exit_code == 4, result.summary
        assert "missing external" in result.summary


# --- 4. DynamicRequirements ------------------------------------------------------------------

DYNAMIC = """
import os

import conveyor


class Shard(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/shards/{self.n}.txt")

    def complete(self):
        with open(f"{self.root}/complete-calls.txt", "a") as log:
            log.write(f"{self.n}\\n")
        return super().complete()

    def run(self):
        with self.output().open("w") as out:
            out.write(str(self.n))


class Gather(conveyor.Task):
    root = conveyor.Parameter()
    count = conveyor.IntParameter(default=3)

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/gathered.txt")

    def run(self):
        shards = [Shard(root=self.root, n=n) for n in range(self.count)]

        def all_there(complete):  # one directory listing instead of a check per shard
            folder = f"{self.root}/shards"
            return os.path.isdir(folder) and len(os.listdir(folder)) >= self.count

        targets = yield conveyor.DynamicRequirements(shards, all_there)
        with self.output().open("w") as out:
            out.write(",".join(sorted(os.path.basename(t.path) for t in targets)))


class NotBool(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/never.txt")

    def run(self):
        yield conveyor.DynamicRequirements([], lambda complete: "yes")
"""


@pytest.mark.parametrize("executor", EXECUTORS)
def test_dynamic_requirements_schedule_what_is_missing_and_give_the_outputs(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """A yielded DynamicRequirements whose check fails schedules the shards, then resumes."""
    mod = _load(task_module, DYNAMIC)
    result = conveyor.build(mod.Gather(root=str(tmp_path)), **_on(executor))
    assert result.exit_code == 0, result.summary
    assert (tmp_path / "gathered.txt").read_text() == "0.txt,1.txt,2.txt"


def test_dynamic_requirements_with_a_true_custom_check_ask_no_task(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """When custom_complete says everything is there, no shard's complete() is called."""
    mod = _load(task_module, DYNAMIC)
    (tmp_path / "shards").mkdir()
    for n in range(3):
        (tmp_path / "shards" / f"{n}.txt").write_text(str(n))
    result = conveyor.build(mod.Gather(root=str(tmp_path)))
    assert result.exit_code == 0, result.summary
    assert not (tmp_path / "complete-calls.txt").exists()
    assert (tmp_path / "gathered.txt").read_text() == "0.txt,1.txt,2.txt"


def test_dynamic_requirements_check_must_return_a_bool(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """A custom_complete that returns a non-bool fails the attempt, naming the value."""
    mod = _load(task_module, DYNAMIC)
    task = mod.NotBool(root=str(tmp_path))
    result = conveyor.build(task)
    assert result.exit_code == 1
    assert "returned 'yes' (str); expected bool" in result.errors[task.task_id]


def test_dynamic_requirements_object_api() -> None:
    """The object reads a generator once and offers Luigi's complete(), paths and flat list."""

    class Leaf(conveyor.Task):
        n = conveyor.IntParameter()

        def output(self) -> conveyor.LocalTarget:
            return conveyor.LocalTarget(f"/nonexistent/dyn-api-{self.n}")

    req = conveyor.DynamicRequirements(Leaf(n=n) for n in range(2))
    assert req.flat_requirements == [Leaf(n=0), Leaf(n=1)]
    assert [t.path for t in req.paths] == ["/nonexistent/dyn-api-0", "/nonexistent/dyn-api-1"]
    assert req.complete() is False
    assert req.complete(lambda task: True) is True


# --- 5. settings read as paths().data_dir ------------------------------------------------------

SETTINGS = """
import conveyor


class paths(conveyor.Settings):
    data_dir = conveyor.Parameter(default="unset")
    region = conveyor.Parameter(default="eu")


class needs(conveyor.Settings):
    api_url = conveyor.Parameter()


class Report(conveyor.Task):
    day = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{paths().data_dir}/report-{self.day}.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write(paths().region)


class RequiresSettings(conveyor.Task):
    def requires(self):
        return paths()
"""


def test_settings_come_from_worker_toml_in_every_process(
    task_module: WriteModule, tmp_path: Path, run_cli: RunCli
) -> None:
    """A settings class takes [tasks."paths"] from worker.toml, in the attempt's process too."""
    mod = task_module(SETTINGS)
    data = tmp_path / "data"
    (tmp_path / "worker.toml").write_text(
        f'[tasks."paths"]\ndata_dir = "{data}"\n\n[tasks."{mod}.paths"]\nregion = "us"\n'
    )
    done = run_cli(
        "run", f"{mod}.Report", "--day", "d1", "--executor", "subprocess", "--workers", "2",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (data / "report-d1.txt").read_text() == "us"


def test_settings_come_from_the_environment(
    task_module: WriteModule, tmp_path: Path, run_cli: RunCli
) -> None:
    """CONVEYOR_TASKS__<Family>__<parameter> sets a settings value."""
    mod = task_module(SETTINGS)
    data = tmp_path / "from-env"
    done = run_cli(
        "run", f"{mod}.Report", "--day", "d2", cwd=tmp_path,
        env={"CONVEYOR_TASKS__paths__data_dir": str(data)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (data / "report-d2.txt").read_text() == "eu"


def test_settings_are_never_scheduled(task_module: WriteModule) -> None:
    """A settings instance required by a task, or given to build(), is a scheduling error."""
    mod = importlib.import_module(task_module(SETTINGS))
    result = conveyor.build(mod.RequiresSettings())
    assert result.exit_code == 3
    assert "is a settings class" in result.errors[mod.RequiresSettings().task_id]
    direct = conveyor.build(mod.paths())
    assert direct.exit_code == 3
    assert "never scheduled" in direct.errors[mod.paths().task_id]


def test_a_missing_setting_says_where_to_set_it(task_module: WriteModule) -> None:
    """A required setting left unset names the worker.toml table and the variable."""
    mod = importlib.import_module(task_module(SETTINGS))
    with pytest.raises(conveyor.ParameterError) as caught:
        mod.needs()
    assert '[tasks."needs"]' in str(caught.value)
    assert "CONVEYOR_TASKS__needs__api_url" in str(caught.value)


# --- 6. Luigi-compatible task ids ------------------------------------------------------------


def _luigi_and_conveyor_pair(name: str, kind: str, value: Any, **options: Any) -> tuple[Any, Any]:
    import luigi

    luigi_cls = type(
        name, (luigi.Task,), {"p": getattr(luigi, kind)(**options), "q": luigi.Parameter()}
    )
    conveyor_cls = type(
        name,
        (conveyor.Task,),
        {
            "p": getattr(conveyor, kind)(**options),
            "q": conveyor.Parameter(),
            "task_id_style": "luigi",
        },
    )
    return luigi_cls(p=value, q="x/y z"), conveyor_cls(p=value, q="x/y z")


@pytest.mark.parametrize(
    ("kind", "value", "options"),
    [
        ("Parameter", "2024-01-01 eu,west", {}),
        ("IntParameter", 12, {}),
        ("FloatParameter", 0.25, {}),
        ("BoolParameter", True, {}),
        ("DateParameter", "2024-02-29", {}),
        ("DateHourParameter", "2024-02-29T13", {}),
        ("MonthParameter", "2024-02", {}),
        ("ListParameter", [3, "a", [1, 2]], {}),
        ("TupleParameter", (1, 2), {}),
        ("DictParameter", {"z": 1, "a": {"k": [1]}}, {}),
        ("TimeDeltaParameter", "1 day 2 hours", {}),
        ("ChoiceParameter", "b", {"choices": ["a", "b"]}),
        ("OptionalParameter", None, {}),
        ("OptionalBoolParameter", False, {}),
    ],
)
def test_luigi_style_ids_equal_luigis_own(kind: str, value: Any, options: dict[str, Any]) -> None:
    """With task_id_style = "luigi" a task's id is exactly the id the luigi package computes."""
    if kind in ("DateParameter", "DateHourParameter", "MonthParameter", "TimeDeltaParameter"):
        import luigi

        value = getattr(luigi, kind)().parse(value)
    ours_luigi, ours = _luigi_and_conveyor_pair(f"Ids{kind}", kind, value, **options)
    assert ours.task_id == ours_luigi.task_id


def test_luigi_style_ids_for_a_namespaced_family_and_many_parameters() -> None:
    """The family keeps its namespace, and only the first three parameters by name are shown."""
    import luigi

    class LuigiSide(luigi.Task):
        task_namespace = "etl"
        zeta = luigi.Parameter()
        alpha = luigi.IntParameter()
        mid = luigi.Parameter()
        beta = luigi.DateParameter()

    class ConveyorSide(conveyor.Task):
        task_namespace = "etl"
        task_id_style = "luigi"
        zeta = conveyor.Parameter()
        alpha = conveyor.IntParameter()
        mid = conveyor.Parameter()
        beta = conveyor.DateParameter()

    args = {"zeta": "a-very-long-value-over-sixteen", "alpha": 3, "mid": "m", "beta": "2024-01-05"}
    luigi_id = LuigiSide(**{**args, "beta": luigi.DateParameter().parse("2024-01-05")}).task_id
    ours = ConveyorSide(**args).task_id
    assert ours.startswith("etl.ConveyorSide_3_2024_01_05_m_")
    # Luigi hashes the parameters only, so the ids differ by the family's name alone
    assert ours == luigi_id.replace("etl.LuigiSide", "etl.ConveyorSide", 1)


def test_luigi_style_never_shows_a_secret_value() -> None:
    """A secret-named parameter among the first three is hashed, not shown."""

    class Login(conveyor.Task):
        task_id_style = "luigi"
        api_token = conveyor.Parameter()

    assert "hunter2" not in Login(api_token="hunter2").task_id


def test_an_unknown_task_id_style_is_refused_when_the_class_is_made() -> None:
    """A misspelt task_id_style fails at class creation, naming the value."""
    with pytest.raises(conveyor.TaskDefinitionError, match="'luigy'"):
        type("Bad", (conveyor.Task,), {"task_id_style": "luigy"})


LUIGI_IDS = """
import conveyor


class Named(conveyor.Task):
    day = conveyor.DateParameter()
    root = conveyor.Parameter()

    def output(self):  # named after the task id, as many Luigi pipelines do
        return conveyor.LocalTarget(f"{self.root}/{self.task_id}.out")

    def run(self):
        with self.output().open("w") as out:
            out.write(self.task_id)


class Top(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return Named(day="2024-03-01", root=self.root)
"""


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_worker_task_id_style_reaches_the_attempts_process(
    task_module: WriteModule, tmp_path: Path, run_cli: RunCli, executor: str
) -> None:
    """[worker] task_id_style = "luigi" names outputs after Luigi's ids, in the child too."""
    import luigi

    mod = task_module(LUIGI_IDS)
    out = tmp_path / "out"
    (tmp_path / "worker.toml").write_text('[worker]\ntask_id_style = "luigi"\n')
    done = run_cli(
        "run", f"{mod}.Top", "--root", str(out), "--executor", executor, "--workers",
        "1" if executor == "inline" else "2", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    class Named(luigi.Task):
        day = luigi.DateParameter()
        root = luigi.Parameter()

    expected = Named(day=datetime.date(2024, 3, 1), root=str(out)).task_id
    made = sorted(p.name for p in out.iterdir())
    assert made == [f"{expected}.out"]
    assert (out / made[0]).read_text() == expected


def test_task_id_style_is_a_validated_worker_key(tmp_path: Path) -> None:
    """A wrong [worker] task_id_style is a configuration error naming the key and choices."""
    path = tmp_path / "worker.toml"
    path.write_text('[worker]\ntask_id_style = "airflow"\n')
    with pytest.raises(conveyor.ConfigError, match="task_id_style") as caught:
        conveyor.load_config(path)
    assert "luigi" in str(caught.value)


NESTED = """
import os

import conveyor


class Leaf(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/leaf-{self.n}.txt")

    def run(self):
        with self.output().open("w") as out:
            out.write(str(self.n))


class Nested(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/nested.txt")

    def run(self):
        [targets] = yield [(Leaf(root=self.root, n=n) for n in (1, 2))]
        with self.output().open("w") as out:
            out.write(",".join(os.path.basename(t.path) for t in targets))


class LoopA(conveyor.WrapperTask):
    def requires(self):
        return LoopB()


class LoopB(conveyor.WrapperTask):
    def requires(self):
        return LoopA()
"""


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_generator_nested_in_a_yield_gives_its_outputs(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """A generator inside a yielded list is read once: the yield gives a list of its outputs."""
    mod = _load(task_module, NESTED)
    result = conveyor.build(mod.Nested(root=str(tmp_path)), **_on(executor))
    assert result.exit_code == 0, result.summary
    assert (tmp_path / "nested.txt").read_text() == "leaf-1.txt,leaf-2.txt"


def test_a_cycle_of_wrapper_tasks_is_a_scheduling_error(task_module: WriteModule) -> None:
    """Two WrapperTasks requiring each other are a cycle (exit 3), not a complete graph."""
    mod = _load(task_module, NESTED)
    result = conveyor.build(mod.LoopA())
    assert result.exit_code == 3, result.summary
    assert "cycle" in result.errors[mod.LoopA().task_id]


def test_a_task_made_before_the_worker_set_the_id_style_takes_the_workers(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """A root made before build(config=...) switched to luigi ids is run under its new id."""
    mod = _load(task_module, LUIGI_IDS)
    out = tmp_path / "out"
    task = mod.Named(day="2024-03-01", root=str(out))
    conveyor_id = task.task_id
    config = tmp_path / "luigi-ids.toml"
    config.write_text('[worker]\ntask_id_style = "luigi"\nexecutor = "fork"\nworkers = 2\n')
    result = conveyor.build(task, config=str(config))
    assert result.exit_code == 0, result.summary
    assert task.task_id != conveyor_id and task.task_id in result.states
    assert [p.name for p in out.iterdir()] == [f"{task.task_id}.out"]


def test_use_task_defaults_without_a_style_keeps_the_one_in_use() -> None:
    """Setting [tasks] tables by hand does not reset the task id style."""
    from conveyor.task import restore_task_defaults, task_defaults_in_use, use_task_defaults

    before = task_defaults_in_use()
    try:
        use_task_defaults({}, {}, "luigi")
        use_task_defaults({"X": {"a": 1}}, {})
        in_use = task_defaults_in_use()
        assert in_use is not None and in_use[2] == "luigi"
    finally:
        restore_task_defaults(before)


def test_an_unreadable_configuration_is_read_once_for_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken ./worker.toml is tried once for task ids, not again for every new id."""
    import conveyor.config
    from conveyor.task import restore_task_defaults, task_defaults_in_use

    (tmp_path / "worker.toml").write_text("[worker\n")
    monkeypatch.chdir(tmp_path)
    reads: list[object] = []
    real = conveyor.config.load_config

    def counting(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(conveyor.config, "load_config", counting)
    before = task_defaults_in_use()
    restore_task_defaults(None)
    try:

        class Many(conveyor.Task):
            n = conveyor.IntParameter()

        ids = {Many(n=n).task_id for n in range(50)}
        assert len(ids) == 50
        assert len(reads) == 1
    finally:
        restore_task_defaults(before)
