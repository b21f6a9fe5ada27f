"""The adapter: a ``luigi.Task`` instance seen as a :class:`conveyor.TaskLike`.

Everything Luigi decides stays Luigi's: the task id, the family, the string parameters, the
requirements (``deps()``), the outputs, ``complete()``, ``run()``, ``on_success()`` and
``on_failure()``. The adapter only translates what conveyor calls into Luigi's calls, fires
Luigi's events of an attempt (``START``, ``PROCESSING_TIME``, ``SUCCESS``, ``FAILURE``) where
the attempt runs, and routes ``set_status_message()``, ``set_progress_percentage()`` and
``set_tracking_url()`` to conveyor's reporter of the attempt.

This module imports ``luigi``: the loader imports it only once ``luigi`` is imported.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import queue
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

import luigi
import luigi.task
from conveyor import DynamicRequirements
from conveyor.errors import TaskLoadError
from conveyor.task import batch_digest
from conveyor.tasklike import TaskLike, TaskPolicy

from .events import KNOWN

__all__ = ["LOADER_NAME", "LuigiTask", "adapted", "is_external"]

LOADER_NAME = "luigi"
"""The name the loader is registered under (``conveyor.task_loaders``)."""

Reporter = Callable[[str, object], None]
"""conveyor's reporter of an attempt: called with ``(kind, value)``."""

# The adapters of Luigi task objects, by the object's id(): not in the task's __dict__, so that
# the task stays picklable (luigi.contrib's spark and hadoop tasks pickle themselves) and a copy
# of it (luigi.task.externalize) does not inherit it. Luigi tasks compare and hash by task id,
# so the key is the identity. An adapter is held weakly: conveyor holds it while it uses it, and
# the adapter holds its task (so a live entry's id cannot be reused by another object).
_ADAPTERS: dict[int, weakref.ref[LuigiTask]] = {}
_ADAPTERS_LOCK = threading.RLock()  # re-entrant: a collection inside adapted() runs _forget

# What Luigi's worker sets on a task while its run() runs, and sets back to None afterwards
# (TaskProcess._forward_attributes)
_FORWARDED = (
    "set_tracking_url",
    "set_status_message",
    "set_progress_percentage",
    "decrease_running_resources",
    "scheduler_messages",
)


def is_external(task: luigi.Task) -> bool:
    """Luigi's notion of an external task: ``run`` is None or NotImplemented."""
    run = getattr(task, "run", None)
    return run is None or run == NotImplemented


def adapted(task: luigi.Task) -> LuigiTask:
    """The adapter of ``task``: one per Luigi task object while it is in use, made the first
    time it is asked (nothing is stored on the task itself)."""
    key = id(task)
    with _ADAPTERS_LOCK:
        ref = _ADAPTERS.get(key)
        found = ref() if ref is not None else None
        if found is not None and found.luigi_task is task:
            return found
        made = LuigiTask(task)
        _ADAPTERS[key] = weakref.ref(made, functools.partial(_forget, key))
        return made


def _forget(key: int, dead: weakref.ref[LuigiTask]) -> None:
    """Drop the entry of a collected adapter (unless a newer adapter took its place)."""
    with _ADAPTERS_LOCK:
        if _ADAPTERS.get(key) is dead:
            del _ADAPTERS[key]


def _owners(owner_email: object) -> tuple[str, ...]:
    """``owner_email`` (None, a comma-separated string or a list) as a tuple of addresses."""
    if owner_email is None:
        return ()
    if isinstance(owner_email, str):
        return tuple(a.strip() for a in owner_email.split(",") if a.strip())
    return tuple(str(a).strip() for a in cast(Iterable[object], owner_email) if str(a).strip())


def _materialised(struct: Any) -> Any:
    """``struct`` with every iterator in it (a generator, at any depth) read into a list, so
    that its tasks and its outputs can both be looked at."""
    if isinstance(struct, luigi.Task) or struct is None:
        return struct
    if isinstance(struct, Iterator):
        return [_materialised(item) for item in struct]
    if isinstance(struct, list):
        return [_materialised(item) for item in struct]
    if isinstance(struct, tuple):
        return tuple(_materialised(item) for item in struct)
    if isinstance(struct, dict):
        return type(struct)((key, _materialised(value)) for key, value in struct.items())
    return struct


