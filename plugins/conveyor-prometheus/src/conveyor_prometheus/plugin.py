"""The ``prometheus`` hook plugin: one object per worker and per central server.

On a worker it does nothing at all (no registry, no thread, no socket) unless its
``[prometheus]`` table sets ``port`` or ``textfile``; then the metrics, the endpoint's socket
and the threads are made when the worker first runs (``conveyor_worker_started``). On the
central server it always serves ``GET /metrics`` (behind the server's token when one is set)
and counts what the server sees; there the table is checked but only ``max_families`` is
used (the server never binds a worker's port nor writes its textfile). Each object has a
registry of its own, never prometheus_client's global one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import conveyor
from conveyor.errors import ConfigError
from conveyor.settings import Field

if TYPE_CHECKING:
    from conveyor.config import Config
    from conveyor.events import (
        NotificationSent,
        ProcessDied,
        SchedulerRequest,
        SchedulerTaskChanged,
        TaskFailed,
        TaskSucceeded,
        TaskTimedOut,
        WorkerStarted,
    )
    from conveyor.server.view import SchedulerView

    from .exporter import WorkerExporter
    from .metrics import ServerMetrics, WorkerMetrics

__all__ = ["NAME", "SCHEMA", "PrometheusPlugin"]

NAME = "prometheus"
"""The plugin's ``conveyor.plugins`` entry-point name, and so its table: ``[prometheus]``."""

DEFAULT_MAX_FAMILIES = 1000

SCHEMA: Mapping[str, Field] = {
    "port": Field(
        "int", 0, ge=0, le=65535, doc="A worker's /metrics port (0: no endpoint; worker only)."
    ),
    "host": Field(
        "str",
        "127.0.0.1",
        check=bool,
        expect="a non-empty string",
        doc="The address a worker's endpoint binds (worker only).",
    ),
    "textfile": Field(
        "str", "", doc='A node-exporter textfile a worker rewrites ("": none; worker only).'
    ),
    "interval": Field(
        "seconds", 15.0, gt=0, doc="Seconds between rewrites of the textfile (worker only)."
    ),
    "max_families": Field(
        "int",
        DEFAULT_MAX_FAMILIES,
        ge=1,
        doc='Distinct task families labelled by name; the rest count as family="other".',
    ),
}
"""The ``[prometheus]`` table."""

log = logging.getLogger("conveyor_prometheus")


@dataclass(frozen=True)
class _Wanted:
    """What a worker's ``[prometheus]`` table asks it to export."""

    host: str
    port: int
    textfile: str
    interval: float


