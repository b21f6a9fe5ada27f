"""Dask's loggers follow conveyor's log level.

``distributed`` sets its loggers' levels when it is imported (``distributed`` at info, a few
noisy ones quieter) from Dask's ``logging`` configuration, whatever the application asked
for; so ``conveyor run --log-level error`` would still show the cluster's info lines (the
scheduler, the nannies, every connection). :func:`follow_level` makes each of Dask's loggers
log at the quieter of Dask's own level for it and conveyor's level, in this process;
:func:`worker_process_level` is what a ``LocalCluster`` is told for its worker processes
(its ``silence_logs``: they never print less than warnings there, as Dask's default does).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import dask.config

__all__ = ["DASK_LOGGERS", "follow_level", "level_number", "worker_process_level"]

DASK_LOGGERS = ("distributed", "dask", "tornado", "bokeh")
"""The roots of the loggers of Dask and of the libraries it logs through."""

_DASK_DEFAULTS: Mapping[str, str] = {  # distributed's own defaults (distributed/config.py)
    "distributed": "info",
    "distributed.client": "warning",
    "distributed.gc": "warning",
    "bokeh": "error",
    "tornado": "critical",
    "tornado.application": "error",
}


def level_number(level: str) -> int:
    """The ``logging`` level of conveyor's level name (``auto``, or anything unknown: info,
    what ``auto`` is away from a progress line)."""
    number = logging.getLevelName(level.upper())
    return number if isinstance(number, int) else logging.INFO


def follow_level(level: str) -> None:
    """Set each of Dask's loggers in this process to the quieter of its Dask level and
    conveyor's ``level`` (every time: a later executor with a chattier level gets it back)."""
    threshold = level_number(level)
    for name, configured in _dask_levels().items():
        logging.getLogger(name).setLevel(max(configured, threshold))


def worker_process_level(level: str) -> int:
    """The ``silence_logs`` level for a LocalCluster's worker processes: conveyor's level, but
    never chattier than warnings (their lines bypass conveyor's format)."""
    return max(level_number(level), logging.WARNING)


def _dask_levels() -> dict[str, int]:
    """Dask's level for each of its loggers: distributed's defaults, Dask's ``logging``
    configuration over them, and the roots of :data:`DASK_LOGGERS` that neither names
    (``NOTSET``: they follow conveyor's level alone)."""
    levels: dict[str, Any] = {name: logging.NOTSET for name in DASK_LOGGERS}
    levels.update(_DASK_DEFAULTS)
    configured = dask.config.get("distributed.logging", default=None) or dask.config.get(
        "logging", default=None
    )
    if isinstance(configured, Mapping) and "version" not in configured:  # old-style: name: level
        levels.update({str(k): v for k, v in configured.items() if isinstance(v, (str, int))})
    return {name: _number(value) for name, value in levels.items()}


def _number(value: str | int) -> int:
    if isinstance(value, int):
        return value
    number = logging.getLevelName(value.upper())
    return number if isinstance(number, int) else logging.INFO
