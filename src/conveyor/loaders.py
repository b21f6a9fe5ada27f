"""Finding a :class:`~conveyor.TaskLoader` by name, cheaply enough for every attempt's process.

Loaders are registered in the entry-point group ``conveyor.task_loaders`` and loaded with
stevedore (:func:`conveyor.backends.load_task_loader`), conveyor's own (``"conveyor"``)
included. Scanning entry points and importing stevedore costs a process a good part of a
second on a loaded machine, though, and an attempt's process only ever needs conveyor's own
loader unless a task names another: so :func:`task_loader` returns conveyor's loader directly
and goes through the entry points for any other name.
"""

from __future__ import annotations

from .task import ConveyorLoader
from .tasklike import DEFAULT_LOADER, TaskLoader

__all__ = ["task_loader"]


def task_loader(name: str = DEFAULT_LOADER) -> TaskLoader:
    """The task loader ``name``: conveyor's own for ``"conveyor"``, else the entry point of
    that name in ``conveyor.task_loaders`` (BackendNotFound or PluginError as for any
    backend)."""
    if name == DEFAULT_LOADER:
        return ConveyorLoader()
    from .backends import load_task_loader  # (imports stevedore: only for another loader)

    return load_task_loader(name)
