"""Logging set-up with structlog (see docs/configuration.md, ``[logging]``).

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
from .core.summary import first_line
from .terminal import TerminalStream

__all__ = ["configure_logging", "resolve_level"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def resolve_level(level: str, progress_line: bool) -> str:
    """The level to log at for the setting ``level``: itself, except ``"auto"``, which is
    ``"warning"`` on a console that shows ``conveyor run``'s progress line (it shows what the
    info events would: what runs, what is done) and ``"info"`` everywhere else (pipes, files,
    ``conveyor worker``, ``build()``). ``--log-level info`` brings the info events back."""
    if level != "auto":
        return level
    return "warning" if progress_line else "info"


def configure_logging(
    settings: LoggingSettings, stream: TextIO | TerminalStream | None = None
) -> None:
    """Configure structlog and stdlib logging: level, console or JSON lines, to stderr.

    On a terminal, lines go through a :class:`~conveyor.terminal.TerminalStream` (pass the one
    the progress line uses), so that they never share a line with the live status line. Level
    ``auto`` is info here: a caller that draws a progress line resolves it first
    (:func:`resolve_level`), so that the attempts' processes log at the same level.
    """
    out: Any = stream or sys.stderr
    if _isatty(out) and not isinstance(out, TerminalStream):
        out = TerminalStream(out)
    level = _LEVELS[resolve_level(settings.level, progress_line=False)]
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


def _renderer(fmt: str, out: TextIO | TerminalStream) -> Any:
    if fmt == "json" or (fmt == "auto" and not _isatty(out)):
        return structlog.processors.JSONRenderer()
    return _ConsoleWithTracebacks(structlog.dev.ConsoleRenderer(colors=_isatty(out)))


class _ConsoleWithTracebacks:
    """The console renderer, showing a multi-line ``error`` (a traceback) as readable lines.

    The ``error`` field keeps the line that names the error; the whole text follows the log
    line the way an exception's traceback does. JSON lines keep ``error`` as one string.
    """

    def __init__(self, console: structlog.dev.ConsoleRenderer) -> None:
        self.console = console

    def __call__(self, logger: Any, name: str, event_dict: dict[str, Any]) -> str:
        """Render one event for a person."""
        error = event_dict.get("error")
        if isinstance(error, str) and "\n" in error.strip() and "exception" not in event_dict:
            event_dict["error"] = first_line(error)
            event_dict["exception"] = error.rstrip("\n")
        return str(self.console(logger, name, event_dict))


def _isatty(out: TextIO | TerminalStream) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
