"""The parameter kinds ported from Luigi (SPEC §2.2), DateInterval, and the Optional kinds.

Where Luigi defines a string form, the cases are those of Luigi 3.8's own tests
(``test/parameter_test.py``, ``test/date_parameter_test.py``, ``test/date_interval_test.py``,
``test/numerical_parameter_test.py``, ``test/choice_parameter_test.py``,
``test/optional_parameter_test.py``), so that command lines written for Luigi keep working.
"""

from __future__ import annotations

import datetime
import enum
import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import conveyor.parameters as parameters_module
from conveyor.errors import ParameterError
from conveyor.intervals import DateInterval
from conveyor.parameters import (
    NO_DEFAULT,
    ChoiceListParameter,
    DateHourParameter,
    DateIntervalParameter,
    DateMinuteParameter,
    FrozenDict,
    MonthParameter,
    NumericalParameter,
    OptionalBoolParameter,
    OptionalChoiceListParameter,
    OptionalChoiceParameter,
    OptionalDateHourParameter,
    OptionalDateIntervalParameter,
    OptionalDateMinuteParameter,
    OptionalDateParameter,
    OptionalDateTimeParameter,
    OptionalDictParameter,
    OptionalEnumParameter,
    OptionalFloatParameter,
    OptionalIntParameter,
    OptionalKind,
    OptionalListParameter,
    OptionalMonthParameter,
    OptionalNumericalParameter,
    OptionalParameter,
    OptionalPathParameter,
    OptionalTaskParameter,
    OptionalTimeDeltaParameter,
    OptionalTupleParameter,
    OptionalYearParameter,
    Parameter,
    TaskParameter,
    TimeDeltaParameter,
    TupleParameter,
    YearParameter,
    allow_task_modules,
    allowed_task_modules,
    task_modules_named,
)
from conveyor.task import Task

RunCli = Callable[..., subprocess.CompletedProcess[str]]  # the run_cli fixture (conftest.py)
WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

D = datetime.date
DT = datetime.datetime
TD = datetime.timedelta


class Color(enum.Enum):
    """An enum for OptionalEnumParameter."""

    RED = 1
    GREEN = 2


class Upstream(Task):
    """A task class that TaskParameter values name."""


class Kinds(Task):
    """One parameter of every new kind, each with a default."""

    hour = DateHourParameter(default=DT(2026, 11, 30, 18))
    minute = DateMinuteParameter(default=DT(2026, 11, 30, 18, 42))
    month = MonthParameter(default=D(2026, 11, 1))
    year = YearParameter(default=D(2026, 1, 1))
    interval = DateIntervalParameter(default=DateInterval.parse("2026-11-01-2026-11-30"))
    window = TimeDeltaParameter(default=TD(days=1, hours=2))
    pairs = TupleParameter(default=((1, 2), (3, 4)))
    ratio = NumericalParameter(default=0.5, var_type=float, min_value=0, max_value=1)
    count = NumericalParameter(default=3, var_type=int, min_value=-3, max_value=7)
    regions = ChoiceListParameter(default=("eu", "us"), choices=["eu", "us", "apac"])
    upstream = TaskParameter(default=Upstream)
    limit = OptionalIntParameter()
    since = OptionalDateHourParameter()


_HOLDERS = itertools.count(1)


def _task_with(param: Parameter[Any], name: str = "p") -> type[Task]:
    """A new Task subclass with ``param`` as its parameter ``name`` (a fresh family each call)."""
    return type(f"Holder{next(_HOLDERS)}", (Task,), {name: param})


# --- DateHourParameter (Luigi's DateHourParameterTest) ----------------------------------------


def test_date_hour_parses_luigi_form() -> None:
    """``2013-02-01T18`` is 18:00 on 1 February 2013."""
    assert DateHourParameter().parse("2013-02-01T18") == DT(2013, 2, 1, 18)


def test_date_hour_reads_unpadded_fields_as_luigi_does() -> None:
    """Luigi parses with strptime, so ``2013-2-1T8`` is accepted too (existing command lines)."""
    assert DateHourParameter().parse("2013-2-1T8") == DT(2013, 2, 1, 8)


def test_date_hour_from_a_date_is_midnight() -> None:
    """A date given as a DateHour value means midnight of that day (Luigi's test_date_to_dh)."""
    assert DateHourParameter().normalize(D(2000, 1, 1)) == DT(2000, 1, 1, 0)


def test_date_hour_cuts_a_datetime_to_its_hour() -> None:
    """A datetime with minutes and seconds is cut down to the hour."""
    assert DateHourParameter().normalize(DT(2013, 2, 1, 18, 39, 45, 7)) == DT(2013, 2, 1, 18)


def test_date_hour_serializes_to_luigi_form() -> None:
    """The string form is ``YYYY-MM-DDTHH`` with zero padding."""
    assert DateHourParameter().serialize(DT(2013, 2, 1, 18, 0, 0)) == "2013-02-01T18"
    assert DateHourParameter().serialize(DT(2013, 2, 3, 4, 5)) == "2013-02-03T04"
    assert DateHourParameter().serialize(DT(999, 1, 2, 3)) == "0999-01-02T03"


@pytest.mark.parametrize(
    "text", ["2013-02-01", "2013-02-01T24", "2013-02-30T10", "2013-02-01T18:00", "2013-02-01 18"]
)
def test_date_hour_rejects_other_forms(text: str) -> None:
    """Anything but a date and an hour joined by T is a ParameterError showing the value."""
    with pytest.raises(ParameterError, match="YYYY-MM-DDTHH") as info:
        DateHourParameter().parse(text)
    assert repr(text) in str(info.value)


def test_date_hour_rejects_an_aware_datetime() -> None:
    """The string form has no offset, so an aware datetime could not round-trip."""
    with pytest.raises(ParameterError, match="naive"):
        DateHourParameter().normalize(DT(2013, 2, 1, 18, tzinfo=datetime.UTC))


