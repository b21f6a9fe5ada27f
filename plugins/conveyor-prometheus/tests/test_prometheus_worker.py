"""A worker's exports, with real ``conveyor run`` processes (and, to look inside, in-process
``Worker`` objects): the ``[prometheus] port`` endpoint scraped while a task runs, the textfile
rewritten atomically, families folded past ``max_families``, configuration refused with exit 2,
a port in use logged (the run goes on), no child of the worker holding the endpoint's socket,
and nothing at all when the plugin is installed but not configured."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path

import conveyor
import pytest
from conveyor.config import load_config
from conveyor.testing.processes import free_port, http_request, put, wait_for
from prometheus_client.parser import text_string_to_metric_families

from prom_support import (
    OPENMETRICS,
    SECRET,
    by_label,
    conveyor_run,
    error_lines,
    finish,
    histogram_counts_match,
    parse,
    scrape,
    value,
)

pytestmark = pytest.mark.timeout(120)

THREAD_PREFIX = "conveyor-prometheus"


def prometheus_threads() -> list[threading.Thread]:
    """The live threads this plugin starts (in this process)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def test_the_port_serves_the_counts_while_a_task_runs(workdir: Path, marker: str) -> None:
    """Scraped over HTTP while ``Gated`` waits for its gate: the dependency that finished is
    counted, the running task is not, and no parameter value is in any label."""
    port = free_port()
    root = workdir / "out"
    proc = conveyor_run(
        workdir,
        "Gated",
        marker,
        "--root", str(root), "--n", SECRET, "--executor", "fork",
        config=f"[prometheus]\nport = {port}\n",
    )  # fmt: skip
    wait_for((root / "started").exists, 60, "the gated task to start")
    text = scrape(port)
    samples = parse(text)
    assert by_label(samples, "conveyor_task_attempts_total", "family", "outcome") == {
        ("Succeeds", "succeeded"): 1.0
    }
    histogram_counts_match(samples, "conveyor_task_attempts", "conveyor_task_duration_seconds")
    assert SECRET not in text and str(root) not in text
    openmetrics = http_request(port, "GET", "/metrics", headers={"Accept": OPENMETRICS})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    put(root / "gate", "open")
    code, out, err = finish(proc)
    assert code == 0, (out + err)[-3000:]


def test_the_textfile_is_never_seen_half_written(workdir: Path, marker: str) -> None:
    """Rewritten every 10 ms while a task runs: every read of the file, taken while it is
    being replaced again and again, parses with prometheus_client's parser and holds every
    family; the last one (at exit) has the final counts; no temporary file is left."""
    root = workdir / "out"
    metrics = workdir / "prom"
    metrics.mkdir()
    textfile = metrics / "conveyor.prom"
    proc = conveyor_run(
        workdir,
        "Gated",
        marker,
        "--root", str(root), "--executor", "fork",
        config=f'[prometheus]\ntextfile = "{textfile}"\ninterval = 0.01\n',
    )  # fmt: skip
    wait_for((root / "started").exists, 60, "the gated task to start")
    versions: set[tuple[int, int]] = set()  # (inode, mtime): one per file written
    reads = 0

    def read_once() -> bool:
        nonlocal reads
        stat = os.stat(textfile)
        versions.add((stat.st_ino, stat.st_mtime_ns))
        text = textfile.read_text(encoding="utf-8")
        names = {family.name for family in text_string_to_metric_families(text)}
        families = {"conveyor_task_attempts", "conveyor_task_duration_seconds"}
        assert families | {"conveyor_notifications"} <= names, text
        done = value(
            parse(text), "conveyor_task_attempts_total", family="Succeeds", outcome="succeeded"
        )
        if reads:  # (counters only grow: once seen, every later file has it)
            assert done == 1.0, text
        elif done is None:
            return False  # (a file written before Succeeds was counted)
        reads += 1
        return len(versions) >= 20 and reads >= 200  # many replacements seen, every read whole

    wait_for(read_once, 60, "20 rewrites of the textfile", interval=0)
    put(root / "gate", "open")
    code, out, err = finish(proc)
    assert code == 0, (out + err)[-3000:]
    final = parse(textfile.read_text(encoding="utf-8"))
    assert by_label(final, "conveyor_task_attempts_total", "family", "outcome") == {
        ("Succeeds", "succeeded"): 1.0,
        ("Gated", "succeeded"): 1.0,
    }
    assert sorted(p.name for p in metrics.iterdir()) == ["conveyor.prom"]


