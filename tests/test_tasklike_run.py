"""Tasks of another framework run through ``conveyor.TaskLike`` (SPEC §10, issue 21).

The tasks here are :class:`conveyor_recorder_plugin.foreignloader.Thing`\\ s: a tiny framework
that subclasses nothing of conveyor's, with string parameters, ``requires()``,
``complete()``, ``run()`` (a generator may yield tasks), ``output()`` and a policy naming its
task loader, ``foreign`` (an entry point of ``conveyor.task_loaders`` of the test plugin). They
run under ``conveyor.build()`` with the in-process executors, and with the subprocess executor,
whose attempt's process rebuilds them through that loader.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from conveyor_recorder_plugin.foreignloader import LOADER_NAME, ForeignLoader, Thing

import conveyor
from conveyor.backends import load_task_loader
from conveyor.errors import TaskLoadError
from conveyor.executors.base import AttemptRequest
from conveyor.executors.child import attempt_spec
from conveyor.task import batch_key, is_task_like, requirements

pytestmark = pytest.mark.timeout(120)

IN_PROCESS = ["inline", "thread"]

TASKS = '''
import os
import pathlib

import conveyor
from conveyor_recorder_plugin.foreignloader import Thing


def _write(path, text):
    pathlib.Path(path).write_text(f"{text}|{os.getpid()}", encoding="utf-8")


def _read(path):
    return pathlib.Path(path).read_text(encoding="utf-8").split("|")[0]


class Make(Thing):
    """Writes its text into root/name."""

    def output(self):
        return os.path.join(self.task_params["root"], self.task_params["name"])

    def complete(self):
        return os.path.exists(self.output())

    def run(self):
        _write(self.output(), self.task_params["text"])


class Upper(Make):
    """Needs a Make of name.src; writes that text upper-cased."""

    def requires(self):
        root = self.task_params["root"]
        return {"src": Make(root=root, name=self.task_params["name"] + ".src", text="chain")}

    def run(self):
        _write(self.output(), _read(self.requires()["src"].output()).upper())


class Top(Make):
    """The end of a chain of three: Top -> Upper -> Make."""

    def requires(self):
        return [Upper(root=self.task_params["root"], name="mid")]

    def run(self):
        [upper] = self.requires()
        _write(self.output(), "top:" + _read(upper.output()))


class Dynamic(Make):
    """Yields a Make from run(); the yield evaluates to its output()."""

    def run(self):
        path = yield Make(root=self.task_params["root"], name="dyn.src", text="yielded")
        _write(self.output(), "got " + _read(path))


class Lazy(Make):
    """Its run() makes nothing: incomplete after run."""

    def run(self):
        pass


class Boom(Make):
    """Its run() raises."""

    def run(self):
        raise RuntimeError("boom from another framework")


class YieldsForeign(conveyor.Task):
    """A conveyor task whose run() yields a task of the other framework."""

    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "yields-foreign"))

    def run(self):
        yield Make(root=self.root, name="yielded-foreign", text="x")
        with self.output().open("w") as out:
            out.write("done")


class Fragile(Make):
    """Cannot be built in another process than the one named by ``pid``: rebuilding it in an
    attempt's process raises ValueError from its constructor (through the loader)."""

    def __init__(self, **params):
        if int(params.get("pid", os.getpid())) != os.getpid():
            raise ValueError("fragile: made in another process")
        super().__init__(**params)


class Mixed(conveyor.Task):
    """A conveyor task that requires a task of the other framework."""

    root = conveyor.Parameter()

    def requires(self):
        return Make(root=self.root, name="for-conveyor", text="foreign")

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "mixed"))

    def run(self):
        with self.output().open("w") as out:
            out.write("mixed:" + _read(self.input()))
