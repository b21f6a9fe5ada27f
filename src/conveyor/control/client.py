""":class:`conveyor.Client` (to be written)."""

from __future__ import annotations

__all__ = ["Client"]


class Client:
    """A client of a central scheduler's control API (to be written)."""
