"""Logging set-up with structlog (SPEC §8).

conveyor's own code only calls ``structlog.get_logger(...)``; this module configures the
processors once, for the CLI or ``build()``. Records that task code emits through the standard
``logging`` module go through the same renderer, and both carry the ``task_id`` bound by the
executor while ``run()`` executes.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from .config import LoggingSettings

__all__ = ["configure_logging"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def configure_logging(settings: LoggingSettings, stream: TextIO | None = None) -> None:
    """Configure structlog and stdlib logging: level, console or JSON lines, to stderr."""
    out = stream or sys.stderr
    level = _LEVELS[settings.level]
    renderer = _renderer(settings.format, out)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if not getattr(h, "_conveyor", False)]
    handler._conveyor = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)


def _renderer(fmt: str, out: TextIO) -> Any:
    if fmt == "json" or (fmt == "auto" and not _isatty(out)):
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=_isatty(out))


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
