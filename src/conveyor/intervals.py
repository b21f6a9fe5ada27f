"""Date intervals: :class:`DateInterval`, the value of a ``DateIntervalParameter``.

An interval is a half-open range of calendar days, ``[date_a, date_b)``: it includes ``date_a``
and excludes ``date_b``. Its *kind* records how it was written, which is also how it steps with
:meth:`DateInterval.prev` and :meth:`DateInterval.next`:

==========  ===========================  ==============  =======================================
kind        string form                  example         ``prev()`` / ``next()``
==========  ===========================  ==============  =======================================
``day``     ``YYYY-MM-DD``               ``2026-11-30``  the day before / after
``week``    ``YYYY-Www`` (ISO 8601)      ``2026-W48``    the ISO week before / after
``month``   ``YYYY-MM``                  ``2026-11``     the month before / after
``year``    ``YYYY``                     ``2026``        the year before / after
``custom``  ``YYYY-MM-DD-YYYY-MM-DD``    ``2026-11-01-2026-11-30``  the interval of the same
                                                         length just before / after
==========  ===========================  ==============  =======================================

These are the forms Luigi's ``DateIntervalParameter`` reads, so command lines written for Luigi
keep working. ``str(interval)`` is the string form and :meth:`DateInterval.parse` reads it back.

Intervals are immutable and hashable. Two intervals are equal when they have the same kind and
the same bounds (the year 2026 is not equal to the custom interval ``2026-01-01-2027-01-01``);
ordering (``<`` and friends) compares the bounds of intervals of the same kind and raises
``TypeError`` across kinds, as Luigi's does.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal, get_args

__all__ = ["FORMS", "DateInterval", "IntervalKind", "is_interval_form"]

IntervalKind = Literal["day", "week", "month", "year", "custom"]
"""How an interval was written: one day, an ISO week, a month, a year, or a custom range."""

_KINDS: Final = frozenset(get_args(IntervalKind))
_ONE_DAY: Final = datetime.timedelta(days=1)
_Bounds = tuple[datetime.date, datetime.date]
_FIRST: Final = datetime.date.min.isoformat()
_LAST: Final = datetime.date.max.isoformat()

# Each form is tried in turn; the groups are the numbers the matching constructor takes.
_YEAR = re.compile(r"(\d{4})", re.ASCII)
_MONTH = re.compile(r"(\d{4})-(\d{2})", re.ASCII)
_WEEK = re.compile(r"(\d{4})-W(\d{2})", re.ASCII)
_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_CUSTOM = re.compile(r"(\d{4})-(\d{2})-(\d{2})-(\d{4})-(\d{2})-(\d{2})", re.ASCII)

FORMS: Final = "YYYY, YYYY-MM, YYYY-Www, YYYY-MM-DD or YYYY-MM-DD-YYYY-MM-DD"
"""The accepted string forms, for error messages."""


@dataclass(frozen=True, eq=True, order=False)
class DateInterval:
    """A half-open range of days ``[date_a, date_b)`` of a given kind (see the module docs).

    Build one with :meth:`parse` or with :meth:`day`, :meth:`week`, :meth:`month`,
    :meth:`year`, :meth:`custom` or :meth:`from_date`. The constructor checks that the bounds
    fit the kind (a ``month`` starts on the 1st and ends on the 1st of the next month) and
    raises ``ValueError`` otherwise.
    """

    kind: IntervalKind
    date_a: datetime.date
    date_b: datetime.date

    def __post_init__(self) -> None:
        """Check the kind and that the bounds are dates that fit it."""
        if self.kind not in _KINDS:
            raise ValueError(f"unknown interval kind {self.kind!r}; expected one of {_kinds()}")
        for bound in (self.date_a, self.date_b):
            if not isinstance(bound, datetime.date) or isinstance(bound, datetime.datetime):
                raise ValueError(f"interval bounds must be dates, got {bound!r}")
        if self.date_b <= self.date_a:
            raise ValueError(
                f"the end {self.date_b.isoformat()} is not after the start "
                f"{self.date_a.isoformat()} (the end date is excluded)"
            )
        if self.kind != "custom":
            expected = _bounds(self.kind, self.date_a)
            if expected != (self.date_a, self.date_b):
                raise ValueError(
                    f"{self.date_a.isoformat()}..{self.date_b.isoformat()} is not one {self.kind}"
                )

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def day(cls, date: datetime.date) -> DateInterval:
        """The single day ``date``."""
        return cls.from_date("day", date)

    @classmethod
    def week(cls, year: int, week: int) -> DateInterval:
        """ISO 8601 week ``week`` of ISO year ``year`` (Monday to Sunday)."""
        try:
            monday = datetime.date.fromisocalendar(year, week, 1)
        except ValueError as exc:
            raise ValueError(f"there is no week {year:04d}-W{week:02d}: {exc}") from None
        return cls.from_date("week", monday)

    @classmethod
    def month(cls, year: int, month: int) -> DateInterval:
        """The calendar month ``month`` (1..12) of ``year``."""
        return cls.from_date("month", datetime.date(year, month, 1))

    @classmethod
    def year(cls, year: int) -> DateInterval:
        """The calendar year ``year``."""
        return cls.from_date("year", datetime.date(year, 1, 1))

    @classmethod
    def custom(cls, date_a: datetime.date, date_b: datetime.date) -> DateInterval:
        """The days from ``date_a`` (included) to ``date_b`` (excluded)."""
        return cls("custom", date_a, date_b)

    @classmethod
    def from_date(cls, kind: IntervalKind, date: datetime.date) -> DateInterval:
        """The interval of ``kind`` (not ``custom``) that contains ``date``."""
        if kind == "custom":
            raise ValueError("a custom interval is not determined by one date")
        if kind not in _KINDS:
            raise ValueError(f"unknown interval kind {kind!r}; expected one of {_kinds()}")
        try:
            date_a, date_b = _bounds(kind, date)
        except OverflowError:
            raise ValueError(f"the {kind} of {date.isoformat()} ends past {_LAST}") from None
        return cls(kind, date_a, date_b)

    @classmethod
    def parse(cls, text: str) -> DateInterval:
        """Read any of the string forms in the module docs; ``ValueError`` for anything else."""
        return _parse(text)

    # --- the days ---------------------------------------------------------------------------

    def dates(self) -> list[datetime.date]:
        """Every day of the interval, in order, ``date_a`` first and ``date_b`` not included."""
        return list(self)

    def hours(self) -> Iterator[datetime.datetime]:
        """The start of every hour of the interval, in order (24 per day)."""
        for date in self:
            for hour in range(24):
                yield datetime.datetime.combine(date, datetime.time(hour))

    def __iter__(self) -> Iterator[datetime.date]:
        """Iterate over the days, as :meth:`dates` lists them."""
        date = self.date_a
        while date < self.date_b:
            yield date
            date += _ONE_DAY

    def __contains__(self, date: object) -> bool:
        """True if ``date`` (a date, not a datetime) is one of the interval's days."""
        if not isinstance(date, datetime.date) or isinstance(date, datetime.datetime):
            return False
        return self.date_a <= date < self.date_b

    # --- neighbours -------------------------------------------------------------------------

    def prev(self) -> DateInterval:
        """The interval of the same kind just before this one (May -> April; a custom
        interval moves back by its own length)."""
        try:
            if self.kind == "custom":
                return DateInterval("custom", self.date_a - self._length(), self.date_a)
            return self.from_date(self.kind, self.date_a - _ONE_DAY)
        except OverflowError:
            raise ValueError(f"the interval before {self} starts before {_FIRST}") from None

    def next(self) -> DateInterval:
        """The interval of the same kind just after this one (2026 -> 2027; a custom interval
        moves forward by its own length)."""
        try:
            if self.kind == "custom":
                return DateInterval("custom", self.date_b, self.date_b + self._length())
        except OverflowError:
            raise ValueError(f"the interval after {self} ends past {_LAST}") from None
        return self.from_date(self.kind, self.date_b)

    def _length(self) -> datetime.timedelta:
        return self.date_b - self.date_a

    # --- string form and ordering -----------------------------------------------------------

    def __str__(self) -> str:
        """The string form, which :meth:`parse` reads back to an equal interval."""
        a = self.date_a
        if self.kind == "day":
            return a.isoformat()
        if self.kind == "week":
            iso_year, week, _ = a.isocalendar()
            return f"{iso_year:04d}-W{week:02d}"
        if self.kind == "month":
            return f"{a.year:04d}-{a.month:02d}"
        if self.kind == "year":
            return f"{a.year:04d}"
        return f"{a.isoformat()}-{self.date_b.isoformat()}"

    def __repr__(self) -> str:
        """``DateInterval.parse('<string form>')``."""
        return f"DateInterval.parse({str(self)!r})"

    def _bounds_vs(
        self, other: object
    ) -> tuple[tuple[datetime.date, ...], tuple[datetime.date, ...]]:
        if not isinstance(other, DateInterval):
            raise TypeError(f"cannot compare a DateInterval with {type(other).__name__}")
        if other.kind != self.kind:
            raise TypeError(f"cannot order a {self.kind} interval against a {other.kind} one")
        return (self.date_a, self.date_b), (other.date_a, other.date_b)

    def __lt__(self, other: object) -> bool:
        """Earlier bounds first; only between intervals of the same kind."""
        mine, theirs = self._bounds_vs(other)
        return mine < theirs

    def __le__(self, other: object) -> bool:
        """Earlier or equal bounds; only between intervals of the same kind."""
        mine, theirs = self._bounds_vs(other)
        return mine <= theirs

    def __gt__(self, other: object) -> bool:
        """Later bounds first; only between intervals of the same kind."""
        mine, theirs = self._bounds_vs(other)
        return mine > theirs

    def __ge__(self, other: object) -> bool:
        """Later or equal bounds; only between intervals of the same kind."""
        mine, theirs = self._bounds_vs(other)
        return mine >= theirs


