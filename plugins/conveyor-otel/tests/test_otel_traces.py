"""The ``otel`` plugin end to end: real ``conveyor run`` processes export to a real OTLP/HTTP
receiver on loopback, and the tests check the span tree it received (SPEC §12)."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from conveyor.protocol import AttemptEnd, AttemptOutcome

from otel_support import clean_env, conveyor_run, python, tracing_env, write_tasks
from otlp_receiver import (
    STATUS_ERROR,
    STATUS_UNSET,
    OtlpReceiver,
    SilentReceiver,
    SpanRecord,
    children,
)


def _one(spans: list[SpanRecord], name: str) -> SpanRecord:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"expected one span {name!r}, got {[s.name for s in spans]}"
    return found[0]


def _task_attributes(
    span: SpanRecord, family: str, executor: str, worker_id: str
) -> dict[str, Any]:
    """The attributes a task span must have, but for its task id (checked separately)."""
    assert str(span.attributes["conveyor.task_id"]).startswith(f"{family}_")
    return {
        "conveyor.family": family,
        "conveyor.attempt": 1,
        "conveyor.executor": executor,
        "conveyor.worker_id": worker_id,
    }


def _without_id(span: SpanRecord) -> dict[str, Any]:
    return {k: v for k, v in span.attributes.items() if k != "conveyor.task_id"}


# executor -> (extra arguments, families expected to fail and how)
CASES = {
    "fork": (["--hard", "--slow"], {"Dies": "ProcessDied", "Slow": "TimedOut"}),
    "subprocess": (["--hard"], {"Dies": "ProcessDied"}),
    "thread": ([], {}),
    "inline": ([], {}),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("executor", list(CASES))
def test_span_tree_attributes_and_statuses(
    tmp_path: Path, receiver: OtlpReceiver, executor: str
) -> None:
    """run → one span per attempt → the span run() made; one trace; exact attributes; ERROR
    with the exception type for a failure, TimedOut for a time-out, ProcessDied for a death."""
    module = write_tasks(tmp_path, f"otel_tree_{executor}")
    extra, hard = CASES[executor]
    env = tracing_env(tmp_path, receiver.endpoint)
    args = [f"{module}.Ok", "--root", str(tmp_path), "--executor", executor, *extra]
    proc = conveyor_run(tmp_path, env, *args)
    assert proc.returncode == 1, proc.stderr[-3000:]

    spans = receiver.wait_spans(1, "conveyor.run")
    families = ["Good", "Bad", *hard]
    spans = receiver.wait_spans(len(families), "conveyor.task ")
    spans = receiver.wait_spans(2, "inside ")

    run = _one(spans, "conveyor.run")
    assert run.parent_id == ""
    worker_id = run.attributes["conveyor.worker_id"]
    assert worker_id and run.attributes == {"conveyor.worker_id": worker_id, "conveyor.ok": False}
    assert run.status_code == STATUS_ERROR
    assert {span.trace_id for span in spans} == {run.trace_id}
    assert sorted(span.name for span in children(spans, run)) == sorted(
        f"conveyor.task {family}" for family in families
    )

    good = _one(spans, "conveyor.task Good")
    assert _without_id(good) == {
        **_task_attributes(good, "Good", executor, worker_id),
        "conveyor.outcome": AttemptEnd.SUCCEEDED.value,
        "conveyor.param.root": str(tmp_path),
        "conveyor.param.colour": "blue",
    }
    assert good.status_code == STATUS_UNSET
    bad = _one(spans, "conveyor.task Bad")
    assert _without_id(bad) == {
        **_task_attributes(bad, "Bad", executor, worker_id),
        "conveyor.outcome": AttemptEnd.FAILED.value,
        "conveyor.param.root": str(tmp_path),
    }
    assert (bad.status_code, bad.status_message) == (STATUS_ERROR, "ValueError")
    for family, error in hard.items():
        span = _one(spans, f"conveyor.task {family}")
        outcome = AttemptEnd.PROCESS_DIED if error == "ProcessDied" else AttemptEnd.TIMED_OUT
        assert _without_id(span) == {
            **_task_attributes(span, family, executor, worker_id),
            "conveyor.outcome": outcome.value,
            "conveyor.param.root": str(tmp_path),
        }
        assert (span.status_code, span.status_message) == (STATUS_ERROR, error)

    # the spans task code made inside run(), in the attempt's process or thread
    assert [s.name for s in children(spans, good)] == ["inside Good"]
    assert [s.name for s in children(spans, bad)] == ["inside Bad"]
    assert {s.service for s in spans} == {"conveyor"}


@pytest.mark.timeout(300)
def test_dask_attempt_nests_task_spans(tmp_path: Path, receiver: OtlpReceiver) -> None:
    """Under the Dask plugin's executor (a LocalCluster it starts), the span run() makes on the
    Dask worker's attempt process nests under the attempt's span."""
    pytest.importorskip("conveyor_dask")
    module = write_tasks(tmp_path, "otel_dask")
    (tmp_path / "worker.toml").write_text(
        '[worker]\nexecutor = "dask"\n\n[executors.dask]\nn_workers = 1\nthreads_per_worker = 1\n',
        encoding="utf-8",
    )
    env = tracing_env(tmp_path, receiver.endpoint)
    proc = conveyor_run(tmp_path, env, f"{module}.Good", "--root", str(tmp_path), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]

    spans = receiver.wait_spans(1, "conveyor.run")
    spans = receiver.wait_spans(1, "inside Good")
    run = _one(spans, "conveyor.run")
    good = _one(spans, "conveyor.task Good")
    assert good.parent_id == run.span_id
    assert good.attributes["conveyor.executor"] == "dask"
    assert good.attributes["conveyor.outcome"] == AttemptEnd.SUCCEEDED.value
    assert [s.name for s in children(spans, good)] == ["inside Good"]
    assert {span.trace_id for span in spans} == {run.trace_id}


@pytest.mark.timeout(120)
def test_a_run_started_with_traceparent_joins_that_trace(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """TRACEPARENT in the worker's environment: conveyor.run is that span's child, and every
    span (the task code's included) is in that trace."""
    module = write_tasks(tmp_path, "otel_join")
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    env = tracing_env(
        tmp_path, receiver.endpoint, TRACEPARENT=f"00-{trace_id}-{span_id}-01", TRACESTATE="k=v"
    )
    args = [f"{module}.Good", "--root", str(tmp_path), "--executor", "fork"]
    proc = conveyor_run(tmp_path, env, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]

    spans = receiver.wait_spans(1, "conveyor.run")
    spans = receiver.wait_spans(1, "inside Good")
    run = _one(spans, "conveyor.run")
    assert run.parent_id == span_id
    assert run.status_code == STATUS_UNSET and run.attributes["conveyor.ok"] is True
    assert {span.trace_id for span in spans} == {trace_id}
    good = _one(spans, "conveyor.task Good")
    assert good.parent_id == run.span_id
    assert [s.name for s in children(spans, good)] == ["inside Good"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("executor", ["fork", "thread"])
def test_secret_named_parameters_never_become_attributes(
    tmp_path: Path, receiver: OtlpReceiver, executor: str
) -> None:
    """``password`` and ``api_token`` values appear in no attribute of any span; the other
    parameters do."""
    module = write_tasks(tmp_path, f"otel_secret_{executor}")
    password, token, colour = (f"{kind}-{uuid.uuid4().hex}" for kind in ("pw", "tok", "col"))
    args = [f"{module}.Good", "--root", str(tmp_path), "--executor", executor]
    args += ["--password", password, "--api-token", token, "--colour", colour]
    proc = conveyor_run(tmp_path, tracing_env(tmp_path, receiver.endpoint), *args)
    assert proc.returncode == 0, proc.stderr[-3000:]

    spans = receiver.wait_spans(1, "conveyor.run")
    good = _one(spans, "conveyor.task Good")
    assert good.attributes["conveyor.param.colour"] == colour
    assert not any("password" in key or "token" in key for key in good.attributes)
    everything = repr([(s.name, s.attributes, s.status_message) for s in spans])
    assert password not in everything and token not in everything
    assert password[:11] not in everything and token[:12] not in everything  # nor a prefix


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("extra", "toml"),
    [
        ({"OTEL_SDK_DISABLED": "true"}, ""),
        ({}, "[otel]\nenabled = false\n"),
        ({"OTEL_TRACES_EXPORTER": "none"}, ""),
    ],
    ids=["sdk-disabled", "enabled-false", "exporter-none"],
)
def test_turned_off_sends_nothing(
    tmp_path: Path, receiver: OtlpReceiver, extra: dict[str, str], toml: str
) -> None:
    """An endpoint is set, but OTEL_SDK_DISABLED, ``[otel] enabled = false`` or (``enabled``
    left out) ``OTEL_TRACES_EXPORTER=none`` turns the plugin off: the receiver hears
    nothing."""
    module = write_tasks(tmp_path, "otel_off")
    (tmp_path / "worker.toml").write_text(toml, encoding="utf-8")
    env = tracing_env(tmp_path, receiver.endpoint, **extra)
    args = [f"{module}.Good", "--root", str(tmp_path), "--executor", "fork"]
    proc = conveyor_run(tmp_path, env, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "Good.out").exists()
    assert receiver.requests == 0 and receiver.snapshot() == []


INERT_SCRIPT = """
import sys
import conveyor
from {module} import Good

with conveyor.Worker(config=conveyor.Config(), plugins=[]) as worker:
    registered = worker.hooks.pm.get_plugin("otel")
    worker.add(Good(root={root!r}))
    ok = worker.run()
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
print("conveyor_otel" in sys.modules, registered, ok, loaded)
"""


@pytest.mark.timeout(120)
def test_inert_without_otel_variables(tmp_path: Path) -> None:
    """Without OTEL_* variables, a worker (in process) loads the plugin, which leaves it
    (``conveyor_configure`` returns False: no hook of it is called, so its tasks' events cost
    nothing), and imports no opentelemetry module, even after running a task under fork."""
    module = write_tasks(tmp_path, "otel_inert_tasks")
    script = INERT_SCRIPT.format(module="otel_inert_tasks", root=str(tmp_path))
    # the task module imports opentelemetry-api itself: give the worker a task without it
    (tmp_path / "otel_inert_tasks.py").write_text(
        "import os\nimport conveyor\n\n\nclass Good(conveyor.Task):\n"
        "    root = conveyor.Parameter()\n\n    def output(self):\n"
        "        return conveyor.LocalTarget(os.path.join(self.root, 'Good.out'))\n\n"
        "    def run(self):\n        with self.output().open('w') as out:\n"
        "            out.write('done')\n",
        encoding="utf-8",
    )
    assert module == "otel_inert_tasks"
    env = clean_env(tmp_path, CONVEYOR_WORKER__EXECUTOR="fork")
    proc = python(tmp_path, env, "-c", script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True None True []"


@pytest.mark.timeout(120)
def test_flush_timeout_bounds_the_exit(tmp_path: Path, silent: SilentReceiver) -> None:
    """A collector that never answers, an export timeout of 120 s: with ``[otel]
    flush_timeout = 1`` (as a variable, which attempt processes see too) the run still exits,
    well before the export would give up."""
    module = write_tasks(tmp_path, "otel_silent")
    env = tracing_env(
        tmp_path,
        silent.endpoint,
        OTEL_EXPORTER_OTLP_TIMEOUT="120",
        CONVEYOR_OTEL__FLUSH_TIMEOUT="1",
    )
    args = [f"{module}.Good", "--root", str(tmp_path), "--executor", "fork"]
    proc = conveyor_run(tmp_path, env, *args, timeout=90)  # TimeoutExpired fails the test
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "Good.out").exists()


@pytest.mark.timeout(60)
def test_a_bad_otel_table_is_a_one_line_error(tmp_path: Path) -> None:
    """``[otel] flush_timeout = -1``: exit 2 with one line naming the file and the key."""
    module = write_tasks(tmp_path, "otel_badconf")
    (tmp_path / "worker.toml").write_text("[otel]\nflush_timeout = -1\n", encoding="utf-8")
    args = [f"{module}.Good", "--root", str(tmp_path)]
    proc = conveyor_run(tmp_path, clean_env(tmp_path), *args)
    assert proc.returncode == 2
    assert "otel.flush_timeout" in proc.stderr and "worker.toml" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(120)
def test_an_attempt_that_yields_dependencies_ends_its_span_unset(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """run() yields an incomplete dependency: that attempt's span ends with the core's
    outcome ``needs_deps`` and no status; the next attempt has its own span."""
    module = write_tasks(tmp_path, "otel_dynamic")
    args = [f"{module}.Dyn", "--root", str(tmp_path), "--executor", "fork"]
    proc = conveyor_run(tmp_path, tracing_env(tmp_path, receiver.endpoint), *args)
    assert proc.returncode == 0, proc.stderr[-3000:]

    spans = receiver.wait_spans(1, "conveyor.run")
    dyn = sorted(
        (s for s in spans if s.name == "conveyor.task Dyn"),
        key=lambda s: int(s.attributes["conveyor.attempt"]),
    )
    assert [(s.attributes["conveyor.outcome"], s.status_code) for s in dyn] == [
        (AttemptOutcome.NEEDS_DEPS.value, STATUS_UNSET),
        (AttemptEnd.SUCCEEDED.value, STATUS_UNSET),
    ]
    assert [s.attributes["conveyor.attempt"] for s in dyn] == [1, 2]
    for attempt in dyn:  # each attempt's run() made its span under its own attempt's span
        assert [s.name for s in children(spans, attempt)] == ["inside Dyn"]


EMBEDDED_SCRIPT = """
import conveyor
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from {module} import Good

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
with trace.get_tracer("app").start_as_current_span("app") as app:
    with conveyor.Worker(config="worker.toml") as worker:
        worker.add(Good(root={root!r}))
        ok = worker.run()
assert trace.get_tracer_provider() is provider
with trace.get_tracer("app").start_as_current_span("after"):
    pass  # the application's provider still works: the plugin did not shut it down
spans = {{s.name: s for s in exporter.get_finished_spans()}}
run, good, inside = spans["conveyor.run"], spans["conveyor.task Good"], spans["inside Good"]
print(ok, run.parent.span_id == app.get_span_context().span_id,
      good.parent.span_id == run.context.span_id, inside.parent.span_id == good.context.span_id,
      "after" in spans)
"""


@pytest.mark.timeout(120)
def test_an_embedding_applications_provider_and_span_are_used(tmp_path: Path) -> None:
    """In an application that has its own SDK provider and an active span, with ``[otel]
    enabled = true`` and no OTEL_* variables: conveyor's spans go to that provider, the run's
    span is the application's span's child, and the provider is left working."""
    module = write_tasks(tmp_path, "otel_embedded")
    (tmp_path / "worker.toml").write_text(
        '[worker]\nexecutor = "thread"\n\n[otel]\nenabled = true\n', encoding="utf-8"
    )
    script = EMBEDDED_SCRIPT.format(module=module, root=str(tmp_path))
    proc = python(tmp_path, clean_env(tmp_path), "-c", script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True True True True True"


FORK_SCRIPT = """
import os
from conveyor_otel import tracing

provider = tracing.ensure_provider()
provider.tracer().start_span("parent").end()  # queued: the batch waits 10 minutes
pid = os.fork()
if pid == 0:
    inherited = tracing.ensure_provider()
    inherited.tracer().start_span("child").end()
    os._exit(0 if inherited.flush(30) and inherited.provider is provider.provider else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), provider.close(30))
"""


@pytest.mark.timeout(120)
def test_a_forked_process_exports_through_a_batch_of_its_own(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """A process forked from one whose provider holds queued spans reuses the provider but
    not its queue: the child's flush sends only the child's span, the parent's its own."""
    env = tracing_env(tmp_path, receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY="600000")
    proc = python(tmp_path, env, "-c", FORK_SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["0", "True"]
    assert receiver.requests == 2
    assert sorted(span.name for span in receiver.snapshot()) == ["child", "parent"]


@pytest.mark.timeout(120)
def test_exporter_none_with_enabled_true_makes_spans_but_sends_nothing(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """``[otel] enabled = true`` and ``OTEL_TRACES_EXPORTER=none`` (an endpoint set too):
    nothing reaches the receiver, yet the fork attempt gets a TRACEPARENT and run() has a
    valid current span in that trace (the attempt's context still nests)."""
    module = write_tasks(tmp_path, "otel_none")
    (tmp_path / "worker.toml").write_text("[otel]\nenabled = true\n", encoding="utf-8")
    env = tracing_env(tmp_path, receiver.endpoint, OTEL_TRACES_EXPORTER="none")
    args = [f"{module}.Ctx", "--root", str(tmp_path), "--executor", "fork"]
    proc = conveyor_run(tmp_path, env, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]

    traceparent, trace_id, span_id, valid = (tmp_path / "Ctx.out").read_text().split()
    assert valid == "True"
    version, parent_trace, parent_span, _flags = traceparent.split("-")
    assert (version, parent_trace) == ("00", trace_id)
    assert parent_span == span_id  # run()'s current span is the attempt's
    assert receiver.requests == 0 and receiver.snapshot() == []


NON_SDK_SCRIPT = """
import logging
import conveyor
from opentelemetry import trace
from {module} import Good

messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("opentelemetry").addHandler(handler)

if {kind!r} == "noop":
    provider = trace.NoOpTracerProvider()
    exporter = None
else:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    inner = TracerProvider()
    inner.add_span_processor(SimpleSpanProcessor(exporter))

    class Vendor(trace.TracerProvider):  # an API provider that is not the SDK's
        flushes = 0

        def get_tracer(self, *args, **kwargs):
            return inner.get_tracer(*args, **kwargs)

        def force_flush(self, timeout_millis=30000):
            Vendor.flushes += 1
            return True

    provider = Vendor()
trace.set_tracer_provider(provider)
with conveyor.Worker(config="worker.toml") as worker:
    worker.add(Good(root={root!r}))
    ok = worker.run()
spans = {{s.name: s for s in exporter.get_finished_spans()}} if exporter else {{}}
nested = not spans or (
    spans["conveyor.task Good"].parent.span_id == spans["conveyor.run"].context.span_id
    and spans["inside Good"].parent.span_id == spans["conveyor.task Good"].context.span_id
)
overriding = sum("Overriding" in message for message in messages)
print(ok, trace.get_tracer_provider() is provider, overriding, sorted(spans), nested,
      getattr(provider, "flushes", 0) > 0)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("kind", "executor"), [("noop", "fork"), ("vendor", "thread")])
def test_an_applications_non_sdk_provider_is_used_without_recursion(
    tmp_path: Path, kind: str, executor: str
) -> None:
    """An application that set a provider that is not the SDK's (a NoOpTracerProvider, a
    vendor's) before the worker, ``[otel] enabled = true``: the plugin uses it, never tries to
    replace it (no "Overriding" warning, no recursion), flushes it only if it can, and the run
    succeeds without a tracing warning."""
    module = write_tasks(tmp_path, f"otel_nonsdk_{kind}")
    (tmp_path / "worker.toml").write_text(
        f'[worker]\nexecutor = "{executor}"\n\n[otel]\nenabled = true\n', encoding="utf-8"
    )
    script = NON_SDK_SCRIPT.format(module=module, root=str(tmp_path), kind=kind)
    proc = python(tmp_path, clean_env(tmp_path), "-c", script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if kind == "noop":
        expected = "True True 0 [] True False"
    else:
        names = ["conveyor.run", "conveyor.task Good", "inside Good"]
        expected = f"True True 0 {names} True True"
    assert proc.stdout.strip().splitlines()[-1] == expected, proc.stderr[-3000:]
    assert "tracing could not" not in proc.stderr
    assert "hook implementation raised" not in proc.stderr


PRELOAD_SCRIPT = """
import sys
import threading

from conveyor.plugins import attempt_hooks

threads = threading.active_count()
hooks = attempt_hooks(("otel",))  # what a fork server does before its first fork
modules = ("conveyor_otel.tracing", "opentelemetry.exporter.otlp.proto.http.trace_exporter")
provider = "-"
if "opentelemetry.trace" in sys.modules:
    provider = type(sys.modules["opentelemetry.trace"].get_tracer_provider()).__name__
print(hooks is not None, *(name in sys.modules for name in modules),
      threading.active_count() - threads, provider)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
            "True True True 0 ProxyTracerProvider",
        ),
        ({"CONVEYOR_OTEL__ENABLED": "true"}, "True True True 0 ProxyTracerProvider"),
        (
            {"CONVEYOR_OTEL__ENABLED": "true", "OTEL_TRACES_EXPORTER": "none"},
            "True True False 0 ProxyTracerProvider",
        ),
        ({}, "True False False 0 -"),
    ],
    ids=["endpoint", "enabled-variable", "exporter-none", "inert"],
)
def test_loading_the_attempt_hooks_preloads_tracing_only_when_wanted(
    tmp_path: Path, extra: dict[str, str], expected: str
) -> None:
    """Loading the plugin's attempt hooks (as a fork server does, once, with the worker's
    environment) imports the tracing module and its exporter when the environment asks for
    tracing, so each forked attempt finds them loaded; it starts no thread and sets no
    provider, and imports nothing OpenTelemetry when the environment does not ask."""
    proc = python(tmp_path, clean_env(tmp_path, **extra), "-c", PRELOAD_SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == expected


@pytest.mark.timeout(120)
def test_a_collector_that_is_down_does_not_time_an_attempt_out(tmp_path: Path) -> None:
    """The collector's port refuses connections: a fork task that makes a span and returns at
    once still succeeds and the run exits 0 (its process's export is abandoned after at most
    1 s; that the export runs after the outcome, outside the attempt's timeout, is checked by
    tests/test_attempt_plugins.py with a slower end than any timeout)."""
    module = write_tasks(tmp_path, "otel_down")
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = clean_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
        args = [f"{module}.Quick", "--root", str(tmp_path), "--executor", "fork"]
        proc = conveyor_run(tmp_path, env, *args, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "Quick.out").exists()
