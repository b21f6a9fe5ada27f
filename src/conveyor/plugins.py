"""Hook plugins: loading, blocking, validation and guarded dispatch.

:class:`HookRelay` is the typed facade over pluggy that the worker fires events through. It
calls every implementation separately (pluggy itself would stop at the first that raises), logs
a failing one with its plugin's name, and carries on.

Plugins come from four places, in this order: conveyor's own (:data:`BUILTIN_PLUGINS`: the
transition and failure logs, the execution summary, the notifier dispatch), the
``conveyor.plugins`` entry points (unless ``CONVEYOR_DISABLE_PLUGIN_AUTOLOAD=1``),
``[plugins] local`` modules, and objects handed to ``Worker(plugins=...)``. Names in
``[plugins] disable`` or ``CONVEYOR_DISABLE_PLUGINS`` are blocked before anything is imported
(conveyor's own included). An entry point that fails to import is reported and
skipped, unless it is named in ``[plugins] required``; a ``[plugins] local`` entry that fails is
fatal (PluginError), since it was asked for by name.
"""

from __future__ import annotations

import difflib
import importlib
import os
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy
import structlog
from stevedore import NamedExtensionManager

from . import hookspecs
from .config import Config, PluginSettings
from .core.summary import WorkerSummary
from .errors import ConfigError, PluginError
from .events import AttemptContext, Event

__all__ = [
    "BUILTIN_PLUGINS",
    "START_REFUSALS",
    "AttemptHooks",
    "HookRelay",
    "LifecycleRelay",
    "LoadFailure",
    "PluginSource",
    "attempt_hooks",
    "blocked_names",
    "load_builtin_plugins",
    "load_hook_plugins",
    "load_local_plugins",
]

GROUP = "conveyor.plugins"
LOCAL = "(local)"  # the distribution of a [plugins] local entry, as reported
log = structlog.get_logger("conveyor.plugins")

_Impl = tuple[str, Callable[..., Any], bool]

BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("conveyor.transition-log", "conveyor.worker.builtin_plugins:transition_log"),
    ("conveyor.failure-log", "conveyor.worker.builtin_plugins:failure_log"),
    ("conveyor.summary", "conveyor.worker.builtin_plugins:SummaryPlugin.for_config"),
    ("conveyor.notify", "conveyor.notifiers.dispatch:NotifyPlugin.for_config"),
)
"""conveyor's own plugins of a worker, registered first and by name, like a third party's: ``(name,
"module:factory")``. The factory is called with the worker's Config and the relay it will be
registered in (to fire hooks of its own: the notifier dispatch's
``conveyor_notification_sent``), and returns the plugin, or None when it has nothing to do for
that configuration (it is then not registered, which keeps the per-task cost of an unused plugin
at nothing). They are named by import path, as entry points are, so the worker imports none of
them (the notifier dispatch especially: an import-linter contract keeps ``conveyor.worker`` away
from ``conveyor.notifiers``)."""