_BATCHING: dict[type, tuple[frozenset[str], bool]] = {}  # (Luigi's registry keeps classes)


def _batching_of(cls: type[luigi.Task]) -> tuple[frozenset[str], bool]:
    """Luigi's ``batch_param_names()`` of ``cls``, and whether the class has a ``batchable`` of
    its own to ask each task (Luigi's, true when there are batched parameters, costs a
    ``get_params()``), worked out once per class: the walk asks for every task it registers."""
    found = _BATCHING.get(cls)
    if found is None:
        asks = getattr(cls, "batchable", None) is not getattr(luigi.Task, "batchable", None)
        found = _BATCHING[cls] = (frozenset(cls.batch_param_names()), asks)
    return found


def _max_batch_size(size: object) -> int:
    """Luigi's ``max_batch_size`` as conveyor's: 0 (no limit) for infinity (Luigi's default)
    or None; for another number, as many tasks as Luigi's scheduler puts in a batch (it adds
    one while the batch holds fewer: 2.5 makes batches of 3), at least 1; 1 (each task alone)
    for anything that is not a number."""
    if size is None:
        return 0
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        return 1
    number = float(size)
    if math.isinf(number):
        return 0 if number > 0 else 1
    return max(1, math.ceil(number)) if number == number else 1  # (NaN: 1)


def _defaults_to_none(param: luigi.Parameter, family: str, name: str) -> bool:
    """Whether a task of ``family`` built without ``name`` takes None (its default in the code,
    ``luigi.cfg`` or the command line in force)."""
    try:
        return bool(param.task_value(family, name) is None)
    except Exception:  # no default at all, or one that does not parse
        return False