# --- DateMinuteParameter (Luigi's DateMinuteParameterTest) ------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2013-02-01T1842", DT(2013, 2, 1, 18, 42)),
        ("2013-02-01T1807", DT(2013, 2, 1, 18, 7)),
        ("2013-02-01T18H42", DT(2013, 2, 1, 18, 42)),  # Luigi's deprecated form
        ("2000-1-1T1200", DT(2000, 1, 1, 12, 0)),  # Luigi's hashability test
        ("2001-02-03T0430", DT(2001, 2, 3, 4, 30)),
    ],
)
def test_date_minute_parses_luigi_forms(text: str, expected: DT) -> None:
    """``YYYY-MM-DDTHHMM`` and the older ``YYYY-MM-DDTHHHMM`` parse as in Luigi."""
    assert DateMinuteParameter().parse(text) == expected


def test_date_minute_serializes_with_padding() -> None:
    """The string form pads hour and minute: ``2013-02-01T1807``."""
    assert DateMinuteParameter().serialize(DT(2013, 2, 1, 18, 42)) == "2013-02-01T1842"
    assert DateMinuteParameter().serialize(DT(2013, 2, 1, 18, 7)) == "2013-02-01T1807"


def test_date_minute_cuts_seconds() -> None:
    """A datetime with seconds is cut down to its minute."""
    assert DateMinuteParameter().normalize(DT(2013, 2, 1, 18, 7, 59)) == DT(2013, 2, 1, 18, 7)


@pytest.mark.parametrize(
    "text", ["2013-02-01T18", "2013-02-01T184", "2013-02-01T1860", "2013-02-01T18:42"]
)
def test_date_minute_rejects_other_forms(text: str) -> None:
    """A missing or impossible minute is a ParameterError (Luigi reads ``T18`` as 01:08)."""
    with pytest.raises(ParameterError, match="YYYY-MM-DDTHHMM"):
        DateMinuteParameter().parse(text)


# --- MonthParameter and YearParameter (Luigi's MonthParameterTest / YearParameterTest) --------


def test_month_parses_to_first_day() -> None:
    """``2015-04`` is the date 2015-04-01."""
    assert MonthParameter().parse("2015-04") == D(2015, 4, 1)


def test_month_accepts_a_month_interval_and_a_date() -> None:
    """A month DateInterval or any date of the month stands for the month."""
    assert MonthParameter().normalize(DateInterval.month(2015, 4)) == D(2015, 4, 1)
    assert MonthParameter().normalize(D(2015, 4, 3)) == D(2015, 4, 1)


def test_month_default_may_be_an_interval() -> None:
    """Luigi's test_month_interval_default: the default is normalised to the first day."""
    holder = _task_with(MonthParameter(default=DateInterval.month(2015, 4)))
    assert holder().p == D(2015, 4, 1)  # type: ignore[attr-defined]


def test_month_serializes_year_and_month() -> None:
    """A date's day is dropped from the string form."""
    assert MonthParameter().serialize(D(2015, 4, 3)) == "2015-04"
    assert MonthParameter().serialize(D(2013, 2, 3)) == "2013-02"


@pytest.mark.parametrize("text", ["2015-13", "2015", "2015-04-01", "15-04"])
def test_month_rejects_other_forms(text: str) -> None:
    """Only year and month are a month."""
    with pytest.raises(ParameterError, match="YYYY-MM"):
        MonthParameter().parse(text)


def test_month_rejects_a_year_interval_and_a_datetime() -> None:
    """A year interval is not a month, and a datetime is not a date here (as DateParameter)."""
    for value in (DateInterval.year(2015), DT(2015, 4, 3, 12)):
        with pytest.raises(ParameterError, match="month DateInterval"):
            MonthParameter().normalize(value)


def test_year_parses_serializes_and_accepts_intervals() -> None:
    """``2015`` is 2015-01-01; a year interval or any date of the year stands for it."""
    assert YearParameter().parse("2015") == D(2015, 1, 1)
    assert YearParameter().normalize(DateInterval.year(2015)) == D(2015, 1, 1)
    assert YearParameter().normalize(D(2015, 4, 3)) == D(2015, 1, 1)
    assert YearParameter().serialize(D(2015, 4, 3)) == "2015"


@pytest.mark.parametrize("text", ["15", "2015-01", "twenty"])
def test_year_rejects_other_forms(text: str) -> None:
    """Only four digits are a year."""
    with pytest.raises(ParameterError, match="YYYY"):
        YearParameter().parse(text)


# --- DateInterval (Luigi's date_interval_test) ------------------------------------------------


def _days(start: D, count: int) -> list[D]:
    return [start + TD(days=i) for i in range(count)]


def test_interval_of_one_day() -> None:
    """``2012-01-01`` is that day; next/prev are the neighbouring days."""
    di = DateIntervalParameter().parse("2012-01-01")
    assert di.dates() == [D(2012, 1, 1)]
    assert di.next().dates() == [D(2012, 1, 2)]
    assert di.prev().dates() == [D(2011, 12, 31)]
    assert str(di) == "2012-01-01"


def test_interval_of_a_month() -> None:
    """``2012-01`` has 31 days; the next month (a leap February) 29."""
    di = DateIntervalParameter().parse("2012-01")
    assert di.dates() == _days(D(2012, 1, 1), 31)
    assert di.next().dates() == _days(D(2012, 2, 1), 29)
    assert di.prev().dates() == _days(D(2011, 12, 1), 31)
    assert str(di) == "2012-01"


def test_interval_of_a_year() -> None:
    """``2012`` has 366 days; its neighbours 365."""
    di = DateIntervalParameter().parse("2012")
    assert di.dates() == _days(D(2012, 1, 1), 366)
    assert di.next().dates() == _days(D(2013, 1, 1), 365)
    assert di.prev().dates() == _days(D(2011, 1, 1), 365)
    assert str(di) == "2012"


def test_interval_of_an_iso_week() -> None:
    """ISO weeks cross new year: 2011-W52 starts on 26 December, 2013-W01 on 31 December 2012."""
    di = DateIntervalParameter().parse("2011-W52")
    assert di.dates() == _days(D(2011, 12, 26), 7)
    assert di.next().dates() == _days(D(2012, 1, 2), 7)
    assert str(di) == "2011-W52"
    di = DateIntervalParameter().parse("2013-W01")
    assert di.dates() == _days(D(2012, 12, 31), 7)
    assert di.prev().dates() == _days(D(2012, 12, 24), 7)
    assert str(di) == "2013-W01"


