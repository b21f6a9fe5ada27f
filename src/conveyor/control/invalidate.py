"""``conveyor invalidate`` and :func:`conveyor.invalidate` (to be written)."""

from __future__ import annotations

__all__ = ["Invalidation", "invalidate"]


class Invalidation:
    """What an invalidation removed (to be written)."""


def invalidate(task: object, downstream_of: object = None) -> Invalidation:
    """Remove ``task``'s outputs (to be written)."""
    raise NotImplementedError
