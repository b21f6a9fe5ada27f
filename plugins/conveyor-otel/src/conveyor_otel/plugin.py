"""The ``otel`` hook plugin: a span per worker run and per attempt, handed to the attempt.

Inert unless tracing is asked for (see :func:`tracing_wanted`); inert, it imports no
``opentelemetry`` module and answers no ``conveyor_attempt_environment``, so no attempt of the
worker loads it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import conveyor
import structlog
from conveyor import events as ev
from conveyor.config import Config
from conveyor.protocol import AttemptEnd, AttemptOutcome
from conveyor.secrets import is_secret_name, redact_text
from conveyor.settings import Field

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from .tracing import Provider

__all__ = ["SCHEMA", "OtelPlugin", "attempt_flush_timeout", "tracing_wanted"]

log = structlog.get_logger("conveyor.otel")
_IN_PROCESS = frozenset({"inline", "thread"})
"""The executors that run an attempt in the worker's own process: no TRACEPARENT to write."""
_MAY_HIDE = re.compile(r"=|://")
"""What a value needs before redact_text could hide anything in it (a URL, a key=value): most
parameter values have neither, and skip its four regular expressions."""

SCHEMA: dict[str, Field] = {
    "enabled": Field(
        "bool",
        doc="true: trace even without OTEL_* variables; false: never trace; left out: trace "
        "when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
        "OTEL_TRACES_EXPORTER is set, unless OTEL_TRACES_EXPORTER is none",
    ),
    "flush_timeout": Field(
        "seconds", 5.0, ge=0, doc="seconds the worker's exit may wait for its spans' export"
    ),
}
"""The ``[otel]`` table of worker.toml (``CONVEYOR_OTEL__<KEY>`` variables)."""

ATTEMPT_FLUSH_CAP = 1.0
"""The most (and the default) an attempt's own process waits for its spans' export at the
attempt's end, after its outcome was sent: the worker hears that outcome when the process
exits, so a collector that does not answer delays each attempt by at most this much (and
it is well under the worker's default ``kill_grace``, 5 s)."""


