"""The ``local`` transport: the in-process :class:`conveyor.Scheduler`, called directly."""

from __future__ import annotations

from ..config import Config
from ..scheduler import Scheduler

__all__ = ["LocalTransport"]


def LocalTransport(config: Config) -> Scheduler:
    """Build the in-process scheduler from the ``[scheduler]`` section of ``config``."""
    return Scheduler(config)
