"""The one exception tree of conveyor.

Every error conveyor raises on purpose derives from :class:`ConveyorError`::

    ConveyorError
    ├── ParameterError          a task parameter is missing, unknown or does not parse
    ├── ConfigError             worker.toml / environment / overrides are invalid
    │   └── CorruptState        the server's state holds unusable rows (conveyor.server.stores)
    ├── PluginError             a hook plugin failed to load, or implements an unknown hook
    │   └── BackendNotFound     a selected executor / transport / notifier / state store is
    │                           not installed
    ├── TaskDefinitionError     requires() / complete() / run() returned something unusable
    │   ├── DependencyCycle     the dependency graph has a cycle
    │   └── RetryPolicyError    a RetryPolicy made with a value it cannot use (a ValueError too)
    ├── TaskLoadError           a task class cannot be imported or found
    ├── SchedulerUnavailable    the scheduler cannot be reached
    ├── StaleReport             a report about an attempt that is no longer current, refused
    ├── StateStoreError         the server's state store cannot be trusted with a write (its
    │                           file was deleted or replaced under it)
    ├── TaskTimeout             stands for an attempt that timed out, in a task's
    │                           ``RetryPolicy.retry_on`` (conveyor.retry)
    ├── ProcessDied             stands for an attempt whose process died, likewise
    └── InvalidTransition       the worker's state machine was asked for an illegal move
        └── InvalidStatusMove   the scheduler was about to make a status move its table does
                                not list (conveyor.scheduler.policy)

Each error carries its context (task, plugin, backend, key) as attributes as well as in the
message, and every message names what is wrong and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BackendNotFound",
    "ConfigError",
    "ConveyorError",
    "DependencyCycle",
    "InvalidTransition",
    "ParameterError",
    "PluginError",
    "ProcessDied",
    "RetryPolicyError",
    "SchedulerUnavailable",
    "StaleReport",
    "StateStoreError",
    "TaskDefinitionError",
    "TaskLoadError",
    "TaskTimeout",
    "UnknownTask",
]


class ConveyorError(Exception):
    """Root of every error conveyor raises on purpose."""


class ParameterError(ConveyorError, ValueError):
    """A task parameter is missing, unknown, or its value does not parse."""

    def __init__(
        self, message: str, *, task: str = "", parameter: str = "", value: object = None
    ) -> None:
        super().__init__(message)
        self.task = task
        self.parameter = parameter
        self.value = value


class ConfigError(ConveyorError):
    """The configuration (file, environment or overrides) is invalid."""

    def __init__(self, message: str, *, key: str = "", source: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.source = source


class PluginError(ConveyorError):
    """A plugin failed to load, is required but missing, or implements an unknown hook."""

    def __init__(self, message: str, *, plugin: str = "", hook: str = "") -> None:
        super().__init__(message)
        self.plugin = plugin
        self.hook = hook


class BackendNotFound(PluginError):
    """A selected backend is not installed in its entry-point group."""

    def __init__(self, group: str, name: str, installed: Sequence[str]) -> None:
        names = ", ".join(sorted(installed)) or "(none)"
        super().__init__(
            f"no {group} backend named {name!r} is installed; installed: {names}",
            plugin=name,
        )
        self.group = group
        self.name = name
        self.installed = tuple(sorted(installed))


class TaskDefinitionError(ConveyorError):
    """A task's requires(), complete() or run() returned something conveyor cannot use."""

    def __init__(self, message: str, *, task_id: str = "") -> None:
        super().__init__(message)
        self.task_id = task_id


class DependencyCycle(TaskDefinitionError):
    """The dependency graph contains a cycle; ``path`` lists it, first task repeated last."""

    def __init__(self, path: Sequence[str]) -> None:
        super().__init__("dependency cycle: " + " -> ".join(path), task_id=path[0])
        self.path = tuple(path)


class RetryPolicyError(TaskDefinitionError, ValueError):
    """A :class:`conveyor.RetryPolicy` was made with a value it cannot use (the message names
    the field and what was expected)."""


class TaskLoadError(ConveyorError):
    """A task class cannot be imported, found, or is not allowed to be loaded."""


class SchedulerUnavailable(ConveyorError):
    """The scheduler could not be reached within the retry budget."""


class StaleReport(ConveyorError):
    """The scheduler refused a report about an attempt that is no longer the task's current
    one (the task was handed to another worker since): nothing was changed."""


class UnknownTask(ConveyorError, LookupError):
    """A request named a task the scheduler does not know (``cancel``: HTTP 404)."""

    def __init__(self, task_id: str) -> None:
        """Name the task."""
        super().__init__(f"no task {task_id!r} is known to this scheduler")
        self.task_id = task_id


class StateStoreError(ConveyorError):
    """The server's state store refused a write it could not make durable (for the SQLite
    store: its file was deleted or replaced while the server ran); nothing was written."""


class TaskTimeout(ConveyorError):
    """An attempt ran out of time (its ``worker_timeout`` or ``[worker] timeout``).

    Conveyor does not raise it in a task's code: a timed-out attempt's process tree is killed.
    It names that outcome in a task's ``retry_policy`` (:class:`conveyor.RetryPolicy`): a
    ``retry_on`` that does not include it (or a base class of it) disables the task at its
    first time-out instead of retrying it. Without ``retry_on``, time-outs are retried.
    """


class ProcessDied(ConveyorError):
    """An attempt's process ended without reporting a result (killed by a signal, exited, or
    over its memory limit).

    Like :class:`TaskTimeout`, it is never raised in a task's code: it names that outcome in
    a task's ``RetryPolicy.retry_on``, where leaving it out disables the task at the first
    death instead of retrying it. Without ``retry_on``, deaths are retried.
    """


class InvalidTransition(ConveyorError):
    """The worker's state machine was asked to make a move its table does not allow."""

    def __init__(self, state: str, event: str) -> None:
        super().__init__(f"no transition from state {state} on event {event}")
        self.state = state
        self.event = event
