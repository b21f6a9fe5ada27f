"""Unmodified Luigi tasks (and two conveyor tasks mixed with them) for the plugin's tests.

Importable in attempt processes through ``PYTHONPATH`` (see conftest.py). Every Luigi event
handled here appends one line ``<EVENT> <task_id> [<extra>]`` to the file named by the
environment variable :data:`EVENTS_VARIABLE` (when set), so that events fired in an attempt's
process are counted too.
"""

from __future__ import annotations

import datetime
import os
import pickle
import signal
import time
from typing import Any

import conveyor
import luigi
import luigi.task
import luigi.util
from luigi.parameter import ParameterVisibility

EVENTS_VARIABLE = "CONVEYOR_LUIGI_TEST_EVENTS"

EVENT_NAMES = {
    luigi.Event.START: "START",
    luigi.Event.SUCCESS: "SUCCESS",
    luigi.Event.FAILURE: "FAILURE",
    luigi.Event.PROCESSING_TIME: "PROCESSING_TIME",
    luigi.Event.DEPENDENCY_DISCOVERED: "DEPENDENCY_DISCOVERED",
    luigi.Event.DEPENDENCY_MISSING: "DEPENDENCY_MISSING",
    luigi.Event.DEPENDENCY_PRESENT: "DEPENDENCY_PRESENT",
    luigi.Event.BROKEN_TASK: "BROKEN_TASK",
    luigi.Event.TIMEOUT: "TIMEOUT",
    luigi.Event.PROCESS_FAILURE: "PROCESS_FAILURE",
}


def _note(event: str, task: Any, *args: Any) -> None:
    path = os.environ.get(EVENTS_VARIABLE)
    if not path:
        return
    extra = ""
    if event == luigi.Event.DEPENDENCY_DISCOVERED:
        extra = " " + args[0].task_id
    elif event in (luigi.Event.FAILURE, luigi.Event.BROKEN_TASK):
        extra = " " + type(args[0]).__name__
    elif event == luigi.Event.PROCESSING_TIME:
        extra = " " + ("number" if isinstance(args[0], float) else "?")
    elif event in (luigi.Event.TIMEOUT, luigi.Event.PROCESS_FAILURE):
        extra = " " + str(args[0]).replace("\n", " ")
    line = f"{EVENT_NAMES[event]} {task.task_id}{extra}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _handler(event: str) -> Any:
    def handle(task: Any, *args: Any) -> None:
        _note(event, task, *args)

    return handle


for _event in EVENT_NAMES:
    luigi.Task.event_handler(_event)(_handler(_event))


def _write(target: luigi.LocalTarget, text: str) -> None:
    with target.open("w") as out:
        out.write(text)


def _read(target: Any) -> str:
    with target.open("r") as src:
        return str(src.read())


# --- a small graph: parameters of several kinds, luigi.util, external, wrapper ----------------


class Raw(luigi.ExternalTask):
    """Data made elsewhere: root/<name>."""

    root = luigi.Parameter()
    name = luigi.Parameter(default="raw.txt")

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, self.name))


class Numbers(luigi.Task):
    """Writes 1..count, one a line (``count`` may come from luigi.cfg)."""

    root = luigi.Parameter()
    date = luigi.DateParameter()
    count = luigi.IntParameter(default=3)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, f"numbers-{self.date:%Y%m%d}.txt"))

    def run(self) -> None:
        _write(self.output(), "".join(f"{i}\n" for i in range(1, self.count + 1)))


@luigi.util.requires(Numbers)
class Squares(luigi.Task):
    """The squares of Numbers, tagged with ``labels``; ``--loud`` adds a '!' to each line."""

    labels = luigi.ListParameter(default=[])
    loud = luigi.BoolParameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, f"squares-{self.date:%Y%m%d}.txt"))

    def run(self) -> None:
        numbers = [int(line) for line in _read(self.input()).split()]
        mark = "!" if self.loud else ""
        tag = ",".join(self.labels)
        _write(self.output(), "".join(f"{n * n}{mark} {tag}\n" for n in numbers))


