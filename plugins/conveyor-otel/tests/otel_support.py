"""Running ``conveyor run`` against a loopback OTLP receiver, and the task module the tests use.

The tasks make a span of their own inside ``run()`` with opentelemetry-api, named
``inside <Family>``, so the tests can check that it nests under the attempt's span.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

TASKS = '''
import os
import signal
import time

from opentelemetry import trace

import conveyor

tracer = trace.get_tracer("otel-plugin-tests")


class Base(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, type(self).__name__ + ".out"))

    def inside(self):
        return tracer.start_as_current_span("inside " + type(self).__name__)

    def done(self):
        with self.output().open("w") as out:
            out.write("done")


class Good(Base):
    colour = conveyor.Parameter(default="blue")
    password = conveyor.Parameter(default="")
    api_token = conveyor.Parameter(default="")

    def run(self):
        with self.inside():
            pass
        self.done()


class Bad(Base):
    def run(self):
        with self.inside():
            pass
        raise ValueError("bad on purpose")


class Dies(Base):
    def run(self):
        with self.inside():
            pass
        os.kill(os.getpid(), signal.SIGKILL)


class Slow(Base):
    worker_timeout = 2

    def run(self):
        while True:
            time.sleep(0.1)


class Dyn(Base):
    """Yields Good from run(): its first attempt ends needing dependencies."""

    def run(self):
        with self.inside():
            pass
        yield Good(root=self.root)
        self.done()


class Quick(Base):
    """Makes a span and succeeds at once (with a time-out, as a real task would have)."""

    worker_timeout = 30

    def run(self):
        with self.inside():
            pass
        self.done()


class Ctx(Base):
    """Writes its TRACEPARENT and the trace and span ids current in run()."""

    def run(self):
        current = trace.get_current_span().get_span_context()
        with self.output().open("w") as out:
            out.write(os.environ.get("TRACEPARENT", "-") + " ")
            out.write(f"{current.trace_id:032x} {current.span_id:016x} {current.is_valid}")


class Ok(Base):
    """Good, Bad (and Dies, Slow with ``hard``): the graph of one run."""

    hard = conveyor.BoolParameter(default=False)
    slow = conveyor.BoolParameter(default=False)

    def requires(self):
        deps = [Good(root=self.root), Bad(root=self.root)]
        if self.hard:
            deps.append(Dies(root=self.root))
        if self.slow:
            deps.append(Slow(root=self.root))
        return deps

    def run(self):
        self.done()
'''


def write_tasks(directory: Path, name: str) -> str:
    """Write the task module into ``directory`` as ``<name>.py``; return ``name``."""
    (directory / f"{name}.py").write_text(TASKS, encoding="utf-8")
    return name


def clean_env(directory: Path, **extra: str) -> dict[str, str]:
    """This process's environment without ``CONVEYOR_*``, ``OTEL_*`` and ``TRACE*`` variables
    (and proxies), with ``directory`` first on ``PYTHONPATH``, plus ``extra``."""
    dropped = ("CONVEYOR_", "OTEL_", "TRACEPARENT", "TRACESTATE")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(dropped) and k.lower() not in ("http_proxy", "https_proxy")
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def tracing_env(directory: Path, endpoint: str, **extra: str) -> dict[str, str]:
    """:func:`clean_env` exporting to ``endpoint`` quickly (100 ms batches)."""
    quick = {"OTEL_BSP_SCHEDULE_DELAY": "100", "CONVEYOR_WORKER__KILL_GRACE": "1"}
    return clean_env(directory, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, **{**quick, **extra})


def conveyor_run(
    directory: Path, env: Mapping[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m conveyor run *args --local-scheduler`` in ``directory``, to its end."""
    return python(
        directory, env, "-m", "conveyor", "run", *args, "--local-scheduler", timeout=timeout
    )


def python(
    directory: Path, env: Mapping[str, str], *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """``python *args`` (a script with ``-c``, a module with ``-m``) in ``directory``, to its
    end, its output captured as text."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=directory,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
