"""Unmodified Luigi tasks: Luigi's own worker and scheduler against conveyor's; prints a table.

Needs luigi and the conveyor-luigi plugin (``pip install ./plugins/conveyor-luigi``). The task
module (``Top`` requiring N ``Leaf`` tasks, each writing a tiny ``luigi.LocalTarget``) is
written to a temporary directory; every run gets a fresh output directory and working
directory, and its output files are counted afterwards (a run that did not make all N + 1 is
reported as failed, whatever its exit code).

Modes:

``fanin``
    one process, in-process scheduler: ``python -m luigi --local-scheduler --module m Top
    --workers 1`` against ``conveyor run m.Top --executor inline --local-scheduler``. Wall
    time of each command, interpreter start and imports included; the ratio is Luigi's time
    over conveyor's.
``server``
    two Luigi CLI workers (``--workers 1`` each, started together) on the same graph, against
    ``luigid`` (Luigi's central scheduler, in the foreground on a free loopback port, its
    state in the temporary directory) and against ``conveyor scheduler`` with
    ``[server] luigi_rpc = true``. Wall time from starting the workers until both have exited.

Both Luigi and conveyor log at warning level. Example::

    python benchmarks/bench_luigi.py --mode fanin --n 2000
    python benchmarks/bench_luigi.py --quick
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from precompile import compile_measured

TASKS = textwrap.dedent(
    """
    import os

    import luigi

    DIR = os.environ["BENCH_DIR"]


    class Leaf(luigi.Task):
        i = luigi.IntParameter()

        def output(self):
            return luigi.LocalTarget(os.path.join(DIR, f"leaf-{self.i}"))

        def run(self):
            with self.output().open("w") as out:
                out.write(f"{self.i}\\n")


    class Top(luigi.Task):
        n = luigi.IntParameter()

        def requires(self):
            return [Leaf(i=i) for i in range(self.n)]

        def output(self):
            return luigi.LocalTarget(os.path.join(DIR, "top"))

        def run(self):
            with self.output().open("w") as out:
                out.write(f"{len(self.input())}\\n")
    """
)
MODULE = "bench_luigi_tasks"
PYTHON = sys.executable
LUIGI = [PYTHON, "-m", "luigi", "--module", MODULE, "Top"]
CONVEYOR = [PYTHON, "-m", "conveyor"]
LUIGID = [PYTHON, "-c", "from luigi.cmdline import luigid; luigid()"]
# Luigi exits 0 when a task failed unless told otherwise
LUIGI_RETCODES = ["--retcode-task-failed", "1", "--retcode-scheduling-error", "1"]
DEFAULT_N = {"fanin": 2000, "server": 500}
QUICK_N = {"fanin": 200, "server": 50}


class BenchError(Exception):
    """A benchmark could not run (a server did not start, a needed feature is missing)."""


@dataclass(frozen=True)
class Outcome:
    """One measured run: what ran, how long it took, whether it made every output."""

    mode: str
    runner: str
    n: int
    wall_s: float
    ok: bool
    note: str = ""


class Bench:
    """A temporary directory holding the task module, and fresh directories for each run."""

    def __init__(self, timeout: float) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="conveyor-bench-luigi-"))
        (self.root / f"{MODULE}.py").write_text(TASKS)
        python_path = [str(self.root), os.environ.get("PYTHONPATH", "")]
        compile_measured(
            {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in python_path if p)},
            self.root,
            [str(self.root / f"{MODULE}.py")],
        )
        self.timeout = timeout
        self._runs = 0

    def fresh(self, name: str) -> tuple[Path, dict[str, str]]:
        """A new working directory for ``name`` and the environment of its processes (their
        outputs go to a new directory of their own, ``BENCH_DIR``)."""
        self._runs += 1
        cwd = self.root / f"{self._runs:02d}-{name}"
        (cwd / "out").mkdir(parents=True)
        python_path = [str(self.root), os.environ.get("PYTHONPATH", "")]
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")},
            "BENCH_DIR": str(cwd / "out"),
            "PYTHONPATH": os.pathsep.join(p for p in python_path if p),
        }
        env.pop("LUIGI_CONFIG_PATH", None)
        return cwd, env

    def timed(self, mode: str, runner: str, n: int, cwd: Path, run: Callable[[], str]) -> Outcome:
        """Time ``run`` (which returns a note, empty when all went well) and count outputs."""
        started = time.perf_counter()
        note = run()
        wall = time.perf_counter() - started
        made = sum(1 for _ in (cwd / "out").iterdir())
        if made != n + 1 and not note:
            note = f"made {made} of {n + 1} outputs"
        return Outcome(mode, runner, n, round(wall, 2), not note, note)

    def command(self, cwd: Path, env: dict[str, str], argv: Sequence[str]) -> str:
        """Run ``argv`` to its end; "" or what went wrong (its stderr is kept in ``cwd``)."""
        with open(cwd / "stderr.txt", "wb") as err:
            done = subprocess.run(
                list(argv),
                cwd=cwd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                timeout=self.timeout,
                check=False,
            )
        return "" if done.returncode == 0 else f"exit {done.returncode}, see {cwd}/stderr.txt"

    def together(self, cwd: Path, env: dict[str, str], argvs: Sequence[Sequence[str]]) -> str:
        """Start every command at once and wait for all; "" or what went wrong."""
        procs = []
        for index, argv in enumerate(argvs):
            err = open(cwd / f"stderr-{index}.txt", "wb")  # noqa: SIM115 (closed below)
            proc = subprocess.Popen(
                list(argv), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err
            )
            procs.append((proc, err))
        codes = []
        for proc, err in procs:
            try:
                codes.append(proc.wait(timeout=self.timeout))
            finally:
                err.close()
        bad = [c for c in codes if c != 0]
        return f"exit codes {codes}, see {cwd}/stderr-*.txt" if bad else ""


def fanin(bench: Bench, n: int) -> list[Outcome]:
    """Luigi's local scheduler and worker, then ``conveyor run`` inline, on one fan-in."""
    cwd, env = bench.fresh("luigi-local")
    luigi_argv = [*LUIGI, "--n", str(n), "--local-scheduler", "--workers", "1"]
    luigi_argv += ["--log-level", "WARNING", *LUIGI_RETCODES]
    luigi = bench.timed(
        "fanin", "luigi --local-scheduler", n, cwd, lambda: bench.command(cwd, env, luigi_argv)
    )
    cwd2, env2 = bench.fresh("conveyor-inline")
    conveyor_argv = [*CONVEYOR, "run", f"{MODULE}.Top", "--n", str(n), "--executor", "inline"]
    conveyor_argv += ["--local-scheduler", "--log-level", "warning"]
    conveyor = bench.timed(
        "fanin",
        "conveyor run --executor inline",
        n,
        cwd2,
        lambda: bench.command(cwd2, env2, conveyor_argv),
    )
    return [luigi, conveyor]


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    """Poll ``ready`` for up to 60 s; BenchError if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with {proc.returncode} before it was ready")
        if ready():
            return
        time.sleep(0.1)
    raise BenchError(f"{what} was not ready within 60 s")


def listening(port: int) -> Callable[[], bool]:
    """Whether something accepts connections on the loopback ``port``."""

    def check() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    return check


def healthy(url: str) -> Callable[[], bool]:
    """Whether conveyor's scheduler at ``url`` answers /health."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return True
        except OSError:
            return False

    return check


