"""Helpers shared by the tests of conveyor's observability seams (test_attempt_plugins.py,
test_plugin_tables.py, test_observability_seams.py): the attempt probe's records, a worker
configuration file, and a real ``conveyor scheduler`` with ``[plugins] local`` modules.

(A uniquely named module, never ``conftest``: pytest collects several test directories.)
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
from conveyor.testing.processes import Reply, SchedulerProcess, child_env, kill_marked

PROBE = "CONVEYOR_TEST_ATTEMPT_PROBE"
"""Turns the ``attemptprobe`` plugin of tests/thirdparty-plugin on: the directory it writes to."""
PROBE_SKIP = "CONVEYOR_TEST_ATTEMPT_PROBE_SKIP"
"""Families (comma-separated) the probe answers None for: it takes no part in their attempts."""
SEAM_MARKER = "SEAMTEST_MARKER"
"""The variable marking the processes a test starts (not CONVEYOR_*: that is configuration)."""


def probe_records(directory: Path, task_id: str | None = None) -> list[dict[str, Any]]:
    """The lines the probe's begin/end wrote to ``directory`` (those of ``task_id`` only, if
    given), in the order they were written."""
    path = directory / "probe.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r for r in records if task_id is None or r["task_id"] == task_id]


def worker_config(directory: Path, text: str) -> conveyor.Config:
    """Write ``text`` as a uniquely named worker.toml in ``directory`` and load it."""
    path = directory / f"worker-{uuid.uuid4().hex[:8]}.toml"
    path.write_text(text, encoding="utf-8")
    return conveyor.load_config(path, env={})


class SeamServer(SchedulerProcess):
    """A ``conveyor scheduler`` with a token, ``[plugins] local`` modules written to its
    directory, and entry-point plugins off (only the local ones are loaded)."""

    def __init__(
        self, directory: Path, marker: str, modules: dict[str, str], token: str, **env: str
    ) -> None:
        """Write each of ``modules`` (name -> source) and the config; ``env`` is added to the
        server's environment."""
        for name, source in modules.items():
            (directory / f"{name}.py").write_text(source, encoding="utf-8")
        self.token = token
        config = directory / "server.toml"
        config.write_text(
            f'[server]\ntoken = "{token}"\n\n[plugins]\nlocal = {json.dumps(list(modules))}\n',
            encoding="utf-8",
        )
        environment = child_env(directory, SEAM_MARKER, marker, **env)
        environment["CONVEYOR_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        super().__init__(directory, config, environment)

    def post(self, route: str, body: Any, **headers: str | None) -> Reply:
        """POST ``body`` to ``/api/v1/<route>``."""
        return self.request("POST", f"/api/v1/{route}", body, headers)

    def work(self, worker: str) -> dict[str, Any]:
        """One ``get_work`` for ``worker``: the work handed out."""
        reply = self.post("get_work", {"worker_id": worker})
        assert reply.status == 200, reply
        work: dict[str, Any] = reply.json()["work"]
        return work


def json_file_lines(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of ``path`` (none while it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@contextlib.contextmanager
def plain_scheduler(directory: Path, config: str = "") -> Iterator[SchedulerProcess]:
    """A started ``conveyor scheduler`` without a token (its web UI answers without signing
    in) and with the ``config`` text as its configuration; it and every process it started are
    killed at the end."""
    marker = uuid.uuid4().hex
    path = directory / "server.toml"
    path.write_text(config, encoding="utf-8")
    started = SchedulerProcess(directory, path, child_env(directory, SEAM_MARKER, marker))
    try:
        started.start()
        yield started
    finally:
        kill_marked(SEAM_MARKER, marker)
