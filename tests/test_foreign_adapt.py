"""The seams for another framework's tasks (issue 22): adapting, command lines, the loader on
the wire.

The test plugin's ``foreign`` task loader (:mod:`conveyor_recorder_plugin.foreignloader`) has
both optional capabilities: it adapts a :class:`Recipe` (an object that is not a task) into the
:class:`Thing` it describes, and it builds a Thing from ``conveyor run``'s words. These tests
check that conveyor asks for them wherever a task may appear — ``build()``, ``Worker.add()``,
a conveyor task's ``requires()``, ``input()`` and ``yield`` — and that a task's loader travels
with it to the scheduler, its stored row and an assistant.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conveyor_recorder_plugin.foreignloader import LOADER_NAME, Recipe

import conveyor
from conveyor.errors import TaskDefinitionError
from conveyor.protocol import DEFAULT_LOADER, TaskSpec
from conveyor.scheduler.persist import from_row, to_row
from conveyor.task import as_task
from conveyor.testing import RecordingPlugin

pytestmark = pytest.mark.timeout(120)

TASKS = '''
import os
import pathlib

import conveyor
from conveyor_recorder_plugin.foreignloader import Recipe, Thing


class Make(Thing):
    """Writes its text into root/name."""

    def output(self):
        return os.path.join(self.task_params["root"], self.task_params["name"])

    def complete(self):
        return os.path.exists(self.output())

    def run(self):
        pathlib.Path(self.output()).write_text(self.task_params["text"], encoding="utf-8")


class NeedsRecipe(conveyor.Task):
    """A conveyor task requiring a Recipe: input() is the adapted Thing's output()."""

    root = conveyor.Parameter()

    def requires(self):
        return {"src": Recipe(Make, root=self.root, name="from-recipe", text="adapted")}

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "needs-recipe"))

    def run(self):
        text = pathlib.Path(self.input()["src"]).read_text(encoding="utf-8")
        with self.output().open("w") as out:
            out.write("got " + text)


class YieldsRecipe(conveyor.Task):
    """A conveyor task whose run() yields a Recipe: the yield is the Thing's output()."""

    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "yields-recipe"))

    def run(self):
        path = yield Recipe(Make, root=self.root, name="yielded", text="dynamic")
        with self.output().open("w") as out:
            out.write("yielded " + pathlib.Path(path).read_text(encoding="utf-8"))


class Noisy(Make):
    """Reports a status message and a progress through the reporter conveyor sets."""

    _report = None

    def set_task_reporter(self, report):
        self._report = report

    def run(self):
        self._report("status_message", "half way")
        self._report("progress", 50)
        super().run()
        self._report("tracking_url", "https://example.org/job/1")


class NeedsJunk(conveyor.Task):
    """requires() holds an object no loader adapts."""

    def requires(self):
        return [object()]
