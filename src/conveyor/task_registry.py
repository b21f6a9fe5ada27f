"""The registry of task classes by ``(module, family)``.

Every concrete task class records itself here when it is defined
(:meth:`conveyor.Task.__init_subclass__`), so that a worker finds the class again from the
strings that crossed over (:func:`conveyor.task.load_task_class`) and a
:class:`~conveyor.parameters.TaskParameter` resolves ``module.Family`` without importing
anything. This module imports nothing else of conveyor's, which is what lets both the task API
and the parameters use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["register_task_class", "registered_task_classes", "task_class_key"]

_REGISTRY: dict[tuple[str, str], type[Any]] = {}
_VIEW: Mapping[tuple[str, str], type[Any]] = MappingProxyType(_REGISTRY)


def register_task_class(cls: type[Any], family: str) -> None:
    """Record ``cls`` as the task class of ``family`` in its module (a later class of the
    same module and family replaces it, as redefining a class in a notebook does)."""
    _REGISTRY[(cls.__module__, family)] = cls


def registered_task_classes() -> Mapping[tuple[str, str], type[Any]]:
    """Every task class defined so far, by ``(module, family)`` (a read-only live view)."""
    return _VIEW


def task_class_key(value: object) -> tuple[str, str] | None:
    """``(module, family)`` of a class that has ``get_task_family()`` (a task class), else
    None."""
    if not isinstance(value, type):
        return None
    family = getattr(value, "get_task_family", None)
    if not callable(family):
        return None
    return (value.__module__, str(family()))
