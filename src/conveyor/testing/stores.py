"""A conformance check for state stores: built-in and third-party alike.

``check_state_store(open_store)`` saves and loads rows of the shape the central scheduler
writes (:func:`conveyor.scheduler.persist.to_row`) through a store, and raises
``AssertionError`` naming the first broken promise. ``open_store`` opens the store (called more
than once when ``durable``: a store reopened on the same place must load what was saved)::

    from conveyor.server.stores import StoreContext
    from conveyor.testing import check_state_store

    def test_my_store_conforms(tmp_path):
        check_state_store(lambda: MyStore(StoreContext(str(tmp_path / "state"))))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocol import TaskStatus
from ..scheduler.persist import from_row, to_row
from ..scheduler.policy import TaskRecord

__all__ = ["check_state_store"]


def _row(task_id: str, seq: int, status: TaskStatus, text: str) -> dict[str, Any]:
    record = TaskRecord(
        task_id=task_id,
        seq=seq,
        family="Fam",
        module="conformance.mod",
        params={"p": text},
        status=status,
        deps=("other",),
        stakeholders=("w1",),
        runners=("w1",),
        explanation=text,
        progress=12.5,
    )
    return to_row(record)


def check_state_store(open_store: Callable[[], Any], *, durable: bool = True) -> list[str]:
    """Check save/load/upsert/remove (and, if ``durable``, reopening); return the checks
    run."""
    store = open_store()
    checks = ["empty", "save-load", "upsert", "workers", "round-trip", "remove"]
    try:
        rows, workers = store.load()
        assert (list(rows), list(workers)) == ([], []), "a new store is not empty"
        first = _row("a", 1, TaskStatus.PENDING, 'ünïcode ✓ "quotes" \n newline')
        second = _row("b", 2, TaskStatus.DONE, "")
        store.save([first, second], [("w1", False)])
        rows, workers = store.load()
        assert _by_id(rows) == {"a": first, "b": second}, "loaded rows differ from saved ones"
        updated = _row("a", 1, TaskStatus.FAILED, "it broke")
        store.save([updated], [("w2", True)])  # the server saves only the workers that changed
        rows, workers = store.load()
        assert _by_id(rows) == {"a": updated, "b": second}, "a saved row did not replace the old"
        assert sorted(workers) == [("w1", False), ("w2", True)], (
            f"a save must add workers, not replace them: {workers}"
        )
        restored = from_row(_by_id(rows)["a"])
        assert restored.status is TaskStatus.FAILED and restored.progress == 12.5, restored
        store.save([_row("c", 3, TaskStatus.DONE, "")], [("w3", False)])
        store.save([], [], gone_tasks=["c", "never-saved"], gone_workers=["w3"])
        rows, workers = store.load()
        assert sorted(_by_id(rows)) == ["a", "b"], "a pruned task's row was not deleted"
        assert sorted(workers) == [("w1", False), ("w2", True)], "a gone worker was not deleted"
    finally:
        store.close()
    if durable:
        checks.append("reopen")
        again = open_store()
        try:
            rows, workers = again.load()
            assert _by_id(rows) == {"a": updated, "b": second}, "a reopened store lost rows"
            assert sorted(workers) == [("w1", False), ("w2", True)], "a reopened store lost workers"
        finally:
            again.close()
    return checks


def _by_id(rows: Any) -> dict[str, Any]:
    rows = list(rows)
    by_id = {row["task_id"]: row for row in rows}
    assert len(by_id) == len(rows), "a task has several rows: save must replace a task's row"
    return by_id