@luigi.util.inherits(Squares)
class Report(luigi.Task):
    """The sum of the squares and the raw data's text."""

    def requires(self) -> dict[str, luigi.Task]:
        return {"squares": self.clone(Squares), "raw": Raw(root=self.root)}

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, f"report-{self.date:%Y%m%d}.txt"))

    def run(self) -> None:
        inputs = self.input()
        lines = _read(inputs["squares"]).splitlines()
        total = sum(int(line.split()[0].rstrip("!")) for line in lines)
        _write(self.output(), f"total={total} raw={_read(inputs['raw']).strip()}\n")


class Marker(luigi.Task):
    """Complete when root/marker exists (its own complete(), no output())."""

    root = luigi.Parameter()

    def complete(self) -> bool:
        return os.path.exists(os.path.join(self.root, "marker"))

    def run(self) -> None:
        with open(os.path.join(self.root, "marker"), "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))


class All(luigi.WrapperTask):
    """The report and the marker."""

    root = luigi.Parameter()
    date = luigi.DateParameter(default=datetime.date(2024, 1, 1))
    labels = luigi.ListParameter(default=["a", "b"])
    loud = luigi.BoolParameter()

    def requires(self) -> list[luigi.Task]:
        report = Report(root=self.root, date=self.date, labels=self.labels, loud=self.loud)
        return [report, Marker(root=self.root)]


# --- dynamic dependencies ---------------------------------------------------------------------


class Piece(luigi.Task):
    """Writes root/piece-<index>.txt."""

    root = luigi.Parameter()
    index = luigi.IntParameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, f"piece-{self.index}.txt"))

    def run(self) -> None:
        _write(self.output(), f"piece {self.index}\n")


class Dynamic(luigi.Task):
    """Yields a task, then a luigi.DynamicRequirements with its own completeness check."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "dynamic.txt"))

    def run(self) -> Any:
        first = yield Piece(root=self.root, index=100)
        pieces = [Piece(root=self.root, index=i) for i in range(3)]

        def custom_complete(complete_fn: Any) -> bool:
            return all(complete_fn(piece) for piece in pieces)

        rest = yield luigi.DynamicRequirements(pieces, custom_complete)
        texts = [_read(first)] + [_read(target) for target in rest]
        _write(self.output(), "".join(texts))


# --- outcomes for events, explanations and reporting -----------------------------------------


class Fails(luigi.Task):
    """run() raises; on_failure() explains."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "fails.txt"))

    def run(self) -> None:
        raise RuntimeError("fails on purpose")

    def on_failure(self, exception: BaseException) -> str:
        return f"explained by on_failure: {exception}"


class Outcomes(luigi.WrapperTask):
    """Two that succeed, one that fails, one external that is missing."""

    root = luigi.Parameter()

    def requires(self) -> list[luigi.Task]:
        return [
            Piece(root=self.root, index=0),
            Piece(root=self.root, index=1),
            Fails(root=self.root),
            Raw(root=self.root, name="absent.txt"),
        ]


class Chatty(luigi.Task):
    """Reports a status message, progress and a tracking URL while it runs."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "chatty.txt"))

    def run(self) -> None:
        self.set_tracking_url("http://tracking.invalid/chatty")
        self.set_status_message("halfway there")
        self.set_progress_percentage(50)
        _write(self.output(), "chatty\n")


class Sleepy(luigi.Task):
    """Sleeps until it is killed: far longer than its worker_timeout, which leaves a slow
    machine's interpreter start (``subprocess``) ample time before ``run()`` starts."""

    root = luigi.Parameter()
    worker_timeout = 10

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "sleepy.txt"))

    def run(self) -> None:
        time.sleep(600)
        _write(self.output(), "woke up\n")


class Killed(luigi.Task):
    """Its ``run()`` kills its own process with SIGKILL."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "killed.txt"))

    def run(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class Wrapping(luigi.Task):
    """A task whose ``TaskParameter`` names another task class (of any module)."""

    root = luigi.Parameter()
    inner = luigi.TaskParameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "wrapping.txt"))

    def run(self) -> None:
        _write(self.output(), f"{self.inner.get_task_family()}\n")


class Policied(luigi.Task):
    """A task with every scheduling attribute Luigi has."""

    root = luigi.Parameter()
    secret = luigi.Parameter(default="s3cret", significant=False)
    priority = 7
    resources = {"db": 2}
    worker_timeout = 30
    disabled = False
    owner_email = "a@example.com,b@example.com"

    @property
    def retry_count(self) -> int:
        return 4

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "policied.txt"))


# --- mixed with conveyor tasks ----------------------------------------------------------------


class ConveyorLeaf(conveyor.Task):
    """A conveyor task a Luigi task requires."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "conveyor-leaf.txt"))

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("from conveyor\n")


