"""Backends found through entry points with stevedore: executors, transports, notifiers, stores.

Only the selected backend of a group is imported (``DriverManager`` checks the name before it
loads anything). Built-ins are registered through conveyor's own entry points, the same path a
third party's backend takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stevedore import DriverManager
from stevedore.exception import NoMatches

from .errors import BackendNotFound, PluginError
from .plugins import entry_point_names, load_local_plugins

__all__ = ["GROUPS", "InstalledPlugin", "describe_installed", "installed_names", "load_backend"]

GROUPS = {
    "executor": "conveyor.executors",
    "scheduler": "conveyor.schedulers",
    "notifier": "conveyor.notifiers",
    "state_store": "conveyor.state_stores",
}
HOOK_GROUP = "conveyor.plugins"

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
            err = errors[0]
            raise PluginError(
                f"{group} backend {name!r} is installed but failed to import: "
                f"{type(err).__name__}: {err}",
                plugin=name,
            ) from None
        raise BackendNotFound(group, name, installed) from None
    _cache[key] = manager.driver
    return manager.driver


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