class PrometheusPlugin:
    """Prometheus metrics of one conveyor worker or central server (see the module)."""

    def __init__(self) -> None:
        """Nothing is set up until ``conveyor_configure`` says what is wanted."""
        self._lock = threading.Lock()
        self._max_families = DEFAULT_MAX_FAMILIES
        self._wanted: _Wanted | None = None  # a worker's exports, until it first runs
        self._tasks: WorkerMetrics | None = None  # a worker's, once it exports
        self._exporter: WorkerExporter | None = None
        self._server: ServerMetrics | None = None

    # --- both sides ---------------------------------------------------------------------------

    @conveyor.hookimpl
    def conveyor_configure(self, config: Config) -> None:
        """Read and check ``[prometheus]`` (ConfigError for a bad value, or a textfile whose
        directory does not exist: exit 2). Nothing is built, bound or started here: the
        server fires this hook too, and a process executor forks after it."""
        settings = config.plugin_settings(NAME, SCHEMA)
        self._max_families = int(settings["max_families"])
        textfile = str(settings["textfile"])
        if textfile and not os.path.isdir(os.path.dirname(os.path.abspath(textfile))):
            source = config.plugin_sources.get(NAME) or config.source or ""
            message = f"prometheus.textfile: the directory of {textfile!r} does not exist"
            raise ConfigError(
                f"{source}: {message}" if source else message,
                key="prometheus.textfile",
                source=source,
            )
        if settings["port"] or textfile:
            self._wanted = _Wanted(
                host=str(settings["host"]),
                port=int(settings["port"]),
                textfile=textfile,
                interval=float(settings["interval"]),
            )

    @conveyor.hookimpl(trylast=True)
    def conveyor_unconfigure(self, flush_timeout: float) -> None:
        """Stop the endpoint and the rewrites; write the textfile with the final counts.

        Called after the other plugins' (``trylast``), so that the notifications conveyor's
        notifier dispatch delivers while it flushes are in the last textfile."""
        self._wanted = None
        exporter, self._exporter = self._exporter, None
        if exporter is not None:
            exporter.stop(flush_timeout)

    # --- a worker -----------------------------------------------------------------------------

    @conveyor.hookimpl
    def conveyor_worker_started(self, event: WorkerStarted) -> None:
        """On the first run of a worker that exports: create its metrics, bind the endpoint
        and start serving and rewriting. Only a worker fires this hook, after its fork servers
        have started, so neither the server nor a fork server holds the socket. A port that
        cannot be bound is logged and the endpoint is off; the run goes on."""
        wanted, self._wanted = self._wanted, None  # (once per worker)
        if wanted is None:
            return
        try:
            from prometheus_client import CollectorRegistry

            from .exporter import WorkerExporter
            from .metrics import WorkerMetrics

            tasks = WorkerMetrics(CollectorRegistry(auto_describe=True), self._max_families)
            exporter = WorkerExporter(
                tasks.registry,
                host=wanted.host,
                port=wanted.port,
                textfile=wanted.textfile,
                interval=wanted.interval,
            )
            self._tasks, self._exporter = tasks, exporter
            exporter.start()
        except Exception:  # (a metrics exporter never stops a pipeline)
            log.exception("the Prometheus exporter could not start; the worker runs without it")

    @conveyor.hookimpl
    def conveyor_task_succeeded(self, event: TaskSucceeded) -> None:
        """Count a succeeded attempt."""
        if self._tasks is not None:
            self._tasks.attempt(event.family, "succeeded", event.duration)

    @conveyor.hookimpl
    def conveyor_task_failed(self, event: TaskFailed) -> None:
        """Count a failed attempt (``interrupted`` when its worker was interrupted)."""
        if self._tasks is not None:
            outcome = "interrupted" if event.interrupted else "failed"
            self._tasks.attempt(event.family, outcome, event.duration)

    @conveyor.hookimpl
    def conveyor_task_timed_out(self, event: TaskTimedOut) -> None:
        """Count a timed-out attempt."""
        if self._tasks is not None:
            self._tasks.attempt(event.family, "timed_out", event.duration)

    @conveyor.hookimpl
    def conveyor_task_process_died(self, event: ProcessDied) -> None:
        """Count an attempt whose process died."""
        if self._tasks is not None:
            self._tasks.attempt(event.family, "process_died", event.duration)

    @conveyor.hookimpl
    def conveyor_notification_sent(self, event: NotificationSent) -> None:
        """Count a notification delivery try by notifier and result."""
        if self._tasks is not None:
            self._tasks.notifications.labels(event.notifier, event.result).inc()

    # --- the central server -------------------------------------------------------------------

    def _server_metrics(self) -> ServerMetrics:
        server = self._server
        if server is None:
            with self._lock:
                if self._server is None:
                    from prometheus_client import CollectorRegistry

                    from .metrics import ServerMetrics

                    registry = CollectorRegistry(auto_describe=True)
                    self._server = ServerMetrics(registry, self._max_families)
                server = self._server
        return server

    @conveyor.hookimpl
    def conveyor_scheduler_routes(self, server: object) -> list[object]:
        """``GET /metrics``: the server's metrics in Prometheus' text format."""
        from prometheus_client.exposition import choose_encoder
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        self._wanted = None  # (a worker's settings in the server's file: checked, never used)
        metrics = self._server_metrics()
        metrics.watch(cast("SchedulerView", server))
        registry = metrics.registry

        async def endpoint(request: Request) -> Response:
            # the format Prometheus asks for (its text format by default, or OpenMetrics), as
            # a worker's endpoint answers; rendered in a thread: the collector reads the store
            encoder, content_type = choose_encoder(request.headers.get("accept", ""))
            body = await asyncio.to_thread(encoder, registry)
            return Response(body, headers={"Content-Type": content_type})

        return [Route("/metrics", endpoint, methods=["GET"])]

    @conveyor.hookimpl
    def conveyor_scheduler_task_changed(self, event: SchedulerTaskChanged) -> None:
        """Count the attempt a move ended, and the queue wait of a hand-out."""
        if event.outcome:
            self._server_metrics().attempt(event.family, event.outcome, event.duration)
        if event.waited is not None:
            self._server_metrics().waited(event.family, event.waited)

    @conveyor.hookimpl
    def conveyor_scheduler_request(self, event: SchedulerRequest) -> None:
        """Count an answered request and observe its time."""
        self._server_metrics().request(event.route, event.code, event.duration)