class LuigiOnConveyor(luigi.Task):
    """A Luigi task requiring a conveyor task (Luigi's input() maps Luigi tasks only: the
    conveyor task's output() is asked directly)."""

    root = luigi.Parameter()

    def requires(self) -> ConveyorLeaf:
        return ConveyorLeaf(root=self.root)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "luigi-on-conveyor.txt"))

    def run(self) -> None:
        with self.requires().output().open("r") as src:
            text = src.read()
        _write(self.output(), "luigi got: " + text)


class ConveyorOnLuigi(conveyor.Task):
    """A conveyor task requiring a Luigi task; its input() is the Luigi task's output()."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        return LuigiOnConveyor(root=self.root)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "conveyor-on-luigi.txt"))

    def run(self) -> None:
        text = _read(self.input())
        with self.output().open("w") as out:
            out.write("conveyor got: " + text)


# --- the command line in every process; luigi.tools.range -------------------------------------


class Total(luigi.Task):
    """Requires Numbers without giving its count: ``--Numbers-count`` decides it, in the worker
    and again in the attempt's process, where run() calls requires()."""

    root = luigi.Parameter()

    def requires(self) -> Numbers:
        return Numbers(root=self.root, date=datetime.date(2024, 1, 1))

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "total.txt"))

    def run(self) -> None:
        _write(self.output(), f"count={self.requires().count}\n")


class Daily(luigi.Task):
    """One file a day, for luigi.tools.range."""

    root = luigi.Parameter()
    date = luigi.DateParameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, f"daily-{self.date:%Y%m%d}.txt"))

    def run(self) -> None:
        _write(self.output(), f"{self.date}\n")


# --- review fixes: pickling, private and None parameters, complete() values, on_success() ----


class Pickles(luigi.Task):
    """Pickles itself in run(), as luigi.contrib's spark and hadoop job tasks do."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "pickles.txt"))

    def run(self) -> None:
        with self.no_unpicklable_properties():
            data = pickle.dumps(self)
        _write(self.output(), f"{pickle.loads(data).task_id}\n")


class Private(luigi.Task):
    """A private parameter: Luigi's to_str_params() leaves it out."""

    root = luigi.Parameter()
    level = luigi.IntParameter(default=1, visibility=ParameterVisibility.PRIVATE)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "private.txt"))

    def run(self) -> None:
        _write(self.output(), f"level={self.level}\n")


class Optionals(luigi.Task):
    """A parameter whose default is None and one whose default is not None."""

    root = luigi.Parameter()
    note = luigi.Parameter(default=None)
    count = luigi.IntParameter(default=3)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "optionals.txt"))

    def run(self) -> None:
        _write(self.output(), f"note={self.note!r} count={self.count!r}\n")


class Truthy(luigi.Task):
    """complete() answers 1 or 0, which Luigi accepts."""

    root = luigi.Parameter()

    def complete(self) -> Any:
        return int(os.path.exists(os.path.join(self.root, "truthy.txt")))

    def run(self) -> None:
        with open(os.path.join(self.root, "truthy.txt"), "w", encoding="utf-8") as out:
            out.write("made\n")


class Polite(luigi.Task):
    """on_success() returns text (the success's explanation)."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "polite.txt"))

    def run(self) -> None:
        _write(self.output(), "polite\n")

    def on_success(self) -> str:
        return f"made {self.output().path}"


class NeedsExternal(luigi.Task):
    """Requires an externalized copy of Piece 7: never runs it."""

    root = luigi.Parameter()

    def requires(self) -> luigi.Task:
        return luigi.task.externalize(Piece(root=self.root, index=7))

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "needs-external.txt"))

    def run(self) -> None:
        _write(self.output(), "ran\n")
