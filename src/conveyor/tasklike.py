"""The task seam: :class:`TaskLike`, :class:`TaskPolicy` and :class:`TaskLoader` (SPEC §10).

The worker, the executors and the scheduler need only this much of a task: its identity (a
task id, a family, the module that defines it and its parameters in string form), the three
methods of the graph (``complete()``, ``requires()``, ``run()``) and a :class:`TaskPolicy`
value saying how it is scheduled. :class:`conveyor.Task` satisfies :class:`TaskLike`; so may a
class of another framework (issue 22's Luigi adapter), written without subclassing anything.

The identity attributes are named ``task_*`` (``task_id``, ``task_family``, ``task_module``,
``task_params``) and the policy is a method, ``task_policy()``: a task's parameters become
attributes of the same object, and a parameter may well be called ``family``, ``params`` or
``policy``; none is called ``task_family``.

A task crosses a process boundary as data (module, family, string params); in the other
process a :class:`TaskLoader` builds it again. Loaders are found by name in the entry-point
group ``conveyor.task_loaders`` (:func:`conveyor.backends.load_task_loader`); conveyor's own
task classes use the loader named ``"conveyor"`` (:data:`DEFAULT_LOADER`), and a task names
its loader in its policy (``TaskPolicy.loader``).

This module imports nothing else of conveyor's: it is the vocabulary, not the machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .retry import RetryPolicy

__all__ = [
    "DEFAULT_LOADER",
    "LOADER_GROUP",
    "AdaptsTasks",
    "ParsesCommandLines",
    "ReportsNotes",
    "RunsInBatches",
    "TaskLike",
    "TaskLoader",
    "TaskPolicy",
]

DEFAULT_LOADER = "conveyor"
"""The loader of conveyor's own task classes (:class:`conveyor.Task` and its subclasses)."""

LOADER_GROUP = "conveyor.task_loaders"
"""The entry-point group task loaders are registered in."""

_NO_RESOURCES: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    """How a task is scheduled: everything about it but its identity and its code.

    ``timeout`` is the attempt's time limit in seconds (None: ``[worker] timeout``);
    ``priority`` orders runnable tasks (higher first); ``resources`` are the amounts of the
    scheduler's named resources an attempt holds; ``retry_count`` is how many failures the
    scheduler tolerates before it disables the task (None: the scheduler's
    ``[scheduler] retry_count``); ``owners`` are e-mail addresses told of a failure besides
    the configured receivers; ``labels`` are what a worker must offer (its
    ``[worker] labels``) to be handed the task; ``memory_limit`` caps an attempt's process
    tree, in bytes, under process executors (None: the worker's ``[worker] memory_limit``;
    0: none); ``retry_policy`` is the task's own retry schedule and the failures worth a retry
    (:class:`conveyor.RetryPolicy`; None: the scheduler's settings; its ``count``, when set,
    wins over ``retry_count``); ``disabled`` means the worker never runs it; ``external``
    means its data is made elsewhere (no ``run()``); ``loader`` names the :class:`TaskLoader`
    that rebuilds the task in another process.

    New fields are added with defaults, so a value built by an older third-party task class
    stays valid.
    """

    timeout: float | None = None
    priority: int = 0
    resources: Mapping[str, int] = field(default_factory=lambda: _NO_RESOURCES)
    retry_count: int | None = None
    owners: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    disabled: bool = False
    external: bool = False
    loader: str = DEFAULT_LOADER
    memory_limit: int | None = None
    retry_policy: RetryPolicy | None = None


@runtime_checkable
class TaskLike(Protocol):
    """What the worker, the executors and the scheduler use of a task.

    ``task_id`` is unique for a family and its significant parameters; ``task_family`` and
    ``task_module`` name the class (the loader finds it again from them); ``task_params`` maps
    every parameter name to its string form (read-only). ``complete()`` returns a bool;
    ``requires()`` returns a task or any nesting of tasks (lists, tuples, dicts); ``run()``
    does the work and may be a generator yielding tasks (dynamic dependencies).
    ``task_policy()`` returns the :class:`TaskPolicy` the task is scheduled by.

    ``isinstance(x, TaskLike)`` checks that these members exist (not their types).
    """

    @property
    def task_id(self) -> str:
        """The task's unique id."""
        ...

    @property
    def task_family(self) -> str:
        """The task's family (its class name, with a namespace prefix if it has one)."""
        ...

    @property
    def task_module(self) -> str:
        """The module defining the task's class."""
        ...

    @property
    def task_params(self) -> Mapping[str, str]:
        """Every parameter in its string form."""
        ...

    def task_policy(self) -> TaskPolicy:
        """How the task is scheduled."""
        ...

    def complete(self) -> bool:
        """Whether the task's outputs exist."""
        ...

    def requires(self) -> Any:
        """The tasks this one needs, in any nesting."""
        ...

    def run(self) -> Any:
        """Do the work (a generator may yield tasks)."""
        ...