def test_custom_interval_includes_start_and_excludes_end() -> None:
    """``2012-01-01-2012-02-01`` holds the 31 days of January, not 1 February."""
    di = DateIntervalParameter().parse("2012-01-01-2012-02-01")
    assert di.dates() == _days(D(2012, 1, 1), 31)
    assert D(2012, 2, 1) not in di
    assert D(2012, 1, 31) in di
    assert str(di) == "2012-01-01-2012-02-01"


def test_custom_interval_steps_by_its_own_length() -> None:
    """Luigi raises NotImplementedError here; conveyor moves by the interval's length."""
    di = DateInterval.parse("2026-11-01-2026-11-30")
    assert str(di.next()) == "2026-11-30-2026-12-29"
    assert str(di.prev()) == "2026-10-03-2026-11-01"


@pytest.mark.parametrize(
    ("text", "kind", "first", "count"),
    [
        ("2026-11-01-2026-11-30", "custom", D(2026, 11, 1), 29),
        ("2026-W48", "week", D(2026, 11, 23), 7),
        ("2026-11", "month", D(2026, 11, 1), 30),
        ("2026", "year", D(2026, 1, 1), 365),
        ("2026-11-30", "day", D(2026, 11, 30), 1),
    ],
)
def test_spec_interval_forms(text: str, kind: str, first: D, count: int) -> None:
    """Each SPEC §2.2 form parses to its kind and days, and str() gives the text back."""
    di = DateInterval.parse(text)
    assert (di.kind, di.date_a, len(di.dates())) == (kind, first, count)
    assert str(di) == text
    assert DateInterval.parse(str(di)) == di


@pytest.mark.parametrize(
    "text",
    ["xyz", "2026-13", "2026-W54", "2026-W00", "2026-02-30", "2026-11-30-2026-11-01", "9999"],
)
def test_interval_rejects_bad_text(text: str) -> None:
    """Unknown forms, impossible dates and backwards custom ranges are ParameterErrors."""
    with pytest.raises(ParameterError, match="date interval"):
        DateIntervalParameter().parse(text)


def test_interval_equal_length_custom_ranges_are_ordered() -> None:
    """Luigi's test_comparison: years order by their dates and equal ones hash together."""
    a, b, c, d = (DateInterval.parse(t) for t in ("2011", "2013", "2012", "2012"))
    assert a < b
    assert a < c
    assert b > c
    assert d == c
    assert min(c, b) == d
    assert len({a, b, c, d}) == 3


def test_interval_comparison_across_kinds() -> None:
    """A year and the equivalent custom range are not equal, and cannot be ordered."""
    year, custom = DateInterval.parse("2012"), DateInterval.parse("2012-01-01-2013-01-01")
    assert year != custom
    with pytest.raises(TypeError):
        _ = year < custom


def test_interval_orders_like_its_bounds() -> None:
    """Luigi's test_cmp: every comparison of custom ranges agrees with comparing the bounds."""
    ranges = [(1, 30), (1, 15), (10, 20), (20, 30)]
    built = {r: DateInterval.parse(f"2015-01-{r[0]:02d}-2015-01-{r[1]:02d}") for r in ranges}
    ops: list[Callable[[Any, Any], bool]] = [
        lambda x, y: x == y,
        lambda x, y: x != y,
        lambda x, y: x < y,
        lambda x, y: x > y,
        lambda x, y: x <= y,
        lambda x, y: x >= y,
    ]
    for ra in ranges:
        for rb in ranges:
            for op in ops:
                assert op(ra, rb) == op(built[ra], built[rb])


def test_interval_hours() -> None:
    """A year of 365 days has 24 * 365 hours, the first at midnight of 1 January."""
    hours = list(DateInterval.parse("2015").hours())
    assert len(hours) == 24 * 365
    assert hours[0] == DT(2015, 1, 1, 0)


def test_interval_parameter_default_and_positional() -> None:
    """Luigi's test_parameter_parse_and_default, without Luigi's command-line parser."""
    month, other = DateInterval.month(2012, 11), DateInterval.month(2012, 10)
    holder = _task_with(DateIntervalParameter(default=month))
    assert holder().p == month  # type: ignore[attr-defined]
    assert holder("2012-10").p == other  # type: ignore[attr-defined]
    assert holder(month).p == month  # type: ignore[attr-defined]
    assert holder(p=month).p == month  # type: ignore[attr-defined]
    required = _task_with(DateIntervalParameter())
    with pytest.raises(ParameterError, match="missing required parameter"):
        required()


def test_interval_constructor_checks_bounds_fit_kind() -> None:
    """A month must start on the 1st and end a month later; bounds must be plain dates."""
    with pytest.raises(ValueError, match="not one month"):
        DateInterval("month", D(2026, 11, 2), D(2026, 12, 2))
    with pytest.raises(ValueError, match="bounds must be dates"):
        DateInterval("custom", DT(2026, 11, 1), D(2026, 12, 1))


def test_interval_neighbours_at_the_end_of_the_calendar() -> None:
    """Stepping past year 9999 or before year 1 is a ValueError, not an OverflowError."""
    with pytest.raises(ValueError, match="past"):
        DateInterval.month(9999, 11).next()
    with pytest.raises(ValueError, match="before"):
        DateInterval.parse("0001-01-01-0001-01-05").prev()


# --- TimeDeltaParameter (Luigi's TestParamWithDefaultFromConfig / TestSerialize…) -------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0 seconds", TD(seconds=0)),
        ("0 d", TD(days=0)),
        ("1 day", TD(days=1)),
        ("2 seconds", TD(seconds=2)),
        ("3w 4h 5m", TD(weeks=3, hours=4, minutes=5)),
        ("P4DT12H30M5S", TD(days=4, hours=12, minutes=30, seconds=5)),
        ("P5D", TD(days=5)),
        ("P5W", TD(weeks=5)),
        ("PT6M", TD(minutes=6)),
        ("P2DT3H2M", TD(days=2, hours=3, minutes=2)),
        ("12.34", TD(seconds=12.34)),
        ("56789", TD(seconds=56789)),
        ("1 day 2 hours", TD(days=1, hours=2)),
        ("P1DT2H", TD(days=1, hours=2)),
        ("90 seconds", TD(seconds=90)),
        ("1 week 2 days", TD(weeks=1, days=2)),
        ("1 h", TD(hours=1)),
        ("5 w 4 d 3 h 2 m 1 s", TD(weeks=5, days=4, hours=3, minutes=2, seconds=1)),
        ("-3", TD(seconds=-3)),
    ],
)
def test_time_delta_parses_luigi_forms(text: str, expected: TD) -> None:
    """Seconds, units longest first, and ISO 8601 durations parse as in Luigi."""
    assert TimeDeltaParameter().parse(text) == expected


