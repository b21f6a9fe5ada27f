"""The OpenTelemetry side of the plugin: providers, context hand-over, bounded flushes.

Only imported once tracing is on (the plugin module imports it lazily), so an inert worker
never loads ``opentelemetry``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "ProcessLocalBatch",
    "Provider",
    "bounded",
    "context_from",
    "ensure_provider",
    "exporter_name",
    "headers_of",
    "preload",
    "set_error",
]

log = structlog.get_logger("conveyor.otel")
TRACER_NAME = "conveyor_otel"
_PROPAGATOR = TraceContextTextMapPropagator()


class ProcessLocalBatch(SpanProcessor):
    """A BatchSpanProcessor per process: a process forked from one that exported spans (the
    worker, a fork server started late) starts a batch and an exporter of its own on its first
    span, instead of sharing the parent's queue, thread and HTTP connections."""

    def __init__(self, make_exporter: Callable[[], SpanExporter]) -> None:
        """``make_exporter`` builds the exporter of each process's batch."""
        self._make_exporter = make_exporter
        self._pid = 0
        self._batch: BatchSpanProcessor | None = None
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    def _current(self, create: bool) -> BatchSpanProcessor | None:
        pid = os.getpid()
        batch = self._batch
        if batch is not None and self._pid == pid:
            return batch
        if not create:
            return None
        if self._lock_pid != pid:  # (a lock held across a fork stays held in the child)
            self._lock, self._lock_pid = threading.Lock(), pid
        with self._lock:
            if self._batch is None or self._pid != pid:
                self._batch, self._pid = BatchSpanProcessor(self._make_exporter()), pid
            return self._batch

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue the ended span in this process's batch (started on the first one)."""
        batch = self._current(create=True)
        if batch is not None:
            batch.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what this process's batch holds (the SDK ignores the timeout: see
        :func:`bounded`)."""
        batch = self._current(create=False)
        return batch.force_flush(timeout_millis) if batch is not None else True

    def shutdown(self) -> None:
        """Stop this process's batch (its thread); a later span starts a new one."""
        batch = self._current(create=False)
        if batch is not None:
            self._batch = None
            batch.shutdown()  # type: ignore[no-untyped-call]


class Provider:
    """The tracer provider a process uses, and whether this plugin made it."""

    def __init__(
        self, provider: trace.TracerProvider, processor: ProcessLocalBatch | None, owned: bool
    ) -> None:
        """``processor`` is this plugin's batch (None when nothing is exported: an
        application's provider, or ``OTEL_TRACES_EXPORTER=none``); ``owned`` whether this
        plugin created ``provider``."""
        self.provider = provider
        self.processor = processor
        self.owned = owned

    def tracer(self) -> trace.Tracer:
        """The plugin's tracer."""
        from . import __version__

        return self.provider.get_tracer(TRACER_NAME, __version__)

    def flush(self, timeout: float) -> bool:
        """Export what is buffered, giving up after ``timeout`` seconds (False then); a
        provider without ``force_flush`` (an application's non-SDK one) has nothing to do."""
        force_flush = getattr(self.provider, "force_flush", None)
        if not callable(force_flush):
            return True
        return bounded(force_flush, timeout, "flush")

    def close(self, timeout: float) -> bool:
        """Flush, then stop this plugin's own batch, within ``timeout`` seconds in all; an
        application's provider is only flushed (it shuts it down itself)."""
        processor = self.processor
        force_flush = getattr(self.provider, "force_flush", None)

        def close() -> None:
            if callable(force_flush):
                force_flush()
            if processor is not None and self.owned:
                processor.shutdown()

        return bounded(close, timeout, "shutdown")


