"""Finding a :class:`~conveyor.TaskLoader` by name, cheaply enough for every attempt's process.

Loaders are registered in the entry-point group ``conveyor.task_loaders`` and loaded with
stevedore (:func:`conveyor.backends.load_task_loader`), conveyor's own (``"conveyor"``)
included. Scanning entry points and importing stevedore costs a process a good part of a
second on a loaded machine, though, and an attempt's process only ever needs conveyor's own
loader unless a task names another: so :func:`task_loader` returns conveyor's loader directly
and goes through the entry points for any other name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from .task import ConveyorLoader
from .tasklike import DEFAULT_LOADER, TaskLoader

__all__ = ["may_import", "only_importing", "task_loader"]

_IMPORTABLE: ContextVar[Callable[[str], bool] | None] = ContextVar(
    "conveyor_loader_importable", default=None
)


def task_loader(name: str = DEFAULT_LOADER) -> TaskLoader:
    """The task loader ``name``: conveyor's own for ``"conveyor"``, else the entry point of
    that name in ``conveyor.task_loaders`` (BackendNotFound or PluginError as for any
    backend)."""
    if name == DEFAULT_LOADER:
        return ConveyorLoader()
    from .backends import load_task_loader  # (imports stevedore: only for another loader)

    return load_task_loader(name)


def may_import(module: str) -> bool:
    """Whether a task loader may import ``module`` here, to find a class that a task's
    parameters name (a Luigi ``TaskParameter``, say): always, except while an assistant
    rebuilds a task another worker registered (:func:`only_importing`), when only the modules
    of its ``[worker] task_modules`` may be. A loader that would import another module raises
    :class:`~conveyor.errors.TaskLoadError` instead, naming it."""
    allowed = _IMPORTABLE.get()
    return allowed is None or allowed(module)


@contextlib.contextmanager
def only_importing(allowed: Callable[[str], bool]) -> Iterator[None]:
    """Within the block, :func:`may_import` answers ``allowed(module)``."""
    token = _IMPORTABLE.set(allowed)
    try:
        yield
    finally:
        _IMPORTABLE.reset(token)
