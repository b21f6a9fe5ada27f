"""OpenTelemetry traces for conveyor: a ``conveyor.run`` span per worker run, a
``conveyor.task <family>`` span per attempt, and the attempt's context handed to the process
that runs it (``TRACEPARENT``), so spans made by task code nest under it.

Registered as the ``otel`` entry point of ``conveyor.plugins``; inert (no ``opentelemetry``
import at all) unless tracing is asked for by the standard ``OTEL_*`` variables or
``[otel] enabled = true``.
"""

from __future__ import annotations

from .plugin import SCHEMA, OtelPlugin, attempt_flush_timeout, tracing_wanted

__all__ = ["SCHEMA", "OtelPlugin", "__version__", "attempt_flush_timeout", "tracing_wanted"]

__version__ = "0.1.0"
