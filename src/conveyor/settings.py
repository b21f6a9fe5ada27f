"""The settings schema as data: :class:`Field`, and the validation every backend shares.

A backend declares the schema of its ``[executors.<name>]``, ``[notifiers.<name>]`` or
``[state_stores.<name>]`` table as ``settings_schema: dict[str, Field]``; the worker (or the
server) validates the table with :func:`validate_backend_settings` and builds the backend from
the result. ``conveyor.config`` uses the same type and checks for its own sections, so every
error reads the same: where, ``section.key`` and the value, and what was expected.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from . import secrets, sizes
from .errors import ConfigError
from .tomlwriter import toml_value

__all__ = [
    "Field",
    "Kind",
    "check_backend_settings",
    "schema_of",
    "split_urls",
    "validate_backend_settings",
]

Kind = Literal["int", "float", "seconds", "bool", "str", "str_list", "int_map", "urls", "bytes"]
"""What a setting holds: ``seconds`` is a float duration (ints accepted), ``bytes`` an amount
of memory (a number of bytes or a string such as ``"2GiB"``, stored as an int), ``str_list`` a list
of strings (stored as a tuple), ``int_map`` a table of name = integer (stored read-only),
``urls`` one URL or several — a list, or one string of comma-separated URLs — stored as one
string, the URLs joined by ", " (:func:`split_urls` splits it; ``check`` tests each URL)."""

_UNSET: Any = object()
_ZERO: dict[str, Any] = {
    "int": 0,
    "float": 0.0,
    "seconds": 0.0,
    "bool": False,
    "str": "",
    "str_list": (),
    "int_map": MappingProxyType({}),
    "urls": "",
    "bytes": 0,
}


# --- the Field type -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    """One setting: its kind, default and checks, as data.

    ``ge`` / ``gt`` / ``le`` bound numbers (and the entries of an ``int_map``); ``choices``
    limits a string or the items of a string list (compared lower-cased when ``casefold``);
    ``check`` is any extra predicate, described by ``expect`` in error messages; ``required``
    keys have no default (backends only). The default defaults to the kind's zero value.
    """

    kind: Kind
    default: Any = _UNSET
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[str, ...] = ()
    casefold: bool = False
    check: Callable[[Any], bool] | None = None
    expect: str = ""
    required: bool = False
    doc: str = ""

    def __post_init__(self) -> None:
        """Fill an omitted default with the kind's zero value."""
        if self.default is _UNSET:
            object.__setattr__(self, "default", _ZERO[self.kind])

    def expected(self) -> str:
        """What a valid value looks like, for error messages ("an integer >= 1")."""
        return _DESCRIBE[self.kind](self)

    def bounds(self) -> str:
        """The numeric range as text (" >= 1", " between 1 and 65535"), or ""."""
        if self.ge is not None and self.le is not None:
            return f" between {_num(self.ge)} and {_num(self.le)}"
        limits = ((">=", self.ge), (">", self.gt), ("<=", self.le))
        parts = [f"{op} {_num(limit)}" for op, limit in limits if limit is not None]
        return " " + " and ".join(parts) if parts else ""


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _choices_text(f: Field) -> str:
    return ", ".join(toml_value(c) for c in f.choices)


def _describe_str(f: Field) -> str:
    if f.choices:
        return "one of: " + _choices_text(f)
    return f.expect or "a string"


def _describe_str_list(f: Field) -> str:
    if f.expect:
        return f.expect
    return "a list of strings" + (", each one of: " + _choices_text(f) if f.choices else "")


_DESCRIBE: dict[str, Callable[[Field], str]] = {
    "int": lambda f: "an integer" + f.bounds(),
    "float": lambda f: "a number" + f.bounds(),
    "seconds": lambda f: "a number of seconds" + f.bounds(),
    "bool": lambda f: "true or false",
    "str": _describe_str,
    "str_list": _describe_str_list,
    "int_map": lambda f: "a table of name = integer" + f.bounds(),
    "urls": lambda f: f"{f.expect or 'a URL'}, or a list of them",
    "bytes": lambda f: sizes.EXPECTED,
}


# --- value checks ---------------------------------------------------------------------------------


