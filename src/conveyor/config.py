"""worker.toml → one frozen :class:`Config` (see docs/configuration.md).

Theory of operation
-------------------
The schema is data. Every settings dataclass declares its keys with ``_setting(default, kind,
...)``, which keeps a :class:`Field` (kind, default, range or choice check) in the dataclass
field's metadata; :data:`SCHEMA` is read from there, so the keys, defaults and checks are written
down once. Backends declare their own ``settings_schema: dict[str, Field]`` the same way.

Loading starts from a mutable draft holding the defaults and applies *layers* in precedence
order — the file, then each ``CONVEYOR_<SECTION>__<KEY>`` environment variable, then
``with_overrides()`` / ``with_section()`` — through one path-based setter. The setter validates
every value against its Field as it lands and remembers which layer set it, so an error names
the file, the variable (``$CONVEYOR_WORKER__WORKERS``) or ``overrides``. The rules that involve
two keys (``inline`` with ``workers > 1``, ``token`` vs ``token_file``, ``client_key`` without
``client_cert``) run once at the end; then ``token_file`` is read, the ``[scheduler]`` TLS
files are checked and made absolute, and the draft is frozen into :class:`Config`. Nothing
else in conveyor reads the file or the environment for configuration.

Backend sections (``[executors.<name>]``, ``[notifiers.<name>]``, ``[state_stores.<name>]``)
are kept raw and read-only in :attr:`Config.backends`: only the selected backend knows their
schema, and validates them with :func:`validate_backend_settings` (or
:meth:`Config.backend_settings`). A section for a backend that is not selected is not an error.
A hook plugin's table is the top-level section named like its ``conveyor.plugins`` entry point
(``[prometheus]``), kept raw in :attr:`Config.plugin_tables` and validated by the plugin with
:meth:`Config.plugin_settings`; a top-level name that no installed plugin has is an unknown
section, as before.

Every error is a :class:`~conveyor.errors.ConfigError` whose message is one line: where
(``file``, ``file:line:column``, ``$VARIABLE`` or ``overrides``), what (``section.key`` and the
value) and what was expected.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from . import secrets
from .errors import ConfigError
from .protocol import NotifyKind

# the shared checks and error wording (one place for the file's sections and the backends')
from .settings import (
    Field,
    Kind,
    _entry_field,
    _error,
    _render,
    _unknown,
    _valid,
    split_urls,
    validate_backend_settings,
)
from .tomlwriter import dumps, toml_value

__all__ = [
    "BACKEND_GROUPS",
    "SCHEMA",
    "Config",
    "Field",
    "Kind",
    "LoggingSettings",
    "NotifierSettings",
    "PluginSettings",
    "SchedulerSettings",
    "ServerSettings",
    "WorkerSettings",
    "load_config",
    "resolve_config",
    "thaw",
    "to_toml",
    "validate_backend_settings",
]

BACKEND_GROUPS = ("executors", "schedulers", "notifiers", "state_stores")
"""Sections whose sub-tables hold one backend's settings each."""

_ENV_PREFIX = "CONVEYOR_"
_OVERRIDES = "overrides"
_META = "conveyor.config"
_T = TypeVar("_T")


def _setting(default: _T, kind: Kind, doc: str = "", **checks: Any) -> _T:
    """A dataclass field carrying its :class:`Field` in the metadata."""
    spec = Field(kind, default, doc=doc, **checks)
    if isinstance(default, Mapping):
        return cast(_T, field(default_factory=lambda: MappingProxyType({}), metadata={_META: spec}))
    return field(default=default, metadata={_META: spec})


def _non_empty(value: Any) -> bool:
    return bool(value)


def _is_http_url(value: Any) -> bool:
    parts = urlsplit(str(value))
    return parts.scheme in ("http", "https") and bool(parts.netloc)


_NAME: dict[str, Any] = {"check": _non_empty, "expect": "a non-empty string"}
_URL: dict[str, Any] = {"check": _is_http_url, "expect": "an http:// or https:// URL"}


def _is_public_url(value: Any) -> bool:
    """'' (``http://host:port``) or an http(s) URL without credentials (it is shown openly)."""
    return value == "" or (_is_http_url(value) and "@" not in urlsplit(str(value)).netloc)