def test_families_beyond_max_families_are_counted_as_other(workdir: Path, marker: str) -> None:
    """max_families = 2 and three families run in order: the third is counted as "other"."""
    textfile = workdir / "worker.prom"
    proc = conveyor_run(
        workdir,
        "ThirdFamily",
        marker,
        "--root", str(workdir / "out"),
        config=f'[prometheus]\ntextfile = "{textfile}"\nmax_families = 2\n',
    )  # fmt: skip
    code, out, err = finish(proc)
    assert code == 0, (out + err)[-3000:]
    samples = parse(textfile.read_text(encoding="utf-8"))
    assert by_label(samples, "conveyor_task_attempts_total", "family", "outcome") == {
        ("FirstFamily", "succeeded"): 1.0,
        ("SecondFamily", "succeeded"): 1.0,
        ("other", "succeeded"): 1.0,
    }
    histogram_counts_match(samples, "conveyor_task_attempts", "conveyor_task_duration_seconds")


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('port = "x"', "prometheus.port"),
        ("port = 70000", "prometheus.port"),
        ("max_families = 0", "prometheus.max_families"),
        ("interval = 0", "prometheus.interval"),
        ('host = ""', "prometheus.host"),
        ("prot = 9000", "prometheus.prot"),
        ('textfile = "no/such/dir/x.prom"', "prometheus.textfile"),
    ],
)
def test_a_bad_table_refuses_the_start(workdir: Path, marker: str, table: str, key: str) -> None:
    """A bad ``[prometheus]`` value: exit 2, one error line naming the file and the key, no
    traceback, and no task run."""
    proc = conveyor_run(
        workdir,
        "Succeeds",
        marker,
        "--root", str(workdir / "out"),
        config=f"[prometheus]\n{table}\n",
    )  # fmt: skip
    code, out, err = finish(proc)
    assert code == 2, out + err
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert key in lines[0] and "worker.toml" in lines[0], lines
    assert "Traceback" not in err
    assert not (workdir / "out").exists()


def test_a_port_in_use_is_logged_and_the_run_goes_on(workdir: Path, marker: str) -> None:
    """A port something else listens on: an error naming host:port is logged, the endpoint is
    off, the textfile is still written and the run succeeds (exit 0)."""
    textfile = workdir / "worker.prom"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = conveyor_run(
            workdir,
            "Succeeds",
            marker,
            "--root", str(workdir / "out"),
            config=f'[prometheus]\nport = {port}\ntextfile = "{textfile}"\n',
        )  # fmt: skip
        code, out, err = finish(proc)
    assert code == 0, out + err
    assert (workdir / "out" / "Succeeds-0.out").exists()
    assert error_lines(err) == [], err
    (line,) = [line for line in err.splitlines() if "cannot listen on" in line]
    assert f"cannot listen on 127.0.0.1:{port}" in line, line
    assert "the metrics endpoint is off" in line and '"level": "error"' in line, line
    assert "Traceback" not in err
    samples = parse(textfile.read_text(encoding="utf-8"))
    assert by_label(samples, "conveyor_task_attempts_total", "family", "outcome") == {
        ("Succeeds", "succeeded"): 1.0
    }


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
@pytest.mark.parametrize(
    ("executor", "worker"),
    [
        ("fork", ""),  # the fork executor's server, made with the worker
        ("inline", "[worker]\ntimeout = 120\n"),  # a timed task's, made when run() begins
    ],
)
def test_no_child_of_the_worker_holds_the_endpoint(
    workdir: Path, marker: str, executor: str, worker: str
) -> None:
    """The worker listens on the port; neither its fork server nor the forked attempt holds
    that socket, so killing the worker with SIGKILL frees the port at once."""
    port = free_port()
    root = workdir / "out"
    proc = conveyor_run(
        workdir,
        "Gated",
        marker,
        "--root", str(root), "--executor", executor,
        config=f"{worker}[prometheus]\nport = {port}\n",
    )  # fmt: skip
    wait_for((root / "started").exists, 60, "the gated task to start")
    scrape(port)  # (the endpoint is up)
    attempt = int((root / "started").read_text(encoding="utf-8"))
    listening = listening_inodes(port)
    assert listening and listening <= socket_inodes(proc.pid), (listening, proc.pid)
    holders = [attempt, parent_of(attempt)]
    assert proc.pid not in holders  # (the attempt ran in a fork server's child)
    for pid in holders:
        assert not listening & socket_inodes(pid), (pid, listening)
    proc.kill()
    finish(proc)
    assert listening_inodes(port) == set()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_a_child_a_task_forks_does_not_hold_the_endpoint(workdir: Path, marker: str) -> None:
    """A task run in the worker's own process (``inline``) forks a child while the endpoint
    serves: the child closed its copy of the listening socket at fork."""
    port = free_port()
    root = workdir / "out"
    proc = conveyor_run(
        workdir,
        "Forks",
        marker,
        "--root", str(root), "--executor", "inline",
        config=f"[prometheus]\nport = {port}\n",
    )  # fmt: skip
    wait_for((root / "child").exists, 60, "the task's child to start")
    child = int((root / "child").read_text(encoding="utf-8"))
    listening = listening_inodes(port)
    assert listening and listening <= socket_inodes(proc.pid), (listening, proc.pid)
    assert parent_of(child) == proc.pid
    assert not listening & socket_inodes(child), (child, listening)
    assert "conveyor_task_attempts_total" in scrape(port)  # (the worker still serves)
    put(root / "gate", "open")
    code, out, err = finish(proc)
    assert code == 0, (out + err)[-3000:]