START_REFUSALS: tuple[type[Exception], ...] = (ConfigError, PluginError)
"""What a worker's ``conveyor_configure`` implementation raises to refuse the start (a
notifier that cannot work, a backend that is not installed): the worker's construction fails
with it, after the plugins already configured are unconfigured. Anything else is logged."""


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A plugin that could not be loaded: its name, distribution and the error."""

    name: str
    distribution: str
    error: str


@dataclass(frozen=True, slots=True)
class PluginSource:
    """A loaded hook plugin and where it came from; ``warning`` says why it may do nothing."""

    name: str
    plugin: object
    distribution: str = ""
    warning: str = ""


class HookRelay:
    """A pluggy PluginManager with validated registration and isolated, typed dispatch."""

    def __init__(self) -> None:
        """Create a manager that knows every spec in :mod:`conveyor.hookspecs`."""
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._impls: dict[str, tuple[_Impl, ...]] = {}
        self.generation = 0
        """Grows whenever the registered plugins change: what a caller worked out from
        :meth:`wants` holds while it stays the same (the worker asks once per change, not
        once per event)."""

    def _changed(self) -> None:
        """Forget what was looked up about the registered plugins (they changed)."""
        self._impls.clear()
        self.generation += 1

    def register(self, plugin: object, name: str) -> None:
        """Register ``plugin`` under ``name``; PluginError if it implements an unknown hook."""
        try:
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"plugin {name!r} has an invalid hook implementation: {exc}", plugin=name
            ) from None
        except ValueError as exc:
            raise PluginError(f"plugin {name!r} could not be registered: {exc}") from None
        self._reject_unknown_hooks(plugin, name)
        self._changed()

    def _reject_unknown_hooks(self, plugin: object, name: str) -> None:
        for caller in self.pm.get_hookcallers(plugin) or ():
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and (impl.hookwrapper or impl.wrapper):
                    self.pm.unregister(plugin)
                    raise PluginError(
                        f"plugin {name!r} implements {caller.name!r} as a hook wrapper; "
                        "conveyor's hooks are observers called one by one, so implement it "
                        "as a plain @conveyor.hookimpl",
                        plugin=name,
                        hook=caller.name,
                    )
            if caller.spec is None:
                self.pm.unregister(plugin)
                known = [
                    n
                    for n in dir(self.pm.hook)
                    if n.startswith("conveyor_") and getattr(self.pm.hook, n).spec is not None
                ]
                close = difflib.get_close_matches(caller.name, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise PluginError(
                    f"plugin {name!r} implements unknown hook {caller.name!r}{hint}",
                    plugin=name,
                    hook=caller.name,
                )

    def names(self) -> list[str]:
        """Names of the registered plugins."""
        return [name for name, _ in self.pm.list_name_plugin()]

    def wants(self, hook: str) -> bool:
        """True if any registered plugin implements ``hook`` (lets callers skip building
        an event nobody receives)."""
        impls = self._impls.get(hook)
        if impls is None:
            impls = self._collect(hook)
        return bool(impls)

    def fire(self, event: Event) -> None:
        """Deliver ``event`` to every implementation of its hook, each guarded on its own."""
        impls = self._impls.get(event.hook)
        if impls is None:
            impls = self._collect(event.hook)
        for plugin_name, function, takes_event in impls:
            try:
                if takes_event:
                    function(event)
                else:
                    function()
            except Exception:
                log.error(
                    "hook implementation raised",
                    plugin=plugin_name,
                    hook=event.hook,
                    task_id=event.task_id,
                    error=traceback.format_exc(),
                )

    def summary(self, event: WorkerSummary) -> str:
        """The execution summary of a finished run: the first ``conveyor_worker_summary``
        implementation that returns a string for ``event``, the plugin registered last asked
        first (so a plugin replaces conveyor's own ``conveyor.summary``, registered first); one
        that raises or returns something else is logged and the next is asked. An
        implementation without the ``event`` argument is called without it (as pluggy allows).
        ``""`` if none answers."""
        for impl in reversed(self.pm.hook.conveyor_worker_summary.get_hookimpls()):
            try:
                text = impl.function(event) if impl.argnames else impl.function()
            except Exception:
                log.error(
                    "hook implementation raised",
                    plugin=impl.plugin_name,
                    hook="conveyor_worker_summary",
                    error=traceback.format_exc(),
                )
                continue
            if isinstance(text, str):
                return text
            if text is not None:
                log.error(
                    "hook implementation returned neither a str nor None; ignored",
                    plugin=impl.plugin_name,
                    hook="conveyor_worker_summary",
                    returned=type(text).__name__,
                )
        return ""

    def attempt_environment(self, event: Event) -> tuple[dict[str, str], tuple[str, ...]]:
        """Ask every ``conveyor_attempt_environment`` implementation for ``event`` (a
        TaskStarted): the variables they returned, merged (a later plugin's value wins), and
        the names of the plugins that answered (not None), in order; those take part in the
        attempt's ``conveyor_attempt_begin``/``end``. One that raises or answers something
        other than a str-to-str mapping is logged and left out."""
        env: dict[str, str] = {}
        names: list[str] = []
        for impl in reversed(self.pm.hook.conveyor_attempt_environment.get_hookimpls()):
            try:
                answer = impl.function(event) if impl.argnames else impl.function()
                if answer is None:
                    continue
                if not isinstance(answer, Mapping) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in answer.items()
                ):
                    raise TypeError(f"returned {type(answer).__name__}, not a Mapping[str, str]")
                bad = answer and [k for k, v in answer.items() if not _env_name_ok(k) or "\0" in v]
                if bad:
                    raise ValueError(f"returned variables an environment cannot hold: {bad!r}")
            except Exception:
                log.error(
                    "hook implementation raised",
                    plugin=impl.plugin_name,
                    hook=_ENVIRONMENT,
                    task_id=event.task_id,
                    error=traceback.format_exc(),
                )
                continue
            env.update(answer)
            names.append(impl.plugin_name)
        return env, tuple(names)

    def _collect(self, hook: str) -> tuple[_Impl, ...]:
        caller = getattr(self.pm.hook, hook)
        impls = tuple(
            (impl.plugin_name, impl.function, bool(impl.argnames))
            for impl in reversed(caller.get_hookimpls())
        )
        self._impls[hook] = impls
        return impls


_ENVIRONMENT = "conveyor_attempt_environment"


def _env_name_ok(name: str) -> bool:
    """Whether ``name`` can name an environment variable (not empty, no ``=``, no NUL)."""
    return bool(name) and "=" not in name and "\0" not in name


_BEGIN = "conveyor_attempt_begin"
_END = "conveyor_attempt_end"


class AttemptHooks:
    """The ``conveyor_attempt_begin``/``conveyor_attempt_end`` implementations of some
    plugins, called where an attempt runs, each guarded on its own."""

    def __init__(self, relay: HookRelay, names: Iterable[str], in_worker: bool) -> None:
        """Call the implementations of the plugins ``names`` registered in ``relay`` (the
        worker's own, for its in-process executors: ``in_worker``)."""
        self.in_worker = in_worker
        wanted = set(names)
        self._begin = [i for i in _impls(relay, _BEGIN) if i.plugin_name in wanted]
        self._end = [i for i in _impls(relay, _END) if i.plugin_name in wanted]

    def __bool__(self) -> bool:
        """Whether there is anything to call."""
        return bool(self._begin or self._end)

    def begin(self, attempt: AttemptContext) -> None:
        """``conveyor_attempt_begin(attempt)``."""
        _call_guarded(self._begin, _BEGIN, {"attempt": attempt}, task_id=attempt.task_id)

    def end(self, attempt: AttemptContext, outcome: str) -> None:
        """``conveyor_attempt_end(attempt, outcome)``."""
        kwargs = {"attempt": attempt, "outcome": outcome}
        _call_guarded(self._end, _END, kwargs, task_id=attempt.task_id)


def _impls(relay: HookRelay, hook: str) -> list[Any]:
    return list(reversed(getattr(relay.pm.hook, hook).get_hookimpls()))


def _call_guarded(
    impls: Iterable[Any],
    hook: str,
    kwargs: Mapping[str, object],
    refusals: tuple[type[Exception], ...] = (),
    **fields: str,
) -> list[object]:
    """Call each implementation with the ``kwargs`` it takes: what each returned. One that
    raises is logged with its plugin's name (and ``fields``), counts as None, and the next is
    called; one of ``refusals`` is raised."""
    answers: list[object] = []
    for impl in impls:
        try:
            answers.append(impl.function(*[kwargs[arg] for arg in impl.argnames]))
        except refusals:
            raise
        except Exception:
            answers.append(None)
            log.error(
                "hook implementation raised",
                plugin=impl.plugin_name,
                hook=hook,
                error=traceback.format_exc(),
                **fields,
            )
    return answers


_attempt_hooks: dict[tuple[str, ...], AttemptHooks] = {}


def attempt_hooks(names: tuple[str, ...]) -> AttemptHooks | None:
    """The attempt hooks of the ``conveyor.plugins`` entry points ``names``, loaded here (in
    an attempt's own process: ``AttemptSpec.plugins``), once per process; None for none. A
    name that is not an installed entry point, or fails to load, is logged and left out:
    only installed plugins are ever imported this way."""
    if not names:
        return None
    hooks = _attempt_hooks.get(names)
    if hooks is None:
        relay = HookRelay()
        failures: list[LoadFailure] = []
        loaded: list[PluginSource] = []
        _load_entry_points(set(), loaded, failures, only=set(names))
        found = {s.name for s in loaded} | {f.name for f in failures}
        for name in names:
            if name not in found:
                log.warning("attempt plugin is not an installed entry point; skipped", plugin=name)
        for failure in failures:
            log.warning("attempt plugin failed to load; skipped", plugin=failure.name)
        for source in loaded:
            try:
                relay.register(source.plugin, source.name)
            except PluginError as exc:
                log.warning("attempt plugin could not be registered", error=str(exc))
        hooks = _attempt_hooks[names] = AttemptHooks(relay, names, in_worker=False)
    return hooks or None


def blocked_names(settings: PluginSettings, environ: Mapping[str, str]) -> set[str]:
    """Plugin names blocked by ``[plugins] disable`` and ``CONVEYOR_DISABLE_PLUGINS``."""
    from_env = environ.get("CONVEYOR_DISABLE_PLUGINS", "")
    return set(settings.disable) | {n.strip() for n in from_env.split(",") if n.strip()}


def load_builtin_plugins(
    config: Config, environ: Mapping[str, str] | None = None, relay: HookRelay | None = None
) -> list[PluginSource]:
    """conveyor's own plugins (:data:`BUILTIN_PLUGINS`) for ``config``, those blocked by
    ``[plugins] disable`` / ``CONVEYOR_DISABLE_PLUGINS`` and those whose factory returns None
    left out. They are part of conveyor: one that fails to import is a bug, and raises."""
    blocked = blocked_names(config.plugins, os.environ if environ is None else environ)
    loaded: list[PluginSource] = []
    for name, path in BUILTIN_PLUGINS:
        if name in blocked:
            continue
        module_name, _, attrs = path.partition(":")
        factory: Any = importlib.import_module(module_name)
        for attr in attrs.split("."):
            factory = getattr(factory, attr)
        plugin = factory(config, relay)
        if plugin is not None:
            loaded.append(PluginSource(name, plugin, "conveyor"))
    return loaded


def load_hook_plugins(
    settings: PluginSettings, environ: Mapping[str, str] | None = None
) -> tuple[list[PluginSource], list[LoadFailure]]:
    """Load entry-point and local hook plugins; PluginError if a required one is missing or
    a ``[plugins] local`` entry fails to load (a failing entry point is logged and skipped)."""
    env = os.environ if environ is None else environ
    blocked = blocked_names(settings, env)
    loaded: list[PluginSource] = []
    failures: list[LoadFailure] = []
    autoload = env.get("CONVEYOR_DISABLE_PLUGIN_AUTOLOAD", "").strip().lower() not in (
        "1",
        "true",
        "yes",
    )
    if autoload:
        _load_entry_points(blocked, loaded, failures)
    for spec in settings.local:
        if spec not in blocked:
            _load_local(spec, loaded, failures)
    _check_required(settings.required, loaded, failures, blocked, autoload)
    for failure in failures:
        if failure.distribution != LOCAL:
            log.warning(
                "plugin failed to load; skipped",
                plugin=failure.name,
                distribution=failure.distribution,
                error=failure.error,
            )
    for failure in failures:
        if failure.distribution == LOCAL:  # asked for by name: never skipped quietly
            raise PluginError(
                f"[plugins] local entry {failure.name!r} failed to load: {failure.error}; fix "
                "it, or remove it from [plugins] local (or list it in [plugins] disable)",
                plugin=failure.name,
            )
    return loaded, failures


def load_local_plugins(specs: Iterable[str]) -> tuple[list[PluginSource], list[LoadFailure]]:
    """Import ``[plugins] local`` entries (``module`` or ``module:attr``), without blocking."""
    loaded: list[PluginSource] = []
    failures: list[LoadFailure] = []
    for spec in specs:
        _load_local(spec, loaded, failures)
    return loaded, failures


def entry_point_names(group: str) -> list[tuple[str, str, str]]:
    """``(name, distribution, version)`` of every entry point of ``group``, without loading."""
    from importlib.metadata import entry_points

    out = []
    for ep in entry_points(group=group):
        dist = getattr(ep, "dist", None)
        out.append((ep.name, dist.name if dist else "", dist.version if dist else ""))
    return sorted(out)


def _load_entry_points(
    blocked: set[str],
    loaded: list[PluginSource],
    failures: list[LoadFailure],
    only: set[str] | None = None,
) -> None:
    dists = {name: dist for name, dist, _ in entry_point_names(GROUP)}
    wanted = [n for n in dists if n not in blocked and (only is None or n in only)]
    if not wanted:
        return

    def on_failure(_mgr: Any, ep: Any, err: BaseException) -> None:
        failures.append(LoadFailure(ep.name, dists.get(ep.name, ""), _describe(err)))

    for name in wanted:
        # one manager per plugin: stevedore reports an Exception through on_failure but lets
        # SystemExit (and AssertionError) through, which must not stop the other plugins
        try:
            manager = NamedExtensionManager(
                GROUP,
                names=[name],
                on_load_failure_callback=on_failure,
                on_missing_entrypoints_callback=None,
            )
            for ext in manager.extensions:
                loaded.append(PluginSource(ext.name, _instantiate(ext.plugin), dists[ext.name]))
        except _LET_THROUGH:
            raise
        except BaseException as exc:  # a plugin's import is its own: never the worker's exit
            failures.append(LoadFailure(name, dists.get(name, ""), _describe(exc)))


# Ctrl+C while plugins load stops the program; every other exception is the plugin's failure
_LET_THROUGH = (KeyboardInterrupt,)


def _load_local(spec: str, loaded: list[PluginSource], failures: list[LoadFailure]) -> None:
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        if attr:
            obj = _instantiate(getattr(obj, attr))
    except _LET_THROUGH:
        raise
    except BaseException as exc:  # SystemExit at import included: reported, not an exit
        failures.append(LoadFailure(spec, LOCAL, _describe(exc)))
        return
    warning = "" if attr else _no_hooks_warning(spec, obj)
    if warning:
        log.warning(warning, plugin=spec)
    loaded.append(PluginSource(spec, obj, LOCAL, warning))


def _is_hookimpl(value: object) -> bool:
    return callable(value) and hasattr(value, f"{hookspecs.PROJECT}_impl")


def _no_hooks_warning(spec: str, module: Any) -> str:
    """A warning when a local plugin module has no hook implementation of its own ('' else).

    The usual cause is hooks written as methods of a class, which the module form does not
    instantiate; the warning names such classes as ``module:Class``.
    """
    if any(_is_hookimpl(value) for value in vars(module).values()):
        return ""
    classes = [
        f"{spec}:{name}"
        for name, value in vars(module).items()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and any(_is_hookimpl(getattr(value, attr, None)) for attr in dir(value))
    ]
    if classes:
        hint = "its hooks are methods of a class; name it as " + " or ".join(
            repr(c) for c in classes
        )
    else:
        hint = f"decorate functions with @conveyor.hookimpl, or name a class as '{spec}:Class'"
    return f"local plugin {spec!r} defines no hook implementation at module level: {hint}"


def _instantiate(obj: Any) -> Any:
    """Entry points may name a module, an instance, or a class (instantiated without args)."""
    return obj() if isinstance(obj, type) else obj


def _check_required(
    required: Iterable[str],
    loaded: list[PluginSource],
    failures: list[LoadFailure],
    blocked: set[str],
    autoload: bool,
) -> None:
    have = {source.name for source in loaded}
    failed = {failure.name: failure for failure in failures}
    for name in required:
        if name in have:
            continue
        if name in failed:
            reason = f"it failed to load: {failed[name].error}"
        elif name in blocked:
            reason = "it is disabled"
        elif not autoload:
            reason = "it was not loaded (CONVEYOR_DISABLE_PLUGIN_AUTOLOAD is set)"
        else:
            reason = "it is not installed"
        raise PluginError(f"required plugin {name!r} is unavailable: {reason}", plugin=name)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


_CONFIGURE = "conveyor_configure"
_UNCONFIGURE = "conveyor_unconfigure"


class LifecycleRelay(HookRelay):
    """A :class:`HookRelay` that also configures and unconfigures its plugins: a worker's
    and the central server's.

    ``conveyor_configure(config)`` is historic (as pytest's ``pytest_configure``): every plugin
    is called once with the configuration, those registered later too;
    ``conveyor_unconfigure(flush_timeout)`` once, at the end. Each implementation is called on
    its own: one that raises is logged with its plugin's name and the others still run
    (pluggy's own ``call_historic`` would stop at the first that raises, and raise out of a
    late ``register``) — unless what it raises is one of ``refusals`` (a worker's are
    :data:`START_REFUSALS`): then the start is refused. The plugins configured before it are
    unconfigured (``flush_timeout`` 0), nothing is configured after it, and the error is
    raised from :meth:`configure` (from :meth:`register`, for a late plugin, which is then
    unregistered)."""

    def __init__(self, refusals: tuple[type[Exception], ...] = ()) -> None:
        """A relay whose plugins are not configured yet; a configure implementation raising
        one of ``refusals`` refuses the start (none: every failure is logged)."""
        super().__init__()
        self._config: Config | None = None
        self._unconfigured = False
        self._refusals = refusals

    @property
    def configured(self) -> bool:
        """Whether :meth:`configure` was called (and so :meth:`unconfigure` will do something)."""
        return self._config is not None

    def configure(self, config: Config) -> None:
        """Call every ``conveyor_configure`` with ``config``, and remember it for plugins
        registered later; a second call does nothing (configured once). A refusal (see the
        class) unconfigures the plugins configured so far and is raised."""
        if self._config is not None:
            return
        self._config = config
        done: list[object] = []
        leaving: list[object] = []
        try:
            for impl in reversed(self.pm.hook.conveyor_configure.get_hookimpls()):
                answer = self._call_one(impl, _CONFIGURE, {"config": config})
                (leaving if answer is False else done).append(impl.plugin)
        except self._refusals:
            self._unconfigured = True  # nothing more: the start is refused
            for impl in reversed(self.pm.hook.conveyor_unconfigure.get_hookimpls()):
                if impl.plugin in done:
                    self._call_one(impl, _UNCONFIGURE, {"flush_timeout": 0.0})
            raise
        for plugin in leaving:
            self._leave(plugin)

    def register(self, plugin: object, name: str) -> None:
        """Register ``plugin`` (PluginError as for any relay); once configured,
        call the plugin's own ``conveyor_configure`` with the configuration (a refusal
        unregisters it and is raised)."""
        super().register(plugin, name)
        if self._config is None or self._unconfigured:
            return
        try:
            answers = self._call_each(_CONFIGURE, {"config": self._config}, only=plugin)
        except self._refusals:
            self.pm.unregister(plugin)
            self._changed()
            raise
        if any(answer is False for answer in answers):  # (that value; 0 == False too)
            self._leave(plugin)

    def _leave(self, plugin: object) -> None:
        """Unregister ``plugin``, whose ``conveyor_configure`` returned False: it takes no
        part in this worker or server (none of its hooks is called, not even
        ``conveyor_unconfigure``), so no event is built for it alone."""
        self.pm.unregister(plugin)
        self._changed()

    def unconfigure(self, flush_timeout: float) -> None:
        """Call every ``conveyor_unconfigure`` once, if the plugins were configured."""
        if self._config is None or self._unconfigured:
            return
        self._unconfigured = True
        self._call_each(_UNCONFIGURE, {"flush_timeout": flush_timeout})

    def _call_each(
        self, hook: str, kwargs: Mapping[str, object], only: object | None = None
    ) -> list[object]:
        """Call the implementations of ``hook`` (of plugin ``only``, if given) in pluggy's
        order, each guarded on its own; what they returned (None for one that raised)."""
        impls = reversed(getattr(self.pm.hook, hook).get_hookimpls())
        chosen = [impl for impl in impls if only is None or impl.plugin is only]
        return _call_guarded(chosen, hook, kwargs, self._refusals)

    def _call_one(self, impl: Any, hook: str, kwargs: Mapping[str, object]) -> object:
        """Call one implementation: what it returned; a failure is logged (None), a refusal
        raised."""
        return _call_guarded((impl,), hook, kwargs, self._refusals)[0]
