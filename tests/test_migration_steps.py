"""The three steps of docs/migrating-from-luigi.md, run as the guide shows them.

The commands are read out of the guide itself, so the page and this test cannot drift apart:
every console block preceded by ``<!-- migration-test: NAME -->`` is run, line by line, in a
fresh directory (with ``examples/`` linked into it, as running from the repository root would
have it). A ``$ `` line is a command, run by bash with the environment the block's ``export``
lines built; the lines after it are its output as the guide shows it, and each of them, unless
it contains ``…`` (the guide's mark for trimmed output), must appear in what the command
printed. A command ending in `` &`` (the scheduler) runs in the background until the test ends;
``pip install`` lines are skipped (the plugin is installed in the test environment). Port 8082
becomes a free loopback port.

Every step's outputs are compared byte for byte with those of the Luigi program run by Luigi
alone (``luigi --local-scheduler``), and with what the sample's fixed input must give.
"""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conveyor.testing.processes import (
    child_env,
    free_port,
    http_request,
    kill_marked,
    kill_tree,
    wait_for,
)
from test_luigi_port_example import _days, _report, _seen, _tsv
from test_luigi_rpc import Server

pytest.importorskip("luigi")

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "migrating-from-luigi.md"
LUIGI_PIPELINE = REPO / "examples" / "luigi_port" / "luigi_pipeline.py"
MARKER = "MIGRATION_STEPS_MARKER"
ROOT = Path("out") / "luigi_port"  # as luigi.cfg and worker.toml set it, relative to cwd
GUIDE_PORT = "8082"
WEEK = "2026-11-01-2026-11-08"


def _plugin_ready() -> bool:
    try:
        import conveyor_luigi  # noqa: F401
    except ImportError:
        return False
    return True


needs_plugin = pytest.mark.skipif(
    not _plugin_ready(), reason="the conveyor-luigi plugin is not installed"
)


@dataclass
class Command:
    """One ``$ `` line of the guide and the output lines shown after it."""

    line: str
    shown: list[str] = field(default_factory=list)


def guide_blocks(name: str) -> list[str]:
    """The bodies of the guide's fenced blocks marked ``<!-- migration-test: name -->``."""
    text = GUIDE.read_text(encoding="utf-8")
    pattern = rf"<!-- migration-test: {re.escape(name)} -->\n```[a-z]*\n(.*?)```"
    found = re.findall(pattern, text, re.S)
    assert found, f"the guide has no block marked {name!r}"
    return found


def commands(name: str) -> list[Command]:
    """The commands of the blocks marked ``name``, with their shown output."""
    made: list[Command] = []
    for block in guide_blocks(name):
        for line in block.splitlines():
            if line.startswith("$ "):
                made.append(Command(line[2:]))
            elif made:
                made[-1].shown.append(line)
    return made


def _normal(text: str) -> str:
    """``text`` without what differs between two runs: durations."""
    return re.sub(r"in \d+(\.\d+)? s\b", "in N s", text)


class Shell:
    """Runs the guide's commands in one directory, as a reader's shell would."""

    def __init__(self, directory: Path, marker: str) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "examples").symlink_to(REPO / "examples", target_is_directory=True)
        self._port = ""  # picked when first needed: just before the server starts
        # this process's environment without CONVEYOR_* (child_env) and LUIGI_* variables
        made = child_env(directory, MARKER, marker)
        self.env = {k: v for k, v in made.items() if not k.startswith("LUIGI_")}
        self.env.pop("PYTHONPATH", None)  # as in a fresh shell; the guide exports its own
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
        self.background: list[subprocess.Popen[bytes]] = []
        self.ran: list[tuple[str, subprocess.CompletedProcess[str]]] = []

    @property
    def port(self) -> str:
        """The scheduler's port, picked free the first time a command line needs it (the
        guide's commands name it just before they start the server)."""
        if not self._port:
            self._port = str(free_port())
        return self._port

    def write_files(self, name: str) -> None:
        """Write each block marked ``name`` to the file its first line names (``# x.py``)."""
        for block in guide_blocks(name):
            first = re.match(r"# (\w+\.py)\b", block)
            assert first, f"a {name!r} block must start with '# <file>.py'"
            (self.dir / first.group(1)).write_text(block, encoding="utf-8")

    def run(self, name: str) -> None:
        """Run the commands of the blocks marked ``name``; each must exit with 0 and print
        the lines the guide shows."""
        for command in commands(name):
            line = command.line
            if GUIDE_PORT in line:
                line = line.replace(GUIDE_PORT, self.port)
            if line.startswith("export "):
                for assignment in shlex.split(line)[1:]:
                    key, _, value = assignment.partition("=")
                    self.env[key] = value
            elif line.startswith("pip install"):
                continue
            elif line.endswith(" &"):
                self.start(line[:-2], command)
            else:
                self.check(line, self.call(line), command)

    def call(self, line: str) -> subprocess.CompletedProcess[str]:
        """Run one command line with bash (bounded); its output."""
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        self.ran.append((line, done))
        return done

    def check(self, line: str, done: subprocess.CompletedProcess[str], command: Command) -> None:
        """Exit 0, and every shown line not trimmed with ``…`` printed."""
        printed = _normal(done.stdout + done.stderr)
        assert done.returncode == 0, f"{line}\nexit {done.returncode}\n{printed}"
        for shown in command.shown:
            if GUIDE_PORT in shown:
                shown = shown.replace(GUIDE_PORT, self.port)
            expected = _normal(shown).rstrip()
            if expected and "…" not in expected:
                assert expected in printed, f"{line}\nshould print {expected!r}:\n{printed}"

    def start(self, line: str, command: Command) -> None:
        """Start a server in the background and wait (bounded) until it answers /health."""
        log = self.dir / f"background-{len(self.background)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", f"exec {line}"],
                cwd=self.dir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append(proc)

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{line} exited with {proc.returncode}: {log.read_text()}")
            try:
                return http_request(int(self.port), "GET", "/health", timeout=2).status == 200
            except OSError:
                return False

        wait_for(healthy, 60, f"{line} to answer /health")
        done = subprocess.CompletedProcess(line, 0, log.read_text(), "")
        self.check(line, done, command)

    def server(self) -> Server:
        """The background scheduler, for requests with the token the guide made."""
        server = Server(self.dir, self.dir / "unused.toml", self.env, port=int(self.port))
        token = self.dir / "out" / "token"
        server.token = token.read_text().strip() if token.exists() else ""
        return server

    def stop(self) -> None:
        """Kill what the commands left running."""
        for proc in self.background:
            kill_tree(proc.pid)
            proc.wait(timeout=10)


