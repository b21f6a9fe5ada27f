"""Task parameters: typed values with a string form.

A parameter is declared as a class attribute of a :class:`~conveyor.task.Task`. It is a plain
object (not a descriptor): the task stores the bound values in its own dict and asks the
parameter to

* ``normalize(value)`` a value given to the constructor -- either its string form (from the CLI
  or the wire), which is parsed, or an already typed value, which is validated and frozen;
* ``serialize(value)`` a value back to its string form, so that
  ``parse(serialize(v)) == v`` for every value the parameter accepts.

``parse`` and ``normalize`` raise :class:`~conveyor.errors.ParameterError` (a ``ValueError``)
whose message says what was expected and what was given; the task adds its own name and the
parameter's name around it.

List and dict values are frozen recursively (tuples and :class:`FrozenDict`), so tasks holding
them stay hashable; their string form is canonical JSON (compact, keys sorted), so equal values
give equal task ids.
"""

from __future__ import annotations

import datetime
import json
import numbers
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, cast, overload

from .errors import ParameterError

__all__ = [
    "NO_DEFAULT",
    "BoolParameter",
    "ChoiceParameter",
    "DateParameter",
    "DateTimeParameter",
    "DictParameter",
    "EnumParameter",
    "FloatParameter",
    "FrozenDict",
    "IntParameter",
    "ListParameter",
    "Parameter",
    "PathParameter",
    "freeze",
]

T = TypeVar("T")
E = TypeVar("E", bound=Enum)
K = TypeVar("K")
V = TypeVar("V")


class _NoDefault:
    """Type of the :data:`NO_DEFAULT` sentinel."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault()
"""Marks a parameter without a default: the task requires a value for it."""


class FrozenDict(Mapping[K, V]):
    """An immutable, hashable mapping whose values are frozen recursively (see :func:`freeze`)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[K, V] | None = None) -> None:
        items = data.items() if data is not None else ()
        self._data: dict[K, V] = {key: freeze(value) for key, value in items}
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"


def freeze(value: Any) -> Any:
    """Return ``value`` with lists/tuples turned into tuples and mappings into FrozenDicts.

    Freezing is recursive; any other value is returned unchanged.
    """
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, Mapping):
        return FrozenDict(value)
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    return value


def _got(value: object) -> str:
    """Describe a rejected value for an error message: its repr, plus its type if not a str."""
    if isinstance(value, str):
        return repr(value)
    return f"{value!r} ({type(value).__name__})"


class Parameter(Generic[T]):
    """A string parameter, and the base class of every typed parameter.

    ``default`` is normalized when the parameter is created (a bad default fails at class
    definition); omit it to make the parameter required. ``significant=False`` leaves the
    parameter out of the task id. ``description`` is shown in the CLI help.

    Subclasses override :meth:`parse`, :meth:`serialize` and :meth:`_coerce` (the validation of
    an already typed value), and set :attr:`type_name`.
    """

    is_flag: ClassVar[bool] = False
    """True when the CLI should offer ``--name`` / ``--no-name`` instead of ``--name VALUE``."""

    type_name: str = "str"
    """Short name of the expected value, for help and documentation."""

    # The overloads let a type checker infer ``Parameter()`` as ``Parameter[str]`` while
    # subclasses (``IntParameter(Parameter[int])``) keep their own type.
    @overload
    def __init__(
        self: Parameter[str],
        default: object = ...,
        *,
        significant: bool = ...,
        description: str = ...,
    ) -> None: ...

    @overload
    def __init__(
        self, default: object = ..., *, significant: bool = ..., description: str = ...
    ) -> None: ...

    def __init__(
        self, default: object = NO_DEFAULT, *, significant: bool = True, description: str = ""
    ) -> None:
        self.name = ""
        self.significant = significant
        self.description = description
        self._default: T | _NoDefault = NO_DEFAULT
        if default is not NO_DEFAULT:
            try:
                self._default = self.normalize(default)
            except ParameterError as exc:
                raise ParameterError(
                    f"invalid default for {type(self).__name__}: {exc}", value=default
                ) from None

    def __set_name__(self, owner: type, name: str) -> None:
        """Remember the attribute name the parameter is declared under."""
        self.name = name

    if TYPE_CHECKING:  # for type checkers only: ``task.param`` is the value, not the Parameter

        @overload
        def __get__(self, instance: None, owner: Any) -> Parameter[T]: ...

        @overload
        def __get__(self, instance: object, owner: Any) -> T: ...

        def __get__(self, instance: object, owner: Any) -> Any: ...

    @property
    def has_default(self) -> bool:
        """True if the parameter has a default (i.e. it is optional)."""
        return self._default is not NO_DEFAULT

    @property
    def default(self) -> T:
        """The normalized default value; raises ParameterError if there is none."""
        if isinstance(self._default, _NoDefault):
            raise ParameterError(f"parameter {self.name!r} has no default", parameter=self.name)
        return self._default

    def normalize(self, value: object) -> T:
        """Turn a string form or an already typed value into this parameter's value type."""
        if isinstance(value, str):
            return self.parse(value)
        return self._coerce(value)

    def parse(self, text: str) -> T:
        """Parse the string form of a value."""
        return cast(T, text)

    def serialize(self, value: T) -> str:
        """The string form of ``value``; ``parse`` reads it back to an equal value."""
        return str(value)

    def _coerce(self, value: object) -> T:
        """Validate (and convert) a value that is not a string."""
        raise self._error("a string", value)

    def _error(self, expected: str, value: object, detail: str = "") -> ParameterError:
        """A ParameterError saying ``expected <expected>, got <value>`` (plus ``detail``)."""
        message = f"expected {expected}, got {_got(value)}"
        if detail:
            message = f"{message} ({detail})"
        return ParameterError(message, parameter=self.name, value=value)

    def _repr_args(self) -> list[str]:
        """Extra ``key=value`` strings for ``__repr__`` (subclass-specific options)."""
        return []

    def __repr__(self) -> str:
        args = [f"name={self.name!r}"] if self.name else []
        args += self._repr_args()
        if self.has_default:
            args.append(f"default={self._default!r}")
        if not self.significant:
            args.append("significant=False")
        return f"{type(self).__name__}({', '.join(args)})"


