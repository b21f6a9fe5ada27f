"""A worker's two ways out for its metrics: an HTTP endpoint and a node-exporter textfile.

A :class:`WorkerExporter` is built from ``conveyor_worker_started`` (only a worker fires it,
after its process executors have forked their servers), so neither the central server nor
a fork server ever holds the endpoint's socket. Building it binds the socket; a port that
cannot be bound is logged as an error naming ``host:port`` and the endpoint is off (the run
goes on: metrics never stop a pipeline). A child forked from the worker later (a task's own
``fork``, a fork server made during a run) closes its copy of the socket at once, so the
port is free as soon as the worker is gone.

The textfile is rewritten every ``interval`` seconds and once more by
:meth:`~WorkerExporter.stop`, always atomically: :func:`prometheus_client.write_to_textfile`
writes a temporary file next to it and renames it over the old one, so a reader
(node-exporter) sees the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import weakref
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app, write_to_textfile

__all__ = ["WorkerExporter"]

log = logging.getLogger("conveyor_prometheus")

_LIVE: weakref.WeakSet[WorkerExporter] = weakref.WeakSet()
"""The exporters of this process, whose sockets a forked child closes."""


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per scrape; those threads never hold up the worker's exit."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """Scrapes are not logged to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class WorkerExporter:
    """Serves ``registry`` on ``host:port`` (``port`` 0: not served) and/or writes it to
    ``textfile`` (``""``: not written) every ``interval`` seconds and at :meth:`stop`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str,
        port: int,
        textfile: str,
        interval: float,
    ) -> None:
        """Bind the endpoint's socket now (a port that cannot be bound is logged, naming
        ``host:port``, and the endpoint is off); nothing runs until :meth:`start`."""
        self._registry = registry
        self._textfile = os.path.abspath(textfile) if textfile else ""
        self._interval = interval
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self._httpd: _Server | None = _bind(registry, host, port) if port else None
        _LIVE.add(self)

    @property
    def address(self) -> tuple[str, int] | None:
        """The endpoint's bound ``(host, port)``, or None when it is off."""
        if self._httpd is None:
            return None
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Start serving and the periodic rewrite (the first call only)."""
        with self._lock:
            if self._started or self._stopped:
                return
            self._started = True
            if self._httpd is not None:
                self._threads.append(_thread("conveyor-prometheus-http", self._httpd.serve_forever))
            if self._textfile:
                self._write()
                self._threads.append(_thread("conveyor-prometheus-textfile", self._rewrite))

    def stop(self, flush_timeout: float) -> None:
        """Stop serving, stop the rewrites (waiting at most ``flush_timeout`` seconds for one
        under way) and write the textfile a last time with the final counts."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            started = self._started
        _LIVE.discard(self)
        self._stopping.set()
        if self._httpd is not None:
            if started:
                self._httpd.shutdown()
            self._httpd.server_close()
        for thread in self._threads:
            thread.join(max(flush_timeout, 0.0))
        if self._textfile:
            self._write()

    def _forked(self) -> None:
        """In a child forked from the worker: close the copy of the endpoint's socket and
        never write the textfile (the worker's threads are not in the child)."""
        self._stopped = True
        self._textfile = ""
        if self._httpd is not None:
            self._httpd.socket.close()
            self._httpd = None

    def _rewrite(self) -> None:
        while not self._stopping.wait(self._interval):
            self._write()

    def _write(self) -> None:
        try:
            write_to_textfile(self._textfile, self._registry)
        except OSError as exc:
            log.error("cannot write the Prometheus textfile %s: %s", self._textfile, exc)


def _bind(registry: CollectorRegistry, host: str, port: int) -> _Server | None:
    """An HTTP server for ``registry`` bound (not yet serving) on ``host:port``, or None
    (logged as an error) when it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]

        class Server(_Server):
            address_family = family

        server = Server((str(address[0]), port), _QuietHandler)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        log.error(
            "prometheus.port: cannot listen on %s:%s: %s; the metrics endpoint is off (set "
            "[prometheus] port to a free port, or 0 for no endpoint)",
            host,
            port,
            reason,
        )
        return None
    server.set_app(make_wsgi_app(registry))
    return server


def _close_in_child() -> None:
    """``os.register_at_fork`` hook: a child of the worker holds no endpoint's socket."""
    for exporter in list(_LIVE):
        with contextlib.suppress(Exception):  # (nothing may stop a fork's child from running)
            exporter._forked()
    _LIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def _thread(name: str, target: Any) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
