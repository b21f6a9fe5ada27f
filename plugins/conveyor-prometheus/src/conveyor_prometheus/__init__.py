"""Prometheus metrics for conveyor: the ``prometheus`` hook plugin of workers and the server.

Installed, it is loaded through the ``conveyor.plugins`` entry point by every worker and by
``conveyor scheduler``. The server serves ``GET /metrics``; a worker exports nothing unless
``worker.toml`` asks for it::

    [prometheus]
    port = 9464                 # GET http://127.0.0.1:9464/metrics while the worker runs
    textfile = "/var/lib/node_exporter/textfile/conveyor.prom"   # rewritten atomically
    interval = 15               # seconds between textfile rewrites (and once at exit)
    max_families = 1000         # families beyond this count as family="other"

See :class:`PrometheusPlugin` (:mod:`conveyor_prometheus.plugin`) and the metric families in
:mod:`conveyor_prometheus.metrics`.
"""

from __future__ import annotations

from .plugin import NAME, SCHEMA, PrometheusPlugin

__all__ = ["NAME", "SCHEMA", "PrometheusPlugin"]
__version__ = "0.1.0"