def _kinds() -> str:
    return ", ".join(sorted(_KINDS))


def _bounds(kind: IntervalKind, date: datetime.date) -> tuple[datetime.date, datetime.date]:
    """``(date_a, date_b)`` of the ``kind`` interval holding ``date``; OverflowError past 9999."""
    if kind == "day":
        return date, date + _ONE_DAY
    if kind == "week":
        monday = date - datetime.timedelta(days=date.weekday())
        return monday, monday + datetime.timedelta(days=7)
    if kind == "month":
        start = date.replace(day=1)
        return start, (start + datetime.timedelta(days=31)).replace(day=1)
    if kind == "year":
        start = datetime.date(date.year, 1, 1)
        if date.year == datetime.MAXYEAR:
            raise OverflowError("the year after 9999 is out of range")  # as date arithmetic does
        return start, datetime.date(date.year + 1, 1, 1)
    raise ValueError(f"a {kind} interval is not determined by one date")


def is_interval_form(text: str) -> bool:
    """True if ``text`` has the shape of one of the string forms (its numbers may still be out
    of range, as in ``2026-13``)."""
    return any(form.fullmatch(text) for form in (_YEAR, _MONTH, _WEEK, _DAY, _CUSTOM))


def _parse(text: str) -> DateInterval:
    if match := _YEAR.fullmatch(text):
        return DateInterval.year(int(match[1]))
    if match := _MONTH.fullmatch(text):
        return DateInterval.month(int(match[1]), int(match[2]))
    if match := _WEEK.fullmatch(text):
        return DateInterval.week(int(match[1]), int(match[2]))
    if match := _DAY.fullmatch(text):
        return DateInterval.day(datetime.date(*map(int, match.groups())))
    if match := _CUSTOM.fullmatch(text):
        numbers = [int(group) for group in match.groups()]
        return DateInterval.custom(datetime.date(*numbers[:3]), datetime.date(*numbers[3:]))
    raise ValueError(f"expected a date interval ({FORMS}), got {text!r}")
