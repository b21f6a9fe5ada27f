"""Dask's loggers follow conveyor's log level (``conveyor_dask.logs``).

``distributed`` sets its loggers to info when it is imported; without the executor's help,
``conveyor run --executor dask --log-level error`` printed some 45 info lines of the
LocalCluster's scheduler and nannies. Real ``conveyor run`` processes show what a user sees.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor_dask.logs import DASK_LOGGERS, follow_level, worker_process_level
from dask_cluster_for_tests import DaskCluster, write_config

NAMES = ("distributed", "distributed.client", "distributed.scheduler", "tornado", "bokeh", "dask")


def conveyor_run(tmp_path: Path, config: Path, level: str) -> subprocess.CompletedProcess[str]:
    """``conveyor run dask_tasks_for_tests.Leaf`` at ``--log-level level``; it must succeed."""
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "run", "dask_tasks_for_tests.Leaf",
         "--root", str(tmp_path), "--config", str(config), "--log-level", level],
        cwd=tmp_path, capture_output=True, text=True, timeout=170, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def json_lines(text: str) -> list[dict[str, object]]:
    """The JSON objects among the lines of ``text`` (stderr is not a terminal: JSON lines)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture
def dask_levels() -> Iterator[None]:
    """Put the levels of Dask's loggers in this process back as they were, after the test."""
    before = {name: logging.getLogger(name).level for name in NAMES}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.timeout(180)  # a LocalCluster starting and closing on a loaded 2-core machine
def test_log_level_error_hides_the_local_clusters_info_lines(tmp_path: Path) -> None:
    """`--log-level error` with a LocalCluster of the executor's own: stderr holds no line of
    Dask's loggers (the worker's process, and the cluster's worker processes), no info line."""
    config = write_config(tmp_path, {"executor": "dask", "workers": 1}, {"n_workers": 1})
    proc = conveyor_run(tmp_path, config, "error")
    dask_lines = [
        line for line in proc.stderr.splitlines() if any(root in line for root in DASK_LOGGERS)
    ]
    assert dask_lines == [], proc.stderr[-3000:]
    assert [e for e in json_lines(proc.stderr) if e.get("level") != "error"] == []
    assert (tmp_path / "Leaf-0.out").exists()


@pytest.mark.timeout(120)
def test_log_level_info_still_shows_conveyors_own_lines(
    cluster: DaskCluster, tmp_path: Path
) -> None:
    """`--log-level info`: conveyor's own info events (the task starting and succeeding on
    dask) are on stderr as before."""
    config = write_config(
        tmp_path, {"executor": "dask", "workers": 1}, {"address": cluster.address}
    )
    events = json_lines(conveyor_run(tmp_path, config, "info").stderr)
    mine = [(e.get("event"), e.get("level")) for e in events if e.get("family") == "Leaf"]
    assert ("task_started", "info") in mine, events
    assert ("task_succeeded", "info") in mine, events


@pytest.mark.usefixtures("dask_levels")
def test_dask_loggers_log_at_the_quieter_of_dask_and_conveyor_levels() -> None:
    """At error every Dask logger is at error or quieter (tornado stays critical); back at
    info, distributed is at info again and the loggers Dask keeps quiet stay quiet."""
    follow_level("error")
    assert logging.getLogger("distributed").level == logging.ERROR
    assert logging.getLogger("dask").level == logging.ERROR
    assert logging.getLogger("tornado").level == logging.CRITICAL
    assert logging.getLogger("distributed.scheduler").getEffectiveLevel() == logging.ERROR
    follow_level("info")
    assert logging.getLogger("distributed").level == logging.INFO
    assert logging.getLogger("distributed.client").level == logging.WARNING
    assert logging.getLogger("bokeh").level == logging.ERROR
    follow_level("auto")  # conveyor's level before it is resolved: info
    assert logging.getLogger("distributed").level == logging.INFO


def test_local_cluster_worker_processes_print_warnings_at_most() -> None:
    """The LocalCluster's worker processes (whose lines bypass conveyor's format) print at
    conveyor's level, but never below warnings."""
    assert worker_process_level("error") == logging.ERROR
    assert worker_process_level("critical") == logging.CRITICAL
    assert worker_process_level("info") == logging.WARNING
    assert worker_process_level("debug") == logging.WARNING