@pytest.mark.parametrize(
    "text", ["P3Y6M4DT12H30M5S", "P6M", "P", "PT", "1 fortnight", "5 ms", "1 day, 2 hours", "inf"]
)
def test_time_delta_rejects_years_months_and_junk(text: str) -> None:
    """Years and months (of no fixed length), unknown units and trailing junk are errors."""
    with pytest.raises(ParameterError, match="duration") as info:
        TimeDeltaParameter().parse(text)
    assert repr(text) in str(info.value)


def test_time_delta_serializes_as_luigi() -> None:
    """Luigi's TestSerializeTimeDeltaParameters: ``5 w 4 d 3 h 2 m 1 s`` and the zero form."""
    tdelta = TD(weeks=5, days=4, hours=3, minutes=2, seconds=1)
    assert TimeDeltaParameter().serialize(tdelta) == "5 w 4 d 3 h 2 m 1 s"
    assert TimeDeltaParameter().serialize(TD(seconds=0)) == "0 w 0 d 0 h 0 m 0 s"


@pytest.mark.parametrize(
    "value",
    [TD(seconds=12.34), TD(seconds=-5), TD(microseconds=1), -TD(days=3, microseconds=7), TD.max],
)
def test_time_delta_round_trips_what_luigi_form_cannot_say(value: TD) -> None:
    """Fractions of a second and negative durations are written in seconds, exactly."""
    param = TimeDeltaParameter()
    assert param.parse(param.serialize(value)) == value


def test_time_delta_takes_numbers_as_seconds() -> None:
    """A typed int or float (a TOML config value) is a number of seconds, never a bool."""
    assert TimeDeltaParameter().normalize(90) == TD(seconds=90)
    assert TimeDeltaParameter().normalize(1.5) == TD(seconds=1.5)
    with pytest.raises(ParameterError):
        TimeDeltaParameter().normalize(True)


# --- TupleParameter (Luigi's tuple tests) ---------------------------------------------------


@pytest.mark.parametrize("value", [((1, 2), (3, 4)), (1, 2, 3), ()])
def test_tuple_serialize_then_parse(value: tuple[Any, ...]) -> None:
    """Luigi's test_tuple_serialize_parse and TestSerializeTupleParameter."""
    param = TupleParameter()
    assert param.parse(param.serialize(value)) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('(1,"hello")', (1, "hello")),
        (
            '({"foo": "bar"}, {"doge": "wow"})',
            (FrozenDict({"foo": "bar"}), FrozenDict({"doge": "wow"})),
        ),
        ('(("foo", "bar"), ("doge", "wow"))', (("foo", "bar"), ("doge", "wow"))),
        ('["foo", "bar"]', ("foo", "bar")),
        ("((1,2),(3,4))", ((1, 2), (3, 4))),
        ("[[1, 2], [3, 4]]", ((1, 2), (3, 4))),
        ("[]", ()),
    ],
)
def test_tuple_parses_json_and_python_literals(text: str, expected: tuple[Any, ...]) -> None:
    """A JSON array or a Python tuple literal, nested lists becoming tuples (hashable)."""
    value = TupleParameter().parse(text)
    assert value == expected
    assert hash(value) == hash(expected)


@pytest.mark.parametrize("text", ['("abcd")', '(("abcd"))', "((1,2),(3,4", '"abc"', "{1, 2}"])
def test_tuple_rejects_non_lists(text: str) -> None:
    """Luigi's invalid-string cases (a bare string, a syntax error) and a set are errors."""
    with pytest.raises(ParameterError, match="tuple literal"):
        TupleParameter().parse(text)


def test_tuple_string_form_is_compact_json() -> None:
    """The written form is JSON, which any Luigi TupleParameter also reads."""
    assert TupleParameter().serialize(((1, 2), (3, 4))) == "[[1,2],[3,4]]"


# --- NumericalParameter (Luigi's numerical_parameter_test) -----------------------------------


def test_numerical_min_value_is_included() -> None:
    """``-3 <= x``: -3 is accepted, as an int or a float."""
    assert NumericalParameter(var_type=int, min_value=-3, max_value=7).parse("-3") == -3
    as_float = NumericalParameter(var_type=float, min_value=-3, max_value=7).parse("-3")
    assert as_float == -3.0
    assert isinstance(as_float, float)


@pytest.mark.parametrize("var_type", [int, float])
def test_numerical_max_value_is_excluded(var_type: type[Any]) -> None:
    """``x < 7``: 7 is rejected, and the message shows the permitted range."""
    param = NumericalParameter(var_type=var_type, min_value=-3, max_value=7)
    with pytest.raises(ParameterError, match=r"in \[-3, 7\), got '7'"):
        param.parse("7")


def test_numerical_checks_typed_values_too() -> None:
    """A typed value out of range, or of the wrong type, is rejected like its string form."""
    param = NumericalParameter(var_type=int, min_value=-3, max_value=7)
    assert param.normalize(-3) == -3
    for bad in (-4, 7, 2.5, True, "x"):
        with pytest.raises(ParameterError):
            param.normalize(bad)


def test_numerical_requires_type_and_bounds() -> None:
    """var_type, min_value and max_value are required; a bad type or an empty range fails."""
    with pytest.raises(TypeError):
        NumericalParameter(min_value=-3, max_value=7)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        NumericalParameter(var_type=int, max_value=7)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        NumericalParameter(var_type=int, min_value=-3)  # type: ignore[call-overload]
    with pytest.raises(ParameterError, match="int or float"):
        NumericalParameter(var_type=str, min_value=0, max_value=1)  # type: ignore[type-var]
    with pytest.raises(ParameterError, match="empty"):
        NumericalParameter(var_type=int, min_value=7, max_value=7)


