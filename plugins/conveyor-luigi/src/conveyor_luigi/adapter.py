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

import queue
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, cast

import luigi
import luigi.task
from conveyor import DynamicRequirements
from conveyor.tasklike import TaskPolicy

from .events import KNOWN

__all__ = ["LOADER_NAME", "LuigiTask", "adapted", "is_external"]

LOADER_NAME = "luigi"
"""The name the loader is registered under (``conveyor.task_loaders``)."""

Reporter = Callable[[str, object], None]
"""conveyor's reporter of an attempt: called with ``(kind, value)``."""

_ADAPTER_ATTRIBUTE = "_conveyor_luigi_adapter"


def is_external(task: luigi.Task) -> bool:
    """Luigi's notion of an external task: ``run`` is None or NotImplemented."""
    run = getattr(task, "run", None)
    return run is None or run == NotImplemented


def adapted(task: luigi.Task) -> LuigiTask:
    """The adapter of ``task``: one per Luigi task object, made the first time it is asked."""
    found = task.__dict__.get(_ADAPTER_ATTRIBUTE)
    if isinstance(found, LuigiTask):
        return found
    made = LuigiTask(task)
    task.__dict__[_ADAPTER_ATTRIBUTE] = made
    return made


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


class LuigiTask:
    """A ``luigi.Task`` object as a :class:`conveyor.TaskLike` (use :func:`adapted`).

    ``luigi_task`` is the wrapped object. The task id, family and module are Luigi's own; the
    parameters are ``to_str_params()`` with every parameter, insignificant and private ones
    included: they are what another process rebuilds the task from (``from_str_params``).
    (The value of a ``TaskParameter`` is written ``module:Family``.)
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
        """Every parameter in Luigi's string form (``to_str_params()``), read-only; a
        ``TaskParameter``'s class is written ``module:Family`` (Luigi writes the family alone)
        so that the loader can import its module in another process."""
        if self._params is None:
            params = dict(self._task.to_str_params())
            for name, param in self._task.get_params():
                value = getattr(self._task, name, None)
                if isinstance(param, luigi.TaskParameter) and isinstance(value, type):
                    # ``module:Family``: the other process imports the class's module first
                    params[name] = f"{value.__module__}:{params[name]}"
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

    # --- the graph --------------------------------------------------------------------------

    def complete(self) -> bool:
        """Luigi's ``complete()`` (its value as it is: conveyor refuses one that is no bool)."""
        try:
            done: bool = self._task.complete()
        except Exception as exc:
            self._broken = exc
            raise
        return done

    def requires(self) -> Any:
        """Luigi's ``deps()``: the flattened ``requires()`` (conveyor adapts each task)."""
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
        task = self._task
        # what Luigi's worker sets on the task before it runs it (TaskProcess._forward_attributes)
        task.set_status_message = self._status_message
        task.set_progress_percentage = self._progress_percentage
        task.set_tracking_url = self._tracking_url
        setattr(task, "decrease_running_resources", self._decrease_running_resources)  # noqa: B010
        setattr(task, "scheduler_messages", queue.Queue())  # noqa: B010
        self.fire(luigi.Event.START)
        self._started = time.time()
        result = task.run()
        if isinstance(result, Generator):
            return self._dynamic(result)
        return result

    def _dynamic(self, generator: Generator[Any, Any, Any]) -> Generator[Any, Any, None]:
        sent: Any = None
        try:
            while True:
                try:
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

    def on_success(self) -> None:
        """``PROCESSING_TIME``, Luigi's ``on_success()``, then ``SUCCESS``, as Luigi's task
        process does after ``run()``; nothing for a task whose ``run()`` was not called here
        (an external task found complete)."""
        started = self._started
        self._started = None
        if started is None:
            return
        self.fire(luigi.Event.PROCESSING_TIME, time.time() - started)
        self._task.on_success()
        self.fire(luigi.Event.SUCCESS)

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
        """The exception ``complete()`` or ``requires()`` last raised here, else one made of
        conveyor's explanation ``error``."""
        found = self._broken
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