@pytest.fixture
def shells(tmp_path: Path) -> Iterator[Any]:
    """Make shells in tmp_path; every process they started is killed at teardown."""
    marker = uuid.uuid4().hex
    made: list[Shell] = []

    def make(name: str) -> Shell:
        made.append(Shell(tmp_path / name, marker))
        return made[-1]

    try:
        yield make
    finally:
        for shell in made:
            shell.stop()
        kill_marked(MARKER, marker)


def outputs(directory: Path) -> dict[str, bytes]:
    """What the pipeline made under ``directory``: daily partitions and period files."""
    root = directory / ROOT
    return {
        str(path.relative_to(root)): path.read_bytes()
        for sub in ("daily", "periods")
        for path in sorted((root / sub).glob("*"))
        if path.is_file()
    }


def rows(directory: Path, interval: str) -> list[tuple[str, str, int]]:
    """The rows of an interval's database."""
    with sqlite3.connect(directory / ROOT / "periods" / f"{interval}.sqlite") as db:
        found = db.execute("SELECT day, type, n FROM counts ORDER BY day, type").fetchall()
    return [(str(day), str(kind), int(n)) for day, kind, n in found]


def assert_first_week(directory: Path) -> None:
    """The first week's partitions, database and report, as the sample's input gives them."""
    days = _days("2026-11-01", "2026-11-08")
    made = outputs(directory)
    for day in days:
        assert made.pop(f"daily/{day}.tsv").decode() == _tsv(day)
    assert made.pop(f"periods/{WEEK}.txt").decode() == _report(WEEK, days)
    assert made.pop(f"periods/{WEEK}.sqlite")
    assert made == {}, sorted(made)
    assert rows(directory, WEEK) == [(str(d), kind, n) for d in days for kind, n in _seen(d)]


@pytest.fixture
def luigi_alone(shells: Any) -> Shell:
    """The reference: the Luigi program run by Luigi alone, as the guide shows it."""
    shell: Shell = shells("luigi-alone")
    shell.run("setup")
    shell.run("luigi-alone")
    assert_first_week(shell.dir)
    return shell


def test_the_guide_shows_the_luigi_program_as_it_is() -> None:
    """Every line of the guide's excerpt of luigi_pipeline.py is in the file, in order."""
    source = LUIGI_PIPELINE.read_text(encoding="utf-8").splitlines()
    (excerpt,) = guide_blocks("luigi-excerpt")
    at = 0
    for line in excerpt.splitlines():
        if not line.strip() or line.strip() in ("...", "…") or line.startswith("# luigi_"):
            continue
        rest = [n for n, have in enumerate(source[at:], at) if have.rstrip() == line.rstrip()]
        assert rest, f"the guide's line {line!r} is not in {LUIGI_PIPELINE.name} (in order)"
        at = rest[0] + 1


def test_the_guide_shows_the_example_configuration_files_whole() -> None:
    """The guide's luigi.cfg and server.toml blocks are the example's files."""
    for name, path in (("luigi-cfg", "luigi.cfg"), ("server-toml", "server.toml")):
        (block,) = guide_blocks(name)
        assert block == (LUIGI_PIPELINE.parent / path).read_text(encoding="utf-8"), path