@pytest.mark.parametrize(("var_type", "value"), [(int, -3), (float, -3.0), (float, 0.1)])
def test_numerical_serialize_then_parse(var_type: type[Any], value: float) -> None:
    """Luigi's int/float serialize-parse and hash tests."""
    param = NumericalParameter(var_type=var_type, min_value=-3, max_value=7)
    assert param.parse(param.serialize(value)) == value
    assert hash(param.normalize(value)) == hash(param.parse(str(value)))


# --- ChoiceListParameter (Luigi's choice-list tests) -----------------------------------------


def test_choice_list_parses_comma_separated_as_luigi() -> None:
    """Luigi's test_choice_list_param_valid: "" is (), "1" is ("1",), "1,3" is ("1", "3")."""
    param = ChoiceListParameter(choices=["1", "2", "3"])
    assert param.parse("") == ()
    assert param.parse("1") == ("1",)
    assert param.parse("1,3") == ("1", "3")
    assert param.parse("3,1,3") == ("3", "1", "3")


def test_choice_list_also_reads_a_json_list() -> None:
    """A JSON array of choices is read too."""
    assert ChoiceListParameter(choices=["1", "2", "3"]).parse('["1", "3"]') == ("1", "3")


def test_choice_list_rejects_a_non_choice() -> None:
    """Luigi's test_choice_list_param_invalid: "4" is not a choice; the error names it."""
    with pytest.raises(ParameterError, match="'4' is not one of the choices"):
        ChoiceListParameter(choices=["1", "2", "3"]).parse("1,4")


def test_choice_list_requires_string_choices() -> None:
    """Missing, empty or non-string choices fail when the parameter is declared."""
    with pytest.raises(TypeError):
        ChoiceListParameter()  # type: ignore[call-arg]
    for bad in ([], "abc", [1, 2]):
        with pytest.raises(ParameterError, match="choice"):
            ChoiceListParameter(choices=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [(("a", "c"), "a,c"), (("a",), "a"), ((), "[]"), (("a,b", "c"), '["a,b","c"]')],
)
def test_choice_list_serializes_commas_unless_ambiguous(value: tuple[str, ...], text: str) -> None:
    """Comma-separated as Luigi writes it; JSON when a choice holds a comma; () is ``[]``."""
    param = ChoiceListParameter(choices=["a", "c", "a,b"])
    assert param.serialize(value) == text
    assert param.parse(text) == value


def test_choice_list_hash_matches_typed_value() -> None:
    """Luigi's hashability test: a typed tuple and its string form give equal hashes."""
    holder = _task_with(ChoiceListParameter(choices=["1", "2", "3"]))
    param = ChoiceListParameter(choices=["3", "2", "1"])
    assert hash(holder(p=("3",)).p) == hash(param.parse("3"))  # type: ignore[attr-defined]


# --- TaskParameter ---------------------------------------------------------------------------


class MetaTask(Task):
    """Luigi's TestTaskParameter.testUsage task (namespaced)."""

    task_namespace = "mynamespace"
    a = TaskParameter()


class OtherTask(Task):
    """A second namespaced task class for TaskParameter values."""

    task_namespace = "other_namespace"


def test_task_parameter_takes_task_classes() -> None:
    """Luigi's testUsage: a class given to the constructor is the value."""
    assert MetaTask(a=MetaTask).a is MetaTask
    assert MetaTask(a=OtherTask).a is OtherTask


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mynamespace.MetaTask", MetaTask),  # Luigi's bare family form
        ("other_namespace.OtherTask", OtherTask),
        (f"{__name__}.other_namespace.OtherTask", OtherTask),  # module.Family
        (f"{__name__}.Upstream", Upstream),
        ("Upstream", Upstream),
    ],
)
def test_task_parameter_resolves_defined_classes(text: str, expected: type[Task]) -> None:
    """A defined class is found by ``module.Family`` or, as in Luigi, by its family alone."""
    assert TaskParameter().parse(text) is expected


@pytest.mark.parametrize("text", ["blah", "Taskk", "no_such_module.Upstream", ""])
def test_task_parameter_rejects_unknown_names(text: str) -> None:
    """Luigi's ``--a blah`` / ``--a Taskk``: no such class is a ParameterError naming it."""
    with pytest.raises(ParameterError, match="no such task class") as info:
        TaskParameter().parse(text)
    assert repr(text) in str(info.value)


def test_task_parameter_serializes_module_and_family() -> None:
    """The string form is ``module.Family``, namespace included."""
    assert TaskParameter().serialize(OtherTask) == f"{__name__}.other_namespace.OtherTask"
    task = MetaTask(a=OtherTask)
    assert task.to_str_params() == {"a": f"{__name__}.other_namespace.OtherTask"}
    assert MetaTask.from_str_params(task.to_str_params()) == task


def test_task_parameter_rejects_non_task_and_replaced_classes() -> None:
    """Only registered Task subclasses are values: not other classes, not a shadowed class."""
    with pytest.raises(ParameterError, match="a Task subclass"):
        TaskParameter().normalize(int)
    with pytest.raises(ParameterError, match="registered"):
        TaskParameter().normalize(Task)

    def make() -> type[Task]:
        class Shadowed(Task):
            """Defined twice under one module and family."""

        return Shadowed

    first, _second = make(), make()
    with pytest.raises(ParameterError, match="replaced"):
        TaskParameter().normalize(first)


def test_task_parameter_bare_family_in_two_modules_is_ambiguous(task_module: WriteModule) -> None:
    """A bare family defined in two modules is an error naming both ``module.Family`` forms."""
    source = "import conveyor\n\nclass TwiceDefined(conveyor.Task):\n    pass\n"
    first, second = task_module(source), task_module(source)
    __import__(first)
    __import__(second)
    with pytest.raises(ParameterError, match="ambiguous") as info:
        TaskParameter().parse("TwiceDefined")
    assert f"{first}.TwiceDefined" in str(info.value)
    assert f"{second}.TwiceDefined" in str(info.value)
    assert TaskParameter().parse(f"{second}.TwiceDefined").__module__ == second


IMPORT_MARKER_SOURCE = """
import pathlib

import conveyor

pathlib.Path({marker!r}).write_text("imported")


class Remote(conveyor.Task):
    pass
"""