_URL_OR_EMPTY: dict[str, Any] = {
    "check": _is_public_url,
    "expect": "an http:// or https:// URL without user:password, or '' for http://host:port",
}
_NOTIFY_ON = tuple(str(k) for k in NotifyKind if k is not NotifyKind.AGGREGATE)
_LEVELS = ("auto", "debug", "info", "warning", "error", "critical")
_FORMATS = ("auto", "console", "json")


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """``[worker]``: how one worker runs tasks (see docs/configuration.md)."""

    workers: int = _setting(1, "int", "concurrent task slots", ge=1)
    executor: str = _setting("auto", "str", "auto | a conveyor.executors name", **_NAME)
    timeout: float = _setting(0.0, "seconds", "default per-task timeout; 0 = none", ge=0)
    kill_grace: float = _setting(5.0, "seconds", "SIGTERM -> SIGKILL delay", ge=0)
    keep_alive: bool = _setting(False, "bool")
    count_uniques: bool = _setting(False, "bool")
    assistant: bool = _setting(False, "bool", "run tasks that other workers registered")
    ping_interval: float = _setting(1.0, "seconds", gt=0)
    wait_interval: float = _setting(1.0, "seconds", gt=0)
    wait_jitter: float = _setting(5.0, "seconds", ge=0)
    max_reschedules: int = _setting(1, "int", ge=0)
    task_limit: int = _setting(0, "int", "0 = unlimited", ge=0)
    retry_external_tasks: bool = _setting(False, "bool")
    check_complete_on_run: bool = _setting(True, "bool", "after run(), incomplete = FAILED")
    parallel_scheduling: bool = _setting(False, "bool", "run complete() checks concurrently")
    # conveyor's own key (Luigi has none): under parallel_scheduling, how long one complete()
    # check may take before the task is reported as failing its check (seconds; 0 = no limit).
    complete_check_timeout: float = _setting(
        60.0, "seconds", "limit on one complete() check under parallel_scheduling", ge=0
    )
    task_modules: tuple[str, ...] = _setting((), "str_list", "modules assistants may import")
    labels: tuple[str, ...] = _setting(
        (),
        "str_list",
        "what this worker offers; it is handed tasks whose labels it all has",
        check=lambda items: all(item and item.isprintable() for item in items),
        expect="a list of non-empty printable strings",
    )
    memory_limit: int = _setting(
        0, "bytes", 'per attempt under process executors (e.g. "2GiB"); 0 = none', ge=0
    )
    install_signal_handlers: bool = _setting(True, "bool")
    task_id_style: str = _setting(
        "conveyor",
        "str",
        "conveyor | luigi (Luigi's task ids, for classes that do not set task_id_style)",
        choices=("conveyor", "luigi"),
    )


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """``[scheduler]``: the transport's client keys and the scheduling policy.

    ``token`` is the effective token: the ``token`` key, or the stripped content of
    ``token_file`` (which is kept too). ``ca_file``, ``client_cert`` and ``client_key`` are
    absolute paths of readable files once loaded (a relative one is taken from the current
    directory), or "".
    """

    transport: str = _setting("local", "str", "a conveyor.schedulers name", **_NAME)
    url: str = _setting("http://127.0.0.1:8082", "urls", "the central scheduler(s)", **_URL)
    token: str = _setting("", "str", "or token_file")
    token_file: str = _setting("", "str", "file holding the token")
    ca_file: str = _setting("", "str", "https: trust only these CAs (PEM)")
    client_cert: str = _setting("", "str", "https: client certificate (PEM)")
    client_key: str = _setting("", "str", "https: its private key, if not in client_cert")
    rpc_timeout: float = _setting(10.0, "seconds", gt=0)
    rpc_retries: int = _setting(5, "int", "attempts per call", ge=1)
    rpc_retry_wait: float = _setting(0.5, "seconds", "first backoff", ge=0)
    rpc_retry_max_wait: float = _setting(30.0, "seconds", "backoff cap", ge=0)
    rpc_give_up_after: float = _setting(3600.0, "seconds", ge=0)
    retry_delay: float = _setting(900.0, "seconds", "FAILED -> PENDING delay", ge=0)
    retry_backoff: float = _setting(1.0, "float", "retry_delay multiplier per failure", ge=1)
    retry_max_delay: float = _setting(86400.0, "seconds", "cap of a retry's delay", ge=0)
    retry_jitter: float = _setting(0.0, "float", "± fraction of a retry's delay", ge=0, le=1)
    retry_count: int = _setting(3, "int", "failures before DISABLED", ge=1)
    disable_window: float = _setting(3600.0, "seconds", ge=0)
    disable_persist: float = _setting(86400.0, "seconds", ge=0)
    worker_disconnect_delay: float = _setting(60.0, "seconds", ge=0)
    remove_delay: float = _setting(600.0, "seconds", ge=0)
    resources: Mapping[str, int] = _setting(
        MappingProxyType[str, int]({}), "int_map", "[scheduler.resources] name = capacity", ge=0
    )

    @property
    def urls(self) -> tuple[str, ...]:
        """The URLs of ``url`` (a list of several is kept as one string, joined by ", ")."""
        return split_urls(self.url)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """``[server]``: the central scheduler server; ``token`` as in SchedulerSettings."""

    host: str = _setting("127.0.0.1", "str", **_NAME)
    port: int = _setting(8082, "int", ge=1, le=65535)
    token: str = _setting("", "str", "or token_file")
    token_file: str = _setting("", "str", "file holding the token")
    state_store: str = _setting("sqlite", "str", "a conveyor.state_stores name", **_NAME)
    state_path: str = _setting("conveyor-state.db", "str", **_NAME)
    max_request_bytes: int = _setting(1048576, "int", ge=1)
    on_corrupt_state: str = _setting(
        "refuse", "str", "unusable state rows", choices=("refuse", "quarantine")
    )
    # each entry is checked (host[:port]) by conveyor.server.hosts when the server starts
    allowed_hosts: tuple[str, ...] = _setting((), "str_list", "more names it answers to")
    luigi_rpc: bool = _setting(False, "bool", "serve Luigi workers (luigid's RPC routes)")
    leader_lease: float = _setting(
        10.0, "seconds", "a shared store's leadership lease (renewed every third)", gt=0
    )
    public_url: str = _setting(
        "", "str", "its URL for workers and the other servers", **_URL_OR_EMPTY
    )


