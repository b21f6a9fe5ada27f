"""What the group-commit tests and the committer tests share: a real SQLite store that counts
the rows of each save (and can be made to fail), a service over it with tasks to hand out, and
what the file holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from conveyor.protocol import AddTasks, GetWork, TaskSpec
from conveyor.scheduler.policy import SchedulerCore
from conveyor.server.app import SchedulerService
from conveyor.server.stores import SqliteStore, StoreContext

CALLERS = 6


class CountingStore(SqliteStore):
    """SQLite that counts the rows of each save; ``fail_with`` is raised by every save from
    the ``fail_from``-th on (0-based: 0 is the set-up's registration)."""

    def __init__(
        self, path: Path, fail_from: int | None = None, fail_with: BaseException | None = None
    ) -> None:
        super().__init__(StoreContext(state_path=str(path)))
        self.saves: list[int] = []  # rows in each save, -1 for one that failed
        self.fail_from = fail_from
        self.fail_with = fail_with or sqlite3.OperationalError("database or disk is full")

    def save(self, rows: Any, workers: Any, **kwargs: Any) -> None:
        rows = list(rows)
        if self.fail_from is not None and len(self.saves) >= self.fail_from:
            self.saves.append(-1)
            raise self.fail_with
        self.saves.append(len(rows))
        super().save(rows, workers, **kwargs)


def served(
    tmp_path: Path, store: CountingStore | None = None, **failing: Any
) -> tuple[SchedulerService, CountingStore]:
    """A service over ``store`` (default a CountingStore in ``tmp_path``, failing as
    ``failing`` says) with CALLERS + 1 tasks registered."""
    store = store or CountingStore(tmp_path / "state.db", **failing)
    core = SchedulerCore()
    service = SchedulerService(core, store)
    specs = tuple(TaskSpec(f"t{i}", family="F") for i in range(CALLERS + 1))
    service.call(core.call, AddTasks("w", specs))
    return service, store


def stored_statuses(path: Path) -> dict[str, str]:
    """Each task's status in the state file at ``path``."""
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT task_id, status FROM tasks").fetchall())
    finally:
        db.close()


def running(service: SchedulerService, tmp_path: Path) -> list[str]:
    """The RUNNING tasks, sorted: the same in the state file and in the scheduler (checked)."""
    stored = stored_statuses(tmp_path / "state.db")
    found = sorted(t for t, s in stored.items() if s == "RUNNING")
    assert sorted(i.task_id for i in service.core.task_list() if i.status == "RUNNING") == found
    return found


def asks() -> list[Any]:
    """One get_work of an assistant for each task, each of another worker."""
    return [GetWork(f"w{i}", assistant=True) for i in range(CALLERS + 1)]
