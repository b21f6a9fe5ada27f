"""A third party's state store, written only against conveyor's public API (``StateStore`` and
``TaskReads`` of :mod:`conveyor.server.stores`, the values of :mod:`conveyor.protocol`): rows
in a dict, no SQL. With a ``state_path`` it writes them all to that JSON file on each save
(atomically: a temporary file renamed over it), so a restart loads them; without one it keeps
them in memory only.

Registered as ``[server] state_store = "dict"`` (entry point ``conveyor.state_stores``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Collection, Iterable
from typing import Any, ClassVar

from conveyor.protocol import (
    Changes,
    StoredWorker,
    TaskDetail,
    TaskFilters,
    TaskGraph,
    TaskInfo,
    TaskPage,
    TaskRef,
    TaskStatus,
    TaskSummary,
)
from conveyor.server.stores import (
    DEPENDENTS_SHOWN,
    GRAPH_CAP,
    PAGE_MAX,
    StoreContext,
    blocked_by,
    graph_answer,
    list_entry,
    matches,
    task_detail,
    task_info,
    walk_graph,
)
from conveyor.settings import Field


class DictStore:
    """Rows by task id, each with its change number and the time it was saved."""

    settings_schema: ClassVar[dict[str, Field]] = {}

    def __init__(self, context: StoreContext | None = None) -> None:
        """Load the JSON file at ``context.state_path`` if there is one."""
        self._path = context.state_path if context is not None else ""
        self._lock = threading.Lock()  # saves come from the scheduler, reads from the UI
        self._rows: dict[str, dict[str, Any]] = {}
        self._stamp: dict[str, tuple[int, float]] = {}  # task id -> (change number, time)
        self._workers: dict[str, bool] = {}
        self._seq = 0
        if self._path and os.path.exists(self._path):
            with open(self._path, encoding="utf-8") as f:
                saved = json.load(f)
            self._seq = saved["seq"]
            self._workers = dict(saved["workers"])
            for task_id, (row, seq, changed) in saved["tasks"].items():
                self._rows[task_id] = row
                self._stamp[task_id] = (seq, changed)

    # --- StateStore -----------------------------------------------------------------------

    def load(self) -> tuple[list[dict[str, Any]], list[tuple[str, bool]]]:
        """Every row and worker."""
        with self._lock:
            rows = [json.loads(json.dumps(r)) for r in self._rows.values()]
            return rows, list(self._workers.items())

    def save(
        self,
        rows: Iterable[dict[str, Any]],
        workers: Iterable[tuple[str, bool]],
        *,
        gone_tasks: Collection[str] = (),
        gone_workers: Collection[str] = (),
    ) -> None:
        """Upsert and delete; each row that changed gets the next change number."""
        now = time.time()
        with self._lock:
            for row in rows:
                copy = json.loads(json.dumps(row))
                if self._rows.get(row["task_id"]) == copy:
                    continue
                self._seq += 1
                self._rows[row["task_id"]] = copy
                self._stamp[row["task_id"]] = (self._seq, now)
            self._workers.update((w, bool(a)) for w, a in workers)
            removed = [t for t in gone_tasks if self._rows.pop(t, None) is not None]
            for task_id in removed:
                del self._stamp[task_id]
            if gone_tasks:
                self._seq += 1  # (a removal is a change too)
            for worker_id in gone_workers:
                self._workers.pop(worker_id, None)
            self._write()

    def _write(self) -> None:
        if not self._path:
            return
        tasks = {t: (row, *self._stamp[t]) for t, row in self._rows.items()}
        saved = {"seq": self._seq, "tasks": tasks, "workers": self._workers}
        with open(self._path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(saved, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self._path + ".tmp", self._path)

    def close(self) -> None:
        """Nothing to release."""

    # --- TaskReads ------------------------------------------------------------------------

    def summary(self) -> TaskSummary:
        """Counts per state of the registered tasks."""
        counts = dict.fromkeys(map(str, TaskStatus), 0)
        with self._lock:
            for row in self._rows.values():
                if row["registered"]:
                    counts[str(row["status"])] += 1
            return TaskSummary(counts, sum(counts.values()), self._seq)

    def families(self) -> tuple[str, ...]:
        """The families of registered tasks, sorted."""
        with self._lock:
            found = {r["family"] for r in self._rows.values() if r["registered"]}
        return tuple(sorted(found - {""}))

    def page(self, filters: TaskFilters, cursor: int | None, limit: int) -> TaskPage:
        """Newest change first, below ``cursor``."""
        with self._lock:
            found = sorted(
                (
                    (*self._stamp[t], row)
                    for t, row in self._rows.items()
                    if matches(row, filters) and (cursor is None or self._stamp[t][0] < cursor)
                ),
                key=lambda entry: -entry[0],
            )
        entries = tuple(list_entry(row, seq, changed) for seq, changed, row in found[:limit])
        return TaskPage(entries, entries[-1].seq if len(found) > limit else None)

    def detail(self, task_id: str) -> TaskDetail | None:
        """The task's detail, or None."""
        with self._lock:
            row = self._rows.get(task_id)
            if row is None:
                return None
            dependents = [t for t, r in self._rows.items() if task_id in r["deps"]]
            up = walk_graph(task_id, self._deps, self._node, GRAPH_CAP, through_done=False)
            blocking, _ = blocked_by(up.status, up.runners, up.edges)
            return task_detail(
                row,
                self._stamp[task_id][1],
                deps=[self._ref(d) for d in dict.fromkeys(row["deps"])],
                dependents=[self._ref(d) for d in dependents[:DEPENDENTS_SHOWN]],
                dependents_total=len(dependents),
                blocked=[
                    TaskRef(up.ids[i], up.family[i], TaskStatus(up.status[i])) for i in blocking
                ],
            )

    def graph(self, task_id: str, downstream: bool, cap: int = GRAPH_CAP) -> TaskGraph | None:
        """Walked in memory."""
        with self._lock:
            if task_id not in self._rows:
                return None
            up = walk_graph(task_id, self._deps, self._node, cap)

            def below(room: int) -> Any:
                return walk_graph(task_id, self._dependents, self._node, room, down=True)

            return graph_answer(up, below if downstream else None, cap)

    def changes_since(self, seq: int, limit: int = PAGE_MAX) -> Changes:
        """The latest change number and the tasks saved after ``seq``."""
        with self._lock:
            if limit <= 0:
                return Changes(self._seq)
            after = sorted((s, t) for t, (s, _) in self._stamp.items() if s > seq)
            return Changes(self._seq, tuple(t for _, t in after[:limit]), len(after) > limit)

    def workers(self) -> tuple[StoredWorker, ...]:
        """Every stored worker."""
        with self._lock:
            return tuple(StoredWorker(w, a) for w, a in self._workers.items())

    def task_infos(self) -> tuple[TaskInfo, ...]:
        """Every registered task as ``GET /api/v1/tasks`` lists it, oldest change first."""
        with self._lock:
            found = sorted(
                ((self._stamp[t][0], row) for t, row in self._rows.items() if row["registered"]),
                key=lambda entry: entry[0],
            )
            return tuple(task_info(row) for _, row in found)

    # --- (under the lock) -----------------------------------------------------------------

    def _deps(self, task_id: str) -> list[str]:
        row = self._rows.get(task_id)
        return list(dict.fromkeys(row["deps"])) if row else []

    def _dependents(self, task_id: str) -> list[str]:
        return [t for t, r in self._rows.items() if task_id in r["deps"]]

    def _node(self, task_id: str) -> tuple[str, str, int]:
        row = self._rows.get(task_id)
        if row is None:
            return "", TaskStatus.UNKNOWN, 0
        return row["family"], str(row["status"]), len(row["runners"])

    def _ref(self, task_id: str) -> TaskRef:
        family, status, _ = self._node(task_id)
        return TaskRef(task_id, family, TaskStatus(status))


class SaveOnlyStore:
    """A state store written before ``TaskReads``: it saves and loads, and reads nothing for
    the web UI, so the server refuses it at start-up (``state_store = "saveonly"``)."""

    settings_schema: ClassVar[dict[str, Field]] = {}

    def __init__(self, context: StoreContext | None = None) -> None:
        """Nothing is kept anywhere but here."""
        self._inner = DictStore()

    def load(self) -> tuple[list[dict[str, Any]], list[tuple[str, bool]]]:
        """Every row and worker."""
        return self._inner.load()

    def save(self, rows: Any, workers: Any, **gone: Any) -> None:
        """Upsert and delete."""
        self._inner.save(rows, workers, **gone)

    def close(self) -> None:
        """Nothing to release."""
