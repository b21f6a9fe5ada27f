"""Helpers of the Prometheus plugin's tests: the task module they run, real ``conveyor
scheduler`` and ``conveyor run`` processes, and metrics read with prometheus_client's parser.

Every process a test starts carries ``PROMTEST_MARKER`` (not a ``CONVEYOR_*`` variable: those
are configuration overrides) and is killed when the test ends.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from conveyor.testing.processes import SchedulerProcess, child_env, http_request
from prometheus_client.parser import text_string_to_metric_families

MARKER_VARIABLE = "PROMTEST_MARKER"
MODULE = "prom_tasks"
TOKEN = "prometheus-test-token"
SECRET = "SECRET-VALUE-xyz"

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
"""What ``/metrics`` answers a scrape that asks for no format (Prometheus' text format)."""

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
"""The ``Accept`` header of a scrape that asks for OpenMetrics."""

QUICK_WORKER = {
    "CONVEYOR_WORKER__WAIT_INTERVAL": "0.1",
    "CONVEYOR_WORKER__WAIT_JITTER": "0",
    "CONVEYOR_WORKER__PING_INTERVAL": "0.2",
    "CONVEYOR_WORKER__KILL_GRACE": "1",
}

TASKS = '''
import os
import signal
import time

import conveyor
from conveyor.testing.processes import put, wait_file


class _Base(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.Parameter(default="0")

    def output(self):
        name = f"{type(self).__name__}-{self.n}.out"
        return conveyor.LocalTarget(os.path.join(self.root, name))

    def finish(self):
        with self.output().open("w") as out:
            out.write("ok")


class Succeeds(_Base):
    def run(self):
        self.finish()


class Raises(_Base):
    def run(self):
        raise ValueError("raised on purpose")


class Sleeps(_Base):
    """Overruns its one-second worker_timeout."""

    worker_timeout = 1

    def run(self):
        time.sleep(60)
        self.finish()


class KillsItself(_Base):
    def run(self):
        os.kill(os.getpid(), signal.SIGKILL)


class Outcomes(conveyor.WrapperTask):
    """Three successes (one with a secret-looking parameter value), a failure, a time-out
    and a death."""

    root = conveyor.Parameter()

    def requires(self):
        return [
            Succeeds(root=self.root, n="1"),
            Succeeds(root=self.root, n="2"),
            Succeeds(root=self.root, n="SECRET-VALUE-xyz"),
            Raises(root=self.root),
            Sleeps(root=self.root),
            KillsItself(root=self.root),
        ]


class Gated(_Base):
    """Runs (after one Succeeds) until the file ``gate`` exists in ``root`` (bounded)."""

    def requires(self):
        return Succeeds(root=self.root, n="before-gate")

    def run(self):
        put(os.path.join(self.root, "started"), str(os.getpid()))
        if not wait_file(os.path.join(self.root, "gate"), 50):
            raise RuntimeError("the gate never opened")
        self.finish()


class Forks(_Base):
    """Forks a child of its own (in the worker's process under ``inline``), which writes its
    pid to ``child`` in ``root`` and waits (bounded) for ``gate``, as the task does."""

    def run(self):
        gate = os.path.join(self.root, "gate")
        os.makedirs(self.root, exist_ok=True)
        pid = os.fork()
        if pid == 0:
            try:
                put(os.path.join(self.root, "child"), str(os.getpid()))
                wait_file(gate, 50)
            finally:
                os._exit(0)
        if not wait_file(gate, 50):
            raise RuntimeError("the gate never opened")
        os.waitpid(pid, 0)
        self.finish()


class FirstFamily(_Base):
    def run(self):
        self.finish()


class SecondFamily(_Base):
    def requires(self):
        return FirstFamily(root=self.root, n=self.n)

    def run(self):
        self.finish()


class ThirdFamily(_Base):
    def requires(self):
        return SecondFamily(root=self.root, n=self.n)

    def run(self):
        self.finish()
'''


def write_tasks(directory: Path) -> None:
    """Write the task module into ``directory`` (first on the children's ``PYTHONPATH``)."""
    (directory / f"{MODULE}.py").write_text(TASKS, encoding="utf-8")


class Server(SchedulerProcess):
    """A ``conveyor scheduler`` subprocess, with a token unless ``token`` is ""."""

    def __init__(
        self, directory: Path, marker: str, token: str = TOKEN, server: str = "", extra: str = ""
    ) -> None:
        """Describe the server (its config written into ``directory``: ``server`` is more of
        its ``[server]`` table, ``extra`` more tables); nothing is started."""
        self.token = token
        text = "[server]\n" + (f'token = "{token}"\n' if token else "") + server
        text += "[scheduler]\nretry_delay = 3600\n" + extra
        config = directory / "server.toml"
        config.write_text(text, encoding="utf-8")
        super().__init__(directory, config, child_env(directory, MARKER_VARIABLE, marker))

    def role(self) -> str:
        """``leader`` or ``standby``, as ``GET /health`` says."""
        reply = self.request("GET", "/health")
        assert reply.status == 200, (reply.status, reply.body[:500])
        return str(reply.json()["role"])

    def metrics(self) -> str:
        """``GET /metrics`` with the token: the text (asserting 200 and the content type)."""
        reply = self.request("GET", "/metrics")
        assert reply.status == 200, (reply.status, reply.body[:500])
        assert reply.headers["content-type"] == TEXT_FORMAT, reply.headers
        return reply.body.decode()


def conveyor_run(
    directory: Path,
    task: str,
    marker: str,
    *flags: str,
    config: str = "",
    server: Server | None = None,
) -> subprocess.Popen[str]:
    """Start ``conveyor run prom_tasks.<task> <flags>`` in ``directory`` as a real worker, with
    ``config`` as its worker.toml, against ``server`` (else the local scheduler)."""
    toml = directory / "worker.toml"
    text = config
    if server is not None and server.token:
        text = f'[scheduler]\ntoken = "{server.token}"\n\n' + text
    toml.write_text(text, encoding="utf-8")
    where = ("--scheduler-url", server.url) if server is not None else ("--local-scheduler",)
    args = [
        *(sys.executable, "-m", "conveyor", "run", f"{MODULE}.{task}", *flags),
        *(*where, "--config", str(toml), "--log-format", "json"),
    ]
    env = child_env(directory, MARKER_VARIABLE, marker, **QUICK_WORKER)
    return subprocess.Popen(
        args,
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    """Wait (bounded) for a worker to end: its exit code, stdout and stderr."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by name and labels (the real parser:
    text it cannot parse raises)."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, f"sample {key} twice"
            found[key] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of sample ``name{labels}`` (labels exactly), or None if there is none."""
    return samples.get((name, frozenset(labels.items())))


def by_label(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """The samples named ``name`` by the values of their labels ``keys`` (all of them)."""
    out: dict[tuple[str, ...], float] = {}
    for (sample, labels), number in samples.items():
        if sample == name:
            label = dict(labels)
            assert set(label) == set(keys), (name, label, keys)
            out[tuple(label[k] for k in keys)] = number
    return out


def histogram_counts_match(samples: Samples, counter: str, histogram: str) -> None:
    """Assert ``histogram``'s ``_count`` equals ``counter``'s ``_total`` for every label set,
    and that its ``+Inf`` bucket equals its count."""
    totals = {labels: v for (name, labels), v in samples.items() if name == counter + "_total"}
    counts = {labels: v for (name, labels), v in samples.items() if name == histogram + "_count"}
    assert totals == counts, (totals, counts)
    for labels, count in counts.items():
        inf = samples[(histogram + "_bucket", labels | {("le", "+Inf")})]
        assert inf == count, (labels, inf, count)


def scrape(port: int, headers: Mapping[str, str] | None = None) -> str:
    """``GET /metrics`` on ``127.0.0.1:port`` (a worker's endpoint): the text, asserting 200."""
    reply = http_request(port, "GET", "/metrics", headers=headers)
    assert reply.status == 200, (reply.status, reply.body[:500])
    assert reply.headers["content-type"] == TEXT_FORMAT, reply.headers
    return reply.body.decode()


def error_lines(stderr: str) -> list[str]:
    """The ``conveyor: error:`` lines of a CLI's stderr."""
    return [line for line in stderr.splitlines() if line.startswith("conveyor: error:")]


def names_in(samples: Iterable[tuple[str, frozenset[tuple[str, str]]]]) -> set[str]:
    """The distinct sample names."""
    return {name for name, _ in samples}