def listening_inodes(port: int) -> set[str]:
    """The inodes of the TCP sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table, encoding="ascii") as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    found.add(inode)
    return found


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` has open."""
    found: set[str] = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:[") : -1])
    return found


def parent_of(pid: int) -> int:
    """The parent process id of ``pid``."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _plugin(worker: conveyor.Worker) -> object:
    plugin = worker.hooks.pm.get_plugin("prometheus")
    assert type(plugin).__name__ == "PrometheusPlugin", plugin
    return plugin


def test_installed_but_unconfigured_it_does_nothing(tmp_path: Path) -> None:
    """A worker without ``[prometheus]`` port or textfile: the plugin is loaded, but it holds
    no metrics, starts no thread and listens nowhere, through a whole run."""
    (tmp_path / "worker.toml").write_text("[prometheus]\nmax_families = 5\n", encoding="utf-8")
    before = set(os.listdir(tmp_path))
    with conveyor.Worker(config=load_config(tmp_path / "worker.toml")) as worker:
        plugin = _plugin(worker)
        worker.add(_Touch(path=str(tmp_path / "done")))
        assert worker.run()
        assert prometheus_threads() == []
        assert vars(plugin)["_tasks"] is None and vars(plugin)["_exporter"] is None
        assert vars(plugin)["_server"] is None
    assert set(os.listdir(tmp_path)) == before | {"done"}


def test_the_endpoint_starts_once_and_stops_with_the_worker(tmp_path: Path) -> None:
    """Two runs of one worker start one endpoint thread; closing the worker stops it and
    frees the port (it can be bound again at once)."""
    port = free_port()
    config = tmp_path / "worker.toml"
    config.write_text(f"[prometheus]\nport = {port}\n", encoding="utf-8")
    with conveyor.Worker(config=load_config(config)) as worker:
        assert prometheus_threads() == []  # (nothing before the run: a fork may follow)
        worker.add(_Touch(path=str(tmp_path / "one")))
        assert worker.run()
        worker.add(_Touch(path=str(tmp_path / "two")))
        assert worker.run()
        assert [t.name for t in prometheus_threads()] == ["conveyor-prometheus-http"]
        samples = parse(scrape(port))
        assert (
            value(samples, "conveyor_task_attempts_total", family="_Touch", outcome="succeeded")
            == 2.0
        )
    assert prometheus_threads() == []
    with socket.socket() as again:  # (the scrape's connection may linger in TIME_WAIT)
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()  # (fails while another socket listens on the port)


class _Touch(conveyor.Task):
    """Creates the file ``path``."""

    path = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.path)

    def run(self) -> None:
        put(self.path, "done")


def test_notifications_and_interruptions_are_counted(workdir: Path, marker: str) -> None:
    """A notifier that fails once then delivers, and a worker stopped by SIGTERM while its
    task runs: the last textfile counts one failed and one sent notification, and the stopped
    attempt as ``interrupted``."""
    root = workdir / "out"
    textfile = workdir / "worker.prom"
    sent = workdir / "notified.jsonl"
    proc = conveyor_run(
        workdir,
        "Gated",
        marker,
        "--root", str(root), "--executor", "fork",
        config=(
            f'[prometheus]\ntextfile = "{textfile}"\ninterval = 60\n'
            '[notifiers]\nenabled = ["jsonl"]\non = ["failed"]\n'
            f'[notifiers.jsonl]\npath = "{sent}"\nfail_first = 1\n'
        ),
    )  # fmt: skip
    wait_for((root / "started").exists, 60, "the gated task to start")
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, (out + err)[-3000:]
    samples = parse(textfile.read_text(encoding="utf-8"))
    assert by_label(samples, "conveyor_task_attempts_total", "family", "outcome") == {
        ("Succeeds", "succeeded"): 1.0,
        ("Gated", "interrupted"): 1.0,
    }
    notified = by_label(samples, "conveyor_notifications_total", "notifier", "result")
    assert len(sent.read_text(encoding="utf-8").splitlines()) == notified[("jsonl", "sent")]
    assert notified == {("jsonl", "failed"): 1.0, ("jsonl", "sent"): 1.0}
