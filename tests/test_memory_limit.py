"""A memory limit per attempt (``[worker] memory_limit``, a task's ``memory_limit``) under the
process executors, with real processes: an attempt whose process tree holds more resident
memory than its limit is killed like at a timeout and ends PROCESS_DIED "exceeded memory limit
150 MiB (peak …)", while the other attempts and the worker go on.

The scenes run in a fresh interpreter (a small driver script calling ``conveyor.build``), not in
the test process: under ``fork`` an attempt's resident memory starts with the pages it shares
with the fork server, a fork of the worker, and the test process's size depends on what else
the test session loaded. A fresh worker makes the attempts' start-up memory small and known.

Nothing here races the clock: a hog grows to far more than its limit and then holds its memory
until a file that no test creates appears (bounded), so only the kill ends it early; the tasks
that must not be killed end by themselves.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import structlog

import conveyor
from conveyor.executors.proctree import ProcessTable, TreeMemory
from conveyor.executors.supervisor import memory_error
from conveyor.testing.processes import (
    child_env,
    gone_within,
    json_lines,
    kill_marked,
    wait_for,
)

WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

MiB = 2**20
MARKER_VARIABLE = "MEMTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides

TASKS = '''
import os
import subprocess
import sys
import time

import psutil

import conveyor
from conveyor.testing.processes import put, wait_file

MiB = 2**20


def grow(upto_mib, step_mib=20):
    """Hold ``upto_mib`` MiB, taken ``step_mib`` at a time with a pause between steps; every
    page is written, so the memory is resident."""
    held = []
    while len(held) * step_mib < upto_mib:
        held.append(bytearray(b"x") * (step_mib * MiB))
        time.sleep(0.05)
    return held


def gone(pid):
    """Whether process ``pid`` has ended (a zombie counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Base(conveyor.Task):
    root = conveyor.Parameter()

    def path(self, name):
        return os.path.join(self.root, name)

    def output(self):
        return conveyor.LocalTarget(self.path(type(self).__name__ + ".out"))

    def finish(self):
        with self.output().open("w") as f:
            f.write("ok")


class Hog(Base):
    """Under the worker's limit: starts a helper process (part of its tree, to be killed with
    it), then grows to 600 MiB and holds it; only a kill ends it within 60 s."""

    def run(self):
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        put(self.path("Hog.pids"), f"{os.getpid()} {helper.pid}")
        held = grow(600)
        wait_file(self.path("never"), 60)
        self.finish()


class ChildHog(Base):
    """A limit of its own, above the worker's; its memory is held by a child process."""

    memory_limit = "250MiB"

    def run(self):
        code = f"import time, {__name__} as m; held = m.grow(600); time.sleep(60)"
        child = subprocess.Popen([sys.executable, "-c", code])
        put(self.path("ChildHog.pids"), f"{os.getpid()} {child.pid}")
        child.wait(90)
        self.finish()


class Unlimited(Base):
    """No limit of its own (0): holds more than the worker's limit and succeeds."""

    memory_limit = 0

    def run(self):
        held = grow(250)
        self.finish()


class Sibling(Base):
    """Under the worker's limit: takes 40 MiB, waits until both hogs' processes have ended
    (bounded), and succeeds: it runs through their kills."""

    def run(self):
        held = grow(40)
        for name in ("Hog.pids", "ChildHog.pids"):
            wait_file(self.path(name), 60)
            pid = int(open(self.path(name)).read().split()[0])
            deadline = time.monotonic() + 90
            while not gone(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.finish()


class Scene(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [cls(root=self.root) for cls in (Hog, ChildHog, Unlimited, Sibling)]


class Light(Base):
    tag = conveyor.Parameter()

    def run(self):
        self.finish()


class Lights(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        return [Light(root=self.root, tag=str(n)) for n in range(3)]
'''

DRIVER = """
import importlib
import json
import sys

import conveyor

name, executor, root, out = sys.argv[1:]
scene = importlib.import_module(name).Scene(root=root)
result = conveyor.build(
    scene,
    executor=executor,
    workers=4,
    kill_grace=2,
    memory_limit="150MiB",
    install_signal_handlers=False,
    log_format="json",
    log_level="info",
)
with open(out, "w") as f:
    json.dump(
        {
            "states": result.states,
            "errors": result.errors,
            "code": result.exit_code,
            "summary": result.summary,
        },
        f,
    )
"""

PEAK = r"\(peak (\d+(?:\.\d)?) MiB\)"


@pytest.fixture
def marker() -> Iterator[str]:
    """A per-test value for MARKER_VARIABLE; whatever still carries it afterwards is killed."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER_VARIABLE, value)


def _pids(path: Path) -> list[psutil.Process]:
    """The processes whose pids a task wrote to ``path`` that still exist."""
    found = []
    for pid in path.read_text().split():
        try:
            found.append(psutil.Process(int(pid)))
        except psutil.NoSuchProcess:
            continue
    return found


def _peak(error: str, limit: str) -> float:
    """The peak (MiB) in ``error``, which must be the memory limit's reason for ``limit``."""
    match = re.fullmatch(rf"exceeded memory limit {limit} {PEAK}", error)
    assert match is not None, error
    return float(match.group(1))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_a_hog_is_killed_for_its_memory_while_the_others_finish(
    executor: str, tmp_path: Path, task_module: WriteModule, marker: str
) -> None:
    """Under ``[worker] memory_limit = "150MiB"``, a task that grows past it is PROCESS_DIED
    "exceeded memory limit 150 MiB (peak …)", its helper process killed with it; a task whose
    own limit (250 MiB) is passed by its child process is killed with that limit's reason; a
    task with ``memory_limit = 0`` holds more than 150 MiB and succeeds, and one under the
    limit runs through the kills and succeeds."""
    name = task_module(TASKS)
    (tmp_path / "driver.py").write_text(DRIVER, encoding="utf-8")
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), name, executor, str(tmp_path), str(out)],
        cwd=tmp_path,
        env=child_env(tmp_path, MARKER_VARIABLE, marker),
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    by_family = {
        family: next(t for t in result["states"] if t.startswith(f"{family}_"))
        for family in ("Hog", "ChildHog", "Unlimited", "Sibling")
    }
    states = {family: result["states"][t] for family, t in by_family.items()}
    assert states == {
        "Hog": "FAILED",
        "ChildHog": "FAILED",
        "Unlimited": "DONE",
        "Sibling": "DONE",
    }, result
    assert result["code"] == 1
    assert _peak(result["errors"][by_family["Hog"]], "150 MiB") >= 150
    assert _peak(result["errors"][by_family["ChildHog"]], "250 MiB") >= 250
    # the run's summary gives the reason, not the signal the supervisor sent
    assert "): exceeded memory limit 150 MiB (peak" in result["summary"], result["summary"]
    assert "SIGTERM" not in result["summary"] and "SIGKILL" not in result["summary"]
    # their whole trees are gone: the helper and the child that held the memory included
    for family in ("Hog", "ChildHog"):
        tree = _pids(tmp_path / f"{family}.pids")
        assert gone_within(tree, 30) == [], f"{family}'s processes survived"
    records = json_lines(proc.stderr)
    for family in ("Hog", "ChildHog"):
        task_id = by_family[family]
        events = [r["event"] for r in records if r.get("task_id") == task_id]
        assert "task_process_died" in events, events
        assert "task_timed_out" not in events and "task_failed" not in events, events
        [died] = [
            r for r in records if r["event"] == "task_process_died" and r["task_id"] == task_id
        ]
        assert died["signal"] is not None, died  # (SIGTERM, or SIGKILL after the grace)
        assert any(
            r["event"].startswith("an attempt exceeded its memory limit")
            for r in records
            if r.get("task_id") == task_id
        )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("executor", ["inline", "thread"])
def test_an_in_process_executor_warns_once_and_runs_without_the_limit(
    executor: str, tmp_path: Path, task_module: WriteModule
) -> None:
    """``inline`` and ``thread`` cannot enforce a memory limit: the attempts run (and succeed)
    without it, and the executor says so once, not per attempt."""
    module = __import__(task_module(TASKS))
    with structlog.testing.capture_logs() as logs:
        result = conveyor.build(
            module.Lights(root=str(tmp_path)),
            executor=executor,
            workers=1 if executor == "inline" else 2,
            memory_limit="1MiB",
            install_signal_handlers=False,
        )
    assert result.ok, result.summary
    warnings = [e for e in logs if "cannot enforce a memory limit" in e["event"]]
    assert len(warnings) == 1, warnings
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["memory_limit"] == "1 MiB"
    assert executor in warnings[0]["event"]


TREE = """
import os
import subprocess
import sys
import time

root, role = sys.argv[1], sys.argv[2]
if role == "top":  # starts the middle one, reaps it, stays
    subprocess.run([sys.executable, __file__, root, "middle"])
    time.sleep(120)
elif role == "middle":  # starts the bottom one, leaves when released (it is re-parented)
    subprocess.Popen([sys.executable, __file__, root, "bottom"])
    while not os.path.exists(os.path.join(root, "release")):
        time.sleep(0.02)
else:  # holds 80 MiB
    held = bytearray(b"x") * (80 * 2**20)
    with open(os.path.join(root, "bottom.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", ["proc", "psutil"])
def test_a_trees_memory_sums_it_and_keeps_counting_a_reparented_descendant(
    source: str, tmp_path: Path, marker: str
) -> None:
    """TreeMemory counts a grandchild's memory; once its parent exits (so it is re-parented
    away from the tree) it still counts, and is among the processes to signal, while it runs,
    no longer once it has ended; the root's end is None. From one look at /proc per sample,
    and from psutil (where /proc is missing)."""
    script = tmp_path / "tree.py"
    script.write_text(TREE, encoding="utf-8")
    top = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), "top"],
        env=child_env(tmp_path, MARKER_VARIABLE, marker),
    )

    def sample() -> int | None:
        return memory.sample(ProcessTable.read() if source == "proc" else None)

    try:
        root = psutil.Process(top.pid)
        memory = TreeMemory(top.pid)
        pid_file = tmp_path / "bottom.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text(), 60, "the bottom process")
        bottom = psutil.Process(int(pid_file.read_text()))
        before = sample()
        assert before is not None and before >= 80 * MiB, before
        (tmp_path / "release").write_text("go")
        wait_for(lambda: len(root.children()) == 0, 60, "the middle process to end")
        assert bottom not in root.children(recursive=True)  # re-parented away
        after = sample()
        assert after is not None and after >= 80 * MiB, after
        assert bottom in memory.processes()
        bottom.kill()
        bottom.wait(30)  # (reaped by its new parent: gone)
        rest = sample()
        assert rest is not None and rest < 80 * MiB, rest
        assert bottom.pid not in {p.pid for p in memory.processes()}
    finally:
        top.kill()
        top.wait(30)
    assert sample() is None


def test_the_reason_names_the_limit_and_the_peak_in_binary_units() -> None:
    """The reason is "exceeded memory limit <limit> (peak <peak>)", sizes as people read them."""
    assert memory_error(2 * 1024**3, int(2.1 * 1024**3)) == (
        "exceeded memory limit 2 GiB (peak 2.1 GiB)"
    )
    assert memory_error(150 * MiB, 157 * MiB + MiB // 2) == (
        "exceeded memory limit 150 MiB (peak 157.5 MiB)"
    )