class IntParameter(Parameter[int]):
    """An integer; also accepts a float without a fractional part, never a bool."""

    type_name = "int"

    def parse(self, text: str) -> int:
        """Parse a decimal integer."""
        try:
            return int(text)
        except ValueError:
            raise self._error("an integer", text) from None

    def serialize(self, value: int) -> str:
        """The decimal form of ``value``."""
        return str(value)

    def _coerce(self, value: object) -> int:
        if type(value) is int:  # the common case, without an ABC check
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise self._error("an integer", value)


class FloatParameter(Parameter[float]):
    """A floating point number; also accepts an int, never a bool."""

    type_name = "float"

    def parse(self, text: str) -> float:
        """Parse a float (``1.5``, ``1e-3``, ``inf``...)."""
        try:
            return float(text)
        except ValueError:
            raise self._error("a number", text) from None

    def serialize(self, value: float) -> str:
        """The shortest string that parses back to exactly ``value``."""
        return repr(float(value))

    def _coerce(self, value: object) -> float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise self._error("a number in the float range", value) from None
        raise self._error("a number", value)


class BoolParameter(Parameter[bool]):
    """A boolean, a flag on the CLI (``--name`` / ``--no-name``).

    Like Luigi's, it defaults to ``False`` when no default is given. The string form is parsed
    from ``true/false/1/0/yes/no`` in any case and serialized as ``true`` / ``false``.
    """

    is_flag = True
    type_name = "bool"
    _TRUE: ClassVar[frozenset[str]] = frozenset({"true", "1", "yes"})
    _FALSE: ClassVar[frozenset[str]] = frozenset({"false", "0", "no"})

    def __init__(
        self, default: object = NO_DEFAULT, *, significant: bool = True, description: str = ""
    ) -> None:
        if default is NO_DEFAULT:
            default = False
        super().__init__(default, significant=significant, description=description)

    def parse(self, text: str) -> bool:
        """Parse true/false/1/0/yes/no, in any case."""
        word = text.strip().lower()
        if word in self._TRUE:
            return True
        if word in self._FALSE:
            return False
        raise self._error("one of true/false/1/0/yes/no", text)

    def serialize(self, value: bool) -> str:
        """``true`` or ``false``."""
        return "true" if value else "false"

    def _coerce(self, value: object) -> bool:
        if isinstance(value, bool):
            return value
        raise self._error("a bool", value)


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


class DateParameter(Parameter[datetime.date]):
    """A calendar date; the string form is ISO ``YYYY-MM-DD``."""

    type_name = "date (YYYY-MM-DD)"

    def parse(self, text: str) -> datetime.date:
        """Parse ``YYYY-MM-DD``."""
        if _ISO_DATE.fullmatch(text):
            try:
                return datetime.date.fromisoformat(text)
            except ValueError as exc:
                raise self._error("a date YYYY-MM-DD", text, str(exc)) from None
        raise self._error("a date YYYY-MM-DD", text)

    def serialize(self, value: datetime.date) -> str:
        """``YYYY-MM-DD``."""
        return value.isoformat()

    def _coerce(self, value: object) -> datetime.date:
        if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
            return value
        raise self._error("a date (not a datetime)", value)


class DateTimeParameter(Parameter[datetime.datetime]):
    """A date and time, naive or with a UTC offset; the string form is ISO 8601."""

    type_name = "datetime (ISO 8601)"

    def parse(self, text: str) -> datetime.datetime:
        """Parse an ISO 8601 date-time such as ``2024-05-01T13:30:00+02:00``."""
        try:
            return datetime.datetime.fromisoformat(text)
        except ValueError:
            raise self._error("an ISO 8601 datetime (YYYY-MM-DDTHH:MM:SS)", text) from None

    def serialize(self, value: datetime.datetime) -> str:
        """The ISO 8601 form of ``value``."""
        return value.isoformat()

    def _coerce(self, value: object) -> datetime.datetime:
        if isinstance(value, datetime.datetime):
            return value
        raise self._error("a datetime", value)


