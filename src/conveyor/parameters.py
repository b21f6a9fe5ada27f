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

The kinds ported from Luigi (``DateHourParameter``, ``MonthParameter``,
``DateIntervalParameter``, ``TimeDeltaParameter``, ``TupleParameter``, ``ChoiceListParameter``
and the rest) read every string form Luigi's parameter of the same name reads, so that command
lines written for Luigi keep working, and write one canonical form. ``TaskParameter`` resolves
a class only among the task classes already defined, or from a module the caller allowed with
:func:`allow_task_modules`. Every ``Optional…Parameter`` is an :class:`OptionalKind`: the
wrapped kind's value or ``None``, written as the empty string.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import numbers
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, cast, overload

from .errors import ParameterError
from .intervals import FORMS as INTERVAL_FORMS
from .intervals import DateInterval, IntervalKind, is_interval_form
from .task_registry import registered_task_classes, task_class_key

# A task class. Typed loosely: the task API imports this module, so this one does not import
# it (the registry of task classes is a module of its own).
TaskClass = type[Any]

__all__ = [
    "NO_DEFAULT",
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
    "FrozenDict",
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
    "allow_task_modules",
    "allowed_task_modules",
    "freeze",
    "task_modules_named",
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
        batch_method: Callable[[list[Any]], Any] | None = ...,
    ) -> None: ...

    @overload
    def __init__(
        self,
        default: object = ...,
        *,
        significant: bool = ...,
        description: str = ...,
        batch_method: Callable[[list[Any]], Any] | None = ...,
    ) -> None: ...

    def __init__(
        self,
        default: object = NO_DEFAULT,
        *,
        significant: bool = True,
        description: str = "",
        batch_method: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.name = ""
        self.significant = significant
        self.description = description
        if batch_method is not None and not callable(batch_method):
            raise ParameterError(
                f"batch_method must be a function of a list of values (max, min, "
                f'",".join, ...), got {batch_method!r}'
            )
        self.batch_method = batch_method
        """How a batch combines its members' values of this parameter into the batch task's
        (Luigi's ``batch_method``): called with the list of parsed values; None: not batched."""
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
        try:
            if isinstance(value, str):
                return self.parse(value)
            return self._coerce(value)
        except RecursionError:  # (JSON nested thousands deep: not a value anyone means)
            raise ParameterError(
                "expected a value nested less deeply; this one is nested too deeply to read",
                parameter=self.name,
            ) from None

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
        if self.batch_method is not None:
            args.append(f"batch_method={self.batch_method!r}")
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
        self,
        default: object = NO_DEFAULT,
        *,
        significant: bool = True,
        description: str = "",
        batch_method: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        if default is NO_DEFAULT:
            default = False
        super().__init__(
            default, significant=significant, description=description, batch_method=batch_method
        )

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
        batch_method: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        if not (isinstance(enum, type) and issubclass(enum, Enum)):
            raise ParameterError(f"EnumParameter(enum=...) needs an Enum class, got {enum!r}")
        self.enum = enum
        self.type_name = "{" + ",".join(enum.__members__) + "}"
        super().__init__(
            default, significant=significant, description=description, batch_method=batch_method
        )

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
        batch_method: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.choices = _check_choices("ChoiceParameter", choices)
        self.type_name = "{" + ",".join(self.choices) + "}"
        super().__init__(
            default, significant=significant, description=description, batch_method=batch_method
        )

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


# --- date and time kinds ported from Luigi --------------------------------------------------


def _strptime(text: str, formats: Sequence[str]) -> datetime.datetime:
    """``text`` parsed with the first of ``formats`` that reads all of it.

    ``strptime`` is what Luigi's date parameters use, so this accepts exactly what they accept
    (``2013-7-1T9`` as well as ``2013-07-01T09``). Raises ValueError with the reason when it is
    more telling than "does not match" (``day is out of range for month``).
    """
    reason = ""
    for fmt in formats:
        try:
            return datetime.datetime.strptime(text, fmt)
        except ValueError as exc:
            if "does not match format" not in str(exc) and not reason:
                reason = str(exc)
    raise ValueError(reason)


class _ClockParameter(Parameter[datetime.datetime]):
    """Base of the date-and-time kinds: a naive datetime cut down to a unit (hour, minute)."""

    _formats: ClassVar[tuple[str, ...]]
    """The strptime formats read, in order; the documented form is the last."""
    _form: ClassVar[str]
    """The documented form, for messages."""
    _shape: ClassVar[re.Pattern[str] | None] = None
    """A pattern the text must match in full before strptime reads it, if any."""

    def parse(self, text: str) -> datetime.datetime:
        """Parse the documented form (and what Luigi's parameter of the same name reads)."""
        if self._shape is not None and not self._shape.fullmatch(text):
            raise self._error(f"a date and time {self._form}", text)
        try:
            return self._cut(_strptime(text, self._formats))
        except ValueError as exc:
            raise self._error(f"a date and time {self._form}", text, str(exc)) from None

    def _coerce(self, value: object) -> datetime.datetime:
        if isinstance(value, datetime.datetime):
            if value.tzinfo is not None:
                raise self._error("a naive datetime (the string form has no UTC offset)", value)
            return self._cut(value)
        if isinstance(value, datetime.date):  # midnight of that day, as in Luigi
            return datetime.datetime.combine(value, datetime.time())
        raise self._error("a datetime or a date", value)

    def _cut(self, value: datetime.datetime) -> datetime.datetime:
        """``value`` with everything below the parameter's unit set to zero."""
        raise NotImplementedError


class DateHourParameter(_ClockParameter):
    """A date and hour, as a naive ``datetime`` on the hour; string form ``YYYY-MM-DDTHH``.

    A typed ``datetime`` is cut down to its hour, a ``date`` means its midnight.
    """

    type_name = "datehour (YYYY-MM-DDTHH)"
    _formats = ("%Y-%m-%dT%H",)
    _form = "YYYY-MM-DDTHH"

    def serialize(self, value: datetime.datetime) -> str:
        """``YYYY-MM-DDTHH``."""
        return f"{value.date().isoformat()}T{value.hour:02d}"

    def _cut(self, value: datetime.datetime) -> datetime.datetime:
        return value.replace(minute=0, second=0, microsecond=0)


class DateMinuteParameter(_ClockParameter):
    """A date and time to the minute, as a naive ``datetime``; string form ``YYYY-MM-DDTHHMM``.

    Also reads Luigi's older ``YYYY-MM-DDTHHHMM`` (``2013-02-01T18H42``). Unlike Luigi's, it
    wants all four digits of ``HHMM`` (Luigi reads ``2013-02-01T18`` as 01:08). A typed
    ``datetime`` is cut down to its minute, a ``date`` means its midnight.
    """

    type_name = "dateminute (YYYY-MM-DDTHHMM)"
    _formats = ("%Y-%m-%dT%HH%M", "%Y-%m-%dT%H%M")
    _form = "YYYY-MM-DDTHHMM"
    # strptime alone would read the hour form 2013-02-01T18 as 01:08: insist on four digits
    _shape = re.compile(r"[^T]*T(?:\d{4}|\d{1,2}H\d{1,2})", re.ASCII | re.IGNORECASE)

    def serialize(self, value: datetime.datetime) -> str:
        """``YYYY-MM-DDTHHMM``."""
        return f"{value.date().isoformat()}T{value.hour:02d}{value.minute:02d}"

    def _cut(self, value: datetime.datetime) -> datetime.datetime:
        return value.replace(second=0, microsecond=0)


class _CalendarParameter(Parameter[datetime.date]):
    """Base of MonthParameter and YearParameter: the first day of a month or of a year."""

    _format: ClassVar[str]
    _form: ClassVar[str]
    _kind: ClassVar[IntervalKind]

    def parse(self, text: str) -> datetime.date:
        """Parse the documented form (strptime's, as Luigi reads it)."""
        try:
            return self._start(_strptime(text, (self._format,)).date())
        except ValueError as exc:
            raise self._error(f"a {self._kind} {self._form}", text, str(exc)) from None

    def _coerce(self, value: object) -> datetime.date:
        if isinstance(value, DateInterval) and value.kind == self._kind:
            return value.date_a
        if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
            return self._start(value)
        raise self._error(f"a date (not a datetime) or a {self._kind} DateInterval", value)

    def _start(self, value: datetime.date) -> datetime.date:
        raise NotImplementedError


class MonthParameter(_CalendarParameter):
    """A month, as the ``date`` of its first day; string form ``YYYY-MM``.

    A typed ``date`` stands for its month (the day is dropped), as does a month
    :class:`~conveyor.intervals.DateInterval`.
    """

    type_name = "month (YYYY-MM)"
    _format = "%Y-%m"
    _form = "YYYY-MM"
    _kind = "month"

    def serialize(self, value: datetime.date) -> str:
        """``YYYY-MM``."""
        return f"{value.year:04d}-{value.month:02d}"

    def _start(self, value: datetime.date) -> datetime.date:
        return value.replace(day=1)


class YearParameter(_CalendarParameter):
    """A year, as the ``date`` of its first day; string form ``YYYY``.

    A typed ``date`` stands for its year, as does a year
    :class:`~conveyor.intervals.DateInterval`.
    """

    type_name = "year (YYYY)"
    _format = "%Y"
    _form = "YYYY"
    _kind = "year"

    def serialize(self, value: datetime.date) -> str:
        """``YYYY``."""
        return f"{value.year:04d}"

    def _start(self, value: datetime.date) -> datetime.date:
        return datetime.date(value.year, 1, 1)


class DateIntervalParameter(Parameter[DateInterval]):
    """A :class:`~conveyor.intervals.DateInterval`: a day, an ISO week, a month, a year or a
    custom range; string forms ``2026-11-30``, ``2026-W48``, ``2026-11``, ``2026`` and
    ``2026-11-01-2026-11-30`` (from the first date, included, to the second, excluded)."""

    type_name = "date interval"

    def parse(self, text: str) -> DateInterval:
        """Parse any of the interval forms."""
        expected = f"a date interval ({INTERVAL_FORMS})"
        if not is_interval_form(text):
            raise self._error(expected, text)
        try:
            return DateInterval.parse(text)
        except ValueError as exc:
            raise self._error(expected, text, str(exc)) from None

    def serialize(self, value: DateInterval) -> str:
        """The interval's own string form."""
        return str(value)

    def _coerce(self, value: object) -> DateInterval:
        if isinstance(value, DateInterval):
            return value
        raise self._error("a DateInterval", value)


# The forms Luigi's TimeDeltaParameter reads, made strict: the whole text must match (Luigi
# matches a prefix, so "1 day, 2 hours" is one day there and an error here).
_ISO_DURATION = re.compile(
    r"P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)S)?)?",
    re.ASCII,
)
_UNITS: Final = {"weeks": "w", "days": "d", "hours": "h", "minutes": "m", "seconds": "s"}
_WORDY_DURATION = re.compile(
    "".join(
        rf"(?:(?P<{unit}>\d+) ?(?:{unit}|{unit[:-1]}|{letter}) ?)?"
        for unit, letter in _UNITS.items()
    ),
    re.ASCII,
)
_SECONDS = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_MAX_SECONDS: Final = int(datetime.timedelta.max.total_seconds()) + 1
_MICROS: Final = 1_000_000


class TimeDeltaParameter(Parameter[datetime.timedelta]):
    """A duration, as a ``datetime.timedelta``. The string forms are Luigi's:

    * a number of seconds: ``90``, ``12.5``, ``-3``;
    * units from longest to shortest: ``1 day 2 hours``, ``3w 4h 5m``, ``90 seconds``; each unit
      is written ``w``/``week``/``weeks`` (and ``d``, ``h``, ``m``, ``s`` likewise);
    * an ISO 8601 duration without years or months: ``P1DT2H``, ``PT6M``, ``P5W``.

    It is written as Luigi writes it, ``0 w 1 d 2 h 0 m 0 s``, or as a number of seconds when
    the duration is negative or has a fraction of a second. A typed int or float is a number
    of seconds.
    """

    type_name = "duration (e.g. '1 day 2 hours', P1DT2H, 90)"
    _expected = "a duration such as '1 day 2 hours', 'P1DT2H' or '90' (seconds)"

    def parse(self, text: str) -> datetime.timedelta:
        """Parse a number of seconds, a list of units or an ISO 8601 duration."""
        stripped = text.strip()
        if _SECONDS.fullmatch(stripped):
            return self._seconds(stripped, text)
        for pattern in (_ISO_DURATION, _WORDY_DURATION):
            match = pattern.fullmatch(stripped)
            if match and any(match.groups()):
                try:
                    amounts = {unit: int(n) for unit, n in match.groupdict(default="0").items()}
                    return datetime.timedelta(**amounts)
                except (OverflowError, ValueError):  # (ValueError: a number of 4300+ digits)
                    raise self._error(self._expected, text, "too long") from None
        raise self._error(self._expected, text)

    def serialize(self, value: datetime.timedelta) -> str:
        """Luigi's ``W w D d H h M m S s`` form, or a number of seconds if that cannot say it."""
        if value >= datetime.timedelta() and not value.microseconds:
            weeks, days = divmod(value.days, 7)
            hours, rest = divmod(value.seconds, 3600)
            minutes, seconds = divmod(rest, 60)
            return f"{weeks} w {days} d {hours} h {minutes} m {seconds} s"
        micros = (value.days * 86_400 + value.seconds) * _MICROS + value.microseconds
        sign = "-" if micros < 0 else ""
        whole, fraction = divmod(abs(micros), _MICROS)
        return f"{sign}{whole}" + (f".{fraction:06d}".rstrip("0") if fraction else "")

    def _coerce(self, value: object) -> datetime.timedelta:
        if isinstance(value, datetime.timedelta):
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return self._seconds(repr(value) if isinstance(value, float) else str(value), value)
        raise self._error("a timedelta, or a number of seconds", value)

    def _seconds(self, number: str, given: object) -> datetime.timedelta:
        """A number of seconds in decimal (read exactly, rounded to the microsecond)."""
        import decimal  # (imported on first use: ``import conveyor`` stays cheap)

        try:
            seconds = decimal.Decimal(number)
        except decimal.InvalidOperation:
            raise self._error(self._expected, given) from None
        if not seconds.is_finite() or abs(seconds) >= _MAX_SECONDS:
            raise self._error("a finite duration of at most 999999999 days", given)
        micros = (seconds * _MICROS).to_integral_value(rounding=decimal.ROUND_HALF_EVEN)
        try:
            return datetime.timedelta(microseconds=int(micros))
        except OverflowError:
            raise self._error("a finite duration of at most 999999999 days", given) from None


# --- structured kinds -----------------------------------------------------------------------


class TupleParameter(ListParameter):
    """A tuple of JSON values, frozen all the way down (nested lists become tuples).

    The string form is a JSON array, ``[[1,2],[3,4]]``; like Luigi's, it also reads a Python
    tuple or list literal, ``((1,2),(3,4))`` (safely: :func:`ast.literal_eval`, never ``eval``).
    """

    type_name = "tuple (JSON)"

    def parse(self, text: str) -> tuple[Any, ...]:
        """Parse a JSON array or a Python tuple/list literal."""
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = self._literal(text)
        if not isinstance(value, list | tuple):
            raise self._error("a JSON list or a tuple literal", text)
        if bad := _check_json(value):
            raise self._error("a list of JSON values", text, bad)
        return cast(tuple[Any, ...], freeze(value))

    def _literal(self, text: str) -> object:
        import ast  # (imported on first use: ``import conveyor`` stays cheap)

        try:
            return ast.literal_eval(text.strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise self._error("a JSON list or a tuple literal", text, detail) from None


N = TypeVar("N", int, float)


class NumericalParameter(Parameter[N]):
    """An int or a float within ``min_value <= x < max_value`` (``var_type=int`` or ``float``).

    The string form is that of :class:`IntParameter` or :class:`FloatParameter`.
    """

    def __init__(
        self,
        default: object = NO_DEFAULT,
        *,
        var_type: type[N],
        min_value: N,
        max_value: N,
        significant: bool = True,
        description: str = "",
        batch_method: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        if var_type not in (int, float):
            raise ParameterError(
                f"NumericalParameter var_type must be int or float, got {var_type!r}"
            )
        for bound in (min_value, max_value):
            if not isinstance(bound, int | float) or isinstance(bound, bool) or bound != bound:
                raise ParameterError(
                    f"NumericalParameter min_value and max_value must be numbers, got {bound!r}"
                )
        if not min_value < max_value:
            raise ParameterError(
                f"NumericalParameter range [{min_value}, {max_value}) is empty: "
                "min_value must be below max_value (which is excluded)"
            )
        self.var_type: type[N] = var_type
        self.min_value: N = min_value
        self.max_value: N = max_value
        self._number: Parameter[Any] = IntParameter() if var_type is int else FloatParameter()
        self.type_name = f"{var_type.__name__} in [{min_value}, {max_value})"
        article = "an" if var_type is int else "a"
        self._expected = f"{article} {self.type_name}"
        super().__init__(
            default, significant=significant, description=description, batch_method=batch_method
        )

    def parse(self, text: str) -> N:
        """Parse a number of ``var_type`` and check it is in range."""
        try:
            number = self._number.parse(text)
        except ParameterError:
            raise self._error(self._expected, text) from None
        return self._in_range(number, text)

    def serialize(self, value: N) -> str:
        """The string form of an int or a float."""
        return self._number.serialize(value)

    def _coerce(self, value: object) -> N:
        try:
            number = self._number.normalize(value)
        except ParameterError:
            raise self._error(self._expected, value) from None
        return self._in_range(number, value)

    def _in_range(self, number: Any, given: object) -> N:
        if self.min_value <= number < self.max_value:
            return cast(N, number)
        raise self._error(self._expected, given)

    def _repr_args(self) -> list[str]:
        return [
            f"var_type={self.var_type.__name__}",
            f"min_value={self.min_value!r}",
            f"max_value={self.max_value!r}",
        ]


def _check_choices(kind: str, choices: Sequence[str]) -> tuple[str, ...]:
    """``choices`` as a tuple, or ParameterError if they are not a non-empty list of strings."""
    if isinstance(choices, str) or not all(isinstance(c, str) for c in choices):
        raise ParameterError(f"{kind} choices must be strings, got {choices!r}")
    if not choices:
        raise ParameterError(f"{kind} needs at least one choice")
    return tuple(choices)


class ChoiceListParameter(Parameter[tuple[str, ...]]):
    """A tuple of strings, each one of ``choices`` (in any order, repeats allowed).

    The string form is Luigi's, comma-separated: ``a,c``; a JSON array, ``["a","c"]``, is read
    too, and is how a value is written when the comma form cannot say it (a choice containing a
    comma, or the empty tuple, written ``[]``; ``""`` also reads as the empty tuple).
    """

    def __init__(
        self,
        default: object = NO_DEFAULT,
        *,
        choices: Sequence[str],
        significant: bool = True,
        description: str = "",
        batch_method: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.choices = _check_choices("ChoiceListParameter", choices)
        self.type_name = "{" + ",".join(self.choices) + "},..."
        self._expected = f"a comma-separated list of {', '.join(map(repr, self.choices))}"
        super().__init__(
            default, significant=significant, description=description, batch_method=batch_method
        )

    def parse(self, text: str) -> tuple[str, ...]:
        """Parse ``a,b`` (or a JSON array of strings)."""
        return self._checked(self._split(text), text)

    def serialize(self, value: tuple[str, ...]) -> str:
        """``a,b``, or a JSON array when the comma form would read back differently."""
        if not value:
            return "[]"
        text = ",".join(value)
        if not text.startswith("[") and self._split(text) == list(value):
            return text
        return _to_json(list(value))

    def _coerce(self, value: object) -> tuple[str, ...]:
        if isinstance(value, list | tuple):
            return self._checked(list(value), value)
        raise self._error(f"a list or tuple of {', '.join(map(repr, self.choices))}", value)

    @staticmethod
    def _split(text: str) -> list[Any]:
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                items = None
            if isinstance(items, list) and all(isinstance(item, str) for item in items):
                return items
        return text.split(",") if text else []

    def _checked(self, items: list[Any], given: object) -> tuple[str, ...]:
        for item in items:
            if not isinstance(item, str) or item not in self.choices:
                raise self._error(self._expected, given, f"{item!r} is not one of the choices")
        return tuple(items)

    def _repr_args(self) -> list[str]:
        return [f"choices={self.choices!r}"]


# --- TaskParameter --------------------------------------------------------------------------

_ALLOWED_TASK_MODULES: ContextVar[frozenset[str]] = ContextVar(
    "conveyor_allowed_task_modules", default=frozenset()
)
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@contextlib.contextmanager
def allow_task_modules(modules: Iterable[str]) -> Iterator[frozenset[str]]:
    """Within the ``with`` block, let :class:`TaskParameter` import ``modules`` to find a class.

    Outside such a block a ``TaskParameter`` only resolves task classes that are already
    defined (already imported): a value read from the wire or a file can never make conveyor
    import a module. Wrap parsing of input you trust, such as the user's own command line::

        with allow_task_modules(["mypipeline.tasks"]):
            task = Report(upstream="mypipeline.tasks.Daily")

    Names are exact module names (allowing ``pkg`` does not allow ``pkg.sub``). Blocks nest,
    each adding to the names allowed; the allowance is per thread and per asyncio task (a
    context variable). Yields the names allowed inside the block.
    """
    if isinstance(modules, str):
        raise TypeError(f"allow_task_modules takes a list of module names, got {modules!r}")
    names = frozenset(modules)
    for name in names:
        if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
            raise ValueError(f"not a module name: {name!r}")
    token = _ALLOWED_TASK_MODULES.set(_ALLOWED_TASK_MODULES.get() | names)
    try:
        yield _ALLOWED_TASK_MODULES.get()
    finally:
        _ALLOWED_TASK_MODULES.reset(token)


def allowed_task_modules() -> frozenset[str]:
    """The module names :func:`allow_task_modules` allows here (empty outside its blocks)."""
    return _ALLOWED_TASK_MODULES.get()


def task_modules_named(
    parameters: Iterable[tuple[str, Parameter[Any]]], values: Mapping[str, object]
) -> tuple[str, ...]:
    """Every module the string values in ``values`` of task-class parameters could name.

    For the command line: ``values`` are the user's flags by parameter name, ``parameters`` a
    task class's ``parameters()``. ``mypkg.mod.Family`` names ``mypkg.mod`` and ``mypkg``.
    Pass the result to :func:`allow_task_modules` around building the task.
    """
    found: dict[str, None] = {}
    for name, param in parameters:
        kind = param.inner if isinstance(param, OptionalKind) else param
        value = values.get(name)
        if isinstance(kind, TaskParameter) and isinstance(value, str):
            found.update(dict.fromkeys(_module_prefixes(value)))
    return tuple(found)


def _module_prefixes(text: str) -> list[str]:
    """``a.b.C`` -> ``["a.b", "a"]``: the dotted prefixes, longest first."""
    parts = text.split(".")
    return [".".join(parts[:end]) for end in range(len(parts) - 1, 0, -1)]


def _find_task_class(text: str) -> TaskClass | None:
    """The defined task class ``text`` names, as ``module.Family`` or (as Luigi writes it) a
    bare family; None if there is none; ValueError if it could be more than one."""
    registry = registered_task_classes()
    exact = {
        registry[key]
        for module in _module_prefixes(text)
        if (key := (module, text[len(module) + 1 :])) in registry
    }
    if not exact:
        exact = {cls for (_, family), cls in registry.items() if family == text}
    if len(exact) > 1:
        names = sorted(f"{cls.__module__}.{cls.get_task_family()}" for cls in exact)
        raise ValueError(f"ambiguous, it could be any of {', '.join(names)}")
    return next(iter(exact), None)


class TaskParameter(Parameter[TaskClass]):
    """A task class (not an instance); the string form is ``module.Family``.

    Parsing finds the class among the task classes already defined, by ``module.Family`` or,
    as in Luigi, by its bare family (``Family``, or ``namespace.Family``) when only one class
    has it. It imports a module only if :func:`allow_task_modules` allows it: a string from the
    wire never makes conveyor import anything.
    """

    type_name = "task (module.Family)"
    _expected = "a task class as module.Family, defined or in an allowed module"

    def parse(self, text: str) -> TaskClass:
        """Find the task class ``text`` names (see the class docstring)."""
        try:
            found = self._resolve(text)
        except ValueError as exc:
            raise self._error(self._expected, text, str(exc)) from None
        if found is None:
            allowed = sorted(allowed_task_modules())
            hint = f"allowed modules: {', '.join(allowed)}" if allowed else "no module allowed"
            raise self._error(self._expected, text, f"no such task class; {hint}")
        return found

    def serialize(self, value: TaskClass) -> str:
        """``module.Family``."""
        return f"{value.__module__}.{value.get_task_family()}"

    def _coerce(self, value: object) -> TaskClass:
        key = task_class_key(value)
        if key is not None:
            found = registered_task_classes().get(key)
            if found is not None and found is value:
                return found
            raise self._error(
                "a task class registered under its module and family",
                value,
                "a later class of the same module and family replaced it, or it is a base class",
            )
        raise self._error("a Task subclass", value)

    @staticmethod
    def _resolve(text: str) -> TaskClass | None:
        found = _find_task_class(text)
        allowed = allowed_task_modules()
        for module in _module_prefixes(text):
            if found is not None:
                break
            if module not in allowed or module in sys.modules:
                continue
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name and (module + ".").startswith(exc.name + "."):
                    continue  # no such module: maybe a shorter prefix is one
                raise ValueError(f"importing {module!r} failed: {exc}") from None
            except Exception as exc:  # whatever the user's module raises at import
                raise ValueError(
                    f"importing {module!r} failed: {type(exc).__name__}: {exc}"
                ) from None
            found = _find_task_class(text)
        return found


# --- the Optional kinds ---------------------------------------------------------------------


class OptionalKind(Parameter[T | None]):
    """Base of the ``Optional…Parameter`` kinds: a value of another kind, or ``None``.

    ``None`` is written as the empty string, and the empty string (or ``None``) reads as
    ``None``; any other value is parsed, checked and written by the wrapped kind, available as
    :attr:`inner`. Unlike the other kinds an optional one defaults to ``None`` (as in Luigi);
    pass ``default=NO_DEFAULT`` to make it required.

    A subclass names the wrapped kind in :attr:`kind`. Keyword options other than
    ``significant`` and ``description`` (``choices=``, ``enum=``, ``var_type=``...) build the
    wrapped kind, and its attributes (``.choices``...) read through this parameter. This is
    also how to make an optional variant of a kind of your own::

        class OptionalRegionParameter(OptionalKind[Region]):
            kind = RegionParameter
    """

    kind: ClassVar[type[Parameter[Any]]] = Parameter
    """The wrapped kind."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Offer the wrapped kind's flag form on the CLI (``OptionalBoolParameter``)."""
        super().__init_subclass__(**kwargs)
        cls.is_flag = cls.kind.is_flag

    def __init__(
        self,
        default: object = None,
        *,
        significant: bool = True,
        description: str = "",
        batch_method: Callable[[list[Any]], Any] | None = None,
        **options: Any,
    ) -> None:
        """Wrap ``kind(**options)``; then initialise (and normalise the default) as usual."""
        self.inner: Parameter[T] = cast(Parameter[T], self.kind(**options))
        """The wrapped parameter, which parses and checks every value but ``None``."""
        self.type_name = self.inner.type_name
        super().__init__(
            default, significant=significant, description=description, batch_method=batch_method
        )

    def __getattr__(self, name: str) -> Any:
        """The wrapped kind's options (``.choices``, ``.enum``...) read through."""
        if name == "inner":  # (not set yet: no wrapped kind to ask)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __set_name__(self, owner: type, name: str) -> None:
        """Remember the attribute name, for this parameter and the wrapped one."""
        super().__set_name__(owner, name)
        self.inner.name = name

    def normalize(self, value: object) -> T | None:
        """``None`` for ``None`` or ``""``; otherwise the wrapped kind's value."""
        if value is None or (isinstance(value, str) and not value):
            return None
        return self.inner.normalize(value)

    def parse(self, text: str) -> T | None:
        """``None`` for ``""``; otherwise the wrapped kind's parse."""
        return None if not text else self.inner.parse(text)

    def serialize(self, value: T | None) -> str:
        """``""`` for ``None``; otherwise the wrapped kind's string form."""
        if value is None:
            return ""
        text = self.inner.serialize(value)
        if not text:  # would read back as None
            raise ParameterError(
                f"{type(self).__name__}: {value!r} has no string form distinct from None",
                parameter=self.name,
                value=value,
            )
        return text

    def _repr_args(self) -> list[str]:
        return self.inner._repr_args()


class OptionalParameter(OptionalKind[str]):
    """A string, or ``None`` (the empty string)."""

    kind = Parameter


class OptionalIntParameter(OptionalKind[int]):
    """An :class:`IntParameter` value, or ``None`` (string form ``""``)."""

    kind = IntParameter


class OptionalFloatParameter(OptionalKind[float]):
    """A :class:`FloatParameter` value, or ``None`` (string form ``""``)."""

    kind = FloatParameter


class OptionalBoolParameter(OptionalKind[bool]):
    """A :class:`BoolParameter` value, or ``None`` (string form ``""``); a CLI flag, which
    leaves it ``None`` (its default) when neither ``--name`` nor ``--no-name`` is given."""

    kind = BoolParameter


class OptionalDateParameter(OptionalKind[datetime.date]):
    """A :class:`DateParameter` value, or ``None`` (string form ``""``)."""

    kind = DateParameter


class OptionalDateTimeParameter(OptionalKind[datetime.datetime]):
    """A :class:`DateTimeParameter` value, or ``None`` (string form ``""``)."""

    kind = DateTimeParameter


class OptionalListParameter(OptionalKind[tuple[Any, ...]]):
    """A :class:`ListParameter` value, or ``None`` (string form ``""``)."""

    kind = ListParameter


class OptionalDictParameter(OptionalKind[FrozenDict[str, Any]]):
    """A :class:`DictParameter` value, or ``None`` (string form ``""``)."""

    kind = DictParameter


class OptionalPathParameter(OptionalKind[Path]):
    """A :class:`PathParameter` value, or ``None`` (string form ``""``)."""

    kind = PathParameter


class OptionalChoiceParameter(OptionalKind[str]):
    """A :class:`ChoiceParameter` value, or ``None`` (string form ``""``)."""

    kind = ChoiceParameter


class OptionalEnumParameter(OptionalKind[E]):
    """An :class:`EnumParameter` value, or ``None`` (string form ``""``)."""

    kind = EnumParameter


class OptionalDateHourParameter(OptionalKind[datetime.datetime]):
    """A :class:`DateHourParameter` value, or ``None`` (string form ``""``)."""

    kind = DateHourParameter


class OptionalDateMinuteParameter(OptionalKind[datetime.datetime]):
    """A :class:`DateMinuteParameter` value, or ``None`` (string form ``""``)."""

    kind = DateMinuteParameter


class OptionalMonthParameter(OptionalKind[datetime.date]):
    """A :class:`MonthParameter` value, or ``None`` (string form ``""``)."""

    kind = MonthParameter


class OptionalYearParameter(OptionalKind[datetime.date]):
    """A :class:`YearParameter` value, or ``None`` (string form ``""``)."""

    kind = YearParameter


class OptionalDateIntervalParameter(OptionalKind[DateInterval]):
    """A :class:`DateIntervalParameter` value, or ``None`` (string form ``""``)."""

    kind = DateIntervalParameter


class OptionalTimeDeltaParameter(OptionalKind[datetime.timedelta]):
    """A :class:`TimeDeltaParameter` value, or ``None`` (string form ``""``)."""

    kind = TimeDeltaParameter


class OptionalTupleParameter(OptionalKind[tuple[Any, ...]]):
    """A :class:`TupleParameter` value, or ``None`` (string form ``""``)."""

    kind = TupleParameter


class OptionalNumericalParameter(OptionalKind[N]):
    """A :class:`NumericalParameter` value, or ``None`` (string form ``""``)."""

    kind = NumericalParameter


class OptionalChoiceListParameter(OptionalKind[tuple[str, ...]]):
    """A :class:`ChoiceListParameter` value, or ``None`` (string form ``""``; the empty tuple
    is written ``[]``)."""

    kind = ChoiceListParameter


class OptionalTaskParameter(OptionalKind[TaskClass]):
    """A :class:`TaskParameter` value, or ``None`` (string form ``""``)."""

    kind = TaskParameter
