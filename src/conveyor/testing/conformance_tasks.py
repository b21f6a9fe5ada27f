"""Tasks used by :func:`conveyor.testing.executors.check_executor` (importable by name)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..parameters import Parameter
from ..targets import LocalTarget
from ..task import Task


class _Conformance(Task):
    task_namespace = "conveyor.conformance"
    path = Parameter()

    def output(self) -> LocalTarget:
        return LocalTarget(self.path)


class Writes(_Conformance):
    """Reports a status message, progress and a tracking URL, then writes its output."""

    def run(self) -> None:
        self.set_status_message("writing")
        self.set_progress_percentage(50)
        self.set_tracking_url("http://example.invalid/t")
        with self.output().open("w") as out:
            out.write("ok")


class Raises(_Conformance):
    """Fails with a ValueError."""

    def run(self) -> None:
        raise ValueError("conformance failure")


class ForgetsOutput(_Conformance):
    """Returns without writing its output."""

    def run(self) -> None:
        return None


class YieldsDependency(_Conformance):
    """Yields one incomplete dynamic dependency."""

    def run(self) -> Iterator[Task]:
        yield Writes(path=f"{self.path}.dep")
        with self.output().open("w") as out:
            out.write("ok")


class Sleeps(_Conformance):
    """Sleeps far longer than any conformance timeout."""

    def run(self) -> None:
        time.sleep(120)
