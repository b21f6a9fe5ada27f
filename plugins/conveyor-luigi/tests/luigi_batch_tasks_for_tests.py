"""Luigi batch tasks (``batch_method``, ``max_batch_size``) for test_luigi_batches.py.

``Shard`` combines its ``item`` with ``",".join`` and does every member's work in one
``run()``; ``Latest`` takes the largest ``day`` (``max``). Each ``run()`` appends a line to
``<root>/runs.log``, so a test counts the attempts; a file ``<root>/fail`` makes ``Shard`` fail.
"""

from __future__ import annotations

import os
from typing import Any

import luigi


def _runs(root: str) -> str:
    return os.path.join(root, "runs.log")


def _note(root: str, line: str) -> None:
    with open(_runs(root), "a", encoding="utf-8") as out:
        out.write(line + "\n")


class Shard(luigi.Task):
    """One item of a group; a batch is the items joined with commas."""

    root = luigi.Parameter()
    group = luigi.Parameter(default="g")
    item = luigi.Parameter(batch_method=",".join)

    def items(self) -> list[str]:
        """The items this task (or batch) covers."""
        return str(self.item).split(",")

    def complete(self) -> bool:
        """Every item's file exists."""
        root, group = str(self.root), str(self.group)
        return all(os.path.exists(os.path.join(root, f"{group}-{i}")) for i in self.items())

    def run(self) -> None:
        """Note the attempt, then write every item's file (or fail on purpose)."""
        _note(str(self.root), f"{self.task_family} {self.group} {self.item}")
        if os.path.exists(os.path.join(str(self.root), "fail")):
            raise RuntimeError("the batch fails on purpose")
        for i in self.items():
            path = os.path.join(str(self.root), f"{self.group}-{i}")
            with open(path, "w", encoding="utf-8") as out:
                out.write("ok")


class SizedShard(Shard):
    """At most 20 members a batch."""

    max_batch_size = 20


class NotBatchable(Shard):
    """Has a batched parameter, but each task says it is not batchable (Luigi asks each)."""

    @property
    def batchable(self) -> bool:
        """Never."""
        return False


class Costly(Shard):
    """Items before ``005`` need one ``db``, the others two: Luigi batches equal resources."""

    def process_resources(self) -> dict[str, int]:
        """By item."""
        return {"db": 1 if str(self.item) < "005" else 2}


class AskedSize(Shard):
    """``max_batch_size`` as a property of the task, which Luigi's worker reads."""

    @property
    def max_batch_size(self) -> int:  # type: ignore[override]
        """Seven."""
        return 7


class Latest(luigi.Task):
    """Complete up to ``day``; a batch is its largest day."""

    root = luigi.Parameter()
    day = luigi.IntParameter(batch_method=max)

    def complete(self) -> bool:
        """The latest day written is at least this one."""
        path = os.path.join(str(self.root), "latest")
        if not os.path.exists(path):
            return False
        with open(path, encoding="utf-8") as f:
            return int(f.read()) >= int(self.day)

    def run(self) -> None:
        """Note the attempt and write the day."""
        _note(str(self.root), f"Latest {self.day}")
        with open(os.path.join(str(self.root), "latest"), "w", encoding="utf-8") as out:
            out.write(str(self.day))


class AllShards(luigi.WrapperTask):
    """``n`` members of ``kind`` (Shard, SizedShard, NotBatchable or Latest) in ``groups``
    groups."""

    root = luigi.Parameter()
    kind = luigi.Parameter(default="Shard")
    n = luigi.IntParameter(default=50)
    groups = luigi.IntParameter(default=1)

    def requires(self) -> list[Any]:
        """The members."""
        if self.kind == "Latest":
            return [Latest(root=self.root, day=i) for i in range(int(self.n))]
        kinds = {"Shard": Shard, "SizedShard": SizedShard, "NotBatchable": NotBatchable}
        cls = kinds[str(self.kind)]
        return [
            cls(root=self.root, group=f"g{i % int(self.groups)}", item=f"{i:03d}")
            for i in range(int(self.n))
        ]
