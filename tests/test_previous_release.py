"""A worker of the previous release against this server, and this worker against the previous
release's server (issue 21, "Must not regress"; SPEC §10: adding a field is adding a defaulted
field, with no signature sniffing or error-text matching).

The previous release is commit ``PREVIOUS`` of this repository: its ``src/conveyor`` is taken
from git (``git archive``) into a temporary directory and put first on ``PYTHONPATH`` of the
process that plays the old side, so ``python -m conveyor`` there runs the old code with the same
third-party packages. Both sides are real processes on loopback: a ``conveyor scheduler`` and a
``conveyor run --scheduler-url`` worker running a graph with a success, a failure and a time-out
(each reported with its outcome), and each test checks what the server stored through
``GET /api/v1/tasks``. Without git or without the commit (an export of the tree instead of a
clone) the tests are skipped, saying why.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from conveyor.testing.processes import SchedulerProcess, kill_marked

pytestmark = pytest.mark.timeout(180)

PREVIOUS = "102f48b"  # the last commit before the transport became call(request) -> answer
REPO = Path(__file__).resolve().parent.parent
MARKER = "PREVIOUS_RELEASE_TEST"

TASKS = '''
import time

import conveyor


class Leaf(conveyor.Task):
    """Writes its file; on_success says so (a success explanation, which a server of the
    previous release does not know: this worker then reports the success without it)."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/leaf-{self.n}")

    def run(self):
        with self.output().open("w") as f:
            f.write("ok")

    def on_success(self):
        return f"wrote leaf {self.n}"


class Broken(conveyor.Task):
    """Always fails, with a message the server must store."""

    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/broken")

    def run(self):
        raise RuntimeError("broken on purpose")


class Slow(conveyor.Task):
    """Runs past its timeout: the report carries the outcome ``timed_out``."""

    root = conveyor.Parameter()
    worker_timeout = 1

    def output(self):
        return conveyor.LocalTarget(f"{self.root}/slow")

    def run(self):
        time.sleep(300)


class Top(conveyor.WrapperTask):
    """Three leaves, a broken task and one that times out."""

    root = conveyor.Parameter()

    def requires(self):
        leaves = [Leaf(root=self.root, n=n) for n in range(3)]
        return [*leaves, Broken(root=self.root), Slow(root=self.root)]
'''


@pytest.fixture(scope="module")
def previous_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``src`` directory, exported from git."""
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("the previous release comes from git history, and this is not a git clone")
    found = subprocess.run(
        [git, "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip(f"commit {PREVIOUS} (the previous release) is not in this clone's history")
    archive = subprocess.run(
        [git, "-C", str(REPO), "archive", "--format=tar", PREVIOUS, "src/conveyor"],
        capture_output=True,
        check=True,
    )
    where = tmp_path_factory.mktemp("previous-release")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    return where / "src"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of this release's processes: the task module on the path."""
    (tmp_path / "compat_tasks.py").write_text(TASKS, encoding="utf-8")
    variables = {key: value for key, value in os.environ.items() if not key.startswith("CONVEYOR_")}
    variables.update({"PYTHONPATH": str(tmp_path), MARKER: tmp_path.name})
    yield variables
    kill_marked(MARKER, tmp_path.name)


NEWER_PLUGINS = "otel,prometheus,attemptprobe"
"""Installed plugins written against hooks the previous release does not have: in a real
installation they come with this release (they require it), so its processes leave them out."""


def older(env: dict[str, str], src: Path) -> dict[str, str]:
    """``env`` for a process running the previous release: its source first on the path, the
    plugins that need this release left out."""
    path = os.pathsep.join([str(src), env["PYTHONPATH"]])
    return {**env, "PYTHONPATH": path, "CONVEYOR_DISABLE_PLUGINS": NEWER_PLUGINS}


def runs_code_from(env: dict[str, str]) -> str:
    """The directory ``conveyor`` is imported from in a process with ``env``."""
    probe = "import conveyor, os; print(os.path.dirname(conveyor.__file__))"
    return subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def run_worker(tmp_path: Path, env: dict[str, str], url: str) -> subprocess.CompletedProcess[str]:
    """``conveyor run`` of the graph against the server at ``url``, to its end."""
    return subprocess.run(
        [
            sys.executable, "-m", "conveyor", "run", "--module", "compat_tasks", "Top",
            "--root", str(tmp_path), "--scheduler-url", url,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


def start_server(tmp_path: Path, env: dict[str, str]) -> SchedulerProcess:
    """A ``conveyor scheduler`` in ``tmp_path/server`` with ``env``, answering /health."""
    directory = tmp_path / "server"
    directory.mkdir()
    config = directory / "server.toml"
    config.write_text("", encoding="utf-8")
    server = SchedulerProcess(directory, config, env)
    server.start(timeout=60)
    return server


def stored(server: SchedulerProcess) -> dict[str, dict[str, object]]:
    """The server's task list by family and parameter ``n`` (``Leaf-0`` …)."""
    reply = server.request("GET", "/api/v1/tasks")
    assert reply.status == 200, reply.body
    entries: dict[str, dict[str, object]] = {}
    for entry in reply.json()["tasks"]:
        n = entry.get("params", {}).get("n")
        entries[entry["family"] + ("" if n is None else f"-{n}")] = entry
    return entries


def last_outcome(server: SchedulerProcess, entry: dict[str, object]) -> object:
    """How the latest attempt of the task ``entry`` ended, as the server keeps it."""
    reply = server.request("GET", "/ui/api/task?" + urlencode({"id": str(entry["task_id"])}))
    assert reply.status == 200, reply.body
    return reply.json()["task"]["attempts"][-1]["outcome"]


def check_run(
    tmp_path: Path, server: SchedulerProcess, run: subprocess.CompletedProcess[str]
) -> None:
    """The run failed only because of Broken; the server stored what happened."""
    assert run.returncode == 1, run.stdout + run.stderr
    assert all((tmp_path / f"leaf-{n}").read_text() == "ok" for n in range(3))
    entries = stored(server)
    assert {entries[f"Leaf-{n}"]["status"] for n in range(3)} == {"DONE"}, entries
    assert entries["Broken"]["status"] == "FAILED", entries
    assert entries["Slow"]["status"] == "FAILED", entries
    assert last_outcome(server, entries["Broken"]) == "failed"
    assert last_outcome(server, entries["Slow"]) == "timed_out"
    assert entries["Top"]["status"] == "PENDING", entries
    assert "broken on purpose" in (run.stdout + run.stderr)


def test_a_worker_of_the_previous_release_against_this_server(
    tmp_path: Path, env: dict[str, str], previous_src: Path
) -> None:
    """The old worker registers, takes work and reports successes and a failure to the new
    server, which stores each."""
    old = older(env, previous_src)
    assert runs_code_from(old) == str(previous_src / "conveyor")
    server = start_server(tmp_path, env)
    try:
        check_run(tmp_path, server, run_worker(tmp_path, old, server.url))
    finally:
        server.kill()


def test_this_worker_against_a_server_of_the_previous_release(
    tmp_path: Path, env: dict[str, str], previous_src: Path
) -> None:
    """The new worker's requests (fields at their defaults left out) are accepted by the old
    server, which stores each result."""
    old = older(env, previous_src)
    server = start_server(tmp_path, old)
    try:
        assert runs_code_from(env) != str(previous_src / "conveyor")
        check_run(tmp_path, server, run_worker(tmp_path, env, server.url))
    finally:
        server.kill()