@runtime_checkable
class TaskLoader(Protocol):
    """Rebuilds a task in another process from what crossed over.

    ``load(module, family, params)`` returns the task of ``family`` defined in ``module`` with
    the string ``params``, under the ``[tasks.*]`` defaults in force in the calling context
    (:func:`conveyor.task.task_defaults_in_use`); it raises
    :class:`~conveyor.errors.TaskLoadError` when the module cannot be imported or has no such
    family. Registered in the entry-point group ``conveyor.task_loaders``; the entry point
    names a class, built without arguments.
    """

    def load(self, module: str, family: str, params: Mapping[str, str]) -> TaskLike:
        """The task ``module``/``family`` with ``params``; TaskLoadError if impossible."""
        ...


@runtime_checkable
class AdaptsTasks(Protocol):
    """A :class:`TaskLoader` that can also make a :class:`TaskLike` of another framework's
    task object (an optional capability: conveyor asks for it with ``isinstance``).

    When ``conveyor.build()``, ``Worker.add()``, or a conveyor task's ``requires()``, ``yield``
    or ``input()`` meets an object that is not a task, each installed loader with this method
    is asked in turn (by entry-point name); the first that returns a task wins, and None means
    "not one of mine". The luigi plugin wraps a ``luigi.Task`` this way. Whether an object is
    adapted must depend on its class alone: conveyor remembers the classes that no loader
    adapts and does not ask about their objects again. ``None``, classes, and lists, tuples,
    dicts, generators and other iterables (nestings of tasks) are never offered.
    """

    def adapt(self, value: object) -> TaskLike | None:
        """``value`` as a :class:`TaskLike`, or None when it is not this framework's task."""
        ...


@runtime_checkable
class ParsesCommandLines(Protocol):
    """A :class:`TaskLoader` that builds its framework's tasks from ``conveyor run``'s words
    (an optional capability).

    ``conveyor run module.Family ...`` asks each installed loader with this method, in turn,
    when ``Family`` is not a conveyor task class of ``module``: ``args`` are the words after
    TASK that are not ``conveyor run``'s own options (those always belong to conveyor run).
    It returns the task, None when ``module``/``family`` is not this framework's task, and
    raises :class:`~conveyor.errors.ParameterError` for words it cannot take (the message says
    which and what was expected: ``conveyor run`` exits 2 with it).
    """

    def task_from_command_line(self, module: str, family: str, args: list[str]) -> TaskLike | None:
        """The task ``module``/``family`` with the parameters in ``args``, or None."""
        ...


@runtime_checkable
class ReportsNotes(Protocol):
    """A task of another framework whose code reports a status message, a progress percentage
    or a tracking URL while it runs (an optional capability of a :class:`TaskLike`).

    Around each attempt's ``run()`` (in the process that runs it), conveyor calls
    ``set_task_reporter(report)``, and ``set_task_reporter(None)`` afterwards; while set, the
    task calls ``report(kind, value)`` with ``kind`` one of ``"status_message"`` (a str),
    ``"progress"`` (a number from 0 to 100) and ``"tracking_url"`` (a str). The notes reach
    the worker, its hooks and the scheduler as a :class:`conveyor.Task`'s
    ``set_status_message()`` and the others do.
    """

    def set_task_reporter(self, report: Callable[[str, object], None] | None) -> None:
        """Route the task's notes to ``report`` (None: nowhere)."""
        ...


@runtime_checkable
class RunsInBatches(Protocol):
    """A task of another framework that may share one attempt with others of its class, as
    Luigi's batch tasks do (an optional capability of a :class:`TaskLike`; a
    :class:`conveyor.Task` has it through its parameters' ``batch_method``).

    ``task_batch_key()`` is asked each time the worker registers the task: None when the task
    runs alone, else ``(key, max_size)``; pending tasks with the same ``key`` (a string that
    covers the class and every parameter but the batched ones) may be handed to one worker as
    one batch of at most ``max_size`` of them (0: no limit). For a batch, conveyor calls
    ``task_batch(members)`` on its first member, with every member (that one included, all of
    one class and key): the one task to run for them all, whose success completes every member
    and whose failure fails each. Whatever it raises fails every member, saying why; a
    ``task_batch_key()`` that raises or answers anything else is logged and the task runs
    alone. The task it returns must be rebuildable from its module, family and string
    parameters by its loader, as any task run by the process executors.
    ``conveyor.task.batch_digest`` makes a key of the usual parts.
    """

    def task_batch_key(self) -> tuple[str, int] | None:
        """``(key, max_size)`` of a task that may share an attempt, else None."""
        ...

    def task_batch(self, members: Sequence[TaskLike]) -> TaskLike:
        """The one task that runs for the batch of ``members``."""
        ...
