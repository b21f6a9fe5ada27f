"""Backfills, as Luigi's ``luigi.tools.range``: :class:`RangeDaily`, :class:`RangeHourly`,
:class:`RangeMonthly`.

A range task stands for one recurring task family (``of``) over every day, hour or month from
``start`` (included) to ``stop`` (excluded). It requires only the instances that are not
complete yet, so a backfill over a year of which most days exist schedules just the gaps::

    conveyor run conveyor.RangeDaily --of sales.DailyTotal --start 2026-01-01

Theory of operation:

* The values in range are ``start``, ``start`` + 1 period, ... up to ``stop``, and no earlier
  than ``stop`` minus ``days_back`` (``hours_back``, ``months_back``) when that is set. ``stop``
  defaults to the period after the current one (UTC): the range ends with today, the current
  hour or the current month. The default is computed when the range task is made and is part
  of its parameters, so the task id says which range it covers.
* Completeness is checked in bulk, once per range task: by the ``of`` class's
  ``bulk_complete(values)`` classmethod if it has one (it returns the values that are complete,
  as Luigi's), else by calling ``complete()`` of every instance on a bounded pool of threads.
  An instance whose ``complete()`` raises counts as missing (the worker then checks it itself
  and reports it broken).
* ``requires()`` returns the missing instances, oldest first (``reverse``: newest first), at
  most ``task_limit`` of them (0: all). The range task is complete when none is required; once
  it has required some, it is complete when they all are (so a limited backfill succeeds when
  its batch is done; run it again for the next batch).
* :meth:`RangeBase.summary_note` says how many values were already complete; the worker puts it
  in the execution summary.
* The range's own attempt runs nothing and checks nothing more (``has_own_completion()`` is
  False): the worker runs it once its requirements are done. Under a process executor the
  attempt's process rebuilds the range and asks ``requires()`` again; with ``task_limit`` that
  fresh range sees the next batch missing, so the attempt fails with unfulfilled
  dependencies, and the worker, checking its own range task again, finds it complete.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

from .clock import SYSTEM, Clock
from .errors import ParameterError, TaskDefinitionError
from .parameters import (
    BoolParameter,
    DateHourParameter,
    DateParameter,
    DateTimeParameter,
    DictParameter,
    IntParameter,
    MonthParameter,
    Parameter,
    TaskParameter,
)
from .secrets import REDACTED, is_secret_name
from .task import Task, WrapperTask

__all__ = ["RangeBase", "RangeDaily", "RangeHourly", "RangeMonthly"]

Value = datetime.date
"""A value in range: a date (daily), a datetime at the hour (hourly), a date on the 1st
(monthly); ``datetime.datetime`` is a subclass of ``datetime.date``."""


class _UntilNow(Parameter[Value]):
    """A parameter of ``kind`` whose default is computed each time a task is made: the period
    after the one containing the current time, by the range class that declares it.

    Not one of conveyor.parameters' classes, so tasks holding it are never memoised (see
    ``Task._memoizable``): each construction computes the default again.
    """

    def __init__(self, kind: Parameter[Any], *, description: str) -> None:
        self._kind = kind
        self._owner: type[RangeBase] | None = None
        self.type_name = kind.type_name
        super().__init__(description=description)

    def __set_name__(self, owner: type, name: str) -> None:
        """Name the inner parameter too (its errors carry the name)."""
        super().__set_name__(owner, name)
        self._kind.name = name
        if isinstance(owner, type) and issubclass(owner, RangeBase):
            self._owner = owner

    @property
    def has_default(self) -> bool:
        """Always: the default is computed."""
        return True

    @property
    def default(self) -> Value:
        """The period after the current one (UTC), computed now."""
        owner = self._owner
        if owner is None:
            raise TypeError("a range's stop parameter must be declared on a RangeBase subclass")
        now = datetime.datetime.fromtimestamp(owner.clock.time(), tz=datetime.UTC)
        return owner.shift(owner.current(now.replace(tzinfo=None)), 1)

    def normalize(self, value: object) -> Value:
        """As the inner kind normalises it."""
        return self._kind.normalize(value)  # type: ignore[no-any-return]

    def parse(self, text: str) -> Value:
        """As the inner kind parses it."""
        return self._kind.parse(text)  # type: ignore[no-any-return]

    def serialize(self, value: Value) -> str:
        """As the inner kind serialises it."""
        return self._kind.serialize(value)


@dataclass(frozen=True, slots=True)
class _Scan:
    """One bulk check of a range: how many values, which were missing, what is required."""

    total: int
    missing: int
    required: tuple[tuple[Value, Task], ...]


class _OfBuilder:
    """Stands in for the ``of`` class as ``cls`` of ``bulk_complete(cls, values)`` when the
    range has ``of_params`` (Luigi passes a partial there): ``cls(value)`` builds the task of
    that value with the of_params; any other attribute is the class's."""

    def __init__(self, range_task: RangeBase) -> None:
        self._range = range_task

    def __call__(self, *args: Any, **kwargs: Any) -> Task:
        """``of`` built from ``of_params``, a value for the range parameter (or keywords)."""
        range_task = self._range
        if len(args) == 1 and not kwargs:
            return range_task.task_for(args[0])
        of: type[Task] = range_task.of
        return of(*args, **{**range_task.of_params, **kwargs})

    def __getattr__(self, name: str) -> Any:
        """The ``of`` class's attribute."""
        return getattr(self._range.of, name)


