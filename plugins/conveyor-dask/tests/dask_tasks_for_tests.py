"""Task classes for the dask executor's tests, importable by name on the Dask workers.

The tests put this directory on ``PYTHONPATH`` before any Dask worker starts, so the attempt
processes that conveyor's subprocess runner starts on the Dask workers can import this module.
Tasks talk to the tests through files in their ``root`` directory: pid files, one-line side
effect logs, and files the test creates to release a waiting task.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator

import conveyor
from conveyor.testing.processes import put, wait_file


def append_line(path: str, text: str) -> None:
    """Append one line to ``path`` in a single write (O_APPEND: lines never interleave)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)


class Base(conveyor.Task):
    """A task whose files live in ``root``; its output is ``<root>/<Family>-<tag>.out``."""

    root = conveyor.Parameter()
    tag = conveyor.Parameter(default="0")

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.path(f"{type(self).__name__}-{self.tag}.out"))

    def side_effect(self) -> None:
        """Record one run of this attempt: a line ``pid ppid`` in ``<Family>-<tag>.runs``."""
        append_line(self.path(f"{type(self).__name__}-{self.tag}.runs"), where())

    def finish(self, text: str) -> None:
        with self.output().open("w") as out:
            out.write(text)


def where() -> str:
    """``"<pid> <parent pid>"`` of this attempt process (the parent is the Dask worker)."""
    return f"{os.getpid()} {os.getppid()}"


class Leaf(Base):
    """Records its run, then writes ``<tag> <pid> <ppid>`` as its output."""

    def run(self) -> None:
        self.side_effect()
        self.finish(f"{self.tag} {where()}")


class Join(Base):
    """Requires ``count`` leaves; checks every one of their outputs is complete."""

    count = conveyor.IntParameter()

    def requires(self) -> list[Leaf]:
        return [Leaf(root=self.root, tag=f"leaf{n}") for n in range(self.count)]

    def run(self) -> None:
        self.side_effect()
        tags = []
        for target in self.input():
            with target.open("r") as f:
                tags.append(f.read().split()[0])
        if tags != [f"leaf{n}" for n in range(self.count)]:
            raise RuntimeError(f"incomplete inputs: {tags}")
        self.finish(" ".join(tags))


class Gate(Base):
    """Writes its pid, waits (bounded) for ``<root>/gate.go``, then succeeds."""

    def run(self) -> None:
        self.side_effect()
        put(self.path("gate.pid"), str(os.getpid()))
        if not wait_file(self.path("gate.go"), 40):
            raise RuntimeError("gate.go never appeared")
        self.finish(f"{self.tag} {where()}")


class GatedJoin(Join):
    """A Join whose graph also holds a Gate (so the test can look at processes mid-run)."""

    def requires(self) -> list[Base]:  # type: ignore[override]
        return [*super().requires(), Gate(root=self.root)]

    def run(self) -> None:
        self.side_effect()
        tags = []
        for target in self.input()[:-1]:
            with target.open("r") as f:
                tags.append(f.read().split()[0])
        if tags != [f"leaf{n}" for n in range(self.count)]:
            raise RuntimeError(f"incomplete inputs: {tags}")
        self.finish(" ".join(tags))


class Overtime(Base):
    """Has a 1-second timeout, which includes its interpreter's start-up: on a loaded machine
    it may fire before run() begins. If run() begins, it records its run and then waits until
    it is killed (bounded only so that a failed kill cannot leave it running for ever)."""

    worker_timeout = 1

    def run(self) -> None:
        self.side_effect()
        wait_file(self.path("never"), 600)
        self.finish("too late")


class Exits(Base):
    """Records its run, then leaves through ``os._exit(3)`` without reporting anything."""

    def run(self) -> None:
        self.side_effect()
        os._exit(3)


class Hangs(Base):
    """Records its run, writes its pid to ``<tag>.pid`` and waits for a file that the test never
    creates, until it is stopped (bounded: a failed stop cannot leave it running for ever)."""

    def run(self) -> None:
        self.side_effect()
        put(self.path(f"{self.tag}.pid"), str(os.getpid()))
        wait_file(self.path("never"), 600)
        self.finish("woke up")


class Reporter(Base):
    """Sets a status message and waits (bounded) for ``<root>/seen`` — which the test creates
    once it heard the message, so it must arrive while the attempt runs; then progress, a
    tracking URL, a dynamic dependency, and more notes."""

    def run(self) -> Iterator[Leaf]:
        self.side_effect()
        self.set_status_message("waiting to be seen")
        if not wait_file(self.path("seen"), 40):
            raise RuntimeError("the status message did not reach the worker while running")
        self.set_progress_percentage(50)
        self.set_tracking_url("http://tracking.invalid/dask/1")
        dynamic = yield Leaf(root=self.root, tag="dyn")
        with dynamic.open("r") as f:
            text = f.read().split()[0]
        self.set_status_message("all done")
        self.set_progress_percentage(100)
        self.finish(text + "+reporter")


class Gpu(Base):
    """Needs one ``gpu``; holds an exclusive lock file for a while (fails if another holds it)."""

    resources = {"gpu": 1}

    def run(self) -> None:
        self.side_effect()
        lock = self.path("gpu.lock")
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise RuntimeError("another task holds the gpu") from None
            raise
        os.write(fd, where().encode())
        os.close(fd)
        append_line(self.path("gpu.log"), f"start {self.tag} {time.time()!r}")
        time.sleep(1.5)  # the work: long enough that an overlap would be caught
        append_line(self.path("gpu.log"), f"end {self.tag} {time.time()!r}")
        os.remove(lock)
        self.finish(f"{self.tag} {where()}")


class Pair(conveyor.WrapperTask):
    """Requires two ``Gpu`` tasks."""

    root = conveyor.Parameter()

    def requires(self) -> list[Gpu]:
        return [Gpu(root=self.root, tag="a"), Gpu(root=self.root, tag="b")]


class Many(conveyor.WrapperTask):
    """Requires ``count`` leaves."""

    root = conveyor.Parameter()
    count = conveyor.IntParameter()

    def requires(self) -> list[Leaf]:
        return [Leaf(root=self.root, tag=f"many{n}") for n in range(self.count)]