@dataclass(frozen=True, slots=True)
class NotifierSettings:
    """``[notifiers]``: which notifiers fire, on what, and how bursts are aggregated."""

    enabled: tuple[str, ...] = _setting((), "str_list", "conveyor.notifiers names")
    on: tuple[str, ...] = _setting(
        ("failed", "timed_out", "process_died", "broken"), "str_list", choices=_NOTIFY_ON
    )
    aggregate_after: int = _setting(5, "int", "more per window are aggregated", ge=0)
    aggregate_window: float = _setting(60.0, "seconds", gt=0)
    flush_timeout: float = _setting(10.0, "seconds", "delivery budget at exit", ge=0)


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """``[plugins]``: hook plugins to block, to load from local modules, and to insist on."""

    disable: tuple[str, ...] = _setting((), "str_list")
    local: tuple[str, ...] = _setting((), "str_list")
    required: tuple[str, ...] = _setting((), "str_list")


@dataclass(frozen=True, slots=True)
class LoggingSettings:
    """``[logging]``: level (stored lower-case) and format.

    Level ``auto`` is decided where the logs go (:func:`conveyor.log.resolve_level`): warning
    on a terminal that shows the progress line of ``conveyor run``, else info.
    """

    level: str = _setting(
        "auto",
        "str",
        "warning where the progress line shows the rest, else info",
        choices=_LEVELS,
        casefold=True,
    )
    format: str = _setting("auto", "str", "console on a TTY, else json", choices=_FORMATS)


_SECTIONS: dict[str, type[Any]] = {
    "worker": WorkerSettings,
    "scheduler": SchedulerSettings,
    "server": ServerSettings,
    "notifiers": NotifierSettings,
    "plugins": PluginSettings,
    "logging": LoggingSettings,
}

SCHEMA: Mapping[str, Mapping[str, Field]] = MappingProxyType(
    {
        name: MappingProxyType({f.name: f.metadata[_META] for f in fields(cls)})
        for name, cls in _SECTIONS.items()
    }
)
"""Section → key → :class:`Field` for every settings section, read from the dataclasses."""


# --- the draft: mutable while layers are applied --------------------------------------------------