class RangeBase(WrapperTask):
    """A wrapper requiring every instance of ``of`` in a range of dates that is not complete.

    Subclasses fix the period (:class:`RangeDaily`, :class:`RangeHourly`,
    :class:`RangeMonthly`) and declare ``start``, ``stop`` and the ``*_back`` limit.
    """

    of = TaskParameter(description="the task family to complete, as module.Family")
    of_params = DictParameter(
        default={}, description="more parameters of the 'of' task, as a JSON object"
    )
    reverse = BoolParameter(
        default=False,
        description="require the newest missing instances first (default: the oldest)",
    )
    task_limit = IntParameter(
        default=0, description="require at most this many missing instances (0: no limit)"
    )
    param_name = Parameter(
        default="",
        description="the parameter of 'of' that takes the date (default: the first of the "
        "range's kind that of_params does not set)",
    )

    clock: ClassVar[Clock] = SYSTEM
    """Where "now" comes from (the default of ``stop``); a ``conveyor.testing.FakeClock`` in
    tests."""
    check_threads: ClassVar[int] = 8
    """Threads checking ``complete()`` concurrently when ``of`` has no ``bulk_complete``."""

    # the period, set by each subclass
    _unit: ClassVar[str] = "value"
    _back_name: ClassVar[str] = ""
    _kinds: ClassVar[tuple[type[Parameter[Any]], ...]] = ()

    start: Parameter[Value]
    stop: Parameter[Value]
    _lock: threading.Lock
    _scan: _Scan | None
    _batch_done: bool
    _target: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Bind the parameters as any task does, then check that they make a range."""
        if type(self).shift is RangeBase.shift:
            raise TypeError(
                f"{type(self).__name__} is a base class: use RangeDaily, RangeHourly or "
                "RangeMonthly, or a subclass that declares start and stop and defines shift() "
                "and current()"
            )
        super().__init__(*args, **kwargs)
        self._check()
        self._target = self._target_param()
        self._lock = threading.Lock()
        self._scan = None
        self._batch_done = False

    def __repr__(self) -> str:
        """``RangeDaily(of=..., start=..., stop=...)`` and the other parameters that are not
        at their default."""
        strings = self.task_params
        shown = []
        for name, param in self.parameters():
            value = strings[name]
            at_default = param.has_default and value == param.serialize(param.default)
            if not param.significant or (at_default and name not in _ALWAYS_SHOWN):
                continue
            shown.append(f"{name}={REDACTED if is_secret_name(name) else value}")
        return f"{self.task_family}({', '.join(shown)})"

    # --- the period (each subclass) --------------------------------------------------------

    @staticmethod
    def shift(value: Value, periods: int) -> Value:
        """``value`` moved by ``periods`` periods (negative: back)."""
        raise NotImplementedError

    @staticmethod
    def current(now: datetime.datetime) -> Value:
        """The period containing ``now``."""
        raise NotImplementedError

    # --- the range -------------------------------------------------------------------------

    def values(self) -> list[Value]:
        """Every value in range, oldest first."""
        start: Value = self.start
        stop: Value = self.stop
        back = self._back()
        if back:
            start = max(start, self.shift(stop, -back))
        found = []
        value = start
        while value < stop:
            found.append(value)
            value = self.shift(value, 1)
        return found

    def task_for(self, value: Value) -> Task:
        """The ``of`` task for ``value``, with ``of_params``."""
        of: type[Task] = self.of
        return of(**{**self.of_params, self._target: value})

    def missing_values(self, values: Sequence[Value]) -> list[Value]:
        """The values among ``values`` whose task is not complete, in the same order.

        Asks ``of.bulk_complete(values)`` if the class defines it (a ``NotImplementedError``
        from it falls back), else ``complete()`` of each task on :attr:`check_threads` threads.
        Override for another bulk check.
        """
        if not values:
            return []
        done = self._bulk_complete(values)
        if done is None:
            done = self._pool_complete(values)
        return [value for value in values if value not in done]

    def requires(self) -> list[Task]:
        """The missing instances, oldest first (newest with ``reverse``), at most
        ``task_limit``; checked once per range task."""
        return [task for _, task in self._scanned().required]

    def complete(self) -> bool:
        """True when nothing in range is missing; once instances were required, when they
        are all complete (checked again, in bulk)."""
        with self._lock:
            if self._scan is None:
                self._scan = self._new_scan()
                return not self._scan.required
            if not self._scan.required or self._batch_done:
                return True
            values = [value for value, _ in self._scan.required]
            self._batch_done = not self.missing_values(values)
            return self._batch_done

    def has_own_completion(self) -> bool:
        """False: a range is complete when its requirements are, and the worker runs it only
        once they are; so an attempt does not check the range again (with a process executor
        that would be a new range task, checking the whole range anew)."""
        return False

    def summary_note(self) -> str:
        """For the execution summary: how many values were already complete (empty before the
        range was checked)."""
        scan = self._scan
        if scan is None:
            return ""
        unit = self._unit + ("" if scan.total == 1 else "s")
        done = scan.total - scan.missing
        note = f"{done} of {scan.total} {unit} were already complete"
        if not scan.missing:
            return note
        if len(scan.required) < scan.missing:
            required, limit = len(scan.required), self.task_limit
            return f"{note}; {scan.missing} missing, {required} required (task_limit {limit})"
        return f"{note}; {scan.missing} required"

    # --- helpers ---------------------------------------------------------------------------

    def _scanned(self) -> _Scan:
        with self._lock:
            if self._scan is None:
                self._scan = self._new_scan()
            return self._scan

    def _new_scan(self) -> _Scan:
        values = self.values()
        missing = self.missing_values(values)
        limit = self.task_limit
        chosen = list(reversed(missing)) if self.reverse else list(missing)
        if limit:
            chosen = chosen[:limit]
        required = tuple((value, self.task_for(value)) for value in chosen)
        return _Scan(len(values), len(missing), required)

    def _back(self) -> int:
        return int(getattr(self, self._back_name)) if self._back_name else 0

    def _bulk_complete(self, values: Sequence[Value]) -> set[Value] | None:
        """The complete values by ``of.bulk_complete``; None if it has none (or raised
        NotImplementedError)."""
        of: type[Task] = self.of
        bulk = getattr(of, "bulk_complete", None)
        if bulk is None:
            return None
        function = getattr(bulk, "__func__", None)
        try:
            if self.of_params and function is not None and getattr(bulk, "__self__", None) is of:
                answer = function(_OfBuilder(self), list(values))
            else:
                answer = bulk(list(values))
        except NotImplementedError:
            return None
        return self._vetted(answer, of)

    def _vetted(self, answer: object, of: type[Task]) -> set[Value]:
        what = f"{of.get_task_family()}.bulk_complete()"
        if isinstance(answer, str | bytes) or not isinstance(answer, Iterable):
            raise TaskDefinitionError(
                f"{what} returned {answer!r} ({type(answer).__name__}); expected an iterable "
                f"of the complete values (the {self._unit}s it was given)",
                task_id=self.task_id,
            )
        kind = type(self).start
        try:
            return {kind.normalize(item) for item in answer}
        except ValueError as exc:
            raise TaskDefinitionError(
                f"{what} returned an item that is not a {self._unit}: {exc}",
                task_id=self.task_id,
            ) from None

    def _pool_complete(self, values: Sequence[Value]) -> set[Value]:
        tasks = [self.task_for(value) for value in values]
        threads = max(1, min(self.check_threads, len(tasks)))
        with ThreadPoolExecutor(threads, thread_name_prefix="conveyor-range") as pool:
            answers = list(pool.map(_is_complete, tasks))
        return {value for value, done in zip(values, answers, strict=True) if done}

    def _target_param(self) -> str:
        """The parameter of ``of`` that takes the value: ``param_name``, else the first of the
        range's kind (exact class, then subclass) that of_params does not set, else the first
        that of_params does not set."""
        of: type[Task] = self.of
        names = [name for name, _ in of.parameters()]
        if self.param_name:
            if self.param_name not in names:
                raise self._error(
                    f"param_name {self.param_name!r} is not a parameter of "
                    f"{of.get_task_family()}; its parameters are: {', '.join(names) or 'none'}",
                    "param_name",
                )
            return str(self.param_name)
        free = [(name, param) for name, param in of.parameters() if name not in self.of_params]
        for matches in (_exactly, isinstance):
            for kind in self._kinds:
                for name, param in free:
                    if matches(param, kind):
                        return name
        if not free:
            raise self._error(
                f"{of.get_task_family()} has no parameter left to take the {self._unit} "
                f"(its parameters: {', '.join(names) or 'none'})",
                "of",
            )
        return free[0][0]

    def _check(self) -> None:
        of: type[Task] = self.of
        names = {name for name, _ in of.parameters()}
        unknown = sorted(set(self.of_params) - names)
        if unknown:
            expected = ", ".join(sorted(names)) or "none"
            raise self._error(
                f"of_params sets {unknown[0]!r}, which is not a parameter of "
                f"{of.get_task_family()}; expected one of: {expected}",
                "of_params",
            )
        if self.start > self.stop:
            raise self._error(
                f"start {self.start} is after stop {self.stop} (stop is excluded)", "start"
            )
        for name in (self._back_name, "task_limit"):
            if name and getattr(self, name) < 0:
                raise self._error(f"{name} must be >= 0, got {getattr(self, name)}", name)

    def _error(self, message: str, parameter: str) -> ParameterError:
        family = self.get_task_family()
        return ParameterError(f"{family}: {message}", task=family, parameter=parameter)


_ALWAYS_SHOWN = frozenset({"of", "start", "stop"})


def _exactly(param: object, kind: type) -> bool:
    return type(param) is kind


def _is_complete(task: Task) -> bool:
    """``task.complete()`` is True; an exception counts as incomplete (the worker reports it
    when it checks the task itself)."""
    try:
        return task.complete() is True
    except Exception:
        return False


# --- the periods --------------------------------------------------------------------------------


def _add_months(value: datetime.date, months: int) -> datetime.date:
    index = value.year * 12 + value.month - 1 + months
    return datetime.date(index // 12, index % 12 + 1, 1)


class RangeDaily(RangeBase):
    """Every day from ``start`` to ``stop`` whose ``of`` task is not complete.

    ``conveyor run conveyor.RangeDaily --of sales.DailyTotal --start 2026-01-01``
    """

    start = DateParameter(description="the first day, included")
    stop = _UntilNow(
        DateParameter(),
        description="the day after the last one, excluded (default: tomorrow, UTC: the range "
        "ends with today)",
    )
    days_back = IntParameter(
        default=0, description="at most this many days before stop (0: no limit)"
    )

    _unit = "day"
    _back_name = "days_back"
    _kinds = (DateParameter,)

    @staticmethod
    def shift(value: Value, periods: int) -> Value:
        """``value`` moved by ``periods`` days."""
        return value + datetime.timedelta(days=periods)

    @staticmethod
    def current(now: datetime.datetime) -> Value:
        """The day of ``now``."""
        return now.date()


class RangeHourly(RangeBase):
    """Every hour from ``start`` to ``stop`` whose ``of`` task is not complete.

    ``conveyor run conveyor.RangeHourly --of logs.HourlyCount --start 2026-01-01T00``
    """

    start = DateHourParameter(description="the first hour, included")
    stop = _UntilNow(
        DateHourParameter(),
        description="the hour after the last one, excluded (default: the next hour, UTC: the "
        "range ends with the current hour)",
    )
    hours_back = IntParameter(
        default=0, description="at most this many hours before stop (0: no limit)"
    )

    _unit = "hour"
    _back_name = "hours_back"
    _kinds = (DateHourParameter, DateTimeParameter)

    @staticmethod
    def shift(value: Value, periods: int) -> Value:
        """``value`` moved by ``periods`` hours."""
        return value + datetime.timedelta(hours=periods)

    @staticmethod
    def current(now: datetime.datetime) -> Value:
        """The hour of ``now``."""
        return now.replace(minute=0, second=0, microsecond=0)


class RangeMonthly(RangeBase):
    """Every month from ``start`` to ``stop`` whose ``of`` task is not complete.

    ``conveyor run conveyor.RangeMonthly --of billing.Invoices --start 2025-01``
    """

    start = MonthParameter(description="the first month, included")
    stop = _UntilNow(
        MonthParameter(),
        description="the month after the last one, excluded (default: next month, UTC: the "
        "range ends with the current month)",
    )
    months_back = IntParameter(
        default=0, description="at most this many months before stop (0: no limit)"
    )

    _unit = "month"
    _back_name = "months_back"
    _kinds = (MonthParameter, DateParameter)

    @staticmethod
    def shift(value: Value, periods: int) -> Value:
        """``value`` moved by ``periods`` months."""
        return _add_months(value, periods)

    @staticmethod
    def current(now: datetime.datetime) -> Value:
        """The month of ``now`` (its 1st)."""
        return now.date().replace(day=1)