def test_luigi_alone_and_the_conveyor_port_make_the_same_files(
    luigi_alone: Shell, shells: Any
) -> None:
    """The Luigi program under ``luigi --local-scheduler`` and the conveyor port
    (examples/luigi_port/pipeline.py) make the same partitions and report, byte for byte,
    and the same database rows."""
    port: Shell = shells("port")
    port.run("setup")
    command = "conveyor run examples.luigi_port.pipeline.Backfill --start 2026-11-01"
    command += " --stop 2026-11-08 --config examples/luigi_port/worker.toml"
    done = port.call(command)
    assert done.returncode == 0, done.stdout + done.stderr
    ours, theirs = outputs(port.dir), outputs(luigi_alone.dir)
    assert ours.pop(f"periods/{WEEK}.sqlite") and theirs.pop(f"periods/{WEEK}.sqlite")
    assert ours == theirs
    assert rows(port.dir, WEEK) == rows(luigi_alone.dir, WEEK)


def test_step_1_luigi_workers_run_against_conveyor_scheduler(
    luigi_alone: Shell, shells: Any
) -> None:
    """Step 1: an unmodified ``luigi`` worker with ``--scheduler-url http://luigi:TOKEN@...``
    against ``conveyor scheduler`` (luigi_rpc, a token file): exit 0, the same files as under
    Luigi alone, and every task of the graph DONE in the server's task list."""
    shell: Shell = shells("step1")
    shell.run("setup")
    shell.run("step1-server")
    shell.run("step1")
    assert outputs(shell.dir) == outputs(luigi_alone.dir)
    assert any(line.startswith("luigi --module") for line, _ in shell.ran)
    reply = shell.server().request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    tasks = reply.json()["tasks"]
    assert {t["status"] for t in tasks} == {"DONE"}
    families = sorted(t["family"] for t in tasks)
    expected = ["Backfill", *["DailyCounts"] * 7, "PeriodDatabase", "PeriodReport"]
    expected += ["RangeDaily", *["RawEvents"] * 7]
    assert families == expected
    unauthorised = shell.server()
    unauthorised.token = "not-the-token"
    assert unauthorised.request("GET", "/api/v1/tasks").status == 401


@needs_plugin
def test_step_2_conveyor_runs_the_luigi_tasks(luigi_alone: Shell, shells: Any) -> None:
    """Step 2: ``conveyor run`` of the unmodified Luigi tasks, with the local scheduler, makes
    the same files as Luigi alone; against the server, a conveyor worker and a Luigi worker
    share one graph (Luigi's task ids on both sides)."""
    shell: Shell = shells("step2")
    shell.run("setup")
    shell.run("step2-local")
    assert outputs(shell.dir) == outputs(luigi_alone.dir)
    assert any(line.startswith("conveyor run examples.") for line, _ in shell.ran)

    shell.run("step1-server")
    shell.run("step2-server")
    week45 = _days("2026-11-02", "2026-11-09")
    made = outputs(shell.dir)
    assert made["periods/2026-W45.txt"].decode() == _report("2026-W45", week45)
    for day in _days("2026-11-01", "2026-11-11"):
        assert made[f"daily/{day}.tsv"].decode() == _tsv(day)
    reply = shell.server().request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply
    listed = {t["task_id"]: t for t in reply.json()["tasks"]}
    assert {t["status"] for t in listed.values()} == {"DONE"}
    # one graph: the conveyor worker's week and the Luigi worker's range on the same ids
    daily = sorted(t["params"]["day"] for t in listed.values() if t["family"] == "DailyCounts")
    assert daily == [str(day) for day in _days("2026-11-02", "2026-11-11")]
    assert {"PeriodReport", "RangeDaily"} <= {t["family"] for t in listed.values()}


@needs_plugin
def test_step_3_a_ported_task_requires_a_luigi_task(luigi_alone: Shell, shells: Any) -> None:
    """Step 3: the conveyor port's PeriodReport, made to require the Luigi PeriodDatabase
    (which requires Luigi's DailyCounts), run by ``conveyor run``: the same files as Luigi
    alone."""
    shell: Shell = shells("step3")
    shell.run("setup")
    shell.write_files("step3-file")
    shell.run("step3")
    assert outputs(shell.dir) == outputs(luigi_alone.dir)
    printed = "".join(done.stdout for _, done in shell.ran)
    assert "1 PeriodReport" in printed and "7 DailyCounts" in printed


def test_a_stopped_shell_leaves_no_server_behind(shells: Any) -> None:
    """The scheduler the guide starts in the background is gone once the shell is stopped
    (so a failing step cannot leave it running)."""
    shell: Shell = shells("stop")
    shell.run("setup")
    shell.run("step1-server")
    (proc,) = shell.background
    assert http_request(int(shell.port), "GET", "/health").status == 200
    shell.stop()
    assert proc.poll() is not None
    with pytest.raises(OSError):
        http_request(int(shell.port), "GET", "/health", timeout=5)