@dataclass(slots=True)
class _Draft:
    values: dict[str, dict[str, Any]]
    backends: dict[str, dict[str, Any]]
    fallback: str
    origins: dict[str, tuple[int, str]] = field(default_factory=dict)
    counter: int = 0
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    task_sources: dict[str, str] = field(default_factory=dict)  # family -> where it was set
    plugin_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    plugin_sources: dict[str, str] = field(default_factory=dict)  # plugin -> where it was set

    @classmethod
    def defaults(cls, fallback: str) -> _Draft:
        values = {s: {k: thaw(f.default) for k, f in keys.items()} for s, keys in SCHEMA.items()}
        return cls(values, {group: {} for group in BACKEND_GROUPS}, fallback)

    def put(self, section: str, key: str, value: Any, source: str) -> None:
        self.values[section][key] = value
        self.counter += 1
        self.origins[f"{section}.{key}"] = (self.counter, source)

    def origin(self, *keys: str) -> str:
        """The source of whichever of ``keys`` was set last (the file, a variable, overrides)."""
        found = [self.origins.get(k, (0, self.fallback)) for k in keys]
        return max(found)[1]


def _apply(draft: _Draft, path: tuple[str, ...], value: Any, source: str) -> None:
    """Set the setting at ``path`` (section, key, ...) to ``value``, validating it."""
    section, rest = path[0], path[1:]
    if section in SCHEMA:
        _apply_section(draft, section, rest, value, source)
    elif section in BACKEND_GROUPS:
        _apply_backend(draft, section, rest, value, source)
    elif section == "tasks":
        _apply_tasks(draft, rest, value, source)
    elif section in _plugin_names():
        _apply_plugin_table(draft, section, rest, value, source)
    else:
        known = sorted({*SCHEMA, *BACKEND_GROUPS, "tasks", *_plugin_names()})
        raise _unknown("section", section, known, source, section)


def _plugin_names() -> frozenset[str]:
    """The names of the installed ``conveyor.plugins`` entry points (not loaded), which may
    have a table of their own; looked up only for a section conveyor does not know."""
    from importlib.metadata import entry_points

    return frozenset(ep.name for ep in entry_points(group=PLUGIN_GROUP)) - {"tasks"}


PLUGIN_GROUP = "conveyor.plugins"


def _apply_plugin_table(
    draft: _Draft, name: str, rest: tuple[str, ...], value: Any, source: str
) -> None:
    """``[<plugin>]``: a hook plugin's own settings, kept raw (the plugin validates them)."""
    target = draft.plugin_tables.setdefault(name, {})
    if rest:
        _deep_set(target, rest, thaw(value))
    else:
        _deep_merge(target, _table(name, value, source))
    draft.plugin_sources[name] = source


def _apply_tasks(draft: _Draft, rest: tuple[str, ...], value: Any, source: str) -> None:
    """``[tasks."module.Family"]``: parameter defaults, kept as given; each is checked against
    the family's parameters when the family is used (the configuration does not import task
    code), by :func:`conveyor.task.configured_defaults`."""
    if not rest:
        for family, table in _table("tasks", value, source).items():
            _apply_tasks(draft, (family,), table, source)
        return
    family, keys = rest[0], rest[1:]
    if not family:
        raise _error(source, "[tasks] has a table without a family name", "tasks")
    # a variable's family arrives lower-case: it refines the file's table of that family
    family = next((k for k in draft.tasks if k.casefold() == family.casefold()), family)
    target = draft.tasks.setdefault(family, {})
    if keys:
        if len(keys) > 1:
            full = ".".join(("tasks", *rest))
            raise _error(source, f"{full}: a task parameter default is one key deep", full)
        target[keys[0]] = thaw(value)
    else:
        for key, item in _table(f'tasks."{family}"', value, source).items():
            target[key] = thaw(item)
    draft.task_sources[family] = source