def ensure_provider() -> Provider:
    """The process's global tracer provider if it has one other than the API's default proxy
    (an embedding application's, SDK or not, or this plugin's from an earlier worker); else a
    new SDK one, made the global one (tried once) so that task code using opentelemetry-api in
    this process reaches it, exporting through a BatchSpanProcessor (``OTEL_BSP_*``) and the
    exporter ``OTEL_TRACES_EXPORTER`` names (OTLP/HTTP, configured by
    ``OTEL_EXPORTER_OTLP_*``; ``console`` prints; ``none`` exports nothing, spans are still
    made)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        return _adopt(current)
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or "conveyor"})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    processor = None if exporter_name() == "none" else ProcessLocalBatch(_exporter)
    if processor is not None:
        provider.add_span_processor(processor)
    provider._conveyor_otel_processor = processor  # type: ignore[attr-defined]
    trace.set_tracer_provider(provider)  # (refused, with a warning, if one was set meanwhile)
    current = trace.get_tracer_provider()
    if current is not provider:  # another thread set one meanwhile: that one is used
        provider.shutdown()
        return _adopt(current)
    return Provider(provider, processor, owned=True)


def _adopt(current: trace.TracerProvider) -> Provider:
    """The already set global ``current``: this plugin's own (made by an earlier worker of
    the process, or inherited over a fork) or the application's."""
    if hasattr(current, "_conveyor_otel_processor"):
        processor = getattr(current, "_conveyor_otel_processor", None)
        return Provider(
            current, processor if isinstance(processor, ProcessLocalBatch) else None, owned=True
        )
    return Provider(current, None, owned=False)


def exporter_name() -> str:
    """``OTEL_TRACES_EXPORTER`` as this plugin reads it: ``none`` (no exporter: the whole
    value says ``none``, as for the SDK), ``console`` if it is named, else ``otlp``."""
    value = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if value == "none":
        return "none"
    return "console" if "console" in [name.strip() for name in value.split(",")] else "otlp"


def preload() -> None:
    """Import the exporter :func:`exporter_name` names (only import: no thread, no
    provider), so that processes forked from this one find it loaded."""
    if exporter_name() == "otlp":  # (console's exporter is in the SDK, loaded already)
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401


def _exporter() -> SpanExporter:
    """The exporter ``OTEL_TRACES_EXPORTER`` asks for: ``console``, else OTLP/HTTP."""
    if exporter_name() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    names = os.environ.get("OTEL_TRACES_EXPORTER", "").lower().split(",")
    if any(name.strip() not in ("", "otlp", "none") for name in names):
        log.warning("OTEL_TRACES_EXPORTER names an exporter this plugin lacks; using otlp")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def bounded(work: Callable[[], object], timeout: float, what: str) -> bool:
    """Run ``work`` on a daemon thread and wait at most ``timeout`` seconds for it: the SDK's
    flush and shutdown do not honour their timeouts while an export hangs. False if it did not
    finish in time or raised (logged)."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except Exception as exc:
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"conveyor-otel-{what}", daemon=True).start()
    if not done.wait(max(timeout, 0.0)):
        log.warning(f"tracing {what} did not finish in time; spans may be lost", timeout=timeout)
        return False
    if failed:
        log.warning(f"tracing {what} failed", error=repr(failed[0]))
        return False
    return True


def context_from(carrier: Mapping[str, str]) -> Context | None:
    """The context in ``TRACEPARENT`` / ``TRACESTATE`` of ``carrier`` (an environment), or
    None when there is no valid one."""
    parent = carrier.get("TRACEPARENT")
    if not parent:
        return None
    headers = {"traceparent": parent}
    if carrier.get("TRACESTATE"):
        headers["tracestate"] = carrier["TRACESTATE"]
    extracted = _PROPAGATOR.extract(headers)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        log.warning("TRACEPARENT is not a valid trace context; ignored", traceparent=parent)
        return None
    return extracted


def headers_of(span: Span) -> dict[str, str]:
    """``TRACEPARENT`` (and ``TRACESTATE`` if any) naming ``span``, for an attempt's process;
    empty when ``span`` has no valid context. Written directly in the W3C format (version 00)
    the propagator writes, without building a context for it: this runs for every attempt."""
    ctx = span.get_span_context()
    if not ctx.is_valid:  # a non-recording span (an application's no-op provider)
        return {}
    env = {"TRACEPARENT": f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"}
    if ctx.trace_state:
        env["TRACESTATE"] = ctx.trace_state.to_header()
    return env


def current_context() -> Context:
    """The calling thread's current context (an embedding application's active span)."""
    return otel_context.get_current()


def attach(ctx: Context) -> object:
    """Make ``ctx`` current on this thread; the token to :func:`detach` it with."""
    return otel_context.attach(ctx)


def detach(token: object) -> None:
    """Undo :func:`attach`."""
    otel_context.detach(token)  # type: ignore[arg-type]


def set_error(span: Span, description: str) -> None:
    """Mark ``span`` ERROR with ``description`` (an exception type)."""
    span.set_status(Status(StatusCode.ERROR, description))


def span_context(span: Span) -> Context:
    """A context whose current span is ``span``."""
    return trace.set_span_in_context(span)
