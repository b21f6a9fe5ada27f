"""The task API: :class:`Task`, :class:`ExternalTask`, :class:`WrapperTask` and helpers.

A task is identified by its family (class name, with ``task_namespace``) and the string form of
its significant parameters. That string form is how a task crosses processes and the network:
``to_str_params()`` / ``from_str_params()``; conveyor never pickles a task.

Every concrete task class is recorded in a registry keyed by ``(module, family)`` so that a
worker can find the class again from those strings (``load_task_class``).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import importlib
import json
import re
import sys
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, ClassVar, TypeVar, cast, overload

import structlog

from .errors import ConfigError, ParameterError, TaskDefinitionError, TaskLoadError
from .events import Params
from .parameters import (
    BoolParameter,
    DictParameter,
    IntParameter,
    ListParameter,
    OptionalKind,
    Parameter,
    allow_task_modules,
    task_modules_named,
)
from .retry import RetryPolicy
from .secrets import REDACTED, is_secret_name, redact_text
from .sizes import parse_size
from .targets import Target
from .task_registry import register_task_class, registered_task_classes
from .tasklike import (
    DEFAULT_LOADER,
    AdaptsTasks,
    ReportsNotes,
    RunsInBatches,
    TaskLike,
    TaskPolicy,
)

__all__ = [
    "ConveyorLoader",
    "DynamicRequirements",
    "ExternalTask",
    "Settings",
    "Task",
    "TaskDefaults",
    "WrapperTask",
    "batch_digest",
    "checked_tasks",
    "clone",
    "common_params",
    "flatten",
    "found_complete",
    "is_external",
    "is_secret_name",
    "is_task_like",
    "load_task_class",
    "on_failure",
    "on_success",
    "outputs_of",
    "rebuild_task",
    "reporting",
    "requirements",
    "task_defaults_in_use",
    "task_loader_of",
    "use_task_defaults",
]

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_ID_MAX = 128
_HASH_LEN = 10
_ID_STYLES = (None, "conveyor", "luigi")  # Task.task_id_style


# Bindings remembered per (class, keyword arguments), so that the many equal tasks a graph's
# requires() methods build (Luigi's style: each dependent makes its own instance) are bound and
# hashed into a task id once. An entry is a snapshot taken at construction (values, read-only
# string form, id), so nothing done to a task later reaches the next one. Only for values of
# these exact types, whose equality implies an equal string form (True == 1, and aware
# datetimes in different zones are equal, but their string forms differ), and only for classes
# whose parameters are conveyor's own (a custom parse() may depend on more than its text) and
# that keep Task.__init__ (an overriding __init__ may change what was bound).
def _id_safe(text: str) -> str:
    """``text`` with every run of characters unsafe in a task id replaced by ``_``."""
    if text.isascii() and text.isalnum():  # the common case, without the regex
        return text
    return _ID_UNSAFE.sub("_", text)


_BINDABLE = frozenset({str, int, datetime.date})
_BOUND_MAX = 1 << 16  # entries; the whole memo is dropped when full


class _Binding(Params):
    """A task's read-only string parameters, carrying the rest of its binding: the class, the
    values (in the class's parameter order) and the id (one object per task, shared with the
    task itself)."""

    __slots__ = ("cls", "param_values", "task_id")

    cls: type[Task]
    task_id: str
    param_values: tuple[Any, ...]

    def __setattr__(self, name: str, value: object) -> None:
        raise TypeError("event params are read-only")  # (plugins see this object)

    def seal(self, cls: type[Task], values: tuple[Any, ...], task_id: str) -> None:
        """Record the rest of the binding, once, when the task is built."""
        object.__setattr__(self, "cls", cls)
        object.__setattr__(self, "param_values", values)
        object.__setattr__(self, "task_id", task_id)


#: Called with (kind, value) by ``set_status_message`` and friends while an attempt runs.
Reporter = Callable[[str, object], None]


def flatten(struct: object) -> list[Any]:
    """Flatten any nesting of iterables (lists, tuples, sets, generators, ...) and dict values
    into a flat list, as Luigi's ``flatten`` does.

    ``None`` is dropped; a task, a target, a string or any other non-iterable object is a leaf.
    A generator is consumed.
    """
    out: list[Any] = []
    _flatten_into(struct, out)
    return out


def _flatten_into(struct: object, out: list[Any], keep_none: bool = False) -> None:
    if struct is None:
        if keep_none:
            out.append(None)
        return
    if isinstance(struct, Task):  # the common leaf, checked before the ABCs below
        out.append(struct)
    elif isinstance(struct, Mapping):
        for value in struct.values():
            _flatten_into(value, out, keep_none)
    elif _is_nesting(struct):
        for item in struct:  # type: ignore[attr-defined]
            _flatten_into(item, out, keep_none)
    else:
        out.append(struct)


def _is_nesting(struct: object) -> bool:
    """True for the iterables whose items ``flatten`` descends into: any iterable but a
    string, bytes, a target or a mapping (whose values are taken instead)."""
    if isinstance(struct, list | tuple | set | frozenset):
        return True
    return isinstance(struct, Iterable) and not isinstance(
        struct, str | bytes | bytearray | Target | Mapping
    )


class DynamicRequirements:
    """What a generator ``run()`` may yield instead of tasks: the ``requirements`` (a task or
    any nesting of them) plus, optionally, a cheaper completeness check (Luigi 3's form).

    ``custom_complete(complete_fn)`` is called with a function that tells whether one task is
    complete, and returns whether all the requirements are (for instance by looking at one
    directory instead of asking every task). When it returns ``True`` the ``yield`` evaluates
    to the outputs of the requirements (``paths``) without asking each task; when it returns
    ``False`` each requirement is asked and the incomplete ones are scheduled, as for a plain
    ``yield``.
    """

    def __init__(
        self,
        requirements: Any,
        custom_complete: Callable[[Callable[[Task], bool]], bool] | None = None,
    ) -> None:
        """Wrap ``requirements`` (a generator, at any depth, is read once, here)."""
        self.requirements = settled(requirements)
        self.custom_complete = custom_complete

    @property
    def flat_requirements(self) -> list[Task]:
        """The requirements, flattened."""
        return flatten(self.requirements)

    @property
    def paths(self) -> Any:
        """The outputs of the requirements, in the same nesting."""
        return outputs_of(self.requirements)

    def complete(self, complete_fn: Callable[[Task], bool] | None = None) -> bool:
        """Whether every requirement is complete: ``custom_complete(complete_fn)`` when given,
        else ``complete_fn`` (default: each task's ``complete()``) on every requirement."""
        check = complete_fn if complete_fn is not None else _task_complete
        if self.custom_complete is not None:
            return self.custom_complete(check)
        return all(check(task) for task in self.flat_requirements)

    def __repr__(self) -> str:
        """``DynamicRequirements(<requirements>)``."""
        return f"DynamicRequirements({self.requirements!r})"


def _task_complete(task: Task) -> bool:
    return task.complete()


def settled(struct: Any) -> Any:
    """``struct`` with every iterator in it (a generator, at any depth) read into a list, so
    that it can be looked at more than once: for its tasks, then for their outputs. Lists,
    tuples and dicts that hold none are returned as they are."""
    if isinstance(struct, Task) or struct is None:
        return struct
    if isinstance(struct, Iterator):
        return [settled(item) for item in struct]
    if isinstance(struct, list | tuple):
        items = [settled(item) for item in struct]
        if all(new is old for new, old in zip(items, struct, strict=True)):
            return struct
        return items if isinstance(struct, list) else tuple(items)
    if isinstance(struct, dict):
        values = {key: settled(value) for key, value in struct.items()}
        if all(values[key] is value for key, value in struct.items()):
            return struct
        return values
    return struct


@functools.lru_cache(maxsize=256)
def _split_owners(owners: str) -> tuple[str, ...]:
    """``owner_email`` given as one string: comma-separated addresses."""
    return tuple(a.strip() for a in owners.split(",") if a.strip())


_POLICIES: dict[tuple[Any, ...], TaskPolicy] = {}
"""The policies made so far, by their inputs (see :meth:`Task.task_policy`)."""
_POLICIES_KEPT = 1024


class Task:
    """Base class of every task: declare parameters as class attributes, override the methods.

    Override ``requires()`` (what it needs), ``output()`` (what it makes), ``run()`` (how to
    make it) and, rarely, ``complete()``. A generator ``run()`` may ``yield`` tasks: dynamic
    dependencies, scheduled by the worker, after which ``run()`` starts again from the top.
    """

    task_namespace: ClassVar[str | None] = None
    priority: ClassVar[int] = 0
    resources: ClassVar[Mapping[str, int]] = {}
    worker_timeout: ClassVar[float | None] = None
    retry_count: ClassVar[int | None] = None
    disabled: ClassVar[bool] = False
    owner_email: ClassVar[str | list[str] | None] = None
    task_loader: ClassVar[str] = DEFAULT_LOADER
    """The :class:`~conveyor.TaskLoader` (entry point of ``conveyor.task_loaders``) that
    rebuilds the task in an attempt's process: conveyor's own, ``"conveyor"``."""
    labels: ClassVar[Iterable[str]] = ()
    """What a worker must offer (``[worker] labels``) to be handed the task: a class
    attribute, or a property that does not depend on parameter values."""
    memory_limit: ClassVar[int | str | None] = None
    """The most memory an attempt's process tree may hold under a process executor
    (``"2GiB"``, or bytes; 0: no limit); None: the worker's ``[worker] memory_limit``."""
    retry_policy: ClassVar[RetryPolicy | None] = None
    """The task's own retry schedule and the failures worth a retry
    (:class:`conveyor.RetryPolicy`); None: the scheduler's settings. Its ``count``, when set,
    wins over ``retry_count``."""
    task_id_style: ClassVar[str | None] = None
    """How task ids are made: ``"conveyor"`` (the default), ``"luigi"`` (as Luigi 3 makes
    them, so outputs named after task ids keep their names across a port; the exceptions are
    in docs/tasks.md), or ``None``: whatever ``[worker] task_id_style`` says."""

    max_batch_size: ClassVar[int | None] = None
    """The most pending tasks one batch attempt covers, for a class with a batched parameter
    (a ``batch_method``): None for no limit (Luigi's ``float("inf")``)."""

    _params: ClassVar[tuple[tuple[str, Parameter[Any]], ...]] = ()
    # each parameter with the one type of value its normalize() returns as is (None: any
    # value goes through normalize()), and its serializer (str, for the same parameters)
    _bind_plan: ClassVar[tuple[tuple[str, Parameter[Any], type | None], ...]] = ()
    _serializers: ClassVar[tuple[tuple[str, Callable[[Any], str]], ...]] = ()
    _batched: ClassVar[tuple[str, ...]] = ()  # names of the batched (significant) parameters
    _param_names: ClassVar[frozenset[str]] = frozenset()
    _param_order: ClassVar[tuple[str, ...]] = ()
    _id_params: ClassVar[tuple[tuple[str, bool], ...]] = ()
    _id_sorted: ClassVar[tuple[tuple[str, bool, str], ...]] = ()
    _id_family: ClassVar[tuple[str, str]] = ("", "")
    _family: ClassVar[str] = "Task"
    _memoizable: ClassVar[bool] = False
    _missing_hint: ClassVar[str] = ""  # added to a "missing required parameter" error
    _reporter: Reporter | None
    _hash: int | None
    _str_params: _Binding | None
    _task_id: str | None
    param_kwargs: dict[str, Any]
    """The parameter values by name, in declaration order."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Collect the class's parameters (in declaration order) and register the class."""
        super().__init_subclass__(**kwargs)
        if cls.task_id_style not in _ID_STYLES:
            raise TaskDefinitionError(
                f"{cls.__qualname__}.task_id_style = {cls.task_id_style!r}; expected one of "
                '"conveyor", "luigi" or None'
            )
        params: dict[str, Parameter[Any]] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, Parameter):
                    params[name] = value
        cls._params = tuple(params.items())
        cls._bind_plan = tuple((name, param, _passed_as_is(param)) for name, param in cls._params)
        cls._serializers = tuple(
            (name, str if _passed_as_is(param) is not None else param.serialize)
            for name, param in cls._params
        )
        cls._param_names = frozenset(params)
        cls._param_order = tuple(params)
        cls._id_params = tuple(
            (name, is_secret_name(name)) for name, param in cls._params if param.significant
        )
        # the order the task id hashes them in, with each name's part of the hash input
        cls._id_sorted = tuple(
            (name, secret, f"{len(name)}:{name}") for name, secret in sorted(cls._id_params)
        )
        _check_scheduling_attributes(cls)
        cls._batched = _batched_params(cls)
        cls._family = cls.get_task_family()
        cls._id_family = (f"{len(cls._family)}:{cls._family}", _id_safe(cls._family))
        cls._memoizable = cls.__init__ is Task.__init__ and all(
            type(param).__module__ == Parameter.__module__ for _, param in cls._params
        )
        register_task_class(cls, cls._family)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Bind parameters from positional (declaration order) and keyword arguments."""
        self._hash = None
        self._reporter = None
        cls = type(self)
        key = _bound_key(cls, kwargs) if self._memoizable and not args else None
        defaults = _in_force() if key is not None else None
        memo = None if defaults is None else defaults.bound
        bound = memo.get(key) if memo is not None and key is not None else None
        if bound is not None and bound.cls is cls:  # an equal task was made before
            self._str_params, self._task_id = bound, bound.task_id
            self._set_values(dict(zip(self._param_order, bound.param_values, strict=True)))
            return
        given = self._merge_args(args, kwargs) if args else kwargs
        names = self._param_names
        for name in given:
            if name not in names:
                self._unknown(name, given[name])
        family = self._family
        params = self._params
        if len(given) < len(params):  # some come from a default: maybe configured
            configured = configured_defaults(cls)
            if configured:
                given = {**configured, **given}
        values: dict[str, Any] = {}
        for name, param, as_is in self._bind_plan:  # (_bind, without the call when given)
            if name in given:
                value = given[name]
                if type(value) is as_is:  # (what normalize() would return: the value itself)
                    values[name] = value
                    continue
                try:
                    values[name] = param.normalize(value)
                    continue
                except ValueError:
                    pass  # (_bind says what is wrong)
            values[name] = _bind(family, name, param, given, self._missing_hint)
        self.param_kwargs = values  # (_set_values, inlined)
        for name in values:  # (by name: no __dict__ is made, the values stay inline)
            object.__setattr__(self, name, values[name])
        self._str_params = None
        self._task_id = None
        if key is not None:
            # (_string_params, inlined: a fresh binding, filled without Params.__init__'s check)
            binding = self._str_params = dict.__new__(_Binding)
            dict.update(
                binding, [(name, serialize(values[name])) for name, serialize in self._serializers]
            )
            if cls.task_id is _TASK_ID:  # (the property, without its call: task_id_afresh)
                style = self.task_id_style or (
                    defaults.id_style if defaults is not None else _default_id_style()
                )
                if style == "luigi":
                    task_id = self._task_id = _luigi_task_id(self)
                else:
                    task_id = _make_task_id(self._id_family, self._id_sorted, binding)
                    self._task_id = task_id
            else:
                task_id = self.task_id
            binding.seal(cls, tuple(values.values()), task_id)
            if memo is None:
                memo = _bound_memo()  # (making the id may have read the configuration)
            if memo is not None:
                if len(memo) >= _BOUND_MAX:
                    memo.clear()
                memo[key] = binding

    def _set_values(self, values: dict[str, Any]) -> None:
        self.param_kwargs = values
        for name in values:  # attribute by attribute: the instance keeps no separate dict
            object.__setattr__(self, name, values[name])

    def _merge_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        family = self._family
        if len(args) > len(self._params):
            raise ParameterError(
                f"{family} takes {len(self._params)} positional parameter(s), got {len(args)}",
                task=family,
            )
        given = dict(zip((name for name, _ in self._params), args, strict=False))
        for name, value in kwargs.items():
            if name in given:
                raise ParameterError(
                    f"{family}: parameter {name!r} given twice", task=family, parameter=name
                )
            given[name] = value
        return given

    def _unknown(self, name: str, value: object) -> None:
        family = self._family
        expected = ", ".join(sorted(self._param_names)) or "none"
        shown = REDACTED if is_secret_name(name) else repr(value)
        raise ParameterError(
            f"{family}: unknown parameter {name!r} (= {shown}); expected one of: {expected}",
            task=family,
            parameter=name,
            value=value,
        )

    # --- identity -------------------------------------------------------------------------

    @classmethod
    def get_task_family(cls) -> str:
        """The class name, prefixed by ``task_namespace`` and a dot when the class sets one."""
        namespace = cls.__dict__.get("task_namespace") or cls.task_namespace
        return f"{namespace}.{cls.__name__}" if namespace else cls.__name__

    @property
    def task_family(self) -> str:
        """The task's family: its class name, with the namespace prefix."""
        return self._family

    @property
    def task_module(self) -> str:
        """The module the task's class is defined in."""
        return type(self).__module__

    @property
    def task_id(self) -> str:
        """A deterministic id from the family and the significant parameters."""
        if self._task_id is None:
            self._task_id = task_id_afresh(self)
        return self._task_id

    def to_str_params(self) -> dict[str, str]:
        """Every parameter in its string form (the wire and CLI representation)."""
        return dict(self._string_params())

    @property
    def task_params(self) -> Mapping[str, str]:
        """Every parameter in its string form, read-only (:class:`~conveyor.TaskLike`'s
        ``task_params``; one object per task, handed to every event as is)."""
        return self._string_params()

    def task_policy(self) -> TaskPolicy:
        """How the task is scheduled (:class:`~conveyor.TaskPolicy`), from its attributes:
        ``worker_timeout``, ``priority``, ``resources``, ``retry_count``, ``owner_email``,
        ``disabled``, whether it is external, ``task_loader``, ``labels``, ``memory_limit``
        and ``retry_policy``."""
        owners = self.owner_email
        if not owners:
            owned: tuple[str, ...] = ()
        elif isinstance(owners, str):
            owned = _split_owners(owners)
        else:
            owned = tuple(str(a) for a in owners if a)
        resources = self.resources
        # Tasks of a class nearly always share one policy, and a frozen value costs more to
        # build than to look up (the walk asks once per task): equal inputs share one value.
        # The resources mapping is keyed by identity and kept alive by the value it is in.
        key = (
            self.worker_timeout,
            self.priority,
            id(resources),
            self.retry_count,
            owned,
            self.disabled,
            self.is_external(),
            self.task_loader,
            () if (labels := self.labels) == () else _labels_of(labels, self),
            None if (limit := self.memory_limit) is None else _memory_limit_of(limit, self),
            None if (retry := self.retry_policy) is None else _retry_policy_of(retry, self),
        )
        policy = _POLICIES.get(key)
        if policy is None or policy.resources is not resources:
            if len(_POLICIES) >= _POLICIES_KEPT:
                _POLICIES.clear()
            policy = _POLICIES[key] = TaskPolicy(
                timeout=key[0],
                priority=key[1],
                resources=resources,
                retry_count=key[3],
                owners=owned,
                disabled=key[5],
                external=key[6],
                loader=key[7],
                labels=key[8],
                memory_limit=key[9],
                retry_policy=key[10],
            )
        return policy

    def _string_params(self) -> _Binding:
        """The cached string form, read-only (the worker hands it to every event as is)."""
        if self._str_params is None:
            values = self.param_kwargs
            # (a fresh binding, filled without Params.__init__'s check that it is empty)
            binding = self._str_params = dict.__new__(_Binding)
            dict.update(
                binding, [(name, serialize(values[name])) for name, serialize in self._serializers]
            )
        return self._str_params

    def clone(self, cls: type[Task] | None = None, **overrides: Any) -> Task:
        """A task of ``cls`` (default: this task's class) made from this task's parameters that
        ``cls`` also has, plus ``overrides`` (see docs/tasks.md and :func:`conveyor.util.clone`)."""
        return clone(self, cls, **overrides)

    @classmethod
    def from_str_params(cls, params: Mapping[str, str]) -> Task:
        """Build the task from the string form made by :meth:`to_str_params`."""
        return cls(**{name: str(value) for name, value in params.items()})

    def _significant_str_params(self) -> dict[str, str]:
        strings = self._string_params()
        return {name: strings[name] for name, _ in self._id_params}

    def __eq__(self, other: object) -> bool:
        """Two tasks are equal when their task ids are."""
        return isinstance(other, Task) and other.task_id == self.task_id

    def __hash__(self) -> int:
        """Hash of the task id."""
        if self._hash is None:
            self._hash = hash(self.task_id)
        return self._hash

    def __repr__(self) -> str:
        """``Family(param=value, ...)`` with secret-named values hidden."""
        shown = ", ".join(
            f"{name}={REDACTED if is_secret_name(name) else value}"
            for name, value in self._significant_str_params().items()
        )
        return f"{self.task_family}({shown})"

    # --- the graph ------------------------------------------------------------------------

    def requires(self) -> Any:
        """The tasks this one needs: a task or any nesting of lists/tuples/dicts (default none)."""
        return []

    def deps(self) -> list[TaskLike]:
        """The flattened requirements; raises TaskDefinitionError for anything not a Task."""
        return checked_tasks(self, self.requires(), "requires()")

    def input(self) -> Any:
        """The outputs of the requirements, in the same nesting as ``requires()``."""
        return outputs_of(self.requires())

    def output(self) -> Any:
        """The targets this task makes: a Target or any nesting of them (default none)."""
        return []

    def complete(self) -> bool:
        """True iff the task has at least one output and every output exists."""
        outputs = flatten(self.output())
        return bool(outputs) and all(target.exists() for target in outputs)

    def run(self) -> Any:
        """Do the work. A generator may yield tasks: dynamic dependencies."""

    def on_success(self) -> str | None:
        """Called after a successful run(); the returned text, if any, is kept as the task's
        explanation by the scheduler (shown in the UI and ``conveyor tasks``), as in Luigi."""
        return None

    def on_failure(self, exception: BaseException) -> str | None:
        """Called when run() raised; the returned text, if any, is the failure explanation."""
        return None

    # --- reporting from inside run() ------------------------------------------------------

    def set_status_message(self, message: str) -> None:
        """Publish a status message for this task to the scheduler and the hooks."""
        self._report("status_message", str(message))

    def set_progress_percentage(self, percentage: float) -> None:
        """Publish progress (0..100) for this task to the scheduler and the hooks."""
        value = float(percentage)
        if not 0.0 <= value <= 100.0:
            raise ValueError(f"progress percentage must be within 0..100, got {percentage!r}")
        self._report("progress", value)

    def set_tracking_url(self, url: str) -> None:
        """Publish a tracking URL for this task to the scheduler and the hooks."""
        self._report("tracking_url", str(url))

    def _report(self, kind: str, value: object) -> None:
        if self._reporter is not None:
            self._reporter(kind, value)

    # --- class-level helpers the worker uses ----------------------------------------------

    @classmethod
    def parameters(cls) -> tuple[tuple[str, Parameter[Any]], ...]:
        """The class's parameters as ``(name, Parameter)`` pairs, in declaration order."""
        return cls._params

    @classmethod
    def is_external(cls) -> bool:
        """True for tasks whose data is made elsewhere: those with no ``run()`` (``run = None``,
        as :class:`ExternalTask` has), as in Luigi. A subclass of ``ExternalTask`` that defines
        ``run()`` is an ordinary task."""
        return cls.run is None

    def has_own_completion(self) -> bool:
        """True if the task has outputs or overrides complete() (check_complete_on_run)."""
        return type(self).complete is not Task.complete or bool(flatten(self.output()))


def _check_scheduling_attributes(cls: type[Task]) -> None:
    """TaskDefinitionError for a ``labels``, ``memory_limit`` or ``retry_policy`` class
    attribute of the wrong shape (a property is checked when the task's policy is first
    asked)."""
    labels, limit = vars(cls).get("labels"), vars(cls).get("memory_limit")
    if labels is not None and not isinstance(labels, property):
        _labels_of(labels, cls)
    if limit is not None and not isinstance(limit, property):
        _memory_limit_of(limit, cls)
    retry = vars(cls).get("retry_policy")
    if retry is not None and not isinstance(retry, property):
        _retry_policy_of(retry, cls)


def _batched_params(cls: type[Task]) -> tuple[str, ...]:
    """The names of ``cls``'s batched parameters (those with a ``batch_method``), after
    checking ``max_batch_size`` and that each batched parameter is significant
    (TaskDefinitionError otherwise)."""
    size = cls.max_batch_size
    if size is not None and (type(size) is not int or size < 1):
        raise TaskDefinitionError(
            f"{cls.__qualname__}.max_batch_size = {size!r}; expected a whole number of 1 or "
            "more, or None (no limit)"
        )
    batched = tuple(name for name, param in cls._params if param.batch_method is not None)
    for name in batched:
        if not dict(cls._params)[name].significant:
            raise TaskDefinitionError(
                f"{cls.__qualname__}.{name} has a batch_method but is not significant: the "
                "tasks of a batch differ in their batched parameters, which must be in the "
                "task id"
            )
    return batched


def batch_key(task: object) -> tuple[str, int] | None:
    """``(key, max_size)`` of a task with batched parameters (None for any other task): tasks
    of one class whose parameters other than the batched ones are equal share ``key`` (a
    hash), and may run as one batch of at most ``max_size`` of them (0: no limit). Another
    framework's task answers through its ``task_batch_key()``
    (:class:`~conveyor.tasklike.RunsInBatches`)."""
    if not isinstance(task, Task):
        return _foreign_batch_key(task) if _has(task, RunsInBatches) else None
    cls = type(task)
    batched = cls._batched
    if not batched:
        return None
    digest = batch_digest(cls.__module__, cls._family, task._string_params(), batched)
    return digest, cls.max_batch_size or 0


def batch_digest(
    module: str, family: str, params: Mapping[str, str], batched: Collection[str], *more: str
) -> str:
    """The batch key of a task of ``module``/``family``: a hash of those two, of every string
    parameter in ``params`` whose name is not in ``batched``, and of ``more`` (what else
    tasks of one batch must share), each part length-prefixed, so that two different tasks
    never write the same text. A :class:`~conveyor.tasklike.RunsInBatches` of another
    framework may use it for its ``task_batch_key()``."""
    digest = hashlib.sha256()
    parts = [module, family]
    for name in sorted(params):
        if name not in batched:
            parts += (name, params[name])
    for part in (*parts, *more):
        digest.update(f"{len(part)}:{part}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def _foreign_batch_key(task: Any) -> tuple[str, int] | None:
    """``task.task_batch_key()`` (a :class:`~conveyor.tasklike.RunsInBatches`) if it is None
    or a ``(key, max_size)`` pair the protocol carries (a key of 1 to 1,000 characters
    without control characters, a whole number ``max_size`` >= 0); one that raises or
    answers anything else is logged, and the task runs alone (None)."""
    try:
        found = task.task_batch_key()
    except Exception as exc:
        problem = f"raised {type(exc).__name__}: {exc}"
    else:
        if found is None:
            return None
        problem = _batch_key_problem(found)
        if not problem:
            return str(found[0]), found[1]
    structlog.get_logger("conveyor.task").warning(
        "task_batch_key() failed; the task runs alone",
        task_id=getattr(task, "task_id", ""),
        problem=problem,
    )
    return None


def _batch_key_problem(found: object) -> str:
    """What is wrong with a ``task_batch_key()`` answer that is not None ("" if nothing)."""
    from .protocol import IDENTIFIER  # (only for a key to check: not at every registration)

    if not isinstance(found, tuple) or len(found) != 2:
        return f"answered {found!r}, not None or (key, max_size)"
    key, size = found
    if not isinstance(key, str):
        return f"answered a key {key!r}, not a str"
    if type(size) is not int or size < 0:
        return f"answered a max_size {size!r}, not a whole number >= 0"
    problem = IDENTIFIER.problem(key)
    return f"answered a key that the protocol cannot carry: {problem}" if problem else ""


def batch_of(tasks: Sequence[TaskLike]) -> TaskLike:
    """The one task that runs for the batch of ``tasks``: :func:`batch_task` of conveyor
    tasks, the first one's ``task_batch(tasks)`` for tasks of another framework's one class
    (:class:`~conveyor.tasklike.RunsInBatches`); TaskLoadError for any other mix."""
    if all(isinstance(task, Task) for task in tasks):
        return batch_task(cast("Sequence[Task]", tasks))
    first = tasks[0]
    if _has(first, RunsInBatches) and all(type(task) is type(first) for task in tasks):
        return cast("RunsInBatches", first).task_batch(tasks)
    raise TaskLoadError("only tasks of one class that runs in batches make a batch")


def batch_task(tasks: Sequence[Task]) -> Task:
    """The one task that runs for the batch of ``tasks`` (of one class, equal but for their
    batched parameters): their class made with each batched parameter set to its
    ``batch_method`` of the members' values (``max``: the largest; ``",".join``: them all
    joined) and every other parameter as the first member has it."""
    if not tasks:
        raise ValueError("a batch needs at least one task")
    first = tasks[0]
    cls = type(first)
    values = dict(first.param_kwargs)
    params = dict(cls._params)
    for name in cls._batched:
        method = params[name].batch_method
        assert method is not None  # (a batched parameter has one)
        values[name] = method([task.param_kwargs[name] for task in tasks])
    return cls(**values)


def _retry_policy_of(retry: Any, owner: object) -> RetryPolicy:
    """``retry`` itself if it is a :class:`~conveyor.RetryPolicy`; TaskDefinitionError
    otherwise."""
    if type(retry) is RetryPolicy or isinstance(retry, RetryPolicy):
        return retry
    raise TaskDefinitionError(
        f"{_owner_name(owner)}.retry_policy = {retry!r}; expected conveyor.RetryPolicy(...) or None"
    )


def _labels_of(labels: Any, owner: object) -> tuple[str, ...]:
    """``labels`` as a sorted tuple of distinct strings; TaskDefinitionError otherwise."""
    if isinstance(labels, str) or not isinstance(labels, Iterable):
        raise TaskDefinitionError(
            f"{_owner_name(owner)}.labels = {labels!r}; expected a list of strings"
        )
    items = tuple(labels)
    if not all(isinstance(item, str) and item for item in items):
        raise TaskDefinitionError(
            f"{_owner_name(owner)}.labels = {labels!r}; expected a list of non-empty strings"
        )
    return tuple(sorted(set(items)))


def _memory_limit_of(limit: Any, owner: object) -> int | None:
    """``memory_limit`` in bytes (None: the worker's); TaskDefinitionError if unreadable."""
    if limit is None:
        return None
    try:
        return parse_size(limit)
    except ValueError as exc:
        raise TaskDefinitionError(f"{_owner_name(owner)}.memory_limit = {exc}") from None


def _owner_name(owner: object) -> str:
    return owner.__qualname__ if isinstance(owner, type) else type(owner).__qualname__


class ExternalTask(Task):
    """A task with no run(): its output is made elsewhere; incomplete means missing data.

    As in Luigi, what makes a task external is that it has no ``run()``: a subclass that
    defines one is an ordinary task.
    """

    run = None  # type: ignore[assignment]


class WrapperTask(Task):
    """A task that only groups others: complete when all its requirements are complete."""

    def complete(self) -> bool:
        """True when every requirement is complete."""
        return all(task.complete() for task in self.deps())


class Settings(Task):
    """Settings read by tasks, with values from the configuration: conveyor's ``luigi.Config``.

    Declare parameters as on a task; their values come from the parameter's default, then
    ``[tasks."<Family>"]`` or ``[tasks."<module>.<Family>"]`` in ``worker.toml``, then the
    environment (``CONVEYOR_TASKS__<Family>__<parameter>``), then keyword arguments. Tasks read
    them where they need them, so a port from Luigi does not thread a setting through every
    ``requires()``::

        class paths(conveyor.Settings):
            data_dir = conveyor.PathParameter(default="data")

        class Report(conveyor.Task):
            def output(self):
                return conveyor.LocalTarget(paths().data_dir / "report.txt")

    A settings class is never scheduled: required or yielded as a dependency, or given to a
    worker, it is a :class:`~conveyor.TaskDefinitionError`.
    """

    _missing_hint = (
        '; set it in worker.toml under [tasks."{family}"] ({{name}} = ...) or in the '
        "environment as CONVEYOR_TASKS__{family}__{{name}}"
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register the class like a task, with a hint saying where its values come from."""
        super().__init_subclass__(**kwargs)
        cls._missing_hint = Settings._missing_hint.format(family=cls.get_task_family())

    def complete(self) -> bool:
        """Never asked of settings: a worker given one refuses it (TaskDefinitionError)."""
        raise TaskDefinitionError(_not_a_task(self), task_id=self.task_id)


def _not_a_task(settings: Settings) -> str:
    return (
        f"{settings!r} is a settings class (conveyor.Settings), not a task: it is never "
        f"scheduled; read its values where they are needed, e.g. "
        f"{settings.task_family}().<parameter>"
    )


# --- parameter defaults from the configuration ([tasks."module.Family"] in worker.toml) ---------


class TaskDefaults:
    """A set of ``[tasks]`` tables in force: family key -> {parameter: value}, where each was
    set, and the ``[worker] task_id_style`` of the same configuration.

    Each :class:`~conveyor.Worker` holds one, made from its configuration, and applies it
    (:meth:`applied`) around everything that makes tasks on its behalf, so two workers with
    different ``[tasks]`` tables in one process do not see each other's defaults. Outside any
    worker the process's defaults apply (:func:`use_task_defaults`, or those discovered from
    ``--config``, ``$CONVEYOR_CONFIG`` or ``./worker.toml``). It also keeps what it derives:
    each class's checked defaults and the memo of bindings made under it.
    """

    def __init__(
        self,
        tables: Mapping[str, Mapping[str, Any]],
        sources: Mapping[str, str] | None = None,
        id_style: str = "conveyor",
    ) -> None:
        """Defaults from ``tables`` (a Config's ``tasks``), ``sources`` (its
        ``task_sources``) and ``id_style`` (its ``worker.task_id_style``)."""
        self.tables = tables
        self.sources: Mapping[str, str] = sources or {}
        self.id_style = id_style
        # CONVEYOR_TASKS__<family>__<param> variables arrive lower-cased
        self.folded = {key.casefold(): key for key in tables}
        self.per_class: dict[type[Task], Mapping[str, Any]] = {}  # each class's checked defaults
        self.bound: dict[tuple[Any, ...], _Binding] = {}  # bindings made under these defaults

    def find(self, key: str) -> str | None:
        """The table key for the family key ``key`` (exact, else without regard to case)."""
        return key if key in self.tables else self.folded.get(key.casefold())

    def in_use(self) -> DefaultsInUse:
        """``(tables, sources, id_style)``, as :func:`task_defaults_in_use` returns them."""
        return (self.tables, self.sources, self.id_style)

    @contextmanager
    def applied(self) -> Iterator[TaskDefaults]:
        """Within the block (in this thread, and the threads started with a copy of its
        context), tasks are made with these defaults."""
        token = _IN_CONTEXT.set(self)
        try:
            yield self
        finally:
            _IN_CONTEXT.reset(token)

    def enter(self) -> None:
        """Apply these defaults in the current context until :meth:`leave` (what a Worker
        does from its construction to its ``close()``, so that tasks made in a ``with Worker(...)``
        block take its defaults). Entered defaults stack: the latest entered that has not
        left is in force (outside an :meth:`applied` block)."""
        _ENTERED.set((*_ENTERED.get(()), self))

    def leave(self) -> None:
        """Undo :meth:`enter` in the current context, whatever was entered after it: workers
        may close in any order, and leaving twice does nothing (a Worker's ``close()`` may be
        called twice). From another context it does nothing: the context that entered them
        keeps them."""
        entered = _ENTERED.get(())
        if self in entered:
            _ENTERED.set(tuple(d for d in entered if d is not self))


#: The defaults applied in this context (a Worker's); None: the process's.
_IN_CONTEXT: ContextVar[TaskDefaults | None] = ContextVar("conveyor_task_defaults", default=None)
#: The defaults entered in this context (the Workers alive there), oldest first.
_ENTERED: ContextVar[tuple[TaskDefaults, ...]] = ContextVar("conveyor_task_defaults_entered")
_PROCESS: TaskDefaults | None = None  # None: not set yet; the configuration is discovered
_DISCOVERY_FAILED = False  # discovering it for an id failed: not tried again until one is set

#: What :func:`task_defaults_in_use` returns: the tables, their sources and the id style.
DefaultsInUse = tuple[Mapping[str, Mapping[str, Any]], Mapping[str, str], str]


def _in_force() -> TaskDefaults | None:
    """The defaults tasks are made with here: those applied, else the latest entered, else
    the process's."""
    applied = _IN_CONTEXT.get()
    if applied is not None:
        return applied
    entered = _ENTERED.get(())
    return entered[-1] if entered else _PROCESS


def _bound_memo() -> dict[tuple[Any, ...], _Binding] | None:
    """The memo of bindings made under the defaults in force (None: none is set yet)."""
    found = _in_force()
    return None if found is None else found.bound


def task_defaults_in_use() -> DefaultsInUse | None:
    """The tables, sources and task id style in force here: those of the Worker applying its
    defaults in this context, else the process's (:func:`use_task_defaults`); None: not set
    yet."""
    found = _in_force()
    return None if found is None else found.in_use()


def restore_task_defaults(previous: DefaultsInUse | None) -> None:
    """Put back the process's defaults as :func:`task_defaults_in_use` returned them (None:
    none, so the configuration is discovered again when needed)."""
    global _PROCESS, _DISCOVERY_FAILED
    if previous is None:
        _PROCESS = None
        _DISCOVERY_FAILED = False
        _forget_workers_defaults()  # (as use_task_defaults: what is set by hand applies here)
    else:
        use_task_defaults(*previous)


def use_task_defaults(
    tables: Mapping[str, Mapping[str, Any]],
    sources: Mapping[str, str] | None = None,
    id_style: str | None = None,
) -> None:
    """Take parameter defaults from ``tables`` (a Config's ``tasks``, keyed ``module.Family``
    or ``Family``) for every task made from now on outside a Worker; ``sources`` names where
    each was set; ``id_style`` is ``[worker] task_id_style`` (for classes whose
    ``task_id_style`` is None; None keeps the style in use, ``"conveyor"`` if none is).

    These are the process's defaults (``conveyor run --config`` and an attempt's process set
    them). A :class:`~conveyor.Worker` applies its own configuration's instead, to the tasks it
    makes and to those made in its ``with`` block (:class:`TaskDefaults`); calling this in
    that block makes the tasks made there afterwards take ``tables`` again. Until either is set
    the configuration is discovered (``--config``, ``$CONVEYOR_CONFIG``, ``./worker.toml``) the
    first time a task is made with a parameter left out, or its id is made.
    """
    global _PROCESS, _DISCOVERY_FAILED
    if id_style is None:
        current = _in_force()
        id_style = current.id_style if current is not None else "conveyor"
    _PROCESS = TaskDefaults(tables, sources or {}, id_style)
    _DISCOVERY_FAILED = False
    # what is set by hand applies in this context from now on, over the defaults of a Worker
    # made in it (its own walks and run apply its defaults again)
    _forget_workers_defaults()


def _forget_workers_defaults() -> None:
    """Let the process's defaults apply in this context: none applied, none entered."""
    _IN_CONTEXT.set(None)
    _ENTERED.set(())


def _discover() -> TaskDefaults:
    """Use the discovered configuration's ``[tasks]`` tables and id style."""
    from .config import load_config  # (the task API reads the configuration only here)

    config = load_config()
    use_task_defaults(config.tasks, config.task_sources, config.worker.task_id_style)
    assert _PROCESS is not None
    return _PROCESS


def _default_id_style() -> str:
    """``[worker] task_id_style`` of the configuration in force (discovered if none is set; a
    configuration that cannot be read gives the default here, once, and its error where it is
    used)."""
    global _DISCOVERY_FAILED
    found = _in_force()
    if found is None:
        if _DISCOVERY_FAILED:
            return "conveyor"
        try:
            found = _discover()
        except ConfigError:
            _DISCOVERY_FAILED = True  # (not read again for each id, until one is set)
            return "conveyor"
    return found.id_style


def task_id_afresh(task: Task) -> str:
    """The id ``task`` would get if it were made now, under the id style now in use (which
    a configuration read after the task was made may have changed)."""
    if (task.task_id_style or _default_id_style()) == "luigi":
        return _luigi_task_id(task)
    return _make_task_id(task._id_family, task._id_sorted, task._string_params())


def take_id_style_in_use(task: Task) -> None:
    """Give ``task`` the id it gets under the id style now in use, if it was made under
    another (a worker does, for a task made before its configuration set the style)."""
    fresh = task_id_afresh(task)
    if task.task_id != fresh:
        task._task_id, task._hash = fresh, None


def configured_defaults(cls: type[Task]) -> Mapping[str, Any]:
    """The configured defaults of ``cls``'s parameters under the defaults in force, normalized;
    ConfigError naming the file, the section and the key for a key that is not a parameter or
    a bad value.

    ``[tasks.Family]`` applies, and ``[tasks."module.Family"]`` over it.
    """
    defaults = _in_force() or _discover()
    found = defaults.per_class.get(cls)
    if found is not None:
        return found
    family = cls.get_task_family()
    merged: dict[str, Any] = {}
    for wanted in (family, f"{cls.__module__}.{family}"):
        key = defaults.find(wanted)
        if key is not None and defaults.tables[key]:
            source = defaults.sources.get(key, "configuration")
            merged.update(_checked(cls, key, defaults.tables[key], source))
    defaults.per_class[cls] = merged
    return merged


def _checked(cls: type[Task], key: str, table: Mapping[str, Any], source: str) -> dict[str, Any]:
    from .config import thaw

    params = dict(cls._params)
    section = f'tasks."{key}"' if "." in key else f"tasks.{key}"
    checked = {}
    for name, value in table.items():
        param = params.get(name)
        if param is None:
            expected = ", ".join(sorted(params)) or "none"
            raise ConfigError(
                f"{source}: [{section}] sets {name!r}, which is not a parameter of "
                f"{cls.get_task_family()}; expected one of: {expected}",
                source=source,
            )
        try:
            checked[name] = param.normalize(thaw(value))  # (tables as dicts, arrays lists)
        except ValueError as exc:
            secret = is_secret_name(name)  # (the parameter's message repeats the value)
            shown = REDACTED if secret else repr(value)
            detail = f"expected {param.type_name}" if secret else str(exc)
            raise ConfigError(
                f"{source}: [{section}] {name} = {shown}: {detail}", source=source
            ) from None
    return checked


def _bind(
    family: str, name: str, param: Parameter[Any], given: Mapping[str, Any], hint: str = ""
) -> Any:
    if name not in given:
        if not param.has_default:
            raise ParameterError(
                f"{family}: missing required parameter {name!r}{hint.format(name=name)}",
                task=family,
                parameter=name,
            )
        return param.default
    value = given[name]
    try:
        return param.normalize(value)
    except ValueError as exc:
        # the parameter's own message repeats the value: leave it out for secrets
        detail = f"expected {param.type_name}" if is_secret_name(name) else str(exc)
        shown = REDACTED if is_secret_name(name) else repr(value)
        raise ParameterError(
            f"{family}: parameter {name!r} = {shown}: {detail}",
            task=family,
            parameter=name,
            value=value,
        ) from None


def _passed_as_is(param: Parameter[Any]) -> type | None:
    """The type of value ``param.normalize()`` returns unchanged and ``param.serialize()``
    turns into ``str(value)``: ``str`` for a plain :class:`Parameter`, ``int`` for an
    :class:`IntParameter` (their own classes, not subclasses); None for any other."""
    kind = type(param)
    if kind is Parameter:
        return str
    if kind is IntParameter:
        return int
    return None


def _bound_key(cls: type[Task], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The memo key of a keyword-only construction, or None if a value is not memoisable."""
    for value in kwargs.values():
        if type(value) not in _BINDABLE:
            return None
    # the class by id (its binding holds the class, so the id is not reused while the entry
    # lives), names, then values: one flat tuple of atoms, untracked by the garbage collector
    return (id(cls), *kwargs, *kwargs.values())


_TASK_ID = Task.task_id  # the property, as Task defines it (see Task.__init__)


def _make_task_id(
    family: tuple[str, str],
    id_params: tuple[tuple[str, bool, str], ...],
    strings: Mapping[str, str],
) -> str:
    """``Family_v1_v2_v3_<hash>``: readable prefix, hash over every significant parameter.

    The hash input is length-prefixed, so no two (family, params) pairs share it; values of
    secret-named parameters are covered by the hash only. ``family`` and each parameter's
    ``(name, secret, name part of the hash input)`` are precomputed per class
    (``Task._id_family``, ``Task._id_sorted``).
    """
    parts = [family[0]]
    shown = [family[1]]
    for name, secret, named in id_params:  # sorted by name
        value = strings[name]
        parts.append(f"{named}{len(value)}:{value}")
        if not secret and len(shown) < 4:
            # a URL's credentials are not shown (ids are in logs and messages; the hash has them)
            if "://" in value:
                value = redact_text(value)
            # (_id_safe, inlined: the common case without the call)
            shown.append((value if value.isascii() and value.isalnum() else _id_safe(value))[:16])
    digest = hashlib.sha256("".join(parts).encode()).hexdigest()[:_HASH_LEN]
    head = "_".join(shown)
    return f"{head[: _ID_MAX - _HASH_LEN - 1]}_{digest}"


_LUIGI_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def _luigi_task_id(task: Task) -> str:
    """The id Luigi 3.8 gives a task of the same family and parameters
    (``luigi.task.task_id_str``): ``Family_<first 16 characters of the first three parameter
    values, by name>_<md5 of the parameters as JSON, 10 hex digits>``.

    The parameters are the significant ones, in Luigi's string form (``True``, JSON with
    Luigi's separators). One deliberate difference: the value of a secret-named parameter is
    left out of the readable part (the hash covers it), where Luigi would show it.
    """
    strings = task._string_params()
    values = task.param_kwargs
    params = {
        name: _luigi_text(param, values[name], strings[name])
        for name, param in task._params
        if param.significant
    }
    digest = hashlib.md5(
        json.dumps(params, separators=(",", ":"), sort_keys=True).encode(), usedforsecurity=False
    ).hexdigest()
    shown = "_".join(
        "" if is_secret_name(name) else params[name][:16] for name in sorted(params)[:3]
    )
    return f"{task.task_family}_{_LUIGI_UNSAFE.sub('_', shown)}_{digest[:_HASH_LEN]}"


def _luigi_text(param: Parameter[Any], value: Any, text: str) -> str:
    """``value``'s string form as Luigi writes it, where it differs from conveyor's: booleans
    as ``True``/``False``, lists, tuples and dicts as JSON with ``", "`` and ``": "`` and the
    keys in their own order."""
    kind = param.inner if isinstance(param, OptionalKind) and value is not None else param
    if isinstance(kind, BoolParameter):
        return str(value)
    if isinstance(kind, ListParameter | DictParameter):
        return json.dumps(value, default=_plain_json)
    return text


def _plain_json(value: object) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def reporting(task: object, report: Reporter) -> AbstractContextManager[None]:
    """Within the block, ``task``'s ``set_status_message()``, ``set_progress_percentage()`` and
    ``set_tracking_url()`` call ``report(kind, value)`` (an executor's attempt does this around
    ``run()``); afterwards they go nowhere again. A task that is not a :class:`Task` is given
    the reporter through its ``set_task_reporter(report)`` method if it has one (and None
    after the block: :class:`~conveyor.tasklike.ReportsNotes`); without one, the block runs
    without a reporter."""
    if isinstance(task, Task):
        return _Reporting(task, report)
    if _has(task, ReportsNotes):
        return _ForeignReporting(task, report)  # type: ignore[arg-type]
    return nullcontext()


_CAPABILITIES: weakref.WeakKeyDictionary[type, dict[type, bool]] = weakref.WeakKeyDictionary()


def _has(task: object, capability: type) -> bool:
    """Whether ``task``'s class has the optional ``capability`` (a runtime-checkable protocol
    of :mod:`conveyor.tasklike`), checked once per class: a protocol check costs microseconds,
    and the worker asks for every task it registers or runs."""
    cls = type(task)
    known = _CAPABILITIES.get(cls)
    if known is None:
        known = _CAPABILITIES[cls] = {}
    found = known.get(capability)
    if found is None:
        found = known[capability] = isinstance(task, capability)
    return found


class _ForeignReporting:
    """:func:`reporting` for a task of another framework with ``set_task_reporter()``."""

    __slots__ = ("report", "task")

    def __init__(self, task: ReportsNotes, report: Reporter) -> None:
        self.task = task
        self.report = report

    def __enter__(self) -> None:
        self.task.set_task_reporter(self.report)

    def __exit__(self, *exc_info: object) -> None:
        self.task.set_task_reporter(None)


class _Reporting:
    """:func:`reporting` for a :class:`Task` (a class, not a generator: it is entered once per
    attempt, and a generator-based context manager costs about four times as much)."""

    __slots__ = ("report", "task")

    def __init__(self, task: Task, report: Reporter) -> None:
        self.task = task
        self.report = report

    def __enter__(self) -> None:
        self.task._reporter = self.report

    def __exit__(self, *exc_info: object) -> None:
        self.task._reporter = None


T = TypeVar("T", bound=Task)
U = TypeVar("U", bound=Task)


@overload
def clone(task: T, cls: None = None, **overrides: Any) -> T: ...


@overload
def clone(task: Task, cls: type[U], **overrides: Any) -> U: ...


def clone(task: Task, cls: type[Task] | None = None, **overrides: Any) -> Task:
    """A task of ``cls`` (default: ``task``'s class) with the values of ``task``'s parameters
    that ``cls`` also has, and ``overrides`` on top (also ``conveyor.util.clone``).

    Parameters of ``cls`` that ``task`` lacks take their default (or configured default). An
    override that is not a parameter of ``cls`` is a :class:`~conveyor.errors.ParameterError`
    (Luigi ignores it silently).
    """
    target = type(task) if cls is None else cls
    if not (isinstance(target, type) and issubclass(target, Task)):
        raise TypeError(f"clone() needs a Task class, got {target!r}")
    unknown = sorted(set(overrides) - target._param_names)
    if unknown:
        family = target.get_task_family()
        expected = ", ".join(sorted(target._param_names)) or "none"
        raise ParameterError(
            f"clone(): {family} has no parameter {unknown[0]!r}; expected one of: {expected}",
            task=family,
            parameter=unknown[0],
        )
    return target(**{**common_params(task, target), **overrides})


def common_params(task: Task, cls: type[Task]) -> dict[str, Any]:
    """The values of ``task``'s parameters that ``cls`` also has, by name (as Luigi's)."""
    values = task.param_kwargs
    return {name: values[name] for name, _ in cls.parameters() if name in values}


_TASK_LIKE: dict[type, bool] = {}
"""Whether objects of a class that is not a :class:`Task` are :class:`~conveyor.TaskLike`s."""


def is_task_like(value: object) -> bool:
    """True for a task: a :class:`Task` (a :class:`Settings` too, which the worker then
    refuses to schedule, saying why), or an object of another class with every member of
    :class:`~conveyor.TaskLike` (decided once per class, from its first object). A class
    is never a task, even one whose members make it look like one (``return A`` for
    ``return A()``)."""
    if isinstance(value, Task):
        return True
    if isinstance(value, type):
        return False
    cls = type(value)
    known = _TASK_LIKE.get(cls)
    if known is None:
        known = _TASK_LIKE[cls] = isinstance(value, TaskLike)
    return known


_NOT_ADAPTED: weakref.WeakSet[type] = weakref.WeakSet()
"""Classes of objects that no installed task loader adapts (asked once per class)."""


def as_task(value: object) -> TaskLike | None:
    """``value`` if it is a task (:func:`is_task_like`); else the :class:`~conveyor.TaskLike`
    an installed task loader with :class:`~conveyor.tasklike.AdaptsTasks` makes of it (a
    ``luigi.Task`` through the luigi plugin); else None. The loaders are asked only for an
    object that is not a task, once per class when none adapts it."""
    if is_task_like(value):
        return cast(TaskLike, value)
    cls = type(value)
    if value is None or isinstance(value, type | Mapping) or _is_nesting(value):
        return None  # (nothing, a class, or a nesting of tasks: never one task)
    if cls in _NOT_ADAPTED:
        return None
    for loader in _adapters():
        adapted = loader.adapt(value)
        if adapted is not None:
            return adapted
    _NOT_ADAPTED.add(cls)
    return None


_ADAPTERS: list[AdaptsTasks] = []
_ADAPTERS_FOUND: list[bool] = []


def _adapters() -> list[AdaptsTasks]:
    """The installed task loaders that adapt objects, found once per process (a runtime
    protocol check costs microseconds: not once per object)."""
    if not _ADAPTERS_FOUND:
        from .backends import other_task_loaders  # (stevedore: only for an object not a task)

        _ADAPTERS[:] = [ld for ld in other_task_loaders() if isinstance(ld, AdaptsTasks)]
        _ADAPTERS_FOUND.append(True)
    return _ADAPTERS


def requirements(task: TaskLike) -> list[TaskLike]:
    """``task``'s requirements, flattened and checked (TaskDefinitionError for a leaf that is
    not a task): :meth:`Task.deps` for a conveyor task, ``flatten(task.requires())`` checked
    the same way for another :class:`~conveyor.TaskLike`."""
    if isinstance(task, Task):
        return task.deps()
    return checked_tasks(task, task.requires(), "requires()")


def is_external(task: TaskLike) -> bool:
    """Whether ``task`` has no ``run()``: :meth:`Task.is_external` for a conveyor task, its
    policy's ``external`` for another :class:`~conveyor.TaskLike`."""
    if isinstance(task, Task):
        return task.is_external()
    return task.task_policy().external


def found_complete(task: TaskLike, external: bool | None = None) -> bool:
    """Whether an attempt finds ``task`` already done before its ``run()``: only a task with
    outputs of its own (``output()``, non-empty) whose ``complete()`` is True; never an
    external task or a :class:`WrapperTask`, whose completeness follows from its
    requirements (as in Luigi, its ``run()`` is always called). Another
    :class:`~conveyor.TaskLike` without an ``output()`` method is never found complete.
    ``external``: whether the task is external (:func:`is_external`), when already known."""
    if isinstance(task, Task):
        if external is None:
            external = task.is_external()
        if external or isinstance(task, WrapperTask):
            return False
        outputs = task.output()
    else:
        output = getattr(task, "output", None)
        if output is None:
            return False
        if external is None:
            external = task.task_policy().external
        if external:
            return False
        outputs = output()
    return bool(outputs) and bool(flatten(outputs)) and task.complete() is True


def task_loader_of(task: TaskLike) -> str:
    """The name of the :class:`~conveyor.TaskLoader` that rebuilds ``task`` elsewhere (a
    conveyor task's ``task_loader``, without building its policy; else its policy's)."""
    if isinstance(task, Task):
        return task.task_loader
    return task.task_policy().loader


def on_success(task: TaskLike) -> str | None:
    """Call ``task.on_success()`` if it has one (every conveyor task has); what it returns,
    as text, is the success's explanation (None: none), as Luigi's ``expl``."""
    hook = task.on_success if isinstance(task, Task) else getattr(task, "on_success", None)
    if hook is None:
        return None
    text = hook()
    return None if text is None else str(text)


def on_failure(task: TaskLike, exception: BaseException) -> str | None:
    """``task.on_failure(exception)`` if it has one (every conveyor task has), else None."""
    if isinstance(task, Task):
        return task.on_failure(exception)
    hook = getattr(task, "on_failure", None)
    if hook is None:
        return None
    text = hook(exception)
    return None if text is None else str(text)


def checked_tasks(owner: TaskLike, struct: object, what: str) -> list[TaskLike]:
    """Flatten ``struct`` and check every leaf is a task (a :class:`Task` or another
    :class:`~conveyor.TaskLike`), naming the owner and what it returned."""
    if type(struct) is list:  # the usual answer: a flat list of conveyor tasks (or nothing)
        for item in struct:
            if not isinstance(item, Task) or isinstance(item, Settings):
                break  # (anything else: looked at below)
        else:
            return list(struct)
    if isinstance(struct, Task) and not isinstance(struct, Settings):
        return [struct]
    if isinstance(struct, Settings):
        raise TaskDefinitionError(
            f"{owner!r}.{what} returned {_not_a_task(struct)}", task_id=owner.task_id
        )
    if struct is None:  # "nothing", as Luigi reads it; a None *inside* a list is an error
        return []
    if not (isinstance(struct, Mapping) or _is_nesting(struct)):
        adapted = as_task(struct)  # a task of another framework
        if adapted is not None:
            return [adapted]
        raise TaskDefinitionError(
            f"{owner!r}.{what} returned {struct!r} ({type(struct).__name__}); "
            "expected a Task, or a list, tuple, dict, generator or other iterable of Tasks",
            task_id=owner.task_id,
        )
    out: list[Any] = []
    _flatten_into(struct, out, keep_none=True)
    for index, item in enumerate(out):
        if not isinstance(item, Task) and not is_task_like(item):
            adapted = as_task(item)
            if adapted is not None:
                out[index] = adapted
                continue
            raise TaskDefinitionError(
                f"{owner!r}.{what} returned {item!r} ({type(item).__name__}) inside its result; "
                "expected only Tasks",
                task_id=owner.task_id,
            )
        if isinstance(item, Settings):
            raise TaskDefinitionError(
                f"{owner!r}.{what} returned {_not_a_task(item)}", task_id=owner.task_id
            )
    return out


def outputs_of(struct: object) -> Any:
    """The outputs of the tasks in ``struct``, in the same nesting (any other iterable, a
    generator included, becomes a list, as in Luigi): what a ``yield`` in ``run()`` evaluates
    to, and what ``input()`` returns for ``requires()``."""
    if isinstance(struct, Task):
        return struct.output()
    if isinstance(struct, DynamicRequirements):
        return struct.paths
    if isinstance(struct, Mapping):
        return {key: outputs_of(value) for key, value in struct.items()}
    if isinstance(struct, list | tuple):
        return type(struct)(outputs_of(item) for item in struct)
    if _is_nesting(struct):
        return [outputs_of(item) for item in struct]  # type: ignore[attr-defined]
    adapted = as_task(struct)  # a task of another framework (adapted by its loader): output()
    output = None if adapted is None else getattr(adapted, "output", None)
    return struct if output is None else output()


def load_task_class(module: str, family: str) -> type[Task]:
    """Import ``module`` and return its task class of ``family``; TaskLoadError if impossible."""
    registry = registered_task_classes()
    found = registry.get((module, family))
    if found is not None:
        return found
    try:
        importlib.import_module(module)
    except Exception as exc:  # any import-time failure of user code is a load error
        raise TaskLoadError(
            f"cannot import task module {module!r}: {type(exc).__name__}: {exc}"
        ) from None
    found = registry.get((module, family)) or _reexported(module, family)
    if found is None:
        known = sorted(fam for mod, fam in registry if mod == module)
        hint = ", ".join(known) or "none"
        raise TaskLoadError(
            f"module {module!r} has no task family {family!r}; tasks defined there: {hint}"
        )
    return found


def _reexported(module: str, family: str) -> type[Task] | None:
    """The task class that ``module`` (imported) re-exports as ``family``, such as
    ``conveyor.RangeDaily`` (defined in ``conveyor.ranges``); None if there is none."""
    value = getattr(sys.modules.get(module), family, None)
    if isinstance(value, type) and issubclass(value, Task) and value.get_task_family() == family:
        return value
    return None


def rebuild_task(module: str, family: str, params: Mapping[str, str]) -> Task:
    """The task a worker made, rebuilt in an attempt's process from what crossed over: its
    module, family and string params. Its :class:`~conveyor.parameters.TaskParameter` values
    may import their modules here: the worker made them from classes it had loaded."""
    cls = load_task_class(module, family)
    with allow_task_modules(task_modules_named(cls.parameters(), params)):
        return cls.from_str_params(params)


class ConveyorLoader:
    """The default :class:`~conveyor.TaskLoader` (entry point ``conveyor`` of
    ``conveyor.task_loaders``): conveyor's own task classes, found by :func:`load_task_class`
    and built by :func:`rebuild_task`."""

    def load(self, module: str, family: str, params: Mapping[str, str]) -> Task:
        """The task ``module``/``family`` built from its string ``params`` under the defaults
        in force; TaskLoadError if the class cannot be found."""
        return rebuild_task(module, family, params)