def test_task_parameter_never_imports_from_a_wire_value(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """A value naming a module not yet imported, outside allow_task_modules, imports nothing."""
    marker = tmp_path / "imported.txt"
    module = task_module(IMPORT_MARKER_SOURCE.format(marker=str(marker)))
    with pytest.raises(ParameterError, match="no module allowed"):
        MetaTask.from_str_params({"a": f"{module}.Remote"})
    assert not marker.exists()
    assert module not in sys.modules


def test_task_parameter_imports_an_allowed_module(task_module: WriteModule, tmp_path: Path) -> None:
    """Inside allow_task_modules([module]) the module is imported and its class resolved."""
    marker = tmp_path / "imported.txt"
    module = task_module(IMPORT_MARKER_SOURCE.format(marker=str(marker)), package=True)
    with allow_task_modules([module]) as allowed:
        assert module in allowed
        task = MetaTask(a=f"{module}.Remote")
    assert marker.exists()
    assert task.a.__module__ == module  # type: ignore[attr-defined]
    assert allowed_task_modules() == frozenset()


def test_allowing_a_package_does_not_allow_its_modules(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Names are exact: allowing ``pkg`` does not let a value import ``pkg.tasks``."""
    marker = tmp_path / "imported.txt"
    module = task_module(IMPORT_MARKER_SOURCE.format(marker=str(marker)), package=True)
    package = module.rpartition(".")[0]
    with allow_task_modules([package]), pytest.raises(ParameterError, match="allowed modules"):
        TaskParameter().parse(f"{module}.Remote")
    assert not marker.exists()


def test_allowed_module_that_fails_to_import_is_named(task_module: WriteModule) -> None:
    """An allowed module that raises at import is a ParameterError saying so."""
    module = task_module("raise RuntimeError('boom at import')\n")
    with allow_task_modules([module]), pytest.raises(ParameterError, match="boom at import"):
        TaskParameter().parse(f"{module}.Anything")


def test_allow_task_modules_nests_and_validates() -> None:
    """Blocks add to each other and are undone on exit; a bare string or bad name is refused."""
    with allow_task_modules(["a"]), allow_task_modules(["b.c"]):
        assert allowed_task_modules() == {"a", "b.c"}
    assert allowed_task_modules() == frozenset()
    with pytest.raises(TypeError), allow_task_modules("mymod"):
        pass
    with pytest.raises(ValueError, match="not a module name"), allow_task_modules(["a-b"]):
        pass


def test_task_modules_named_lists_prefixes_of_task_parameter_values() -> None:
    """For the CLI: every dotted prefix of each TaskParameter value; other parameters ignored."""

    class Wants(Task):
        """Two task-class parameters and a string."""

        first = TaskParameter()
        second = OptionalTaskParameter()
        label = Parameter()

    values = {"first": "pkg.mod.Family", "second": "other.Fam", "label": "not.a.Module"}
    assert task_modules_named(Wants.parameters(), values) == ("pkg.mod", "pkg", "other")


# --- through a real Task: string round trip, ids, hashing, errors -----------------------------


def test_every_kind_round_trips_through_str_params() -> None:
    """from_str_params(to_str_params()) rebuilds an equal task with equal, typed values."""
    task = Kinds(limit=5, since=DT(2026, 11, 29, 6))
    strings = task.to_str_params()
    again = Kinds.from_str_params(strings)
    assert again == task
    assert again.param_kwargs == task.param_kwargs
    assert again.to_str_params() == strings
    assert isinstance(again.interval, DateInterval)  # type: ignore[attr-defined]
    assert again.upstream is Upstream  # type: ignore[attr-defined]


def test_string_forms_of_the_defaults() -> None:
    """The canonical string form of each kind, as the wire carries it."""
    assert {k: v for k, v in Kinds().to_str_params().items() if k != "upstream"} == {
        "hour": "2026-11-30T18",
        "minute": "2026-11-30T1842",
        "month": "2026-11",
        "year": "2026",
        "interval": "2026-11-01-2026-11-30",
        "window": "0 w 1 d 2 h 0 m 0 s",
        "pairs": "[[1,2],[3,4]]",
        "ratio": "0.5",
        "count": "3",
        "regions": "eu,us",
        "limit": "",
        "since": "",
    }


class Stable(Task):
    """The new kinds without a module-dependent value, for a pinned task id."""

    hour = DateHourParameter()
    interval = DateIntervalParameter()
    window = TimeDeltaParameter()
    pairs = TupleParameter()
    regions = ChoiceListParameter(choices=["eu", "us"])
    limit = OptionalIntParameter()


def test_task_id_is_stable_and_independent_of_the_spelling() -> None:
    """Equivalent spellings (Luigi's lenient ones) give one task id, pinned across versions."""
    canonical = Stable(
        hour="2026-11-30T08",
        interval="2026-W48",
        window="1 day 2 hours",
        pairs="[[1,2]]",
        regions="eu,us",
    )
    spelled = Stable(
        hour="2026-11-30T8",
        interval=DateInterval.week(2026, 48),
        window="P1DT2H",
        pairs="((1, 2),)",
        regions='["eu", "us"]',
        limit="",
    )
    assert spelled.task_id == canonical.task_id
    assert canonical.task_id == "Stable_2026-11-30T08_2026-W48__1c81353d8f"


def test_values_are_hashable() -> None:
    """Every value is hashable, so tasks holding them are too."""
    task = Kinds()
    for value in task.param_kwargs.values():
        hash(value)
    assert len({task, Kinds()}) == 1


@pytest.mark.parametrize(
    ("param", "bad"),
    [
        (DateHourParameter(), "2026-11-30"),
        (DateMinuteParameter(), "2026-11-30T18"),
        (MonthParameter(), "2026-13"),
        (YearParameter(), "26"),
        (DateIntervalParameter(), "2026-W99"),
        (TimeDeltaParameter(), "1 fortnight"),
        (TupleParameter(), '"abc"'),
        (NumericalParameter(var_type=int, min_value=0, max_value=10), "10"),
        (ChoiceListParameter(choices=["a", "b"]), "a,c"),
        (TaskParameter(), "nowhere.Nothing"),
        (OptionalIntParameter(), "x"),
        (OptionalDateIntervalParameter(), "2026-99"),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, Parameter) else repr(x),
)
def test_bad_value_error_names_task_parameter_and_value(param: Parameter[Any], bad: str) -> None:
    """A bad string is a ParameterError whose message and attributes name all three."""
    holder = _task_with(param, name="setting")
    with pytest.raises(ParameterError) as info:
        holder(setting=bad)
    message = str(info.value)
    assert message.startswith(f"{holder.get_task_family()}: parameter 'setting' = {bad!r}: ")
    assert (info.value.task, info.value.parameter, info.value.value) == (
        holder.get_task_family(),
        "setting",
        bad,
    )


@pytest.mark.parametrize(
    ("make", "bad"),
    [
        (DateHourParameter, "2026-11-30"),
        (DateMinuteParameter, "noon"),
        (MonthParameter, "2026-13"),
        (YearParameter, D(2026, 1, 1).isoformat()),
        (DateIntervalParameter, "2026-W99"),
        (TimeDeltaParameter, "soon"),
        (TupleParameter, "{}"),
        (lambda **kw: NumericalParameter(var_type=int, min_value=0, max_value=10, **kw), 10),
        (lambda **kw: ChoiceListParameter(choices=["a"], **kw), ("b",)),
        (TaskParameter, "nowhere.Nothing"),
        (OptionalMonthParameter, "2026-13"),
    ],
)
def test_bad_default_fails_at_class_definition(make: Callable[..., Any], bad: object) -> None:
    """A default that does not parse fails when the parameter is declared."""
    with pytest.raises(ParameterError, match="invalid default"):
        make(default=bad)


# --- the Optional kinds ----------------------------------------------------------------------

OPTIONALS: list[tuple[OptionalKind[Any], object, str, object]] = [
    (OptionalParameter(), "text", "text", 5),
    (OptionalIntParameter(), 10, "10", "bad data"),
    (OptionalFloatParameter(), 10.5, "10.5", "bad data"),
    (OptionalBoolParameter(), True, "true", "bad data"),
    (OptionalDateParameter(), D(2013, 7, 10), "2013-07-10", "2013-7-10x"),
    (OptionalDateTimeParameter(), DT(2013, 7, 10, 1, 2), "2013-07-10T01:02:00", "bad data"),
    (OptionalListParameter(), (10.5,), "[10.5]", "bad data"),
    (OptionalDictParameter(), FrozenDict({"a": 10}), '{"a":10}', "bad data"),
    (OptionalPathParameter(), Path("a/b"), "a/b", 5),
    (OptionalChoiceParameter(choices=["d", "e"]), "e", "e", "bad data"),
    (OptionalEnumParameter(enum=Color), Color.GREEN, "GREEN", "bad data"),
    (OptionalDateHourParameter(), DT(2013, 7, 10, 19), "2013-07-10T19", "bad data"),
    (OptionalDateMinuteParameter(), DT(2013, 7, 10, 19, 7), "2013-07-10T1907", "bad data"),
    (OptionalMonthParameter(), D(2013, 7, 1), "2013-07", "bad data"),
    (OptionalYearParameter(), D(2013, 1, 1), "2013", "bad data"),
    (OptionalDateIntervalParameter(), DateInterval.week(2013, 28), "2013-W28", "bad data"),
    (OptionalTimeDeltaParameter(), TD(hours=2), "0 w 0 d 2 h 0 m 0 s", "bad data"),
    (OptionalTupleParameter(), (10.5,), "[10.5]", "bad data"),
    (OptionalNumericalParameter(var_type=float, min_value=0, max_value=100), 10.5, "10.5", "-1"),
    (OptionalNumericalParameter(var_type=int, min_value=0, max_value=100), 10, "10", "bad data"),
    (OptionalChoiceListParameter(choices=["d", "e"]), ("e", "d"), "e,d", "bad data"),
    (OptionalTaskParameter(), Upstream, f"{__name__}.Upstream", "bad data"),
]


@pytest.mark.parametrize(
    ("param", "value", "text", "bad"), OPTIONALS, ids=[type(o[0]).__name__ for o in OPTIONALS]
)
def test_optional_kind(param: OptionalKind[Any], value: object, text: str, bad: object) -> None:
    """Luigi's optional_parameter_test: "" is None both ways; other values as the kind; bad
    values rejected; the default is None."""
    assert param.parse("") is None
    assert param.normalize(None) is None
    assert param.normalize("") is None
    assert param.serialize(None) == ""
    assert param.parse(text) == value
    assert param.normalize(value) == value
    assert param.serialize(value) == text
    assert param.default is None
    with pytest.raises(ParameterError):
        param.normalize(bad)


def test_every_kind_has_an_optional_variant_and_the_table_covers_them() -> None:
    """``Optional<Kind>Parameter`` exists for every kind, each named in __all__ and tested."""
    names = set(parameters_module.__all__)
    kinds = {n for n in names if n.endswith("Parameter") and not n.startswith("Optional")}
    optionals = {n for n in names if n.startswith("Optional") and n.endswith("Parameter")}
    expected = {"OptionalParameter"} | {f"Optional{k}" for k in kinds if k != "Parameter"}
    assert optionals == expected
    assert {type(o[0]).__name__ for o in OPTIONALS} == optionals
    for name in optionals:
        cls = getattr(parameters_module, name)
        wrapped = getattr(parameters_module, name.removeprefix("Optional"))
        assert issubclass(cls, OptionalKind)
        assert cls.kind is wrapped


def test_optional_of_an_empty_choice_list_is_not_none() -> None:
    """The empty tuple is written ``[]``, so it does not read back as None."""
    param = OptionalChoiceListParameter(choices=["a"])
    assert param.serialize(()) == "[]"
    assert param.parse("[]") == ()


def test_optional_bool_is_a_flag_and_others_are_not() -> None:
    """OptionalBoolParameter keeps BoolParameter's CLI flag form; other optionals take values."""
    assert OptionalBoolParameter.is_flag
    assert not OptionalIntParameter.is_flag
    assert not OptionalChoiceListParameter.is_flag


def test_optional_keeps_options_for_help_and_repr() -> None:
    """Choices and enums stay visible (the CLI help reads them) and repr shows them."""
    holder = _task_with(OptionalChoiceParameter(choices=["d", "e"]), name="pick")
    param = dict(holder.parameters())["pick"]
    assert param.choices == ("d", "e")  # type: ignore[attr-defined]
    assert repr(param) == "OptionalChoiceParameter(name='pick', choices=('d', 'e'), default=None)"
    assert OptionalEnumParameter(enum=Color).enum is Color


def test_optional_can_be_made_required() -> None:
    """``default=NO_DEFAULT`` makes an optional kind required (it still accepts "" as None)."""
    holder = _task_with(OptionalIntParameter(default=NO_DEFAULT))
    with pytest.raises(ParameterError, match="missing required parameter"):
        holder()
    assert holder(p="").p is None  # type: ignore[attr-defined]


def test_optional_round_trips_none_and_values_through_a_task() -> None:
    """A task holding None and a value rebuilds equal from its string form."""
    task = Kinds(limit=None, since="2026-11-29T06")
    strings = task.to_str_params()
    assert (strings["limit"], strings["since"]) == ("", "2026-11-29T06")
    again = Kinds.from_str_params(strings)
    assert (again.limit, again.since) == (None, DT(2026, 11, 29, 6))  # type: ignore[attr-defined]


# --- the real CLI ----------------------------------------------------------------------------

CLI_TASKS = '''
import json

import conveyor
from conveyor.parameters import (
    ChoiceListParameter,
    DateHourParameter,
    DateIntervalParameter,
    MonthParameter,
    NumericalParameter,
    OptionalBoolParameter,
    OptionalIntParameter,
    OptionalMonthParameter,
    TaskParameter,
    TimeDeltaParameter,
    TupleParameter,
)


class Upstream(conveyor.Task):
    """Named by the TaskParameter."""


class Kinds(conveyor.Task):
    """Writes what it was given, typed, as JSON to ``out``."""

    out = conveyor.Parameter()
    hour = DateHourParameter()
    month = MonthParameter()
    interval = DateIntervalParameter()
    window = TimeDeltaParameter()
    pairs = TupleParameter()
    count = NumericalParameter(var_type=int, min_value=-3, max_value=7)
    regions = ChoiceListParameter(choices=["eu", "us", "apac"])
    upstream = TaskParameter(default=Upstream)
    limit = OptionalIntParameter(default=3)
    since = OptionalMonthParameter()
    strict = OptionalBoolParameter()

    def output(self):
        return conveyor.LocalTarget(self.out)

    def run(self):
        values = {
            "hour": self.hour.isoformat(),
            "month": self.month.isoformat(),
            "interval_days": [str(self.interval.date_a), str(self.interval.dates()[-1])],
            "interval_kind": self.interval.kind,
            "window_seconds": self.window.total_seconds(),
            "pairs": self.pairs,
            "count": self.count,
            "regions": self.regions,
            "upstream": self.upstream.__name__,
            "limit": self.limit,
            "since": None if self.since is None else self.since.isoformat(),
            "strict": self.strict,
            "str_params": self.to_str_params(),
        }
        with self.output().open("w") as f:
            json.dump(values, f)
'''

CLI_FLAGS = [
    "--hour", "2026-11-30T18",
    "--month", "2026-11",
    "--interval", "2026-W48",
    "--window", "1 day 2 hours",
    "--pairs", "((1,2),(3,4))",
    "--count", "-3",
    "--regions", "eu,apac",
]  # fmt: skip


def _run(run_cli: RunCli, module: str, out: Path, tmp_path: Path, *extra: str) -> Any:
    proc = run_cli("run", f"{module}.Kinds", "--out", str(out), *CLI_FLAGS, *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_cli_flags_of_the_new_kinds(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """``conveyor run`` parses Luigi-style flags of each kind into typed values."""
    module = task_module(CLI_TASKS)
    out = tmp_path / "out.json"
    values = _run(run_cli, module, out, tmp_path, "--upstream", f"{module}.Upstream",
                  "--since", "", "--strict")  # fmt: skip
    assert values["hour"] == "2026-11-30T18:00:00"
    assert values["month"] == "2026-11-01"
    assert values["interval_kind"] == "week"
    assert values["interval_days"] == ["2026-11-23", "2026-11-29"]
    assert values["window_seconds"] == 26 * 3600
    assert values["pairs"] == [[1, 2], [3, 4]]
    assert values["count"] == -3
    assert values["regions"] == ["eu", "apac"]
    assert values["upstream"] == "Upstream"
    assert values["since"] is None  # given as ""
    assert values["strict"] is True
    assert values["str_params"]["window"] == "0 w 1 d 2 h 0 m 0 s"
    assert values["str_params"]["regions"] == "eu,apac"


def test_cli_optional_given_empty_or_omitted(
    task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """An Optional kind given as "" is None; omitted, it has its default (None unless set)."""
    module = task_module(CLI_TASKS)
    given_empty = _run(run_cli, module, tmp_path / "a.json", tmp_path, "--limit", "")
    assert given_empty["limit"] is None
    omitted = _run(run_cli, module, tmp_path / "b.json", tmp_path)
    assert (omitted["limit"], omitted["since"], omitted["strict"]) == (3, None, None)
    given = _run(
        run_cli, module, tmp_path / "c.json", tmp_path, "--since", "2026-10", "--no-strict"
    )
    assert (given["since"], given["strict"]) == ("2026-10-01", False)


@pytest.mark.parametrize(
    ("flag", "bad"),
    [
        ("--hour", "2026-11-30"),
        ("--interval", "2026-W99"),
        ("--window", "1 fortnight"),
        ("--count", "7"),
        ("--regions", "eu,mars"),
        ("--upstream", "nowhere.Nothing"),
    ],
)
def test_cli_bad_value_exits_2_naming_task_parameter_and_value(
    flag: str, bad: str, task_module: WriteModule, run_cli: RunCli, tmp_path: Path
) -> None:
    """A bad flag value exits 2 with one error line naming the task, the parameter, the value."""
    module = task_module(CLI_TASKS)
    args = [*CLI_FLAGS, flag, bad]
    proc = run_cli("run", f"{module}.Kinds", "--out", str(tmp_path / "x.json"), *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    name = flag.removeprefix("--")
    assert f"Kinds: parameter {name!r} = {bad!r}" in proc.stderr
    assert "Traceback" not in proc.stderr
