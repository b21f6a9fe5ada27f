"""Tests for conveyor.parameters: parsing, serialising, normalising and freezing values."""

from __future__ import annotations

import datetime
import enum
import math
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from conveyor.errors import ParameterError
from conveyor.parameters import (
    NO_DEFAULT,
    BoolParameter,
    ChoiceParameter,
    DateParameter,
    DateTimeParameter,
    DictParameter,
    EnumParameter,
    FloatParameter,
    FrozenDict,
    IntParameter,
    ListParameter,
    Parameter,
    PathParameter,
)


class Color(enum.Enum):
    """An enum for EnumParameter tests."""

    RED = "r"
    GREEN = "g"


class Other(enum.Enum):
    """A second enum, whose members an EnumParameter(enum=Color) must reject."""

    RED = "r"


UTC_PLUS_2 = datetime.timezone(datetime.timedelta(hours=2))

ROUND_TRIPS: list[tuple[Parameter[Any], object]] = [
    (Parameter(), ""),
    (Parameter(), "hello world"),
    (Parameter(), '{"not": "json"} ünïcode'),
    (IntParameter(), 0),
    (IntParameter(), -42),
    (IntParameter(), 10**30),
    (FloatParameter(), 0.1),
    (FloatParameter(), -1e-300),
    (FloatParameter(), 1e16),
    (FloatParameter(), math.inf),
    (BoolParameter(), True),
    (BoolParameter(), False),
    (DateParameter(), datetime.date(2024, 2, 29)),
    (DateParameter(), datetime.date(1, 1, 1)),
    (DateTimeParameter(), datetime.datetime(2024, 5, 1, 13, 30)),
    (DateTimeParameter(), datetime.datetime(2024, 5, 1, 13, 30, 5, 123456, tzinfo=UTC_PLUS_2)),
    (EnumParameter(enum=Color), Color.GREEN),
    (ChoiceParameter(choices=["a", "b c"]), "b c"),
    (ListParameter(), ()),
    (ListParameter(), (1, "two", 3.5, None, True, (4, (5,)), FrozenDict({"k": (6,)}))),
    (DictParameter(), FrozenDict()),
    (DictParameter(), FrozenDict({"b": 1, "a": (1, 2), "c": FrozenDict({"d": None})})),
    (PathParameter(), Path("data/out.csv")),
    (PathParameter(), Path("/abs/dir with space")),
]


@pytest.mark.parametrize(("param", "value"), ROUND_TRIPS, ids=repr)
def test_serialize_then_parse_round_trips(param: Parameter[Any], value: object) -> None:
    """parse(serialize(v)) gives back an equal value of the same type for every parameter type."""
    text = param.serialize(value)
    parsed = param.parse(text)
    assert isinstance(text, str)
    assert parsed == value
    assert type(parsed) is type(value)


@pytest.mark.parametrize(("param", "value"), ROUND_TRIPS, ids=repr)
def test_normalize_accepts_typed_value_and_string_form(
    param: Parameter[Any], value: object
) -> None:
    """normalize() accepts both the typed value and its string form, giving the same result."""
    assert param.normalize(value) == value
    assert param.normalize(param.serialize(value)) == value