'''


@pytest.fixture
def mod(process_module: Callable[[str], Any]) -> Any:
    """The task module, importable here and (through PYTHONPATH) in an attempt's process."""
    return process_module(TASKS)


def _text_and_pid(path: str) -> tuple[str, int]:
    text, pid = Path(path).read_text(encoding="utf-8").split("|")
    return text, int(pid)


def test_a_thing_is_a_tasklike_but_not_a_conveyor_task(mod: Any, tmp_path: Path) -> None:
    """The foreign class has TaskLike's members and nothing of conveyor's Task."""
    task = mod.Top(root=str(tmp_path), name="top")
    assert isinstance(task, conveyor.TaskLike) and is_task_like(task)
    assert not isinstance(task, conveyor.Task)
    assert not is_task_like("Top") and not is_task_like([task])
    assert [dep.task_id for dep in requirements(task)] == [
        mod.Upper(root=str(tmp_path), name="mid").task_id
    ]


@pytest.mark.parametrize("executor", IN_PROCESS)
def test_a_foreign_chain_runs_in_process(executor: str, mod: Any, tmp_path: Path) -> None:
    """Top -> Upper -> Make: each runs once, in dependency order, in this process."""
    top = mod.Top(root=str(tmp_path), name="top")
    result = conveyor.build(top, executor=executor, workers=1 if executor == "inline" else 2)
    assert result.ok, result.summary
    assert result.exit_code == 0
    assert set(result.states.values()) == {"DONE"} and len(result.states) == 3
    assert _text_and_pid(top.output()) == ("top:CHAIN", os.getpid())
    assert result.tasks[top.task_id] is top


@pytest.mark.parametrize("executor", IN_PROCESS)
def test_a_foreign_run_may_yield_a_dynamic_dependency(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """run() yields a foreign task: it runs, and the yield evaluates to its output()."""
    task = mod.Dynamic(root=str(tmp_path), name="dyn")
    result = conveyor.build([task], executor=executor, workers=1)
    assert result.ok, result.summary
    assert _text_and_pid(task.output())[0] == "got yielded"
    assert _text_and_pid(str(tmp_path / "dyn.src"))[0] == "yielded"
    assert len(result.states) == 2


def test_foreign_failures_are_reported_as_for_conveyor_tasks(mod: Any, tmp_path: Path) -> None:
    """A run() that raises fails with its traceback; one that makes nothing fails as
    incomplete after run (check_complete_on_run); neither stops the other tasks."""
    boom = mod.Boom(root=str(tmp_path), name="boom")
    lazy = mod.Lazy(root=str(tmp_path), name="lazy")
    fine = mod.Make(root=str(tmp_path), name="fine", text="ok")
    result = conveyor.build([boom, lazy, fine], executor="inline", workers=1)
    assert not result.ok
    assert result.states[boom.task_id] == "FAILED"
    assert "boom from another framework" in result.errors[boom.task_id]
    assert result.states[lazy.task_id] == "FAILED"
    assert "not complete" in result.errors[lazy.task_id]
    assert result.states[fine.task_id] == "DONE"


@pytest.mark.parametrize("executor", ["inline", "subprocess"])
def test_a_conveyor_task_may_require_a_foreign_one(executor: str, mod: Any, tmp_path: Path) -> None:
    """A conveyor task's requires() may name a foreign task; input() is its output(). In an
    attempt's process, its requirements are made again by its own requires() (the loader of
    a conveyor task rebuilds conveyor tasks only)."""
    mixed = mod.Mixed(root=str(tmp_path))
    assert (
        attempt_spec(AttemptRequest(mixed, mixed.task_id, 1, deps=(mixed.requires(),))).deps is None
    )
    result = conveyor.build(mixed, executor=executor)
    assert result.ok, result.summary
    assert (tmp_path / "mixed").read_text(encoding="utf-8") == "mixed:foreign"


@pytest.mark.parametrize("executor", ["thread", "subprocess"])
def test_a_conveyor_run_yielding_a_foreign_task(executor: str, mod: Any, tmp_path: Path) -> None:
    """In process, a conveyor task's run() may yield a foreign task; in an attempt's process
    conveyor's loader cannot rebuild it, and the attempt fails saying so (not as an
    unreadable message)."""
    task = mod.YieldsForeign(root=str(tmp_path))
    result = conveyor.build(task, executor=executor)
    if executor == "thread":
        assert result.ok, result.summary
        assert (tmp_path / "yields-foreign").read_text(encoding="utf-8") == "done"
    else:
        assert result.states[task.task_id] == "FAILED"
        assert "cannot rebuild" in result.errors[task.task_id]
        assert "unreadable" not in result.errors[task.task_id]


def test_worker_add_refuses_what_is_not_a_task() -> None:
    """Worker.add() takes a TaskLike; anything else is a TypeError naming what it got."""
    with (
        conveyor.Worker(conveyor.Scheduler()) as worker,
        pytest.raises(TypeError, match=r"conveyor\.TaskLike.*got str"),
    ):
        worker.add("Top")  # type: ignore[arg-type]


def test_a_task_class_is_not_a_task_and_requires_returning_one_is_a_broken_task(
    tmp_path: Path,
) -> None:
    """A class is never a task (``return A`` written for ``return A()``), whatever was asked
    before: ``requires()`` returning one makes its task broken, named, as before the protocol;
    and asking about a class does not make ``int`` a task."""

    class A(conveyor.Task):
        def output(self) -> conveyor.LocalTarget:
            return conveyor.LocalTarget(str(tmp_path / "a"))

    class B(conveyor.Task):
        def requires(self) -> Any:
            return A  # the class, not A()

        def output(self) -> conveyor.LocalTarget:
            return conveyor.LocalTarget(str(tmp_path / "b"))

    assert (is_task_like(A), is_task_like(int), is_task_like(A())) == (False, False, True)
    result = conveyor.build(B(), local_scheduler=True, log_level="warning")
    assert not result.ok
    assert "returned" in result.summary and "expected a Task" in result.summary
    with (
        conveyor.Worker(conveyor.Scheduler()) as worker,
        pytest.raises(TypeError, match=r"conveyor\.TaskLike"),
    ):
        worker.add(A)  # type: ignore[arg-type]


def test_the_foreign_loader_is_found_by_entry_point(mod: Any, tmp_path: Path) -> None:
    """The test plugin registers ``foreign``; the attempt's spec names it for a Thing."""
    loader = load_task_loader(LOADER_NAME)
    assert isinstance(loader, ForeignLoader) and isinstance(loader, conveyor.TaskLoader)
    top = mod.Top(root=str(tmp_path), name="top")
    rebuilt = loader.load(top.task_module, top.task_family, top.task_params)
    assert type(rebuilt) is mod.Top and rebuilt.task_id == top.task_id
    spec = attempt_spec(AttemptRequest(top, top.task_id, 1))
    assert (spec.loader, spec.family, dict(spec.params)) == (
        "foreign",
        "Top",
        dict(top.task_params),
    )
    with pytest.raises(TaskLoadError, match="not a Thing"):
        loader.load("conveyor.task", "Task", {})


@pytest.mark.parametrize("executor", ["subprocess", "fork"])
def test_a_foreign_chain_runs_in_other_processes(executor: str, mod: Any, tmp_path: Path) -> None:
    """With a process executor each attempt's process rebuilds its task through the
    ``foreign`` loader: the chain and a dynamic dependency run in other processes."""
    if executor == "fork" and not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    top = mod.Top(root=str(tmp_path), name="top")
    dynamic = mod.Dynamic(root=str(tmp_path), name="dyn")
    result = conveyor.build([top, dynamic], executor=executor, workers=2)
    assert result.ok, result.summary
    assert len(result.states) == 5 and set(result.states.values()) == {"DONE"}
    text, pid = _text_and_pid(top.output())
    assert text == "top:CHAIN" and pid != os.getpid()
    text, pid = _text_and_pid(dynamic.output())
    assert text == "got yielded" and pid != os.getpid()


def test_a_loader_that_makes_no_task_fails_the_attempt(mod: Any, tmp_path: Path) -> None:
    """A foreign task whose loader cannot rebuild it in the attempt's process (its class
    is not at module level there) fails as a load error; run() is never called."""
    thing = _Local(root=str(tmp_path), name="local")
    result = conveyor.build(thing, executor="subprocess", workers=1)
    assert result.states[thing.task_id] == "FAILED"
    assert "foreign loader" in result.errors[thing.task_id]
    assert not (tmp_path / "local").exists()


@pytest.mark.parametrize("executor", ["subprocess", "fork"])
def test_a_loader_raising_an_error_of_its_own_fails_the_attempt_naming_it(
    executor: str, mod: Any, tmp_path: Path
) -> None:
    """An error that is not conveyor's, raised while the loader rebuilds the task (here the
    task's own constructor), fails the attempt as a load error naming it; run() never ran."""
    fragile = mod.Fragile(root=str(tmp_path), name="fragile", text="x", pid=str(os.getpid()))
    result = conveyor.build(fragile, executor=executor, workers=1)
    assert result.states[fragile.task_id] == "FAILED"
    error = result.errors[fragile.task_id]
    assert "could not rebuild" in error and "ValueError: fragile" in error
    assert not (tmp_path / "fragile").exists()


class _Local(Thing):
    """A Thing of this test module's name but absent from the module an attempt imports."""

    __module__ = "tests_no_such_module_here"

    def output(self) -> str:
        return os.path.join(self.task_params["root"], self.task_params["name"])

    def complete(self) -> bool:
        return os.path.exists(self.output())

    def run(self) -> None:
        Path(self.output()).write_text("ran", encoding="utf-8")


class _Batcher(_Local):
    """A Thing that answers ``task_batch_key()`` with the class's ``answer`` (raising it
    when it is an exception); it is never asked to make a batch."""

    answer: object = None

    def task_batch_key(self) -> object:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def task_batch(self, members: Any) -> Any:
        raise AssertionError("a task that runs alone is never asked for a batch")


def test_a_valid_task_batch_key_is_the_batch_key(tmp_path: Path) -> None:
    """``conveyor.task.batch_key`` asks another framework's task (RunsInBatches)."""
    cls = type("GoodBatcher", (_Batcher,), {"answer": ("family-and-group", 5)})
    task = cls(root=str(tmp_path), name="good")
    assert isinstance(task, conveyor.RunsInBatches)
    assert batch_key(task) == ("family-and-group", 5)


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("no key today"),
        ("k", -1),
        ("k", 1.5),
        ("k", True),
        ("", 0),
        ("a\nb", 0),
        ("x" * 1001, 0),
        (7, 0),
        "k",
        ("k", 0, 1),
    ],
)
def test_a_task_batch_key_that_raises_or_answers_badly_runs_the_task_alone(
    answer: object, tmp_path: Path
) -> None:
    """A ``task_batch_key()`` that raises, or answers anything but None or a ``(key,
    max_size >= 0)`` the protocol carries (a key of 1 to 1,000 characters without control
    characters), is logged naming the task, and the task runs alone: the run is ok."""
    cls = type("OddBatcher", (_Batcher,), {"answer": answer})
    task = cls(root=str(tmp_path), name="odd")
    with structlog.testing.capture_logs() as logs:
        assert batch_key(task) is None
    [entry] = [e for e in logs if e["event"].startswith("task_batch_key() failed")]
    assert entry["task_id"] == task.task_id and entry["problem"]
    result = conveyor.build(task, executor="inline")
    assert result.ok, result.summary
    assert (tmp_path / "odd").read_text(encoding="utf-8") == "ran"
