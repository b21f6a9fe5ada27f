"""Helpers for task authors, after ``luigi.util``: inherits, requires and clone.

A chain of tasks often repeats the same parameters at every step: ``Report(day, region)``
needs ``Aggregate(day, region)``, which needs ``Extract(day, region)``. Instead of declaring
them again and passing them on by hand:

* ``@inherits(Aggregate)`` copies ``Aggregate``'s parameters onto the decorated class (the same
  :class:`~conveyor.parameters.Parameter` objects, so defaults and significance are kept) --
  parameters only, no methods: the decorated class does not become a subclass;
* ``@requires(Aggregate)`` does the same and also defines ``requires()`` to return
  ``Aggregate`` built from ``self``'s parameters;
* ``clone(task, cls, **overrides)`` (also ``task.clone(cls, **overrides)``) builds a task of
  ``cls`` from the parameters of ``task`` that ``cls`` has, plus ``overrides``.

A parameter the decorated class already has -- declared in its body or inherited from a base
class, or any other attribute of that name -- is never replaced. Copied parameters come first
in the constructor's positional order (like inherited parameters), then the class's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .errors import ParameterError
from .parameters import Parameter
from .task import Task, clone, common_params

__all__ = ["clone", "common_params", "inherits", "requires"]

T = TypeVar("T", bound=Task)


def inherits(*task_classes: type[Task], **named: type[Task]) -> Callable[[type[T]], type[T]]:
    """Class decorator: copy the parameters of ``task_classes`` onto the decorated class.

    The parameters the class already has are kept. The class also gains, as in Luigi,
    ``clone_parent(**overrides)`` (the first class, built by :func:`clone`) and
    ``clone_parents(**overrides)`` (a list of them all; a dict when the classes are given by
    keyword, ``@inherits(left=A, right=B)``).
    """
    parents = _parents("inherits", task_classes, named)

    def decorate(cls: type[T]) -> type[T]:
        _check_task_class(cls, "@inherits")
        _copy_parameters(cls, parents.values())
        _add_clone_methods(cls, parents, bool(named))
        return cls

    return decorate


def requires(*task_classes: type[Task], **named: type[Task]) -> Callable[[type[T]], type[T]]:
    """Class decorator: :func:`inherits`, and ``requires()`` returns those classes built from
    ``self`` by :func:`clone`: the task itself for one class, a list for several, a dict when
    the classes are given by keyword (``@requires(left=A, right=B)``).
    """
    parents = _parents("requires", task_classes, named)
    make_parents = inherits(*task_classes, **named)

    def decorate(cls: type[T]) -> type[T]:
        cls = make_parents(cls)
        if named:

            def required(self: Task) -> Any:
                return {key: clone(self, parent) for key, parent in parents.items()}

        elif len(task_classes) == 1:

            def required(self: Task) -> Any:
                return clone(self, task_classes[0])

        else:

            def required(self: Task) -> Any:
                return [clone(self, parent) for parent in task_classes]

        required.__doc__ = "The required tasks, built from this task's parameters (@requires)."
        required.__qualname__ = f"{cls.__qualname__}.requires"
        cls.requires = required  # type: ignore[method-assign]
        return cls

    return decorate


# --- helpers ------------------------------------------------------------------------------------


def _parents(
    decorator: str, positional: tuple[type[Task], ...], named: Mapping[str, type[Task]]
) -> dict[str, type[Task]]:
    """The classes given to a decorator, keyed by position (``"0"``, ...) or by name."""
    if not positional and not named:
        raise TypeError(f"@{decorator}() needs at least one task class")
    if positional and named:
        raise TypeError(f"@{decorator}() takes task classes by position or by keyword, not both")
    parents = dict(named) if named else {str(i): cls for i, cls in enumerate(positional)}
    for parent in parents.values():
        _check_task_class(parent, f"@{decorator}()")
    return parents


def _check_task_class(cls: object, where: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"{where} needs a Task class, got {cls!r}")


def _copy_parameters(cls: type[Task], parents: Any) -> None:
    """Set the parents' parameters that ``cls`` lacks on it, first in declaration order, and
    collect its parameters again."""
    copied: dict[str, Parameter[Any]] = {}
    for parent in parents:
        for name, param in parent.parameters():
            if name not in copied and not hasattr(cls, name):
                copied[name] = param
    if not copied:
        return
    # the class's own parameters move behind the copied ones (a class's dict keeps insertion
    # order, and Task collects parameters in it), so that subclasses see the same order
    own = {name: value for name, value in vars(cls).items() if isinstance(value, Parameter)}
    for name in own:
        delattr(cls, name)
    for name, param in {**copied, **own}.items():
        setattr(cls, name, param)
    # Task collects a class's parameters (and registers it) when the class is created: do it
    # again, with Task's own hook only (a user override of __init_subclass__ ran already)
    vars(Task)["__init_subclass__"].__func__(cls)


def _add_clone_methods(cls: type[Task], parents: dict[str, type[Task]], by_name: bool) -> None:
    first = next(iter(parents.values()))

    def clone_parent(self: Task, **overrides: Any) -> Task:
        """The first inherited class, built from this task's parameters (@inherits)."""
        return clone(self, first, **overrides)

    def clone_parents(self: Task, **overrides: Any) -> Any:
        """Every inherited class, built from this task's parameters (@inherits); each gets
        the overrides that are parameters of its own."""
        _check_used(parents.values(), overrides)
        built = {
            key: clone(self, parent, **_for(parent, overrides)) for key, parent in parents.items()
        }
        return built if by_name else list(built.values())

    if not by_name:
        cls.clone_parent = clone_parent  # type: ignore[attr-defined]
    cls.clone_parents = clone_parents  # type: ignore[attr-defined]


def _check_used(classes: Any, overrides: Mapping[str, Any]) -> None:
    """ParameterError for an override that is a parameter of none of ``classes``."""
    known = set().union(*(cls._param_names for cls in classes))
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ParameterError(
            f"clone_parents(): no inherited class has a parameter {unknown[0]!r}; "
            f"expected one of: {', '.join(sorted(known)) or 'none'}",
            parameter=unknown[0],
        )


def _for(cls: type[Task], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides that apply to ``cls`` (clone_parents passes each class only its own)."""
    return {name: value for name, value in overrides.items() if name in cls._param_names}