@pytest.mark.parametrize(
    ("param", "text", "expected"),
    [
        (IntParameter(), "abc", "expected an integer, got 'abc'"),
        (IntParameter(), "1.5", "expected an integer"),
        (FloatParameter(), "one", "expected a number, got 'one'"),
        (BoolParameter(), "maybe", "expected one of true/false/1/0/yes/no, got 'maybe'"),
        (DateParameter(), "2024/01/02", "expected a date YYYY-MM-DD"),
        (DateParameter(), "20240102", "expected a date YYYY-MM-DD"),
        (DateParameter(), "2023-02-29", "day is out of range"),
        (DateTimeParameter(), "yesterday", "expected an ISO 8601 datetime"),
        (EnumParameter(enum=Color), "red", "expected one of RED, GREEN, got 'red'"),
        (ChoiceParameter(choices=["a", "b"]), "c", "expected one of 'a', 'b', got 'c'"),
        (ListParameter(), "[1,", "expected a JSON list"),
        (ListParameter(), '{"a": 1}', "expected a JSON list"),
        (DictParameter(), "[1]", "expected a JSON object"),
        (DictParameter(), "{", "expected a JSON object"),
        (PathParameter(), "", "expected a non-empty path"),
    ],
)
def test_parse_rejects_bad_text_saying_what_was_expected(
    param: Parameter[Any], text: str, expected: str
) -> None:
    """parse() raises a ParameterError (a ValueError) whose message says what was expected."""
    with pytest.raises(ValueError, match="expected") as info:
        param.parse(text)
    assert isinstance(info.value, ParameterError)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("param", "value", "expected"),
    [
        (Parameter(), 5, "expected a string, got 5 (int)"),
        (IntParameter(), True, "expected an integer, got True (bool)"),
        (IntParameter(), 1.5, "expected an integer, got 1.5 (float)"),
        (IntParameter(), None, "expected an integer"),
        (FloatParameter(), False, "expected a number"),
        (FloatParameter(), "1,5", "expected a number"),
        (BoolParameter(), 1, "expected a bool, got 1 (int)"),
        (DateParameter(), datetime.datetime(2024, 1, 1), "expected a date (not a datetime)"),
        (DateTimeParameter(), datetime.date(2024, 1, 1), "expected a datetime"),
        (EnumParameter(enum=Color), Other.RED, "expected a member of Color"),
        (ChoiceParameter(choices=["a"]), 1, "expected a string"),
        (ListParameter(), {1, 2}, "expected a list or tuple"),
        (ListParameter(), [object], "expected a list of JSON values"),
        (DictParameter(), [("a", 1)], "expected a mapping"),
        (DictParameter(), {1: "a"}, "key 1 is not a string"),
        (DictParameter(), {"a": {1, 2}}, "set value"),
        (PathParameter(), 3, "expected a path"),
    ],
)
def test_normalize_rejects_wrong_types(param: Parameter[Any], value: object, expected: str) -> None:
    """normalize() refuses a typed value of the wrong kind with an 'expected ...' message."""
    with pytest.raises(ParameterError) as info:
        param.normalize(value)
    assert expected in str(info.value)
    assert info.value.value == value


def test_int_parameter_accepts_integral_float() -> None:
    """IntParameter accepts a float without a fractional part and returns an int."""
    value = IntParameter().normalize(3.0)
    assert value == 3
    assert type(value) is int


def test_float_parameter_accepts_int_as_float() -> None:
    """FloatParameter turns an int into a float."""
    value = FloatParameter().normalize(2)
    assert value == 2.0
    assert type(value) is float


@pytest.mark.parametrize("text", ["true", "TRUE", "Yes", "1", " yes "])
def test_bool_parameter_parses_true_words(text: str) -> None:
    """BoolParameter reads true/yes/1 in any case as True."""
    assert BoolParameter().parse(text) is True


@pytest.mark.parametrize("text", ["false", "False", "NO", "0"])
def test_bool_parameter_parses_false_words(text: str) -> None:
    """BoolParameter reads false/no/0 in any case as False."""
    assert BoolParameter().parse(text) is False


def test_only_bool_parameter_is_a_flag() -> None:
    """is_flag is True for BoolParameter and False for the other parameter types."""
    others: list[Parameter[Any]] = [
        Parameter(),
        IntParameter(),
        ListParameter(),
        ChoiceParameter(choices=["x"]),
    ]
    assert BoolParameter.is_flag is True
    assert [p.is_flag for p in others] == [False] * len(others)


def test_bool_parameter_defaults_to_false() -> None:
    """A BoolParameter without an explicit default is optional and defaults to False (Luigi)."""
    param = BoolParameter()
    assert param.has_default
    assert param.default is False


def test_default_is_normalized_when_declared() -> None:
    """A default given in string form is stored parsed."""
    assert IntParameter("7").default == 7
    assert DateParameter(default="2024-01-02").default == datetime.date(2024, 1, 2)
    assert ListParameter([1, [2]]).default == (1, (2,))


def test_invalid_default_fails_at_declaration() -> None:
    """A default that does not normalize raises ParameterError naming the parameter type."""
    with pytest.raises(ParameterError, match=r"invalid default for IntParameter: expected an int"):
        IntParameter(default="x")


def test_parameter_without_default_is_required() -> None:
    """Without a default has_default is False and reading default raises ParameterError."""
    param = IntParameter()
    assert param.has_default is False
    with pytest.raises(ParameterError, match="has no default"):
        _ = param.default


def test_no_default_sentinel_is_the_constructor_default() -> None:
    """Passing NO_DEFAULT explicitly is the same as passing no default."""
    assert Parameter(NO_DEFAULT).has_default is False
    assert repr(NO_DEFAULT) == "NO_DEFAULT"


