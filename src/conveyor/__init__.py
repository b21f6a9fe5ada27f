"""conveyor: a plugin-extensible workflow worker in the spirit of Luigi.

The public API is re-exported here; see ``docs/`` for the guide.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import events
    from .config import Config, load_config
    from .control.client import Client
    from .control.invalidate import Invalidation, invalidate
    from .control.plan import Plan, PlannedTask, plan
    from .errors import (
        BackendNotFound,
        ConfigError,
        ConveyorError,
        DependencyCycle,
        InvalidTransition,
        ParameterError,
        PluginError,
        ProcessDied,
        SchedulerUnavailable,
        StaleReport,
        TaskDefinitionError,
        TaskLoadError,
        TaskTimeout,
    )
    from .fstargets import FileSystemTarget
    from .hookspecs import hookimpl
    from .intervals import DateInterval
    from .parameters import (
        BoolParameter,
        ChoiceListParameter,
        ChoiceParameter,
        DateHourParameter,
        DateIntervalParameter,
        DateMinuteParameter,
        DateParameter,
        DateTimeParameter,
        DictParameter,
        EnumParameter,
        FloatParameter,
        IntParameter,
        ListParameter,
        MonthParameter,
        NumericalParameter,
        OptionalBoolParameter,
        OptionalChoiceListParameter,
        OptionalChoiceParameter,
        OptionalDateHourParameter,
        OptionalDateIntervalParameter,
        OptionalDateMinuteParameter,
        OptionalDateParameter,
        OptionalDateTimeParameter,
        OptionalDictParameter,
        OptionalEnumParameter,
        OptionalFloatParameter,
        OptionalIntParameter,
        OptionalKind,
        OptionalListParameter,
        OptionalMonthParameter,
        OptionalNumericalParameter,
        OptionalParameter,
        OptionalPathParameter,
        OptionalTaskParameter,
        OptionalTimeDeltaParameter,
        OptionalTupleParameter,
        OptionalYearParameter,
        Parameter,
        PathParameter,
        TaskParameter,
        TimeDeltaParameter,
        TupleParameter,
        YearParameter,
    )
    from .ranges import RangeDaily, RangeHourly, RangeMonthly
    from .retry import RetryPolicy
    from .run import RunResult, build
    from .scheduler import Scheduler
    from .targets import LocalTarget, Target
    from .task import (
        DynamicRequirements,
        ExternalTask,
        Settings,
        Task,
        TaskDefaults,
        WrapperTask,
        flatten,
    )
    from .tasklike import (
        AdaptsTasks,
        ParsesCommandLines,
        ReportsNotes,
        RunsInBatches,
        TaskLike,
        TaskLoader,
        TaskPolicy,
    )
    from .util import inherits, requires
    from .worker.loop import Worker

# Submodules are imported on first use (PEP 562), so that ``import conveyor`` -- done by every
# task module, and by every subprocess attempt -- stays cheap.
_EXPORTS = {
    "events": ("conveyor.events", None),
    "Config": ("conveyor.config", "Config"),
    "load_config": ("conveyor.config", "load_config"),
    **{
        name: ("conveyor.errors", name)
        for name in (
            "BackendNotFound",
            "ConfigError",
            "ConveyorError",
            "DependencyCycle",
            "InvalidTransition",
            "ParameterError",
            "PluginError",
            "ProcessDied",
            "SchedulerUnavailable",
            "StaleReport",
            "TaskDefinitionError",
            "TaskLoadError",
            "TaskTimeout",
        )
    },
    "hookimpl": ("conveyor.hookspecs", "hookimpl"),
    **{
        name: ("conveyor.parameters", name)
        for name in (
            "BoolParameter",
            "ChoiceListParameter",
            "ChoiceParameter",
            "DateHourParameter",
            "DateIntervalParameter",
            "DateMinuteParameter",
            "DateParameter",
            "DateTimeParameter",
            "DictParameter",
            "EnumParameter",
            "FloatParameter",
            "IntParameter",
            "ListParameter",
            "MonthParameter",
            "NumericalParameter",
            "OptionalBoolParameter",
            "OptionalChoiceListParameter",
            "OptionalChoiceParameter",
            "OptionalDateHourParameter",
            "OptionalDateIntervalParameter",
            "OptionalDateMinuteParameter",
            "OptionalDateParameter",
            "OptionalDateTimeParameter",
            "OptionalDictParameter",
            "OptionalEnumParameter",
            "OptionalFloatParameter",
            "OptionalIntParameter",
            "OptionalKind",
            "OptionalListParameter",
            "OptionalMonthParameter",
            "OptionalNumericalParameter",
            "OptionalParameter",
            "OptionalPathParameter",
            "OptionalTaskParameter",
            "OptionalTimeDeltaParameter",
            "OptionalTupleParameter",
            "OptionalYearParameter",
            "Parameter",
            "PathParameter",
            "TaskParameter",
            "TimeDeltaParameter",
            "TupleParameter",
            "YearParameter",
        )
    },
    "RunResult": ("conveyor.run", "RunResult"),
    "build": ("conveyor.run", "build"),
    "Scheduler": ("conveyor.scheduler", "Scheduler"),
    "LocalTarget": ("conveyor.targets", "LocalTarget"),
    "FileSystemTarget": ("conveyor.fstargets", "FileSystemTarget"),
    "DateInterval": ("conveyor.intervals", "DateInterval"),
    "RangeDaily": ("conveyor.ranges", "RangeDaily"),
    "RangeHourly": ("conveyor.ranges", "RangeHourly"),
    "RangeMonthly": ("conveyor.ranges", "RangeMonthly"),
    "RetryPolicy": ("conveyor.retry", "RetryPolicy"),
    "plan": ("conveyor.control.plan", "plan"),
    "Plan": ("conveyor.control.plan", "Plan"),
    "PlannedTask": ("conveyor.control.plan", "PlannedTask"),
    "invalidate": ("conveyor.control.invalidate", "invalidate"),
    "Invalidation": ("conveyor.control.invalidate", "Invalidation"),
    "Client": ("conveyor.control.client", "Client"),
    "inherits": ("conveyor.util", "inherits"),
    "requires": ("conveyor.util", "requires"),
    "Target": ("conveyor.targets", "Target"),
    "DynamicRequirements": ("conveyor.task", "DynamicRequirements"),
    "ExternalTask": ("conveyor.task", "ExternalTask"),
    "Settings": ("conveyor.task", "Settings"),
    "Task": ("conveyor.task", "Task"),
    "TaskDefaults": ("conveyor.task", "TaskDefaults"),
    "TaskLike": ("conveyor.tasklike", "TaskLike"),
    "TaskLoader": ("conveyor.tasklike", "TaskLoader"),
    "AdaptsTasks": ("conveyor.tasklike", "AdaptsTasks"),
    "ParsesCommandLines": ("conveyor.tasklike", "ParsesCommandLines"),
    "ReportsNotes": ("conveyor.tasklike", "ReportsNotes"),
    "RunsInBatches": ("conveyor.tasklike", "RunsInBatches"),
    "TaskPolicy": ("conveyor.tasklike", "TaskPolicy"),
    "WrapperTask": ("conveyor.task", "WrapperTask"),
    "flatten": ("conveyor.task", "flatten"),
    "Worker": ("conveyor.worker.loop", "Worker"),
}


def __getattr__(name: str) -> Any:
    """Import the submodule that defines ``name`` on first access."""
    try:
        module_name, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'conveyor' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, for completion."""
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "AdaptsTasks",
    "BackendNotFound",
    "BoolParameter",
    "ChoiceListParameter",
    "ChoiceParameter",
    "Client",
    "Config",
    "ConfigError",
    "ConveyorError",
    "DateHourParameter",
    "DateInterval",
    "DateIntervalParameter",
    "DateMinuteParameter",
    "DateParameter",
    "DateTimeParameter",
    "DependencyCycle",
    "DictParameter",
    "DynamicRequirements",
    "EnumParameter",
    "ExternalTask",
    "FileSystemTarget",
    "FloatParameter",
    "IntParameter",
    "InvalidTransition",
    "Invalidation",
    "ListParameter",
    "LocalTarget",
    "MonthParameter",
    "NumericalParameter",
    "OptionalBoolParameter",
    "OptionalChoiceListParameter",
    "OptionalChoiceParameter",
    "OptionalDateHourParameter",
    "OptionalDateIntervalParameter",
    "OptionalDateMinuteParameter",
    "OptionalDateParameter",
    "OptionalDateTimeParameter",
    "OptionalDictParameter",
    "OptionalEnumParameter",
    "OptionalFloatParameter",
    "OptionalIntParameter",
    "OptionalKind",
    "OptionalListParameter",
    "OptionalMonthParameter",
    "OptionalNumericalParameter",
    "OptionalParameter",
    "OptionalPathParameter",
    "OptionalTaskParameter",
    "OptionalTimeDeltaParameter",
    "OptionalTupleParameter",
    "OptionalYearParameter",
    "Parameter",
    "ParameterError",
    "ParsesCommandLines",
    "PathParameter",
    "Plan",
    "PlannedTask",
    "PluginError",
    "ProcessDied",
    "RangeDaily",
    "RangeHourly",
    "RangeMonthly",
    "ReportsNotes",
    "RetryPolicy",
    "RunResult",
    "RunsInBatches",
    "Scheduler",
    "SchedulerUnavailable",
    "Settings",
    "StaleReport",
    "Target",
    "Task",
    "TaskDefaults",
    "TaskDefinitionError",
    "TaskLike",
    "TaskLoadError",
    "TaskLoader",
    "TaskParameter",
    "TaskPolicy",
    "TaskTimeout",
    "TimeDeltaParameter",
    "TupleParameter",
    "Worker",
    "WrapperTask",
    "YearParameter",
    "__version__",
    "build",
    "events",
    "flatten",
    "hookimpl",
    "inherits",
    "invalidate",
    "load_config",
    "plan",
    "requires",
]
