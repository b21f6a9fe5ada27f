"""conveyor: a plugin-extensible workflow worker in the spirit of Luigi.

The public API is re-exported here; see ``docs/`` for the guide.
"""

from __future__ import annotations

from . import events
from .config import Config, load_config
from .errors import (
    BackendNotFound,
    ConfigError,
    ConveyorError,
    DependencyCycle,
    InvalidTransition,
    ParameterError,
    PluginError,
    SchedulerUnavailable,
    TaskDefinitionError,
    TaskLoadError,
)
from .hookspecs import hookimpl
from .parameters import (
    BoolParameter,
    ChoiceParameter,
    DateParameter,
    DateTimeParameter,
    DictParameter,
    EnumParameter,
    FloatParameter,
    IntParameter,
    ListParameter,
    Parameter,
    PathParameter,
)
from .run import RunResult, build
from .scheduler import Scheduler
from .targets import LocalTarget, Target
from .task import ExternalTask, Task, WrapperTask, flatten
from .worker.loop import Worker

__version__ = "0.1.0"

__all__ = [
    "BackendNotFound",
    "BoolParameter",
    "ChoiceParameter",
    "Config",
    "ConfigError",
    "ConveyorError",
    "DateParameter",
    "DateTimeParameter",
    "DependencyCycle",
    "DictParameter",
    "EnumParameter",
    "ExternalTask",
    "FloatParameter",
    "IntParameter",
    "InvalidTransition",
    "ListParameter",
    "LocalTarget",
    "Parameter",
    "ParameterError",
    "PathParameter",
    "PluginError",
    "RunResult",
    "Scheduler",
    "SchedulerUnavailable",
    "Target",
    "Task",
    "TaskDefinitionError",
    "TaskLoadError",
    "Worker",
    "WrapperTask",
    "__version__",
    "build",
    "events",
    "flatten",
    "hookimpl",
    "load_config",
]
