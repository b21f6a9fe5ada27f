"""A third-party state store written only against the public seams (SPEC §10): the ``dict``
store of tests/thirdparty-plugin (``StateStore`` and ``TaskReads`` in pure Python, rows in a
dict saved as JSON) passes ``check_state_store`` and imports nothing private or SQLite; a store
without ``TaskReads`` stops ``conveyor scheduler`` at start-up with exit 2 and one line. Its
browser test is tests/ui/test_ui_thirdparty_store.py. Real processes; nothing is mocked.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from conveyor.backends import load_backend
from conveyor.protocol import encode
from conveyor.server.stores import StoreContext, TaskReads, task_info
from conveyor.testing import check_state_store
from conveyor.testing.processes import SchedulerProcess, child_env, free_port, kill_marked
from conveyor.testing.stores import READ_CHECKS

PUBLIC = {"conveyor.protocol", "conveyor.server.stores", "conveyor.settings"}


def test_the_dict_store_passes_the_state_store_check(tmp_path: Path) -> None:
    """Loaded by its entry point, the ``dict`` store passes every check, the reads and the
    reopening included."""
    store_cls = load_backend("conveyor.state_stores", "dict")
    path = str(tmp_path / "state.json")
    checks = check_state_store(lambda: store_cls(StoreContext(path)))
    assert checks[-1] == "reopen" and set(READ_CHECKS) <= set(checks), checks
    opened = store_cls(StoreContext(path))
    try:
        assert isinstance(opened, TaskReads)
    finally:
        opened.close()


def test_the_dict_store_uses_only_the_public_api() -> None:
    """Its module imports of conveyor only the public modules of the seam, none of their
    underscored names, and no SQLite."""
    spec = importlib.util.find_spec("conveyor_recorder_plugin.dictstore")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    imported: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.setdefault(node.module, []).extend(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update((a.name, []) for a in node.names)
    ours = {m: names for m, names in imported.items() if m.split(".")[0] == "conveyor"}
    assert set(ours) <= PUBLIC, sorted(ours)
    assert not [n for names in ours.values() for n in names if n.startswith("_")], ours
    assert "sqlite3" not in imported


def test_a_store_without_reads_stops_the_server_at_start_up(tmp_path: Path) -> None:
    """``state_store = "saveonly"`` (save and load, no TaskReads): exit 2, one line naming
    the store and what it lacks, no traceback."""
    config = tmp_path / "server.toml"
    config.write_text('[server]\nstate_store = "saveonly"\n', encoding="utf-8")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "conveyor", "scheduler"),
            *("--port", str(free_port()), "--state-path", str(tmp_path / "state")),
            *("--config", str(config)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("conveyor: error: state store saveonly "), lines
    assert "does not implement TaskReads: it lacks summary, families, page" in lines[0], lines


def test_only_the_sqlite_store_knows_sqlite() -> None:
    """No module of the server but the SQLite store's package (``conveyor.server.sqlite``)
    names ``sqlite3``: no connection crosses the store's boundary (SPEC §10)."""
    spec = importlib.util.find_spec("conveyor.server")
    assert spec is not None and spec.origin is not None
    server = Path(spec.origin).parent
    naming = sorted(
        str(path.relative_to(server))
        for path in server.rglob("*.py")
        if "sqlite3" in path.read_text(encoding="utf-8")
    )
    assert naming == ["sqlite/reads.py", "sqlite/store.py"], naming


def test_the_task_list_of_the_api_is_what_the_store_holds(tmp_path: Path) -> None:
    """``GET /api/v1/tasks`` of a server on the ``dict`` store answers the store's rows
    (``TaskReads.task_infos``): each entry is what its saved row says, parameters unredacted
    (the route is behind the token), oldest change first, and a running task's status
    message, progress and URL are there once annotated."""
    marker = uuid.uuid4().hex
    config = tmp_path / "server.toml"
    config.write_text(
        '[scheduler]\nretry_delay = 3600\n[server]\nstate_store = "dict"\ntoken = "t0ken"\n',
        encoding="utf-8",
    )
    server = SchedulerProcess(tmp_path, config, child_env(tmp_path, "STORETEST_MARKER", marker))
    server.token = "t0ken"
    specs: list[dict[str, Any]] = [
        {"task_id": "Load-1", "family": "Load", "deps": ["Fetch-1"], "priority": 5,
         "params": {"day": "2026-12-02", "password": "s3cret"}},
        {"task_id": "Fetch-1", "family": "Fetch", "status": "DONE"},
        {"task_id": "Old-1", "family": "Old", "status": "DISABLED", "explanation": "retired"},
    ]  # fmt: skip
    server.start()
    try:
        assert server.request("GET", "/api/v1/tasks", headers={"Authorization": None}).status == 401
        for body in (
            {"worker_id": "w1", "tasks": specs},
            {"worker_id": "w1"},
            {"task_id": "Load-1", "kind": "status_message", "value": "loading"},
            {"task_id": "Load-1", "kind": "progress", "value": 40.0},
            {"task_id": "Load-1", "kind": "tracking_url", "value": "http://x.example/1"},
        ):
            route = "add_tasks" if "tasks" in body else "annotate" if "kind" in body else "get_work"
            reply = server.request("POST", f"/api/v1/{route}", body)
            assert reply.status == 200, (route, reply.status, reply.body[:300])
        reply = server.request("GET", "/api/v1/tasks")
        assert reply.status == 200, reply.body[:300]
        listed = reply.json()["tasks"]
        saved = json.loads(server.state.read_text(encoding="utf-8"))["tasks"]
    finally:
        server.kill()
        kill_marked("STORETEST_MARKER", marker)
    by_change = sorted(saved.values(), key=lambda entry: entry[1])  # (row, seq, changed)
    assert listed == [encode(task_info(row)) for row, _, _ in by_change]
    load = next(entry for entry in listed if entry["task_id"] == "Load-1")
    assert load["params"] == {"day": "2026-12-02", "password": "s3cret"}, load
    assert load["status"] == "RUNNING" and load["worker"] == "w1", load
    assert (load["status_message"], load["progress"]) == ("loading", 40.0), load
    assert load["tracking_url"] == "http://x.example/1" and load["priority"] == 5, load
    assert load["dependencies"] == ["Fetch-1"], load
    old = next(entry for entry in listed if entry["task_id"] == "Old-1")
    assert (old["status"], old["explanation"]) == ("DISABLED", "retired"), old
