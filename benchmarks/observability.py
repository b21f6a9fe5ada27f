"""``--observability`` for the benchmarks: run with the Prometheus and OpenTelemetry plugins on.

:func:`observability_env` returns the environment a benchmark's conveyor processes get to turn
both plugins on (the plugins in plugins/conveyor-prometheus and plugins/conveyor-otel must be
installed): the Prometheus plugin writes its textfile every 5 seconds and at exit, and the
OpenTelemetry plugin exports every span over OTLP/HTTP to :class:`SpanSink`, a loopback server
of this process that answers each export at once (so what is measured is
conveyor's side of tracing, not a collector). Every other auto-loaded plugin is turned off, as
it is in the runs without ``--observability`` (``CONVEYOR_DISABLE_PLUGIN_AUTOLOAD=1``).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from conveyor.testing.processes import StubServer

OBSERVABILITY_PLUGINS = ("prometheus", "otel")


class SpanSink(StubServer):
    """A loopback OTLP/HTTP endpoint that accepts every export at once (200)."""

    def __init__(self) -> None:
        """Start serving on a free loopback port (:attr:`url`)."""
        super().__init__(lambda path: (200, {}))

    @property
    def exports(self) -> int:
        """How many exports it received."""
        return len(self.asked)


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