def luigi_rpc_answers(url: str) -> bool:
    """Whether the server at ``url`` serves Luigi's RPC (``/api/ping`` is not a 404)."""
    request = urllib.request.Request(
        url + "/api/ping",
        data=b"data=%7B%22worker%22%3A%20%22bench-probe%22%7D",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code != 404
    except OSError:
        return False


def two_luigi_workers(
    bench: Bench, n: int, runner: str, url: str, cwd: Path, env: dict[str, str]
) -> Outcome:
    """Two Luigi CLI workers on the graph against the scheduler at ``url``, timed."""
    argv = [*LUIGI, "--n", str(n), "--workers", "1", "--scheduler-url", url + "/"]
    argv += ["--log-level", "WARNING", *LUIGI_RETCODES]
    return bench.timed("server", runner, n, cwd, lambda: bench.together(cwd, env, [argv, argv]))


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server started here and wait for it (kill after 30 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def against_luigid(bench: Bench, n: int) -> Outcome:
    """Two Luigi workers against luigid, in the foreground on a free port."""
    cwd, env = bench.fresh("luigid")
    port = free_port()
    argv = [*LUIGID, "--address", "127.0.0.1", "--port", str(port)]
    argv += ["--state-path", str(cwd / "luigid-state.pickle"), "--logdir", str(cwd)]
    with open(cwd / "luigid.log", "wb") as log:
        server = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(listening(port), server, "luigid")
            return two_luigi_workers(
                bench, n, "2 luigi workers -> luigid", f"http://127.0.0.1:{port}", cwd, env
            )
        finally:
            stop(server)


def against_conveyor(bench: Bench, n: int) -> Outcome:
    """Two Luigi workers against ``conveyor scheduler`` with ``[server] luigi_rpc = true``."""
    cwd, env = bench.fresh("conveyor-scheduler")
    (cwd / "worker.toml").write_text("[server]\nluigi_rpc = true\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [*CONVEYOR, "scheduler", "--port", str(port), "--state-path", str(cwd / "state.db")]
    argv += ["--config", str(cwd / "worker.toml")]
    with open(cwd / "scheduler.log", "wb") as log:
        server = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                wait_until(healthy(url), server, "conveyor scheduler")
            except BenchError as exc:
                raise BenchError(
                    f"{exc}; does this conveyor know [server] luigi_rpc? see {cwd}/scheduler.log"
                ) from None
            if not luigi_rpc_answers(url):
                raise BenchError("conveyor scheduler does not serve Luigi's RPC (/api/ping is 404)")
            return two_luigi_workers(
                bench, n, "2 luigi workers -> conveyor scheduler", url, cwd, env
            )
        finally:
            stop(server)


def server(bench: Bench, n: int) -> list[Outcome]:
    """Two Luigi workers against luigid, then against conveyor's scheduler."""
    outcomes = [against_luigid(bench, n)]
    try:
        outcomes.append(against_conveyor(bench, n))
    except BenchError as exc:
        outcomes.append(
            Outcome("server", "2 luigi workers -> conveyor scheduler", n, 0.0, False, str(exc))
        )
    return outcomes


MODES: dict[str, Callable[[Bench, int], list[Outcome]]] = {"fanin": fanin, "server": server}


def print_table(outcomes: Sequence[Outcome]) -> None:
    """One row per run of one mode, then Luigi's time over conveyor's when both worked."""
    print(f"{'mode':<7} {'runner':<40} {'n':>6} {'wall s':>8}  result")
    for o in outcomes:
        result = "ok" if o.ok else f"FAILED: {o.note}"
        print(f"{o.mode:<7} {o.runner:<40} {o.n:>6} {o.wall_s:>8.2f}  {result}")
    if len(outcomes) == 2 and all(o.ok for o in outcomes) and outcomes[1].wall_s > 0:
        ratio = outcomes[0].wall_s / outcomes[1].wall_s
        print(f"{outcomes[0].mode}: luigi / conveyor = {ratio:.1f}x", flush=True)


def main() -> None:
    """Parse arguments, run the chosen modes, print the tables; exit 1 if a run failed (its
    work directory is kept), else remove the work directory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--n", type=int, help="leaves in the graph (fanin 2000, server 500)")
    parser.add_argument("--quick", action="store_true", help="small graphs (fanin 200, server 50)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per command")
    parser.add_argument("--repeat", type=int, default=1, help="measure each mode this often")
    args = parser.parse_args()
    bench = Bench(args.timeout)
    print(f"# work directory: {bench.root}", flush=True)
    failed = False
    for _ in range(args.repeat):
        for mode in args.mode:
            n = args.n or (QUICK_N if args.quick else DEFAULT_N)[mode]
            try:
                outcomes = MODES[mode](bench, n)
            except BenchError as exc:
                outcomes = [Outcome(mode, "-", n, 0.0, False, str(exc))]
            print_table(outcomes)
            failed = failed or not all(o.ok for o in outcomes)
    if failed:
        print(f"# kept for inspection: {bench.root}")
        sys.exit(1)
    shutil.rmtree(bench.root, ignore_errors=True)


if __name__ == "__main__":
    main()
