"""``--observability`` for the benchmarks: run with the Prometheus and OpenTelemetry plugins on.

:func:`observability_env` returns the environment a benchmark's conveyor processes get to turn
both plugins on (the plugins in plugins/conveyor-prometheus and plugins/conveyor-otel must be
installed): the Prometheus plugin writes its textfile every 5 seconds and at exit, and the
OpenTelemetry plugin exports every span over OTLP/HTTP to :class:`SpanSink`, a loopback server
of this process that answers each export at once and counts its bytes (so what is measured is
conveyor's side of tracing, not a collector). Every other auto-loaded plugin is turned off, as
it is in the runs without ``--observability`` (``CONVEYOR_DISABLE_PLUGIN_AUTOLOAD=1``).
"""

from __future__ import annotations

import http.server
import threading
from importlib.metadata import entry_points
from pathlib import Path

OBSERVABILITY_PLUGINS = ("prometheus", "otel")


class SpanSink:
    """A loopback OTLP/HTTP endpoint that accepts every export (200, empty body)."""

    def __init__(self) -> None:
        """Start serving on a free loopback port, on a daemon thread."""
        sink = self
        self.exports = 0
        self.bytes = 0
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received = len(self.rfile.read(length))
                with lock:
                    sink.bytes += received
                    sink.exports += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def observability_env(work: Path, sink: SpanSink, name: str = "worker") -> dict[str, str]:
    """Variables that turn both plugins on (the textfile ``<work>/<name>.prom``, spans to
    ``sink``) and every other auto-loaded plugin off; for ``name`` "server", no textfile (a
    server's metrics are its ``/metrics``)."""
    others = sorted(
        {ep.name for ep in entry_points(group="conveyor.plugins")} - set(OBSERVABILITY_PLUGINS)
    )
    missing = set(OBSERVABILITY_PLUGINS) - {
        ep.name for ep in entry_points(group="conveyor.plugins")
    }
    if missing:
        raise SystemExit(
            "--observability needs the plugins " + ", ".join(sorted(missing)) + ": pip install "
            "./plugins/conveyor-prometheus ./plugins/conveyor-otel"
        )
    textfile = (
        {}
        if name == "server"
        else {
            "CONVEYOR_PROMETHEUS__TEXTFILE": str(work / f"{name}.prom"),
            "CONVEYOR_PROMETHEUS__INTERVAL": "5",
        }
    )
    return {
        "CONVEYOR_DISABLE_PLUGINS": ",".join(others),
        **textfile,
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
        "OTEL_SERVICE_NAME": "conveyor-bench",
    }
