"""Live progress: shown on stderr when it is a terminal, from the hooks alone."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import conveyor
from conveyor.progress import ProgressPlugin
from conveyor.testing import FakeClock, RecordingPlugin


class PgLeaf(conveyor.Task):
    """Writes its output."""

    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, f"leaf-{self.n}"))

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("x")


class PgBad(conveyor.Task):
    """Always fails."""

    root = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(os.path.join(self.root, "bad"))

    def run(self) -> None:
        raise RuntimeError("no")


class PgAll(conveyor.WrapperTask):
    """Three leaves and a failure."""

    root = conveyor.Parameter()

    def requires(self) -> list[conveyor.Task]:
        return [*(PgLeaf(root=self.root, n=n) for n in range(3)), PgBad(root=self.root)]


def test_progress_plugin_counts_from_the_hooks(tmp_path: Path) -> None:
    """The final line counts done, running, pending and failed tasks, then ends the line."""
    stream = io.StringIO()
    progress = ProgressPlugin(stream, min_interval=0.0, clock=FakeClock().monotonic)
    with conveyor.Worker(plugins=[progress, RecordingPlugin()]) as worker:
        worker.add(PgAll(root=str(tmp_path)))
        worker.run()
    last = stream.getvalue().rstrip("\n").split("\r\x1b[K")[-1]
    assert last == "conveyor: 3/5 done (60%) · 0 running · 1 pending · 1 failed · 0.0 s elapsed"
    assert stream.getvalue().endswith("\n")


def test_conveyor_run_shows_progress_only_on_a_terminal(tmp_path: Path) -> None:
    """With stderr on a pseudo-terminal the CLI draws the progress line; piped, it does not."""
    module = tmp_path / "pg_tasks.py"
    module.write_text(
        "import conveyor, os\n"
        "class T(conveyor.Task):\n"
        "    root = conveyor.Parameter()\n"
        "    def output(self):\n"
        "        return conveyor.LocalTarget(os.path.join(self.root, 'out'))\n"
        "    def run(self):\n"
        "        self.output().open('w').close()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = str(tmp_path)
    args = [
        sys.executable,
        "-m",
        "conveyor",
        "run",
        "pg_tasks.T",
        "--root",
        str(tmp_path),
        "--log-level",
        "warning",
    ]
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run(
            args,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=secondary,
            timeout=60,
            check=False,
        )
        os.close(secondary)
        seen = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(primary)
    assert proc.returncode == 0
    assert "conveyor: 1/1 done (100%) · 0 running · 0 pending · 0 failed" in seen.decode()
    (tmp_path / "out").unlink()
    piped = subprocess.run(
        args, cwd=tmp_path, env=env, capture_output=True, timeout=60, check=False
    )
    assert piped.returncode == 0
    assert b"done (" not in piped.stderr
