"""A worker's two ways out for its metrics: an HTTP endpoint and a node-exporter textfile.

:class:`WorkerExporter` binds the endpoint's socket when it is built (so a port that cannot
be bound refuses the worker's start, exit 2, naming ``host:port``) and starts its threads only
in :meth:`~WorkerExporter.start` (from ``conveyor_worker_started``, after the process
executors have forked their servers). The textfile is rewritten every ``interval`` seconds
and once more by :meth:`~WorkerExporter.stop`, always atomically:
:func:`prometheus_client.write_to_textfile` writes a temporary file next to it and renames it
over the old one, so a reader (node-exporter) sees the old file or the new one, never half.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from conveyor.errors import ConfigError
from prometheus_client import CollectorRegistry, make_wsgi_app, write_to_textfile

__all__ = ["WorkerExporter"]

log = logging.getLogger("conveyor_prometheus")


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
        source: str = "",
    ) -> None:
        """Check the textfile's directory and bind the endpoint's socket now; ConfigError
        (naming ``source``, the configuration file) if either cannot work."""
        self._registry = registry
        self._textfile = os.path.abspath(textfile) if textfile else ""
        self._interval = interval
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._threads: list[threading.Thread] = []
        if self._textfile and not os.path.isdir(os.path.dirname(self._textfile)):
            message = f"prometheus.textfile: the directory of {textfile!r} does not exist"
            raise _refusal(message, "prometheus.textfile", source)
        self._httpd: _Server | None = None
        if port:
            self._httpd = _bind(registry, host, port, source)

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
        self._stopping.set()
        if self._httpd is not None:
            if started:
                self._httpd.shutdown()
            self._httpd.server_close()
        for thread in self._threads:
            thread.join(max(flush_timeout, 0.0))
        if self._textfile:
            self._write()

    def _rewrite(self) -> None:
        while not self._stopping.wait(self._interval):
            self._write()

    def _write(self) -> None:
        try:
            write_to_textfile(self._textfile, self._registry)
        except OSError as exc:
            log.error("cannot write the Prometheus textfile %s: %s", self._textfile, exc)


def _bind(registry: CollectorRegistry, host: str, port: int, source: str) -> _Server:
    """An HTTP server for ``registry`` bound (not yet serving) on ``host:port``."""
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]

        class Server(_Server):
            address_family = family

        server = Server((str(address[0]), port), _QuietHandler)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        message = (
            f"prometheus.port: cannot listen on {where}: {reason} (set [prometheus] port to a "
            "free port, or 0 for no endpoint)"
        )
        raise _refusal(message, "prometheus.port", source) from None
    server.set_app(make_wsgi_app(registry))
    return server


def _refusal(message: str, key: str, source: str) -> ConfigError:
    """A ConfigError read like conveyor's own: the file first, then the key."""
    return ConfigError(f"{source}: {message}" if source else message, key=key, source=source)


def _thread(name: str, target: Any) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