class EnumParameter(Parameter[E]):
    """A member of ``enum``; the string form is the member's name."""

    def __init__(
        self,
        default: object = NO_DEFAULT,
        *,
        enum: type[E],
        significant: bool = True,
        description: str = "",
    ) -> None:
        if not (isinstance(enum, type) and issubclass(enum, Enum)):
            raise ParameterError(f"EnumParameter(enum=...) needs an Enum class, got {enum!r}")
        self.enum = enum
        self.type_name = "{" + ",".join(enum.__members__) + "}"
        super().__init__(default, significant=significant, description=description)

    def parse(self, text: str) -> E:
        """Look a member up by name (case-sensitive)."""
        try:
            return self.enum[text]
        except KeyError:
            raise self._error(f"one of {', '.join(self.enum.__members__)}", text) from None

    def serialize(self, value: E) -> str:
        """The member's name."""
        return value.name

    def _coerce(self, value: object) -> E:
        if isinstance(value, self.enum):
            return value
        raise self._error(f"a member of {self.enum.__name__}", value)

    def _repr_args(self) -> list[str]:
        return [f"enum={self.enum.__name__}"]


class ChoiceParameter(Parameter[str]):
    """A string that must be one of ``choices``."""

    def __init__(
        self,
        default: object = NO_DEFAULT,
        *,
        choices: Sequence[str],
        significant: bool = True,
        description: str = "",
    ) -> None:
        if isinstance(choices, str) or not all(isinstance(c, str) for c in choices):
            raise ParameterError(f"ChoiceParameter choices must be strings, got {choices!r}")
        if not choices:
            raise ParameterError("ChoiceParameter needs at least one choice")
        self.choices = tuple(choices)
        self.type_name = "{" + ",".join(self.choices) + "}"
        super().__init__(default, significant=significant, description=description)

    def parse(self, text: str) -> str:
        """Accept ``text`` if it is one of the choices."""
        if text in self.choices:
            return text
        raise self._error(f"one of {', '.join(map(repr, self.choices))}", text)

    def _repr_args(self) -> list[str]:
        return [f"choices={self.choices!r}"]


def _check_json(value: object) -> str | None:
    """Describe the first part of ``value`` that JSON cannot represent, or None if all can."""
    if value is None or isinstance(value, str | int | float | bool):
        return None
    if isinstance(value, list | tuple):
        return next((bad for item in value if (bad := _check_json(item))), None)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r} is not a string"
            if bad := _check_json(item):
                return bad
        return None
    return f"{type(value).__name__} value {value!r} is not JSON"


def _to_json(value: object) -> str:
    """Canonical JSON: compact, keys sorted, FrozenDicts written as objects."""

    def default(obj: object) -> Any:
        if isinstance(obj, Mapping):
            return dict(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")

    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=default)


class ListParameter(Parameter[tuple[Any, ...]]):
    """A list of JSON values, frozen: lists become tuples and objects FrozenDicts.

    The string form is a JSON array.
    """

    type_name = "list (JSON)"

    def parse(self, text: str) -> tuple[Any, ...]:
        """Parse a JSON array."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise self._error("a JSON list", text, str(exc)) from None
        if not isinstance(value, list):
            raise self._error("a JSON list", text)
        return cast(tuple[Any, ...], freeze(value))

    def serialize(self, value: tuple[Any, ...]) -> str:
        """The value as a compact JSON array (object keys sorted)."""
        return _to_json(value)

    def _coerce(self, value: object) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise self._error("a list or tuple", value)
        if bad := _check_json(value):
            raise self._error("a list of JSON values", value, bad)
        return cast(tuple[Any, ...], freeze(value))


class DictParameter(Parameter[FrozenDict[str, Any]]):
    """A mapping of string keys to JSON values, frozen into a :class:`FrozenDict`.

    The string form is a JSON object.
    """

    type_name = "dict (JSON)"

    def parse(self, text: str) -> FrozenDict[str, Any]:
        """Parse a JSON object."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise self._error("a JSON object", text, str(exc)) from None
        if not isinstance(value, dict):
            raise self._error("a JSON object", text)
        return FrozenDict(value)

    def serialize(self, value: FrozenDict[str, Any]) -> str:
        """The value as a compact JSON object with sorted keys."""
        return _to_json(value)

    def _coerce(self, value: object) -> FrozenDict[str, Any]:
        if not isinstance(value, Mapping):
            raise self._error("a mapping", value)
        if bad := _check_json(value):
            raise self._error("a mapping of JSON values", value, bad)
        return FrozenDict(value)


class PathParameter(Parameter[Path]):
    """A filesystem path (not required to exist), as a :class:`pathlib.Path`."""

    type_name = "path"

    def parse(self, text: str) -> Path:
        """Any non-empty string is a path."""
        if not text:
            raise self._error("a non-empty path", text)
        return Path(text)

    def serialize(self, value: Path) -> str:
        """``str(value)``."""
        return str(value)

    def _coerce(self, value: object) -> Path:
        if isinstance(value, os.PathLike):
            path = os.fspath(value)
            if isinstance(path, str):
                return self.parse(path)
        raise self._error("a path (str or os.PathLike of str)", value)