class LuigiTask:
    """A ``luigi.Task`` object as a :class:`conveyor.TaskLike` (use :func:`adapted`).

    ``luigi_task`` is the wrapped object. The task id, family and module are Luigi's own; the
    parameters are every parameter's ``serialize()``d value, insignificant, hidden and private
    ones included: they are what another process rebuilds the task from. (A value None that
    the rebuilt task would take anyway is left out; the value of a ``TaskParameter`` is written
    ``module:Family``.)
    """

    def __init__(self, task: luigi.Task) -> None:
        """Wrap ``task`` and register it for the worker-side events of this process."""
        self._task = task
        self._task_id: str = task.task_id
        self._params: Mapping[str, str] | None = None
        self._policy: TaskPolicy | None = None
        self._reporter: Reporter | None = None
        self._started: float | None = None
        self._broken: BaseException | None = None
        KNOWN[self._task_id] = self

    # --- identity ---------------------------------------------------------------------------

    @property
    def luigi_task(self) -> luigi.Task:
        """The wrapped Luigi task."""
        return self._task

    @property
    def task_id(self) -> str:
        """Luigi's task id."""
        return self._task_id

    @property
    def task_family(self) -> str:
        """Luigi's task family (with its namespace, if any)."""
        return str(self._task.task_family)

    @property
    def task_module(self) -> str:
        """The module defining the Luigi task class."""
        return str(self._task.task_module)

    @property
    def task_params(self) -> Mapping[str, str]:
        """Every parameter in Luigi's string form (``param.serialize(value)``), private ones
        included (Luigi's ``to_str_params()`` leaves them out), read-only. A ``TaskParameter``'s
        class is written ``module:Family`` (Luigi writes the family alone) so that the loader can
        import its module in another process. A value None is left out when the parameter's
        default (code, ``luigi.cfg`` or command line) is None too; otherwise it is Luigi's
        ``"None"``, which the loader turns back into None when the parameter cannot parse it."""
        if self._params is None:
            task = self._task
            declared = dict(task.get_params())
            params: dict[str, str] = {}
            for name, value in task.param_kwargs.items():
                param = declared[name]
                if value is None and _defaults_to_none(param, task.get_task_family(), name):
                    continue
                text = str(param.serialize(value))
                if isinstance(param, luigi.TaskParameter) and isinstance(value, type):
                    # ``module:Family``: the other process imports the class's module first
                    text = f"{value.__module__}:{text}"
                params[name] = text
            self._params = MappingProxyType(params)
        return self._params

    def task_policy(self) -> TaskPolicy:
        """Luigi's ``worker_timeout``, ``priority``, ``process_resources()``, ``retry_count``,
        ``owner_email``, ``disabled`` and external-ness, rebuilt elsewhere by the ``luigi``
        loader."""
        if self._policy is None:
            task = self._task
            timeout = task.worker_timeout
            retry_count = task.retry_count
            resources = task.process_resources() or {}
            self._policy = TaskPolicy(
                timeout=float(timeout) if timeout else None,
                priority=int(task.priority or 0),
                resources=MappingProxyType({str(k): int(v) for k, v in resources.items()}),
                retry_count=None if retry_count is None else int(retry_count),
                owners=_owners(task.owner_email),
                disabled=bool(task.disabled),
                external=is_external(task),
                loader=LOADER_NAME,
            )
        return self._policy

    # --- batches (Luigi's batch_method and max_batch_size) ------------------------------------

    def task_batch_key(self) -> tuple[str, int] | None:
        """``(key, max_size)`` of a task whose class has parameters with a ``batch_method``
        (Luigi's ``batch_param_names()``) and that is ``batchable``, else None: tasks of one
        class whose other parameters and whose resources are all equal share the key (a hash
        of the module, the family, those parameters' strings and the resources), as Luigi's
        scheduler batches them; ``max_size`` is the task's ``max_batch_size`` (0 for Luigi's
        default, infinity)."""
        task = self._task
        batched, asks = _batching_of(type(task))
        if not batched or (asks and not task.batchable):  # (Luigi asks each task)
            return None
        resources = self.task_policy().resources  # (Luigi batches equal resources only)
        key = batch_digest(
            self.task_module,
            self.task_family,
            self.task_params,
            batched,
            repr(sorted(resources.items())),
        )
        return key, _max_batch_size(getattr(task, "max_batch_size", None))

    def task_batch(self, members: Sequence[TaskLike]) -> LuigiTask:
        """The Luigi task run for the batch of ``members`` (this task's class and key): this
        task's parameters, each batched one set as Luigi's ``from_str_params`` sets it from
        the members' values (their ``serialize()``d strings, parsed and combined by its
        ``batch_method``). TaskLoadError for a member of another class."""
        cls = type(self._task)
        tasks: list[luigi.Task] = []
        for member in members:
            if not isinstance(member, LuigiTask) or type(member.luigi_task) is not cls:
                raise TaskLoadError(f"a batch of {cls.get_task_family()} holds {member!r}")
            tasks.append(member.luigi_task)
        declared = dict(cls.get_params())
        kwargs = dict(self._task.param_kwargs)
        for name in _batching_of(cls)[0]:
            param = declared[name]
            texts = [param.serialize(task.param_kwargs[name]) for task in tasks]
            kwargs[name] = param._parse_list(texts)  # (what from_str_params does with a list)
        made = cls(**kwargs)
        known = KNOWN.get(made.task_id)
        batch = adapted(made)
        if known is not None and known is not batch:  # (a member's id: it keeps its events)
            KNOWN[made.task_id] = known
        return batch

    # --- the graph --------------------------------------------------------------------------

    def complete(self) -> bool:
        """Luigi's ``complete()``: a value Luigi accepts (``in (True, False)``: ``1``, a numpy
        bool, ...) as a bool; any other value as it is (conveyor refuses it)."""
        self._broken = None
        try:
            done: Any = self._task.complete()
        except Exception as exc:
            self._broken = exc
            raise
        with contextlib.suppress(Exception):  # an odd __eq__: conveyor refuses the value
            if done in (True, False):
                return bool(done)
        return cast(bool, done)

    def requires(self) -> Any:
        """Luigi's ``deps()``: the flattened ``requires()`` (conveyor adapts each task)."""
        self._broken = None
        try:
            return self._task.deps()
        except Exception as exc:
            self._broken = exc
            raise

    def output(self) -> Any:
        """Luigi's ``output()``."""
        return self._task.output()

    def run(self) -> Any:
        """Fire ``START`` and call Luigi's ``run()``; a generator's yields are translated (a
        ``luigi.DynamicRequirements`` becomes a :class:`conveyor.DynamicRequirements`) and
        what it is sent back is what Luigi sends: ``getpaths()`` of what it yielded."""
        self.fire(luigi.Event.START)
        self._started = time.time()
        with self._forwarded():
            result = self._task.run()
        if isinstance(result, Generator):
            return self._dynamic(result)
        return result

    @contextlib.contextmanager
    def _forwarded(self) -> Iterator[None]:
        """What Luigi's worker sets on the task while its ``run()`` runs, set back to None
        afterwards as Luigi does (``TaskProcess._forward_attributes``)."""
        values: tuple[object, ...] = (
            self._tracking_url,
            self._status_message,
            self._progress_percentage,
            self._decrease_running_resources,
            queue.Queue(),
        )
        for name, value in zip(_FORWARDED, values, strict=True):
            setattr(self._task, name, value)
        try:
            yield
        finally:
            for name in _FORWARDED:
                setattr(self._task, name, None)

    def _dynamic(self, generator: Generator[Any, Any, Any]) -> Generator[Any, Any, None]:
        sent: Any = None
        try:
            while True:
                try:
                    with self._forwarded():  # Luigi forwards them around each resumption
                        yielded = generator.send(sent)
                except StopIteration:
                    return
                if isinstance(yielded, luigi.DynamicRequirements):
                    requirements = _materialised(yielded.requirements)
                    custom = yielded.custom_complete
                    outputs = yield DynamicRequirements(requirements, custom_complete=custom)
                else:
                    requirements = _materialised(yielded)
                    outputs = yield requirements
                sent = self._paths(requirements, outputs)
        finally:
            generator.close()

    @staticmethod
    def _paths(requirements: Any, outputs: Any) -> Any:
        """Luigi's ``getpaths(requirements)`` when every requirement is a Luigi task; else what
        conveyor computed (a conveyor task among them)."""
        if all(isinstance(t, luigi.Task) for t in luigi.task.flatten(requirements)):
            return luigi.task.getpaths(requirements)
        return outputs

    def on_success(self) -> str | None:
        """``PROCESSING_TIME``, Luigi's ``on_success()``, then ``SUCCESS``, as Luigi's task
        process does after ``run()``; what ``on_success()`` returns (as text; None: nothing) is
        the success's explanation. Nothing for a task whose ``run()`` was not called here (an
        external task found complete)."""
        started = self._started
        self._started = None
        if started is None:
            return None
        self.fire(luigi.Event.PROCESSING_TIME, time.time() - started)
        text = self._task.on_success()
        self.fire(luigi.Event.SUCCESS)
        return None if text is None else str(text)

    def on_failure(self, exception: BaseException) -> str | None:
        """``FAILURE(task, exception)``, then Luigi's ``on_failure()``: its text is the failure
        explanation."""
        self._started = None
        self.fire(luigi.Event.FAILURE, exception)
        text = self._task.on_failure(exception)
        return None if text is None else str(text)

    # --- events and reporting ---------------------------------------------------------------

    def fire(self, event: str, *args: Any) -> None:
        """Luigi's ``trigger_event(event, task, *args)`` on the wrapped task."""
        self._task.trigger_event(event, self._task, *args)

    def broken_by(self, error: str) -> BaseException:
        """The exception the last call of ``complete()`` or ``requires()`` raised here, else
        one made of conveyor's explanation ``error``; forgotten once asked for (it holds a
        traceback and its frames)."""
        found, self._broken = self._broken, None
        return found if found is not None else RuntimeError(error)

    def set_task_reporter(self, report: Reporter | None) -> None:
        """Route the task's ``set_status_message()``, ``set_progress_percentage()`` and
        ``set_tracking_url()`` to ``report(kind, value)`` (None: nowhere); conveyor calls it
        around each attempt's ``run()`` (``conveyor.ReportsNotes``)."""
        self._reporter = report

    def _status_message(self, message: str) -> None:
        if self._reporter is not None:
            self._reporter("status_message", str(message))

    def _progress_percentage(self, percentage: float) -> None:
        if self._reporter is not None:
            self._reporter("progress", float(percentage))

    def _tracking_url(self, url: str) -> None:
        if self._reporter is not None:
            self._reporter("tracking_url", str(url))

    def _decrease_running_resources(self, decrease: Mapping[str, int]) -> None:
        """Luigi's scheduler may lower a running task's resources; conveyor's cannot (ignored)."""

    # --- value semantics --------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        """Equal to another adapter of the same task id."""
        return isinstance(other, LuigiTask) and other._task_id == self._task_id

    def __hash__(self) -> int:
        """The hash of the task id."""
        return hash(self._task_id)

    def __repr__(self) -> str:
        """Luigi's repr of the task."""
        return repr(self._task)
