"""The built-in state stores, ``sqlite`` and ``memory`` (:mod:`.store`), and the SQL that
answers their reads (:mod:`.reads`): the only modules of the server that know SQLite. Nothing
else is handed a connection: the server and the web UI use them through
:class:`~conveyor.server.stores.StateStore` and :class:`~conveyor.server.stores.TaskReads`.
"""

from __future__ import annotations

from .store import MemoryStore, SqliteStore

__all__ = ["MemoryStore", "SqliteStore"]