'''


@pytest.fixture
def mod(process_module: Callable[[str], Any]) -> Any:
    """The task module, importable here and (through PYTHONPATH) in an attempt's process."""
    return process_module(TASKS)


def test_a_recipe_is_not_a_task_but_the_foreign_loader_adapts_it(mod: Any, tmp_path: Path) -> None:
    """as_task() returns a task as it is, the loader's Thing for a Recipe, None for junk."""
    recipe = Recipe(mod.Make, root=str(tmp_path), name="a", text="x")
    adapted = as_task(recipe)
    assert isinstance(adapted, mod.Make)
    assert adapted.task_params == {"root": str(tmp_path), "name": "a", "text": "x"}
    thing = mod.Make(root=str(tmp_path), name="b", text="y")
    assert as_task(thing) is thing
    assert as_task(object()) is None and as_task(mod.Make) is None  # (a class is never a task)


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_build_and_worker_add_take_an_adaptable_object(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """build(recipe), build([recipe, ...]) and Worker.add(recipe) run the adapted Thing."""
    one = Recipe(mod.Make, root=str(tmp_path), name="one", text="1")
    result = conveyor.build(one, executor=executor, workers=1)
    assert result.ok, result.summary
    assert (tmp_path / "one").read_text(encoding="utf-8") == "1"
    two = Recipe(mod.Make, root=str(tmp_path), name="two", text="2")
    task = mod.NeedsRecipe(root=str(tmp_path))
    result = conveyor.build([two, task], executor=executor, workers=1)
    assert result.ok, result.summary
    assert (tmp_path / "two").read_text(encoding="utf-8") == "2"
    assert (tmp_path / "needs-recipe").read_text(encoding="utf-8") == "got adapted"
    three = Recipe(mod.Make, root=str(tmp_path), name="three", text="3")
    with conveyor.Worker(config=conveyor.Config(), executor=executor) as worker:
        assert worker.add(three)
        assert worker.run()
    assert (tmp_path / "three").read_text(encoding="utf-8") == "3"


@pytest.mark.parametrize("executor", ["inline", "thread"])
def test_a_yielded_recipe_is_a_dynamic_dependency(executor: str, mod: Any, tmp_path: Path) -> None:
    """run() yields a Recipe: the Thing runs, and the yield evaluates to its output()."""
    result = conveyor.build(mod.YieldsRecipe(root=str(tmp_path)), executor=executor, workers=1)
    assert result.ok, result.summary
    assert (tmp_path / "yields-recipe").read_text(encoding="utf-8") == "yielded dynamic"


def test_what_no_loader_adapts_is_still_refused(mod: Any) -> None:
    """Worker.add(junk) is a TypeError and junk in requires() makes the task broken."""
    with conveyor.Worker(config=conveyor.Config()) as worker, pytest.raises(TypeError):
        worker.add(object())  # type: ignore[arg-type]
    result = conveyor.build(mod.NeedsJunk())
    assert not result.ok and result.exit_code == 3
    assert "expected only Tasks" in " ".join(result.errors.values())
    with pytest.raises(TaskDefinitionError):
        mod.NeedsJunk().deps()


def test_conveyor_run_hands_a_foreign_family_to_its_loader(
    mod: Any, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    """`conveyor run mod.Make --root R ... --executor subprocess`: run's own options are taken
    out, the rest parsed by the loader; a bad word is one clear line and exit 2."""
    name = mod.__name__
    proc = run_cli(
        "run", f"{name}.Make", "--root", str(tmp_path), "--name", "cli", "--executor",
        "subprocess", "--text", "from the command line", "--local-scheduler",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cli").read_text(encoding="utf-8") == "from the command line"
    assert "1 ran successfully" in proc.stdout and "text=from the command line" in proc.stdout
    bad = run_cli("run", f"{name}.Make", "--root", str(tmp_path), "loose", cwd=tmp_path)
    assert bad.returncode == 2
    assert "expected --key value pairs" in bad.stderr and "Traceback" not in bad.stderr
    broken = run_cli("run", f"{name}.Make", "--explode", "x", cwd=tmp_path)
    assert broken.returncode == 2, broken.stderr
    assert "task loader ForeignLoader failed on" in broken.stderr
    assert "KeyError" in broken.stderr and "Traceback" not in broken.stderr
    missing = run_cli("run", f"{name}.Nothing", cwd=tmp_path)
    assert missing.returncode == 2, missing.stderr
    assert "has no task family 'Nothing'" in missing.stderr and "Traceback" not in missing.stderr


def test_a_tasks_loader_travels_to_the_scheduler_its_row_and_the_work() -> None:
    """TaskSpec.loader is kept by the scheduler, handed out with the Work, and stored; a row
    saved before the field existed reads as conveyor's loader."""
    scheduler = conveyor.Scheduler()
    scheduler.add_tasks("w", [TaskSpec("T_1", "T", "m", {}, loader=LOADER_NAME)])
    work = scheduler.get_work("w")
    assert work is not None and work.loader == LOADER_NAME
    record = scheduler.peek("T_1")
    assert record is not None
    row = to_row(record)
    assert row["loader"] == LOADER_NAME and from_row(row).loader == LOADER_NAME
    del row["loader"]
    assert from_row(row).loader == DEFAULT_LOADER


def test_an_assistant_rebuilds_a_foreign_task_with_its_loader(mod: Any, tmp_path: Path) -> None:
    """A Thing registered by one worker is run by an assistant that never saw it: the Work
    names the foreign loader, which rebuilds it in the assistant."""
    scheduler = conveyor.Scheduler()
    registrar = conveyor.Worker(scheduler, config=conveyor.Config(), worker_id="registrar")
    assert registrar.add(mod.Make(root=str(tmp_path), name="adopted", text="by the assistant"))
    toml = tmp_path / "assistant.toml"
    toml.write_text(f'[worker]\nassistant = true\ntask_modules = ["{mod.__name__}"]\n')
    with conveyor.Worker(scheduler, config=conveyor.load_config(toml), worker_id="helper") as a:
        assert a.run()
    registrar.close()
    assert (tmp_path / "adopted").read_text(encoding="utf-8") == "by the assistant"


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_a_foreign_task_with_a_reporter_method_reports_notes(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """set_task_reporter() is given the reporter around run(), in the attempt's process: the
    notes reach the worker's hooks."""
    task = mod.Noisy(root=str(tmp_path), name="noisy", text="n")
    assert isinstance(task, conveyor.ReportsNotes)
    recorder = RecordingPlugin()
    with conveyor.Worker(config=conveyor.Config(), executor=executor, plugins=[recorder]) as w:
        assert w.add(task)
        assert w.run()
    messages = recorder.events("conveyor_task_status_message", task.task_id)
    assert [e.message for e in messages] == ["half way"]
    assert [e.percentage for e in recorder.events("conveyor_task_progress", task.task_id)] == [50]
    urls = recorder.events("conveyor_task_tracking_url", task.task_id)
    assert [e.url for e in urls] == ["https://example.org/job/1"]


def test_an_assistant_is_handed_only_tasks_its_loaders_rebuild() -> None:
    """An assistant naming no loaders gets conveyor tasks only; one naming the foreign loader
    gets the foreign task; what one skips stays queued for the next, in priority order."""
    scheduler = conveyor.Scheduler()
    scheduler.add_tasks(
        "registrar",
        [
            TaskSpec("F_1", "F", "m", {}, priority=9, loader=LOADER_NAME),
            TaskSpec("F_2", "F", "m", {}, priority=8, loader=LOADER_NAME),
            TaskSpec("C_1", "C", "m", {}, priority=1),
        ],
    )
    plain = scheduler.get_work("plain", assistant=True)
    assert plain is not None and plain.task_id == "C_1" and plain.loader == DEFAULT_LOADER
    assert scheduler.get_work("plain", assistant=True) is None  # (F_1, F_2 are not for it)
    both = scheduler.get_work("both", assistant=True, loaders=(DEFAULT_LOADER, LOADER_NAME))
    assert both is not None and (both.task_id, both.loader) == ("F_1", LOADER_NAME)
    again = scheduler.get_work("foreign", assistant=True, loaders=(LOADER_NAME,))
    assert again is not None and again.task_id == "F_2"
    assert scheduler.get_work("registrar") is None  # (its own tasks are all handed out)


def test_a_loaders_heap_no_assistant_reads_stays_bounded() -> None:
    """Tasks of a loader no live assistant has are offered to that loader's heap at every
    registration; nobody pops that heap, so it is compacted instead of growing with each
    offer, and the task that is ready stays in it."""
    scheduler = conveyor.Scheduler()
    assert scheduler.get_work("plain", assistant=True) is None  # (an assistant exists)
    specs = [TaskSpec(f"F_{i}", "F", "m", {}, loader=LOADER_NAME) for i in range(100)]
    for _ in range(40):  # 4,000 offers of 100 pending tasks
        scheduler.add_tasks("owner", specs)
    foreign = scheduler._heaps["\0assistants\0" + LOADER_NAME]  # (white-box: its size)
    assert len(foreign) <= 2 * 100 + 1024
    assert {entry[2] for entry in foreign} == {spec.task_id for spec in specs}
    helper = scheduler.get_work("helper", assistant=True, loaders=(LOADER_NAME,))
    assert helper is not None and helper.loader == LOADER_NAME


def test_build_of_a_list_never_asks_the_loaders(
    mod: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list of conveyor tasks is a list: build() does not offer it to the task loaders
    (whose import might fail, or be slow)."""
    import conveyor.backends

    def refuse() -> list[Any]:
        raise AssertionError("the task loaders were asked about a list")

    monkeypatch.setattr(conveyor.backends, "other_task_loaders", refuse)
    task = mod.NeedsRecipe(root=str(tmp_path))
    assert as_task([task]) is None and as_task((task,)) is None and as_task(None) is None
    result = conveyor.build([mod.Noisy(root=str(tmp_path), name="n", text="t")], workers=1)
    assert result.ok, result.summary
