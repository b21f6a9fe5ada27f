"""A tiny task framework that is not conveyor's, and the task loader that rebuilds its tasks.

:class:`Thing` subclasses nothing of conveyor's: it has the members of ``conveyor.TaskLike``
(identity, ``complete()``, ``requires()``, ``run()``, ``task_policy()``) and ``output()``,
and its parameters are strings. :class:`ForeignLoader` is registered as the task loader
``foreign`` (entry-point group ``conveyor.task_loaders``); a :class:`Thing` names it in its
policy, so that an attempt's process rebuilds it with this loader. Nothing else of conveyor's
tests uses either.

The loader has both optional capabilities of a task loader: it adapts a :class:`Recipe` (an
object that is not a task: a Thing class and its parameters, as another framework might hand a
task around) into the :class:`Thing` it describes (``AdaptsTasks``), and it builds a Thing from
``conveyor run``'s words, ``--key value`` pairs (``ParsesCommandLines``).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from conveyor.errors import ParameterError, TaskLoadError
from conveyor.tasklike import TaskPolicy

__all__ = ["LOADER_NAME", "ForeignLoader", "Recipe", "Thing"]

LOADER_NAME = "foreign"
"""The name :class:`ForeignLoader` is registered under."""

_POLICY = TaskPolicy(loader=LOADER_NAME)


class Thing:
    """A task of the tiny framework: string parameters given as keywords."""

    def __init__(self, **params: str) -> None:
        """Keep ``params`` (every value a string)."""
        self._params = MappingProxyType({k: str(v) for k, v in sorted(params.items())})

    @property
    def task_id(self) -> str:
        """The family and a hash of the parameters."""
        text = repr(sorted(self._params.items())).encode()
        return f"{self.task_family}_{hashlib.sha256(text).hexdigest()[:10]}"

    @property
    def task_family(self) -> str:
        """The class name."""
        return type(self).__name__

    @property
    def task_module(self) -> str:
        """The module defining the class."""
        return type(self).__module__

    @property
    def task_params(self) -> Mapping[str, str]:
        """The parameters, read-only."""
        return self._params

    def task_policy(self) -> TaskPolicy:
        """Rebuilt elsewhere by the ``foreign`` loader; otherwise conveyor's defaults."""
        return _POLICY

    def output(self) -> Any:
        """What the task makes (none by default)."""
        return None

    def requires(self) -> Any:
        """No requirements by default."""
        return []

    def complete(self) -> bool:
        """Never complete by default."""
        return False

    def run(self) -> Any:
        """Nothing to do by default."""
        return None

    def __repr__(self) -> str:
        """``Family(k=v, ...)``."""
        shown = ", ".join(f"{k}={v}" for k, v in self._params.items())
        return f"{self.task_family}({shown})"


class Recipe:
    """Not a task: the Thing class to make and its parameters (what the loader adapts)."""

    def __init__(self, thing: type[Thing], **params: str) -> None:
        """Keep the class and the parameters."""
        self.thing = thing
        self.params = params


class ForeignLoader:
    """Rebuilds a :class:`Thing` from its module, family and string parameters."""

    def load(self, module: str, family: str, params: Mapping[str, str]) -> Thing:
        """The ``family`` of ``module`` built with ``params``; TaskLoadError if impossible."""
        try:
            cls = getattr(importlib.import_module(module), family)
        except (ImportError, AttributeError) as exc:
            raise TaskLoadError(f"foreign loader: no {module}.{family} ({exc})") from exc
        if not (isinstance(cls, type) and issubclass(cls, Thing)):
            raise TaskLoadError(f"foreign loader: {module}.{family} is not a Thing")
        return cls(**params)

    def adapt(self, value: object) -> Thing | None:
        """The Thing a :class:`Recipe` describes; None for anything else."""
        if isinstance(value, Recipe):
            return value.thing(**value.params)
        return None

    def task_from_command_line(self, module: str, family: str, args: list[str]) -> Thing | None:
        """A Thing from ``--key value`` pairs; None when ``module.family`` is not a Thing."""
        cls = getattr(importlib.import_module(module), family, None)
        if not (isinstance(cls, type) and issubclass(cls, Thing)):
            return None
        if "--explode" in args:  # (a loader with a bug of its own, for conveyor's tests)
            raise KeyError("the foreign loader broke")
        if len(args) % 2 or not all(word.startswith("--") for word in args[::2]):
            raise ParameterError(
                f"foreign loader: expected --key value pairs for {family}, got {args!r}"
            )
        return cls(**{key[2:]: value for key, value in zip(args[::2], args[1::2], strict=True)})
