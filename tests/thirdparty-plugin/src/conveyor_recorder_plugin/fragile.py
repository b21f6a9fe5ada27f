"""A plugin whose import fails when CONVEYOR_BREAK_FRAGILE_PLUGIN=1 (ImportError) or =exit
(SystemExit), for conveyor's tests."""

from __future__ import annotations

import os

if os.environ.get("CONVEYOR_BREAK_FRAGILE_PLUGIN") == "1":
    raise ImportError("fragile plugin was told to break (CONVEYOR_BREAK_FRAGILE_PLUGIN=1)")
if os.environ.get("CONVEYOR_BREAK_FRAGILE_PLUGIN") == "exit":
    raise SystemExit(3)


class FragilePlugin:
    """Implements no hook; only its loading matters."""
