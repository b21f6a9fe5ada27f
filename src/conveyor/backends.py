"""Backends found through entry points with stevedore: executors, transports, notifiers, stores.

Only the selected backend of a group is imported (``DriverManager`` checks the name before it
loads anything). Built-ins are registered through conveyor's own entry points, the same path a
third party's backend takes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stevedore import DriverManager
from stevedore.exception import NoMatches

from .errors import BackendNotFound, PluginError
from .plugins import entry_point_names, load_local_plugins
from .settings import check_backend_settings, schema_of
from .tasklike import DEFAULT_LOADER, TaskLoader

if TYPE_CHECKING:
    from .config import Config

__all__ = [
    "GROUPS",
    "TABLES",
    "InstalledPlugin",
    "build_backend",
    "check_selected",
    "describe_installed",
    "installed_names",
    "load_backend",
    "load_task_loader",
    "other_task_loaders",
]

GROUPS = {
    "executor": "conveyor.executors",
    "scheduler": "conveyor.schedulers",
    "notifier": "conveyor.notifiers",
    "state_store": "conveyor.state_stores",
    "task_loader": "conveyor.task_loaders",
}
HOOK_GROUP = "conveyor.plugins"
TABLES = {
    "conveyor.executors": "executors",
    "conveyor.schedulers": "schedulers",
    "conveyor.notifiers": "notifiers",
    "conveyor.state_stores": "state_stores",
}
"""The configuration table of each group: a backend's own keys are ``[<table>.<name>]``."""

_cache: dict[tuple[str, str], Any] = {}


def installed_names(group: str) -> list[str]:
    """Names installed in an entry-point group (nothing is imported)."""
    return [name for name, _, _ in entry_point_names(group)]


def load_backend(group: str, name: str) -> Any:
    """Import and return the object a backend's entry point names.

    Raises BackendNotFound (listing the installed names) when ``name`` is not installed, and
    PluginError when it is installed but fails to import.
    """
    key = (group, name)
    if key in _cache:
        return _cache[key]
    installed = installed_names(group)
    if name not in installed:
        raise BackendNotFound(group, name, installed)
    errors: list[BaseException] = []

    def on_failure(_mgr: Any, _ep: Any, err: BaseException) -> None:
        errors.append(err)

    try:
        manager = DriverManager(
            group,
            name,
            on_load_failure_callback=on_failure,
            on_missing_entrypoints_callback=None,
        )
    except NoMatches:
        if errors:
            raise _import_failed(group, name, errors[0]) from None
        raise BackendNotFound(group, name, installed) from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # stevedore lets SystemExit through: still the backend's
        raise _import_failed(group, name, err) from None
    _cache[key] = manager.driver
    return manager.driver


def load_task_loader(name: str) -> TaskLoader:
    """The task loader ``name`` of ``conveyor.task_loaders`` (``"conveyor"``: conveyor's own
    classes), built once per process; BackendNotFound or PluginError as for any backend."""
    key = ("conveyor.task_loaders#instance", name)
    if key not in _cache:
        _cache[key] = load_backend("conveyor.task_loaders", name)()
    loader: TaskLoader = _cache[key]
    return loader


def other_task_loaders() -> list[TaskLoader]:
    """Every installed task loader but conveyor's own, by entry-point name, each built once
    per process (asked for the optional capabilities of :mod:`conveyor.tasklike` when an
    object or a command line is not conveyor's); BackendNotFound or PluginError as for any
    backend."""
    key = ("conveyor.task_loaders#others", "")
    if key not in _cache:
        names = installed_names(GROUPS["task_loader"])
        _cache[key] = [load_task_loader(name) for name in names if name != DEFAULT_LOADER]
    loaders: list[TaskLoader] = _cache[key]
    return loaders


def build_backend(
    group: str,
    name: str,
    config: Config,
    context: Callable[[Mapping[str, Any]], object] | None = None,
) -> Any:
    """Build the backend ``name`` of ``group``: the one way every kind of backend is made.

    The class the entry point names is loaded, its ``[<table>.<name>]`` table is validated
    against the class's ``settings_schema`` (ConfigError naming the file and key otherwise),
    and the class is called with ``context(settings)`` — the kind's context object holding the
    validated settings and what the worker or server gives every backend of that kind — or,
    without ``context``, with the settings alone (a notifier, see docs/notifiers.md).
    """
    cls = load_backend(group, name)
    settings = config.backend_settings(TABLES[group], name, schema_of(cls))
    check_backend_settings(cls, settings, config.source or "")
    return cls(settings if context is None else context(settings))


def check_selected(config: Config) -> None:
    """Load every backend the configuration selects for a worker — its executor (unless
    ``auto``), its transport, its notifiers — and validate their tables (BackendNotFound,
    PluginError or ConfigError), as the worker would at start-up."""
    selected = [("conveyor.schedulers", config.scheduler.transport)]
    if config.worker.executor != "auto":
        selected.append(("conveyor.executors", config.worker.executor))
    selected += [("conveyor.notifiers", name) for name in config.notifiers.enabled]
    for group, name in selected:
        cls = load_backend(group, name)
        settings = config.backend_settings(TABLES[group], name, schema_of(cls))
        check_backend_settings(cls, settings, config.source or "")


def _import_failed(group: str, name: str, err: BaseException) -> PluginError:
    return PluginError(
        f"{group} backend {name!r} is installed but failed to import: {type(err).__name__}: {err}",
        plugin=name,
    )


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    """One installed backend or hook plugin, as ``conveyor plugins`` lists it."""

    group: str
    name: str
    distribution: str
    version: str
    loads: bool
    error: str = ""
    warning: str = ""


def describe_installed(local: Sequence[str] = ()) -> list[InstalledPlugin]:
    """Every backend and hook plugin installed, and the ``local`` hook plugins of the
    configuration, each tried for import."""
    out = []
    for group in (*GROUPS.values(), HOOK_GROUP):
        for name, dist, version in entry_point_names(group):
            error = _try_load(group, name)
            out.append(InstalledPlugin(group, name, dist, version, not error, error))
    if local:
        loaded, failures = load_local_plugins(local)
        out.extend(
            InstalledPlugin(HOOK_GROUP, s.name, s.distribution, "", True, warning=s.warning)
            for s in loaded
        )
        out.extend(
            InstalledPlugin(HOOK_GROUP, f.name, f.distribution, "", False, f.error)
            for f in failures
        )
    return out


def _try_load(group: str, name: str) -> str:
    try:
        load_backend(group, name)
    except PluginError as exc:
        return str(exc)
    return ""