class _Invalid(Exception):
    """A value failed its Field; ``problem`` completes "section.key = value ...";
    ``expected``, if given, says what was expected instead of the Field's description."""

    def __init__(self, problem: str, expected: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.expected = expected


_WRONG_TYPE = "has the wrong type"
_OUT_OF_RANGE = "is out of range"


def _in_range(f: Field, x: float) -> None:
    low_ok = (f.ge is None or x >= f.ge) and (f.gt is None or x > f.gt)
    if not (low_ok and (f.le is None or x <= f.le)):
        raise _Invalid(_OUT_OF_RANGE)


def _extra_check(f: Field, value: Any) -> None:
    if f.check is not None and not f.check(value):
        raise _Invalid("is invalid")


def _to_int(f: Field, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(_WRONG_TYPE)
    _in_range(f, value)
    _extra_check(f, value)
    return value


def _to_bytes(f: Field, value: Any) -> int:
    try:
        number = sizes.parse_size(value)
    except ValueError as exc:
        raise _Invalid("is not a size", str(exc).rsplit("expected ", 1)[-1]) from None
    _in_range(f, number)
    _extra_check(f, number)
    return number


def _to_float(f: Field, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _Invalid(_WRONG_TYPE)
    number = float(value)
    if not math.isfinite(number):
        raise _Invalid(_OUT_OF_RANGE)
    _in_range(f, number)
    _extra_check(f, number)
    return number


def _to_bool(f: Field, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(_WRONG_TYPE)
    return value


def _to_str(f: Field, value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(_WRONG_TYPE)
    text = value.lower() if f.casefold else value
    if f.choices and text not in f.choices:
        raise _Invalid("is not one of the allowed values")
    _extra_check(f, text)
    return text


def _to_str_list(f: Field, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _Invalid(_WRONG_TYPE)
    items = tuple(v.lower() if f.casefold else v for v in value)
    bad = [v for v in items if f.choices and v not in f.choices]
    if bad:
        raise _Invalid(f"contains {toml_value(bad[0])}, which is not allowed")
    _extra_check(f, items)
    return items


def split_urls(text: str) -> tuple[str, ...]:
    """The URLs of a ``urls`` setting: ``text`` cut at its commas, each part stripped."""
    return tuple(part.strip() for part in text.split(","))


def _to_urls(f: Field, value: Any) -> str:
    if isinstance(value, str):
        items = split_urls(value)
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        items = tuple(url for v in value for url in split_urls(v))
        if not items:
            raise _Invalid("is an empty list")
    else:
        raise _Invalid(_WRONG_TYPE)
    one = f.expect or "a URL"
    if len(items) == 1:
        if f.check is not None and not f.check(items[0]):
            raise _Invalid("is invalid", one)
        return items[0]
    given = [value] if isinstance(value, str) else list(value)
    raw = ", ".join(given)
    for number, item in enumerate(items, 1):
        if f.check is not None and not f.check(item):
            shown = secrets.redact_text(item)
            # a part of a hidden password (a comma in it) is named by its place, not shown
            text = toml_value(shown) if shown in secrets.redact_text(raw) else f"URL {number}"
            split = "://" not in item and any("," in v for v in given)  # a URL cut at a comma?
            comma = " (a comma separates URLs: write one inside a URL as %2C)" if split else ""
            raise _Invalid(f"lists {text}, which is invalid", f"each URL to be {one}{comma}")
    return ", ".join(items)


def _to_int_map(f: Field, value: Any) -> dict[str, int]:
    # Entries are checked one by one by _valid(), which names them; this only checks the shape.
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Invalid(_WRONG_TYPE)
    return dict(value)


_CONVERT: dict[str, Callable[[Field, Any], Any]] = {
    "int": _to_int,
    "float": _to_float,
    "seconds": _to_float,
    "bool": _to_bool,
    "str": _to_str,
    "str_list": _to_str_list,
    "int_map": _to_int_map,
    "urls": _to_urls,
    "bytes": _to_bytes,
}


def _entry_field(f: Field) -> Field:
    """The Field of one entry of an ``int_map``."""
    return Field("int", 0, ge=f.ge, gt=f.gt, le=f.le)


def _valid(f: Field, value: Any, label: str, source: str) -> Any:
    """``value`` checked and normalised for the setting ``label``; ConfigError if it is not."""
    try:
        result = _CONVERT[f.kind](f, value)
    except _Invalid as bad:
        shown = _render(label.rsplit(".", 1)[-1], value)
        hint = _env_hint(f, value, source) if bad.problem == _WRONG_TYPE else ""
        expected = bad.expected or f.expected()
        raise _error(
            source, f"{label} = {shown} {bad.problem}; expected {expected}{hint}", label
        ) from None
    if f.kind == "int_map":
        entry = _entry_field(f)
        return {k: _valid(entry, v, f"{label}.{k}", source) for k, v in result.items()}
    return result


def _env_hint(f: Field, value: Any, source: str) -> str:
    """A reminder that variables are read as TOML, when that is the likely mistake."""
    if not source.startswith("$"):
        return ""
    if f.kind == "str" and not isinstance(value, str):
        return " (variables are read as TOML; quote a string: '\"...\"')"
    if f.kind == "str_list" and isinstance(value, str):
        return ' (variables are read as TOML; write a list: \'["a", "b"]\')'
    return ""


def _render(key: str, value: Any) -> str:
    """A value as it would be written in TOML, shortened, and hidden for secret keys."""
    if secrets.is_secret_setting(key) and not isinstance(value, bool):
        return secrets.REDACTED
    if isinstance(value, str | list | tuple):  # e.g. a webhook URL's secret path
        value = secrets.redact(key, value)
    try:
        text = toml_value(value)
    except TypeError:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(source: str, message: str, key: str = "") -> ConfigError:
    return ConfigError(f"{source}: {message}" if source else message, key=key, source=source)


def _suggest(name: str, valid: Iterable[str]) -> str:
    options = sorted(valid)
    close = difflib.get_close_matches(name.lower(), options, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    if not options:
        return "this section takes no keys"
    return "expected one of: " + ", ".join(options)


def _unknown(what: str, name: str, valid: Iterable[str], source: str, key: str) -> ConfigError:
    return _error(source, f"unknown {what} {key!r}; {_suggest(name, valid)}", key)


# --- the settings sections ------------------------------------------------------------------------


def validate_backend_settings(
    section: str,
    name: str,
    raw: Mapping[str, Any],
    schema: Mapping[str, Field],
    source: str = "",
) -> dict[str, Any]:
    """A backend's table (``[<section>.<name>]``) checked against the schema it declares.

    Unknown keys (with a suggestion), wrong types and ranges raise ConfigError with the same
    messages as the rest of the file; missing keys get their defaults (a ``required`` key
    without a value is an error). Lists come back as tuples.
    """
    prefix = f"{section}.{name}" if name else section  # (a hook plugin's table: [<section>])
    for key in raw:
        if key not in schema:
            raise _unknown("key", key, schema, source, f"{prefix}.{key}")
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        label = f"{prefix}.{key}"
        if key in raw:
            out[key] = _valid(spec, raw[key], label, source)
        elif spec.required:
            raise _error(source, f"missing key {label!r}; expected {spec.expected()}", label)
        else:
            out[key] = spec.default
    return out


def check_backend_settings(backend_cls: Any, settings: Mapping[str, Any], source: str = "") -> None:
    """Run the check across keys a backend class may declare, after its table passed the schema.

    ``check_settings(settings)`` (a static or class method; optional) raises ConfigError when
    keys that are each valid cannot work together — the ``email`` notifier without recipients,
    say. Its message gets ``source`` (the file) in front, like every other configuration error,
    so ``conveyor config`` and the worker's start-up report it the same way.
    """
    check = getattr(backend_cls, "check_settings", None)
    if check is None:
        return
    try:
        check(settings)
    except ConfigError as exc:
        if not source or exc.source:
            raise
        raise _error(source, str(exc), exc.key) from None


def schema_of(backend_cls: Any) -> Mapping[str, Field]:
    """The settings schema a backend class declares as ``settings_schema`` (none: no keys)."""
    schema: Mapping[str, Field] = getattr(backend_cls, "settings_schema", {})
    return schema
