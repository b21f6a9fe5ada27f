"""A PostgreSQL state store for conveyor's central scheduler (``[server] state_store =
"postgres"``), which several schedulers can share, one of them leading: :class:`PostgresStore`
(the ``postgres`` entry point of ``conveyor.state_stores``)."""

from __future__ import annotations

from .store import SCHEMA_VERSION, PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]
