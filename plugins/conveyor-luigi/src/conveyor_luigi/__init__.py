"""Run unmodified ``luigi.Task`` code with conveyor.

:class:`LuigiLoader` is the task loader ``luigi`` (entry-point group
``conveyor.task_loaders``): it rebuilds Luigi tasks in other processes, makes a
:class:`conveyor.TaskLike` of a ``luigi.Task`` object met by ``conveyor.build()``,
``Worker.add()``, ``requires()`` or a ``yield``, and parses ``conveyor run``'s command line with
Luigi's own parser. :class:`~conveyor_luigi.events.LuigiEvents` (entry point ``luigi-events`` of
``conveyor.plugins``) fires Luigi's worker-side events. Importing this package does not import
``luigi``: the adapter, :mod:`conveyor_luigi.adapter`, is imported once Luigi is.
"""

from __future__ import annotations

from .events import LuigiEvents
from .loader import COMMAND_LINE_VARIABLE, LuigiLoader

__all__ = ["COMMAND_LINE_VARIABLE", "LuigiEvents", "LuigiLoader"]