def test_set_name_records_attribute_name() -> None:
    """A parameter declared as a class attribute learns its attribute name."""

    class Holder:
        size = IntParameter(3, significant=False, description="how many")

    assert Holder.size.name == "size"
    assert Holder.size.significant is False
    assert Holder.size.description == "how many"


def test_repr_shows_name_default_and_options() -> None:
    """repr() names the type, the attribute name, type options and a non-default setting."""

    class Holder:
        color = EnumParameter(Color.RED, enum=Color, significant=False)
        mode = ChoiceParameter(choices=["a", "b"])

    assert repr(Holder.color) == (
        "EnumParameter(name='color', enum=Color, default=<Color.RED: 'r'>, significant=False)"
    )
    assert repr(Holder.mode) == "ChoiceParameter(name='mode', choices=('a', 'b'))"


def test_type_names_describe_expected_values() -> None:
    """type_name gives a short description for CLI help."""
    assert IntParameter.type_name == "int"
    assert DateParameter().type_name == "date (YYYY-MM-DD)"
    assert EnumParameter(enum=Color).type_name == "{RED,GREEN}"
    assert ChoiceParameter(choices=["x", "y"]).type_name == "{x,y}"


def test_enum_parameter_requires_an_enum_class() -> None:
    """EnumParameter refuses an enum= that is not an Enum class."""
    with pytest.raises(ParameterError, match="needs an Enum class"):
        EnumParameter(enum=int)  # type: ignore[type-var]


@pytest.mark.parametrize("choices", [[], "ab", [1, 2]])
def test_choice_parameter_requires_string_choices(choices: Any) -> None:
    """ChoiceParameter refuses empty, bare-string or non-string choices."""
    with pytest.raises(ParameterError, match="ChoiceParameter"):
        ChoiceParameter(choices=choices)


def test_list_parameter_freezes_nested_values() -> None:
    """ListParameter turns nested lists into tuples and dicts into FrozenDicts."""
    value = ListParameter().normalize([1, [2, [3]], {"a": [4]}])
    assert value == (1, (2, (3,)), FrozenDict({"a": (4,)}))
    assert isinstance(value[2], FrozenDict)
    assert isinstance(value[2]["a"], tuple)
    assert hash(value) == hash((1, (2, (3,)), FrozenDict({"a": (4,)})))


def test_dict_parameter_string_form_is_canonical_json() -> None:
    """Equal dicts serialise to the same compact JSON with sorted keys, whatever their order."""
    param = DictParameter()
    one = param.normalize({"b": [1, 2], "a": {"y": 1, "x": 2}})
    two = param.parse('{"a": {"x": 2, "y": 1}, "b": [1, 2]}')
    assert one == two
    assert param.serialize(one) == '{"a":{"x":2,"y":1},"b":[1,2]}'
    assert param.serialize(two) == param.serialize(one)


def test_frozen_dict_is_immutable_and_hashable() -> None:
    """FrozenDict compares like a dict, hashes by content and offers no way to mutate it."""
    frozen = FrozenDict({"a": [1], "b": {"c": 2}})
    assert frozen == {"a": (1,), "b": {"c": 2}}
    assert hash(frozen) == hash(FrozenDict({"b": FrozenDict({"c": 2}), "a": (1,)}))
    assert {frozen: "ok"}[FrozenDict({"a": (1,), "b": {"c": 2}})] == "ok"
    with pytest.raises(TypeError):
        frozen["a"] = 2  # type: ignore[index]
    assert not hasattr(frozen, "update")
    assert repr(FrozenDict({"a": 1})) == "FrozenDict({'a': 1})"


def test_path_parameter_accepts_pathlike() -> None:
    """PathParameter turns any os.PathLike of str into a pathlib.Path."""
    assert PathParameter().normalize(PurePosixPath("a/b")) == Path("a/b")
    assert PathParameter().serialize(Path("a/b")) == str(Path("a/b"))


def test_datetime_parameter_accepts_utc_designator() -> None:
    """DateTimeParameter parses a trailing Z as UTC."""
    parsed = DateTimeParameter().parse("2024-05-01T12:00:00Z")
    assert parsed == datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.UTC)


def test_plain_parameter_keeps_string_verbatim() -> None:
    """Parameter (str) returns the text unchanged, including surrounding spaces."""
    assert Parameter().normalize("  spaced  ") == "  spaced  "