def tracing_wanted(environ: Mapping[str, str], enabled: bool | None) -> bool:
    """Whether to trace: never with ``OTEL_SDK_DISABLED=true``; else as ``[otel] enabled``
    says, or (left out: ``enabled`` None) when an OTLP endpoint or a traces exporter other
    than ``none`` is named in ``environ`` and ``OTEL_TRACES_EXPORTER`` is not ``none``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if enabled is not None:
        return enabled
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        return True
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return exporter not in ("", "none")


def attempt_flush_timeout(environ: Mapping[str, str]) -> float:
    """The bound of an attempt process's flush: ``CONVEYOR_OTEL__FLUSH_TIMEOUT`` if the
    worker's environment sets it (worker.toml is not read there), at most
    :data:`ATTEMPT_FLUSH_CAP` seconds."""
    try:
        value = float(environ.get("CONVEYOR_OTEL__FLUSH_TIMEOUT", ATTEMPT_FLUSH_CAP))
    except ValueError:
        value = ATTEMPT_FLUSH_CAP
    if value != value:  # NaN
        value = ATTEMPT_FLUSH_CAP
    return min(max(value, 0.0), ATTEMPT_FLUSH_CAP)


def enabled_in(environ: Mapping[str, str]) -> bool | None:
    """``CONVEYOR_OTEL__ENABLED`` of ``environ``: True, False, or None (unset or not a
    boolean; the worker's configuration reports a bad value)."""
    value = environ.get("CONVEYOR_OTEL__ENABLED", "").strip().lower()
    return {"true": True, "false": False}.get(value)


class OtelPlugin:
    """Traces a worker's runs and attempts with OpenTelemetry (the ``otel`` entry point)."""

    def __init__(self) -> None:
        """An unconfigured plugin: inert until ``conveyor_configure`` finds tracing wanted.

        When the environment alone asks for tracing, the OpenTelemetry modules are imported
        here (only imported: no thread, no provider), so that a fork server, which loads this
        plugin once, hands them to every attempt process it forks."""
        self._active = False
        self._flush_timeout = SCHEMA["flush_timeout"].default
        self._provider: Provider | None = None
        self._tracer: Tracer | None = None
        self._run: Span | None = None
        self._run_context: Context | None = None
        self._worker_id = ""
        self._attempts: dict[tuple[str, int], Span] = {}
        self._tokens: dict[tuple[str, int, int], object] = {}
        self._lock = threading.Lock()
        if tracing_wanted(os.environ, enabled_in(os.environ)):
            try:
                from . import tracing

                tracing.preload()
            except Exception as exc:  # reported again, and handled, where tracing starts
                log.debug("tracing could not be preloaded", error=repr(exc))

    # --- the worker's lifecycle -------------------------------------------------------------

    @conveyor.hookimpl
    def conveyor_configure(self, config: Config) -> bool | None:
        """Read ``[otel]`` (ConfigError for a bad table) and decide whether to trace; False
        (leave this worker or server: no hook of it is called there, so its tasks' events
        cost nothing) when tracing is not wanted."""
        settings = config.plugin_settings("otel", SCHEMA)
        enabled = settings["enabled"] if "enabled" in config.plugin_tables.get("otel", {}) else None
        self._flush_timeout = float(settings["flush_timeout"])
        self._active = tracing_wanted(os.environ, enabled)
        return None if self._active else False

    @conveyor.hookimpl
    def conveyor_worker_started(self, event: ev.WorkerStarted) -> None:
        """Set up the tracer provider (first run only) and open the ``conveyor.run`` span."""
        if not self._active:
            return
        try:
            from . import tracing

            if self._provider is None:
                self._provider = tracing.ensure_provider()
                self._tracer = self._provider.tracer()
            assert self._tracer is not None
            parent = tracing.context_from(os.environ) or tracing.current_context()
            self._worker_id = event.worker_id
            self._run = self._tracer.start_span(
                "conveyor.run",
                context=parent,
                attributes={"conveyor.worker_id": event.worker_id},
            )
            self._run_context = tracing.span_context(self._run)
        except Exception as exc:
            log.warning("tracing could not start; this run is not traced", error=repr(exc))
            self._run = self._run_context = None

    @conveyor.hookimpl
    def conveyor_worker_stopped(self, event: ev.WorkerStopped) -> None:
        """End the ``conveyor.run`` span: ``conveyor.ok``, ERROR when the run was not ok."""
        run, self._run, self._run_context = self._run, None, None
        if run is None:
            return
        try:
            self._end_leftovers()
            run.set_attribute("conveyor.ok", event.ok)
            if not event.ok:
                from . import tracing

                tracing.set_error(run, "run not ok")
            run.end()
        except Exception as exc:
            log.warning("tracing could not end the run's span", error=repr(exc))

    @conveyor.hookimpl
    def conveyor_unconfigure(self, flush_timeout: float) -> None:
        """Export what is left within ``[otel] flush_timeout``, then stop the exporter this
        plugin started (an application's own provider is only flushed)."""
        provider = self._provider
        if provider is None:
            return
        try:
            run, self._run = self._run, None
            self._end_leftovers()
            if run is not None:
                run.end()
            provider.close(self._flush_timeout)
        except Exception as exc:
            log.warning("tracing could not flush", error=repr(exc))
        self._provider = self._tracer = None

    def _end_leftovers(self) -> None:
        with self._lock:
            left = list(self._attempts.values())
            self._attempts.clear()
        for span in left:
            span.end()

    # --- attempts, from the worker's loop thread --------------------------------------------

    @conveyor.hookimpl
    def conveyor_task_started(self, event: ev.TaskStarted) -> None:
        """Open the attempt's ``conveyor.task <family>`` span under the run's."""
        if self._run_context is None or self._tracer is None:
            return
        try:
            attributes: dict[str, str | int] = {
                "conveyor.task_id": event.task_id,
                "conveyor.family": event.family,
                "conveyor.attempt": event.attempt,
                "conveyor.executor": event.executor,
                "conveyor.worker_id": event.worker_id or self._worker_id,
            }
            for name, value in event.params.items():
                if not is_secret_name(name):  # (and credentials in a URL value hidden)
                    attributes[f"conveyor.param.{name}"] = (
                        redact_text(value) if _MAY_HIDE.search(value) else value
                    )
            span = self._tracer.start_span(
                f"conveyor.task {event.family}", context=self._run_context, attributes=attributes
            )
            with self._lock:
                self._attempts[(event.task_id, event.attempt)] = span
        except Exception as exc:
            log.warning("tracing could not start the attempt's span", error=repr(exc))

    @conveyor.hookimpl
    def conveyor_attempt_environment(self, event: ev.TaskStarted) -> Mapping[str, str] | None:
        """``TRACEPARENT`` (and ``TRACESTATE``) naming the attempt's span; None when inert."""
        if not self._active:
            return None
        with self._lock:
            span = self._attempts.get((event.task_id, event.attempt))
        if span is None:
            return None
        if event.executor in _IN_PROCESS:  # (the attempt runs here: begin finds the span)
            return {}
        from . import tracing

        return tracing.headers_of(span) or None

    @conveyor.hookimpl
    def conveyor_task_succeeded(self, event: ev.TaskSucceeded) -> None:
        """End the attempt's span: succeeded."""
        self._finish(event.task_id, event.attempt, AttemptEnd.SUCCEEDED, None)

    @conveyor.hookimpl
    def conveyor_task_failed(self, event: ev.TaskFailed) -> None:
        """End the attempt's span: ERROR with the exception type (``interrupted`` when the
        worker stopped it)."""
        outcome = AttemptEnd.INTERRUPTED if event.interrupted else AttemptEnd.FAILED
        self._finish(event.task_id, event.attempt, outcome, event.exception_type or "Exception")

    @conveyor.hookimpl
    def conveyor_task_timed_out(self, event: ev.TaskTimedOut) -> None:
        """End the attempt's span: ERROR ``TimedOut``."""
        self._finish(event.task_id, event.attempt, AttemptEnd.TIMED_OUT, "TimedOut")

    @conveyor.hookimpl
    def conveyor_task_process_died(self, event: ev.ProcessDied) -> None:
        """End the attempt's span: ERROR ``ProcessDied``."""
        self._finish(event.task_id, event.attempt, AttemptEnd.PROCESS_DIED, "ProcessDied")

    @conveyor.hookimpl
    def conveyor_task_dependencies_discovered(self, event: ev.DependenciesDiscovered) -> None:
        """``run()`` yielded incomplete dependencies: end the attempt's span, status unset."""
        if event.dynamic:
            with self._lock:
                keys = [key for key in self._attempts if key[0] == event.task_id]
            for task_id, attempt in keys:
                self._finish(task_id, attempt, AttemptOutcome.NEEDS_DEPS, None)

    def _finish(
        self, task_id: str, attempt: int, outcome: AttemptEnd | AttemptOutcome, error: str | None
    ) -> None:
        with self._lock:
            span = self._attempts.pop((task_id, attempt), None)
        if span is None:
            return
        try:
            span.set_attribute("conveyor.outcome", outcome.value)
            if error is not None:
                from . import tracing

                tracing.set_error(span, error)
            span.end()
        except Exception as exc:
            log.warning("tracing could not end the attempt's span", error=repr(exc))

    # --- where the attempt runs -------------------------------------------------------------

    @conveyor.hookimpl
    def conveyor_attempt_begin(self, attempt: ev.AttemptContext) -> None:
        """Make the attempt's span current where ``run()`` runs, so that task code's spans
        nest under it; in an attempt's own process, set up a provider first."""
        try:
            from . import tracing

            if not attempt.in_worker:
                if not tracing_wanted(os.environ, True):
                    return
                if self._provider is None:
                    self._provider = tracing.ensure_provider()
            ctx = None
            if attempt.in_worker:  # the span itself is here: no need to read TRACEPARENT
                with self._lock:
                    span = self._attempts.get((attempt.task_id, attempt.attempt))
                if span is not None:
                    ctx = tracing.span_context(span)
            else:
                ctx = tracing.context_from(attempt.env)
            if ctx is not None:
                token = tracing.attach(ctx)
                self._tokens[(attempt.task_id, attempt.attempt, threading.get_ident())] = token
        except Exception as exc:
            log.warning("tracing could not join the attempt's span", error=repr(exc))

    @conveyor.hookimpl
    def conveyor_attempt_end(self, attempt: ev.AttemptContext, outcome: str) -> None:
        """Undo ``conveyor_attempt_begin``; in an attempt's own process, export its spans
        (bounded: :func:`attempt_flush_timeout`)."""
        key = (attempt.task_id, attempt.attempt, threading.get_ident())
        try:
            from . import tracing

            token = self._tokens.pop(key, None)
            if token is not None:
                tracing.detach(token)
            if not attempt.in_worker and self._provider is not None:
                self._provider.flush(attempt_flush_timeout(os.environ))
        except Exception as exc:
            log.warning("tracing could not flush the attempt's spans", error=repr(exc))

    def __repr__(self) -> str:
        """For logs."""
        return f"OtelPlugin(active={self._active})"