def _table(label: str, value: Any, source: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        shown = _render(label.rsplit(".", 1)[-1], value)
        raise _error(source, f"{label} = {shown} is not a table; expected [{label}]", label)
    return value


def _apply_section(
    draft: _Draft, section: str, rest: tuple[str, ...], value: Any, source: str
) -> None:
    if not rest:
        for key, item in _table(section, value, source).items():
            _apply_section(draft, section, (key,), item, source)
        return
    key, deeper = rest[0], rest[1:]
    spec = SCHEMA[section].get(key)
    label = f"{section}.{key}"
    if spec is None and section == "notifiers" and (deeper or isinstance(value, Mapping)):
        _apply_backend(draft, section, rest, value, source)
    elif spec is None:
        raise _unknown("key", key, SCHEMA[section], source, ".".join((section, *rest)))
    elif not deeper:
        draft.put(section, key, _valid(spec, value, label, source), source)
    elif spec.kind == "int_map" and len(deeper) == 1:
        entry = _valid(_entry_field(spec), value, f"{label}.{deeper[0]}", source)
        draft.put(section, key, {**draft.values[section][key], deeper[0]: entry}, source)
    else:
        full = ".".join((section, *rest))
        raise _error(source, f"unknown key {full!r}; {label} is {spec.expected()}", full)


def _apply_backend(
    draft: _Draft, group: str, rest: tuple[str, ...], value: Any, source: str
) -> None:
    if not rest:
        for name, item in _table(group, value, source).items():
            _apply_backend(draft, group, (name,), item, source)
        return
    name, keys = rest[0], rest[1:]
    if group == "schedulers" and name in SCHEMA["scheduler"]:
        # [schedulers.<name>] is a transport's own table; [scheduler] holds the core keys
        full = ".".join((group, *rest))
        raise _error(
            source,
            f"unknown key {full!r}: {name!r} is a key of [scheduler] (singular), not the name "
            "of a transport; did you mean [scheduler]?",
            full,
        )
    target = draft.backends.setdefault(group, {}).setdefault(name, {})
    if keys:
        _deep_set(target, keys, thaw(value))
    else:
        _deep_merge(target, _table(f"{group}.{name}", value, source))


def _deep_set(target: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    for key in keys[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[keys[-1]] = value


def _deep_merge(target: dict[str, Any], table: Mapping[str, Any]) -> None:
    for key, value in table.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _deep_merge(target[key], value)
        else:
            target[key] = thaw(value)


def thaw(value: Any) -> Any:
    """A mutable deep copy of a configuration value: mappings become dicts, tuples lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


def _freeze(value: Any) -> Any:
    """A read-only deep copy: dicts become mapping proxies, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


# --- cross-key rules and the frozen result --------------------------------------------------------


def _check_executor(draft: _Draft) -> None:
    worker = draft.values["worker"]
    if worker["executor"] == "inline" and worker["workers"] > 1:
        source = draft.origin("worker.executor", "worker.workers")
        raise _error(
            source,
            f'worker.executor = "inline" runs one task at a time, but worker.workers = '
            f'{worker["workers"]}; expected workers = 1 or another executor ("auto", "thread", '
            '"fork", "subprocess")',
            "worker.executor",
        )


def _resolve_token(
    draft: _Draft, section: str, cwd: Path, known: Mapping[str, tuple[str, str]]
) -> None:
    """Fill ``token`` from ``token_file``: read once, stripped; both set is an error."""
    values = draft.values[section]
    token_file = values["token_file"]
    if not token_file:
        return
    source = draft.origin(f"{section}.token", f"{section}.token_file")
    if values["token"]:
        message = f"{section}.token and {section}.token_file are both set; expected only one"
        raise _error(source, message, f"{section}.token")
    if known.get(section, ("", ""))[0] == token_file:
        values["token"] = known[section][1]
        return
    values["token"] = _read_token(cwd / Path(token_file).expanduser(), section, source)


def _read_token(path: Path, section: str, source: str) -> str:
    label = f"{section}.token_file"
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        message = f"{label}: cannot read token file {str(path)!r}: {reason}"
        raise _error(source, message, label) from None
    if not token:
        raise _error(source, f"{label}: token file {str(path)!r} is empty; expected a token", label)
    return token


_TLS_FILES = ("ca_file", "client_cert", "client_key")


def _resolve_tls_files(draft: _Draft, cwd: Path) -> None:
    """Make ``[scheduler]`` ca_file / client_cert / client_key absolute (a relative path is
    taken from ``cwd``, like token_file) after checking that each can be read; client_key
    needs client_cert. Only the paths are kept: the http transport loads the files."""
    values = draft.values["scheduler"]
    if values["client_key"] and not values["client_cert"]:
        source = draft.origin("scheduler.client_key", "scheduler.client_cert")
        message = (
            "scheduler.client_key is set without scheduler.client_cert; expected client_cert "
            "too (the certificate the key belongs to)"
        )
        raise _error(source, message, "scheduler.client_key")
    for key in _TLS_FILES:
        if values[key]:
            label = f"scheduler.{key}"
            values[key] = _readable_file(cwd, values[key], label, draft.origin(label))


def _readable_file(cwd: Path, given: str, label: str, source: str) -> str:
    """The absolute path of the file ``given`` (relative to ``cwd``), once it could be read."""
    if "\n" in given or "-----BEGIN" in given:  # never echo what may be a pasted private key
        raise _error(source, f"{label} holds PEM text; expected the path of a PEM file", label)
    path = cwd / Path(given).expanduser()
    try:
        with path.open("rb") as file:
            file.read(1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise _error(source, f"{label}: cannot read {str(path)!r}: {reason}", label) from None
    return str(path)


def _finish(
    draft: _Draft, source: str | None, cwd: Path, known: Mapping[str, tuple[str, str]]
) -> Config:
    _check_executor(draft)
    for section in ("scheduler", "server"):
        _resolve_token(draft, section, cwd, known)
    _resolve_tls_files(draft, cwd)
    settings = {
        name: cls(**{k: _freeze(v) for k, v in draft.values[name].items()})
        for name, cls in _SECTIONS.items()
    }
    return Config(
        **settings,
        backends=_freeze(draft.backends),
        source=source,
        tasks=_freeze(draft.tasks),
        task_sources=MappingProxyType(dict(draft.task_sources)),
        plugin_tables=_freeze(draft.plugin_tables),
        plugin_sources=MappingProxyType(dict(draft.plugin_sources)),
    )


def _draft_of(config: Config) -> _Draft:
    """A draft holding ``config``'s values (a token read from token_file is set aside)."""
    draft = _Draft.defaults(config.source or "configuration")
    for name in _SECTIONS:
        settings = getattr(config, name)
        draft.values[name] = {f.name: thaw(getattr(settings, f.name)) for f in fields(settings)}
        if draft.values[name].get("token_file"):
            draft.values[name]["token"] = ""
    draft.backends = thaw(config.backends)
    draft.tasks = thaw(config.tasks)
    draft.task_sources = dict(config.task_sources)
    draft.plugin_tables = thaw(config.plugin_tables)
    draft.plugin_sources = dict(config.plugin_sources)
    return draft


def _known_tokens(config: Config) -> dict[str, tuple[str, str]]:
    return {
        s: (getattr(config, s).token_file, getattr(config, s).token)
        for s in ("scheduler", "server")
    }


# --- overrides ------------------------------------------------------------------------------------

_Entry = tuple[tuple[str, str], Any]


def _scheduler_url(value: Any) -> list[_Entry]:
    return [(("scheduler", "transport"), "http"), (("scheduler", "url"), value)]


def _local_scheduler(value: Any) -> list[_Entry]:
    flag = _valid(Field("bool"), value, "local_scheduler", _OVERRIDES)
    return [(("scheduler", "transport"), "local")] if flag else []


_SPECIAL_OVERRIDES: dict[str, Callable[[Any], list[_Entry]]] = {
    "scheduler_url": _scheduler_url,
    "local_scheduler": _local_scheduler,
    "log_level": lambda value: [(("logging", "level"), value)],
    "log_format": lambda value: [(("logging", "format"), value)],
}


def _override_entries(overrides: Mapping[str, Any]) -> list[_Entry]:
    given = {k: v for k, v in overrides.items() if v is not None}
    if "scheduler_url" in given and given.get("local_scheduler") is True:
        message = "scheduler_url and local_scheduler exclude each other; expected only one"
        raise _error(_OVERRIDES, message, "scheduler_url")
    entries: list[_Entry] = []
    for name, value in given.items():
        if name in _SPECIAL_OVERRIDES:
            entries += _SPECIAL_OVERRIDES[name](value)
        elif name in SCHEMA["worker"]:
            entries.append((("worker", name), value))
        else:
            valid = [*SCHEMA["worker"], *_SPECIAL_OVERRIDES]
            raise _unknown("override", name, valid, _OVERRIDES, name)
    return entries


# --- Config ---------------------------------------------------------------------------------------


def _no_backends() -> Mapping[str, Mapping[str, Mapping[str, Any]]]:
    return MappingProxyType({group: MappingProxyType({}) for group in BACKEND_GROUPS})


@dataclass(frozen=True, slots=True)
class Config:
    """The whole effective configuration, resolved once and passed down (read-only).

    ``backends`` maps a backend group section (``executors``, ``notifiers``, ``state_stores``)
    to backend name to that backend's raw table; ``source`` is the file used, if any.
    ``Config()`` is the embedded defaults.
    """

    worker: WorkerSettings = field(default_factory=WorkerSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    notifiers: NotifierSettings = field(default_factory=NotifierSettings)
    plugins: PluginSettings = field(default_factory=PluginSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    backends: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=_no_backends)
    source: str | None = None
    tasks: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    """``[tasks."module.Family"]`` (or the bare family): parameter defaults, as written."""
    task_sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Where each family's defaults were set (the file, or a ``CONVEYOR_TASKS__...`` variable)."""
    plugin_tables: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """``[<plugin>]``: the raw table of each installed hook plugin that has one, by the name of
    its ``conveyor.plugins`` entry point (``[prometheus]``); see :meth:`plugin_settings`."""
    plugin_sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Where each plugin table was last set (the file, or a ``CONVEYOR_<PLUGIN>__…`` variable)."""

    def with_overrides(self, **overrides: Any) -> Config:
        """A copy with ``build()`` / CLI overrides applied, validated like file values.

        Accepted: any ``[worker]`` key (``workers=4``, ``executor="fork"``),
        ``scheduler_url=`` (sets ``scheduler.url`` and transport ``http``),
        ``local_scheduler=True`` (transport ``local``), ``log_level=``, ``log_format=``.
        ``None`` values are ignored, so a CLI can pass flags that were not given.
        """
        return self._layered(_override_entries(overrides))

    def with_section(self, section: str, **values: Any) -> Config:
        """A copy with keys of one section replaced (``with_section("scheduler", retry_delay=5)``).

        Validated like file values; ``None`` values are ignored. A table value replaces the
        whole table (``resources={"db": 1}``).
        """
        if section not in SCHEMA:
            raise _unknown("section", section, SCHEMA, _OVERRIDES, section)
        return self._layered([((section, k), v) for k, v in values.items() if v is not None])

    def backend_settings(
        self, group: str, name: str, schema: Mapping[str, Field]
    ) -> dict[str, Any]:
        """The selected backend's table validated against its schema, defaults filled in."""
        raw = self.backends.get(group, {}).get(name, {})
        return validate_backend_settings(group, name, raw, schema, self.source or "")

    def plugin_settings(self, name: str, schema: Mapping[str, Field]) -> dict[str, Any]:
        """The hook plugin ``name``'s table (``[<name>]``, named like its ``conveyor.plugins``
        entry point) checked against ``schema``, defaults filled in; ConfigError naming the
        file or variable for an unknown key or a bad value (a plugin raises it from
        ``conveyor_configure``, which makes the worker or server exit 2)."""
        raw = self.plugin_tables.get(name, {})
        where = self.plugin_sources.get(name) or self.source or ""
        return validate_backend_settings(name, "", raw, schema, where)

    def _layered(self, entries: Iterable[_Entry]) -> Config:
        draft = _draft_of(self)
        for path, value in entries:
            _apply(draft, path, value, _OVERRIDES)
        return _finish(draft, self.source, Path.cwd(), _known_tokens(self))


# --- loading --------------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Config:
    """Discover, read, layer and validate the configuration (see docs/configuration.md).

    The file is ``path``, else ``$CONVEYOR_CONFIG``, else ``worker.toml`` in ``cwd`` if it
    exists, else none (defaults). ``CONVEYOR_<SECTION>__<KEY>`` variables of ``env`` (default
    ``os.environ``) override the file. Relative paths (the file, ``token_file``, the TLS files
    of ``[scheduler]``) are taken from ``cwd`` (default: the current directory). Raises
    ConfigError for anything invalid.
    """
    environ = os.environ if env is None else env
    base = Path.cwd() if cwd is None else cwd
    found = _discover(path, environ, base)
    draft = _Draft.defaults("configuration")
    source: str | None = None
    if found is not None:
        file, label = found
        source = str(file)
        draft.fallback = label
        for section, table in _read_toml(file, label).items():
            _apply(draft, (section,), table, label)
    for parts, value, variable in _env_entries(environ):
        _apply(draft, parts, value, variable)
    return _finish(draft, source, base, {})


def resolve_config(config: Config | str | os.PathLike[str] | None) -> Config:
    """A Config as given, or loaded from a path, or discovered by :func:`load_config`."""
    if isinstance(config, Config):
        return config
    return load_config(config)


def _discover(
    path: str | os.PathLike[str] | None, env: Mapping[str, str], cwd: Path
) -> tuple[Path, str] | None:
    """The file to read and how to name it in messages, or None for defaults."""
    if path is not None:
        return _must_exist(cwd / Path(path), os.fspath(path), "")
    from_env = env.get("CONVEYOR_CONFIG", "")
    if from_env:
        return _must_exist(cwd / Path(from_env), from_env, " (from $CONVEYOR_CONFIG)")
    local = cwd / "worker.toml"
    return (local, "worker.toml") if local.is_file() else None


def _must_exist(file: Path, label: str, why: str) -> tuple[Path, str]:
    if not file.exists():
        raise _error("", f"configuration file {label!r}{why} does not exist", label)
    return file, label


def _read_toml(file: Path, label: str) -> dict[str, Any]:
    try:
        text = file.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise _error(label, f"cannot read the configuration file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise _error(label, f"the file is not UTF-8 text: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(str(exc), text, label) from None


_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_AT_END = "(at end of document)"


def _syntax_error(message: str, text: str, label: str) -> ConfigError:
    """``file:line:column: invalid TOML: reason`` from tomllib's message."""
    match = _POSITION.search(message)
    if match:
        where, reason = f"{match[1]}:{match[2]}", message[: match.start()]
    elif message.endswith(_AT_END):
        lines = text.split("\n")
        where, reason = f"{len(lines)}:{len(lines[-1]) + 1}", message[: -len(_AT_END)].rstrip()
    else:
        return _error(label, f"invalid TOML: {message}")
    return _error(f"{label}:{where}", f"invalid TOML: {reason}")


def _env_entries(env: Mapping[str, str]) -> list[tuple[tuple[str, ...], Any, str]]:
    """``CONVEYOR_<SECTION>__<KEY>[__<KEY>...]`` variables as (path, value, "$NAME"), shallow
    paths first so that ``CONVEYOR_SCHEDULER__RESOURCES__DB`` refines a whole-table variable."""
    entries = []
    for name, text in env.items():
        if not name.startswith(_ENV_PREFIX) or "__" not in name:
            continue
        parts = tuple(p.lower() for p in name[len(_ENV_PREFIX) :].split("__"))
        if not all(parts):
            expected = "expected CONVEYOR_<SECTION>__<KEY>"
            raise _error("$" + name, f"does not name a setting; {expected}", name)
        entries.append((parts, _env_value(text), "$" + name))
    return sorted(entries, key=lambda e: (len(e[0]), e[2]))


def _env_value(text: str) -> Any:
    """The text read as a TOML value; text that is not one is a string."""
    try:
        parsed = tomllib.loads("v = " + text)
    except tomllib.TOMLDecodeError:
        return text
    return parsed["v"] if parsed.keys() == {"v"} else text


# --- backend sections -----------------------------------------------------------------------------


# --- TOML output ----------------------------------------------------------------------------------


def to_toml(config: Config, *, redact: bool = True) -> str:
    """The effective configuration as TOML text that ``tomllib`` reads back.

    With ``redact``, values of keys whose name contains password, secret, token or key (except
    ``*_file`` / ``*_path`` keys, which hold paths) are shown as ``***``, as are ``user:pass@``
    in URLs, secret-named URL query values and the path of Slack webhook URLs. A token read
    from ``token_file`` is never printed: the file's path is.
    """
    document = _document(config)
    if redact:
        document = {k: secrets.redact(k, v) for k, v in document.items()}
    origin = toml_value(config.source) if config.source else "none (defaults and environment)"
    return dumps(document, header="effective conveyor configuration; file: " + origin)


def _document(config: Config) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for name in _SECTIONS:
        settings = getattr(config, name)
        table = {f.name: getattr(settings, f.name) for f in fields(settings)}
        if table.get("token_file"):
            del table["token"]
        if name == "scheduler" and len(config.scheduler.urls) > 1:
            table["url"] = list(config.scheduler.urls)  # several: shown as the list they are
        document[name] = table
    document["notifiers"].update(config.backends.get("notifiers", {}))
    for group in ("executors", "schedulers", "state_stores"):
        if config.backends.get(group):
            document[group] = config.backends[group]
    if config.tasks:
        document["tasks"] = config.tasks
    document.update(config.plugin_tables)
    return document
