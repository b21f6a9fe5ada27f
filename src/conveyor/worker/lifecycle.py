"""The worker's plugin manager: the observer relay plus the lifecycle hooks.

``conveyor_configure(config)`` is historic (as pytest's ``pytest_configure``): every plugin of a
worker is called once with its configuration, those registered when the worker is built and
those registered later alike. ``conveyor_unconfigure(flush_timeout)`` is called once, when the
worker closes. Like every other hook, each implementation is called on its own: one that raises
is logged with its plugin's name and the others still run. (pluggy's own ``call_historic``
would stop at the first implementation that raises, and raise out of a late ``register``.)
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping

import structlog

from ..config import Config
from ..plugins import HookRelay

__all__ = ["WorkerHooks"]

log = structlog.get_logger("conveyor.plugins")
_CONFIGURE = "conveyor_configure"
_UNCONFIGURE = "conveyor_unconfigure"


class WorkerHooks(HookRelay):
    """A :class:`~conveyor.plugins.HookRelay` that also configures and unconfigures plugins."""

    def __init__(self) -> None:
        """A relay whose plugins are not configured yet."""
        super().__init__()
        self._config: Config | None = None
        self._unconfigured = False

    @property
    def configured(self) -> bool:
        """Whether :meth:`configure` was called (and so :meth:`unconfigure` will do something)."""
        return self._config is not None

    def configure(self, config: Config) -> None:
        """Call every ``conveyor_configure`` with ``config``, and remember it for plugins
        registered later; a second call does nothing (a worker is configured once)."""
        if self._config is not None:
            return
        self._config = config
        self._call_each(_CONFIGURE, {"config": config})

    def register(self, plugin: object, name: str) -> None:
        """Register ``plugin`` (PluginError as for any relay); once the worker is configured,
        call the plugin's own ``conveyor_configure`` with the worker's configuration."""
        super().register(plugin, name)
        if self._config is not None and not self._unconfigured:
            self._call_each(_CONFIGURE, {"config": self._config}, only=plugin)

    def unconfigure(self, flush_timeout: float) -> None:
        """Call every ``conveyor_unconfigure`` once, if the plugins were configured."""
        if self._config is None or self._unconfigured:
            return
        self._unconfigured = True
        self._call_each(_UNCONFIGURE, {"flush_timeout": flush_timeout})

    def _call_each(
        self, hook: str, kwargs: Mapping[str, object], only: object | None = None
    ) -> None:
        """Call the implementations of ``hook`` (of plugin ``only``, if given) in pluggy's
        order, each guarded on its own."""
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            if only is not None and impl.plugin is not only:
                continue
            try:
                impl.function(*[kwargs[arg] for arg in impl.argnames])
            except Exception:
                log.error(
                    "hook implementation raised",
                    plugin=impl.plugin_name,
                    hook=hook,
                    error=traceback.format_exc(),
                )
