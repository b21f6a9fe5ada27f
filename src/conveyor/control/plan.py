"""``conveyor plan`` and :func:`conveyor.plan`: a dry run (to be written)."""

from __future__ import annotations

__all__ = ["Plan", "PlannedTask", "plan"]


class PlannedTask:
    """One task of a :class:`Plan` (to be written)."""


class Plan:
    """What a run would do (to be written)."""


def plan(task: object) -> Plan:
    """The dry run of ``task`` (to be written)."""
    raise NotImplementedError
