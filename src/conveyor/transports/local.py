"""The ``local`` transport: the in-process :class:`conveyor.Scheduler`, called directly."""

from __future__ import annotations

from ..scheduler import Scheduler
from .base import TransportContext

__all__ = ["LocalTransport"]


def LocalTransport(context: TransportContext) -> Scheduler:
    """Build the in-process scheduler from the worker's ``[scheduler]`` settings."""
    return Scheduler(context.scheduler)
