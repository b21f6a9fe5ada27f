"""Tests for the task API (conveyor.task): identity, string form, parameters and the graph."""

from __future__ import annotations

import datetime
import enum
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.task import load_task_class

ID_CHARS = re.compile(r"[A-Za-z0-9_.-]+")
SECRET_MARK = "SEKRIT"


class Shade(enum.Enum):
    """An enum for the EnumParameter of TtAllTypes."""

    LIGHT = 1
    DARK = 2


class TtPlain(conveyor.Task):
    """A required string and an int with a default."""

    name = conveyor.Parameter()
    n = conveyor.IntParameter(default=1)


class TtTwin(conveyor.Task):
    """Same parameters as TtPlain, different family."""

    name = conveyor.Parameter()
    n = conveyor.IntParameter(default=1)


class TtPair(conveyor.Task):
    """Two string parameters, to check that values cannot be shuffled between them."""

    x = conveyor.Parameter()
    y = conveyor.Parameter(default="")


class TtNamespaced(conveyor.Task):
    """A task with a namespace."""

    task_namespace = "etl.daily"


class TtLongNamespace(conveyor.Task):
    """A task whose family alone is longer than a task id may be."""

    task_namespace = "very_long_namespace_" * 12
    value = conveyor.Parameter(default="")


class TtAllTypes(conveyor.Task):
    """One parameter of every type, without defaults, so every value comes from the caller."""

    text = conveyor.Parameter()
    count = conveyor.IntParameter()
    ratio = conveyor.FloatParameter()
    flag = conveyor.BoolParameter()
    day = conveyor.DateParameter()
    moment = conveyor.DateTimeParameter()
    shade = conveyor.EnumParameter(enum=Shade)
    size = conveyor.ChoiceParameter(choices=["S", "M", "L"])
    items = conveyor.ListParameter()
    options = conveyor.DictParameter()
    where = conveyor.PathParameter()


ALL_TYPES_VALUES: dict[str, Any] = {
    "text": "héllo wörld / with: punctuation",
    "count": -(10**20),
    "ratio": 0.1,
    "flag": True,
    "day": datetime.date(2024, 2, 29),
    "moment": datetime.datetime(
        2024, 5, 1, 13, 30, 15, 250, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    ),
    "shade": Shade.DARK,
    "size": "M",
    "items": [3, "two", {"z": 1, "a": [None, True]}],
    "options": {"zeta": [1, 2], "alpha": {"nested": "yes"}, "beta": None},
    "where": Path("/data/in put/file.csv"),
}


class TtSecrets(conveyor.Task):
    """A task whose secret-named parameters must never show up in its id or repr."""

    user = conveyor.Parameter()
    api_token = conveyor.Parameter()
    password = conveyor.Parameter()
    client_secret = conveyor.Parameter(default="")
    ssh_key = conveyor.Parameter(default="")


class TtSecretInt(conveyor.Task):
    """A secret-named int, to check that a value that does not parse stays hidden."""

    key_bits = conveyor.IntParameter()


class TtInsignificant(conveyor.Task):
    """A task with one insignificant parameter."""

    x = conveyor.Parameter()
    note = conveyor.Parameter(default="", significant=False)


class TtOrdered(conveyor.Task):
    """Parameters declared deliberately out of alphabetical order."""

    zulu = conveyor.Parameter()
    alpha = conveyor.IntParameter()
    mike = conveyor.BoolParameter(default=False)


class TtFile(conveyor.Task):
    """A task whose outputs are local files at the given paths."""

    paths = conveyor.ListParameter(default=[])

    def output(self) -> list[conveyor.LocalTarget]:
        """One LocalTarget per path."""
        return [conveyor.LocalTarget(path) for path in self.paths]


class TtNested(conveyor.Task):
    """A task whose requirements are a nesting of a dict, a list and a tuple."""

    root = conveyor.Parameter()

    def requires(self) -> Any:
        """A nested structure of TtFile tasks."""
        return {
            "one": TtFile(paths=[f"{self.root}/one"]),
            "many": [TtFile(paths=[f"{self.root}/two"]), (TtFile(paths=[f"{self.root}/three"]),)],
        }


BAD_REQUIRES: dict[str, Any] = {
    "str": "TtPlain",
    "int": 42,
    "target": conveyor.LocalTarget("somewhere.txt"),
    "list_with_none": [TtPlain(name="dep"), None],
    "tuple_with_none": (TtPlain(name="dep"), None),
    "nested_list_with_none": [[TtPlain(name="dep"), None]],
    "str_in_list": [TtPlain(name="dep"), "TtPlain"],
    "target_in_dict": {"out": conveyor.LocalTarget("somewhere.txt")},
}


class TtBadRequires(conveyor.Task):
    """A task whose requires() returns one of BAD_REQUIRES."""

    kind = conveyor.Parameter()

    def requires(self) -> Any:
        """The bad value selected by ``kind``."""
        return BAD_REQUIRES[self.kind]


class TtWrapper(conveyor.WrapperTask):
    """A wrapper over two file tasks."""

    root = conveyor.Parameter()

    def requires(self) -> list[TtFile]:
        """Two TtFile tasks under ``root``."""
        return [TtFile(paths=[f"{self.root}/a"]), TtFile(paths=[f"{self.root}/b"])]


class TtExternal(conveyor.ExternalTask):
    """Data made elsewhere."""

    path = conveyor.Parameter()

    def output(self) -> conveyor.LocalTarget:
        """The file that must already exist."""
        return conveyor.LocalTarget(self.path)


CHILD_TASK_ID = """
import json, sys
sys.path.insert(0, sys.argv[1])
from conveyor.task import load_task_class
cls = load_task_class(sys.argv[2], sys.argv[3])
print(cls.from_str_params(json.loads(sys.argv[4])).task_id)
"""


def _task_id_in_child(task: conveyor.Task, hash_seed: str) -> str:
    """The task id of ``task`` as a fresh interpreter computes it from the string form."""
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    args = [str(Path(__file__).parent), __name__, task.task_family]
    args.append(json.dumps(task.to_str_params()))
    result = subprocess.run(
        [sys.executable, "-c", CHILD_TASK_ID, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


# --- family, module ------------------------------------------------------------------------


def test_task_family_is_the_class_name_without_namespace():
    """A class without task_namespace has its bare class name as family."""
    assert TtPlain(name="a").task_family == "TtPlain"


def test_task_family_is_prefixed_by_the_namespace():
    """task_namespace and a dot prefix the class name."""
    assert TtNamespaced().task_family == "etl.daily.TtNamespaced"
    assert TtNamespaced().task_id.startswith("etl.daily.TtNamespaced")


def test_task_module_is_the_defining_module():
    """task_module names the module the class is defined in."""
    assert TtPlain(name="a").task_module == __name__ == TtPlain.__module__


# --- task_id -------------------------------------------------------------------------------


def test_task_id_is_stable_within_a_process():
    """Equal tasks built separately have equal ids, however the values were given."""
    assert TtPlain(name="a", n=2).task_id == TtPlain("a", "2").task_id


def test_task_id_is_the_same_in_other_processes():
    """Fresh interpreters with different hash seeds compute the same id from the string form."""
    task = TtAllTypes(**ALL_TYPES_VALUES)
    ids = {_task_id_in_child(task, seed) for seed in ("1", "4242")}
    assert ids == {task.task_id}


@pytest.mark.parametrize(
    "task",
    [
        TtPlain(name="héllo wörld/€ <script> \n\t;|&$"),
        TtAllTypes(**ALL_TYPES_VALUES),
        TtLongNamespace(value="x"),
        TtNamespaced(),
    ],
    ids=["odd-chars", "all-types", "long-namespace", "namespace"],
)
def test_task_id_uses_only_safe_characters(task: conveyor.Task):
    """Task ids consist only of [A-Za-z0-9_.-], whatever the family or values."""
    assert ID_CHARS.fullmatch(task.task_id), task.task_id


@pytest.mark.parametrize(
    "task",
    [
        TtPlain(name="v" * 100_000, n=10**300),
        TtLongNamespace(value="w" * 5_000),
        TtAllTypes(**(ALL_TYPES_VALUES | {"items": list(range(20_000))})),
    ],
    ids=["huge-values", "long-family", "huge-list"],
)
def test_task_id_is_at_most_128_characters(task: conveyor.Task):
    """Huge parameter values or a huge family never make an id longer than 128 characters."""
    assert 0 < len(task.task_id) <= 128
    assert ID_CHARS.fullmatch(task.task_id)


def test_different_parameters_give_different_ids():
    """Values that look alike once sanitised or truncated still give distinct ids."""
    long_prefix = "p" * 40
    tasks = [
        TtPlain(name="a b"),
        TtPlain(name="a_b"),
        TtPlain(name="a/b"),
        TtPlain(name="a b", n=2),
        TtPlain(name=long_prefix + "1"),
        TtPlain(name=long_prefix + "2"),
        TtPair(x="1", y="2"),
        TtPair(x="2", y="1"),
        TtPair(x="ab", y="c"),
        TtPair(x="a", y="bc"),
        TtTwin(name="a b"),
    ]
    ids = [task.task_id for task in tasks]
    assert len(set(ids)) == len(ids)


def test_long_values_that_differ_only_at_the_end_give_different_ids():
    """Two huge values differing in their last character do not collide after truncation."""
    base = "x" * 10_000
    assert TtPlain(name=base + "a").task_id != TtPlain(name=base + "b").task_id


def test_insignificant_parameters_do_not_change_the_id():
    """Changing only an insignificant parameter keeps the id (and equality)."""
    first = TtInsignificant(x="1", note="first run")
    second = TtInsignificant(x="1", note="second run")
    assert first.task_id == second.task_id
    assert first == second
    assert "first run" not in repr(first)


def test_secret_values_never_appear_in_id_or_repr():
    """Values of password/secret/token/key parameters are absent from task_id and repr."""
    task = TtSecrets(
        user="alice",
        api_token=f"tok-{SECRET_MARK}-1",
        password=f"hunter2{SECRET_MARK}",
        client_secret=f"cs{SECRET_MARK}",
        ssh_key=f"AAAAB3{SECRET_MARK}",
    )
    for text in (task.task_id, repr(task), str(task)):
        assert SECRET_MARK not in text
        assert "hunter2" not in text
    assert "alice" in repr(task)


def test_secret_values_still_distinguish_tasks():
    """A hash covers secret values: tasks differing only in a secret have different ids."""
    one = TtSecrets(user="alice", api_token="t1", password="p")
    two = TtSecrets(user="alice", api_token="t2", password="p")
    assert one.task_id != two.task_id
    assert one != two


# --- string form ---------------------------------------------------------------------------


def test_every_parameter_type_round_trips_through_strings():
    """to_str_params() gives strings only and from_str_params() rebuilds an equal task."""
    task = TtAllTypes(**ALL_TYPES_VALUES)
    strings = task.to_str_params()
    assert set(strings) == set(ALL_TYPES_VALUES)
    assert all(isinstance(value, str) for value in strings.values())
    again = TtAllTypes.from_str_params(strings)
    assert again == task and again.task_id == task.task_id
    assert again.to_str_params() == strings
    for name in ALL_TYPES_VALUES:
        assert getattr(again, name) == getattr(task, name), name
    assert again.moment == ALL_TYPES_VALUES["moment"]
    assert again.moment.utcoffset() == datetime.timedelta(hours=2)
    assert again.shade is Shade.DARK
    assert again.where == Path("/data/in put/file.csv")
    assert again.items == (3, "two", {"z": 1, "a": (None, True)})
    assert again.options == {"zeta": (1, 2), "alpha": {"nested": "yes"}, "beta": None}


def test_string_form_through_json_round_trips():
    """The string form survives JSON (the wire) and builds the same task on the other side."""
    task = TtAllTypes(**ALL_TYPES_VALUES)
    wire = json.loads(json.dumps(task.to_str_params()))
    assert TtAllTypes.from_str_params(wire).task_id == task.task_id


def test_round_trip_keeps_insignificant_parameters():
    """Insignificant parameters are part of the string form and survive the round trip."""
    task = TtInsignificant(x="1", note="keep me")
    assert TtInsignificant.from_str_params(task.to_str_params()).note == "keep me"


def test_to_str_params_returns_a_copy():
    """Mutating the returned dict does not change the task's string form or id."""
    task = TtPlain(name="a")
    before = task.task_id
    task.to_str_params()["name"] = "changed"
    assert task.to_str_params()["name"] == "a"
    assert TtPlain.from_str_params(task.to_str_params()).task_id == before


# --- equal tasks made again ----------------------------------------------------------------


class TtWhen(conveyor.Task):
    """A date-time parameter: equal aware values in different zones have different ids."""

    moment = conveyor.DateTimeParameter()


def test_an_equal_task_made_again_is_a_separate_object_with_the_same_identity():
    """The binding of an equal task is reused, but each instance is its own object: changing
    one's attributes or param_kwargs changes neither the other nor a third made later."""
    first = TtPlain(name="a", n=2)
    second = TtPlain(name="a", n=2)
    assert second is not first and second.task_id == first.task_id
    assert second.param_kwargs == {"name": "a", "n": 2} and second.n == 2
    second.n = 5
    second.param_kwargs["n"] = 7
    first.param_kwargs["n"] = 8  # the first one too: what is reused is a snapshot
    third = TtPlain(name="a", n=2)
    assert first.n == 2
    assert (third.n, third.param_kwargs["n"], third.task_id) == (2, 2, second.task_id)
    assert third.to_str_params() == {"name": "a", "n": "2"}


class _Relative(conveyor.Parameter):
    """A custom parameter whose parse() depends on more than its text (a counter here)."""

    parsed = 0

    def parse(self, text: str) -> str:
        type(self).parsed += 1
        return f"{text}-{type(self).parsed}"


class TtCustom(conveyor.Task):
    """A task with a parameter kind of its own."""

    when = _Relative()


class TtOwnInit(conveyor.Task):
    """A task whose __init__ changes a bound value after binding."""

    n = conveyor.IntParameter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.param_kwargs["n"] *= 10
        self.n = self.param_kwargs["n"]


def test_tasks_with_custom_parameters_or_their_own_init_are_bound_every_time():
    """A custom parameter's parse() and an overriding __init__ run for every construction,
    so their results are never reused from an earlier equal task."""
    assert TtCustom(when="today").when != TtCustom(when="today").when
    assert TtOwnInit(n=1).n == TtOwnInit(n=1).n == 10


def test_a_value_equal_to_an_earlier_one_is_still_checked_on_its_own():
    """True == 1 in Python, but a bool is no int parameter, even after TtPlain(n=1)."""
    TtPlain(name="a", n=1)
    with pytest.raises(conveyor.ParameterError, match="got True"):
        TtPlain(name="a", n=True)


def test_equal_aware_datetimes_in_different_zones_keep_their_own_ids():
    """Equal instants written in two zones serialise differently, so their ids differ."""
    utc = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    plus_two = utc.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert utc == plus_two
    assert TtWhen(moment=utc).task_id != TtWhen(moment=plus_two).task_id
    assert TtWhen(moment=plus_two).moment.utcoffset() == datetime.timedelta(hours=2)


def test_a_task_made_again_after_the_first_is_gone_is_bound_afresh():
    """The reuse holds only while an equal task is alive: nothing is kept for a dead one."""
    import gc
    import weakref

    first = TtPlain(name="gone", n=3)
    task_id = first.task_id
    ref = weakref.ref(first)
    del first
    gc.collect()
    assert ref() is None  # the memo does not keep a task alive
    assert TtPlain(name="gone", n=3).task_id == task_id


# --- equality ------------------------------------------------------------------------------


def test_equal_ids_mean_equal_and_same_hash():
    """Tasks with equal ids compare equal, hash equal and collapse in a set."""
    one, two = TtPlain(name="a"), TtPlain("a", 1)
    assert one == two
    assert hash(one) == hash(two)
    assert len({one, two, TtPlain(name="b")}) == 2


def test_tasks_of_different_families_are_not_equal():
    """Same parameters but a different family give unequal tasks."""
    assert TtPlain(name="a") != TtTwin(name="a")
    assert TtPlain(name="a") != "TtPlain"


# --- constructor ---------------------------------------------------------------------------


def test_positional_arguments_follow_declaration_order():
    """Positional arguments bind in declaration order, not alphabetical order."""
    task = TtOrdered("z-value", 7, True)
    assert (task.zulu, task.alpha, task.mike) == ("z-value", 7, True)
    assert task == TtOrdered(zulu="z-value", alpha=7, mike=True)


def test_positional_and_keyword_arguments_mix():
    """Leading positional arguments combine with keywords for the rest."""
    assert TtOrdered("z", alpha=3).alpha == 3


def test_too_many_positional_arguments_is_a_parameter_error():
    """More positional arguments than parameters raises ParameterError naming the task."""
    with pytest.raises(conveyor.ParameterError, match="TtOrdered"):
        TtOrdered("z", 1, True, "extra")


def test_a_parameter_given_twice_is_a_parameter_error():
    """A parameter given positionally and by keyword raises ParameterError naming it."""
    with pytest.raises(conveyor.ParameterError, match="zulu") as info:
        TtOrdered("z", 1, zulu="again")
    assert info.value.parameter == "zulu"


@pytest.mark.parametrize(
    ("kwargs", "parameter", "value"),
    [
        ({}, "name", None),
        ({"name": "a", "colour": "ultraviolet"}, "colour", "ultraviolet"),
        ({"name": "a", "n": "lots-of-them"}, "n", "lots-of-them"),
    ],
    ids=["missing", "unknown", "unparsable"],
)
def test_bad_parameters_raise_parameter_error_naming_task_parameter_and_value(
    kwargs: dict[str, str], parameter: str, value: str | None
):
    """Missing, unknown and unparsable parameters name task, parameter and (if any) value."""
    with pytest.raises(conveyor.ParameterError) as info:
        TtPlain(**kwargs)
    error = info.value
    assert isinstance(error, conveyor.ConveyorError)
    assert (error.task, error.parameter, error.value) == ("TtPlain", parameter, value)
    message = str(error)
    assert "TtPlain" in message and parameter in message
    if value is not None:
        assert value in message


def test_unparsable_secret_value_is_not_shown_in_the_error():
    """A secret-named parameter's bad value is kept out of the ParameterError message."""
    with pytest.raises(conveyor.ParameterError, match="key_bits") as info:
        TtSecretInt(key_bits=f"not-a-number-{SECRET_MARK}")
    assert SECRET_MARK not in str(info.value)


# --- flatten, deps, input ------------------------------------------------------------------


def test_flatten_walks_nested_lists_tuples_and_dicts():
    """flatten() returns the leaves of any nesting in order, dropping None."""
    a, b, c, d, e = (TtPlain(name=n) for n in "abcde")
    nested = [a, (b, [c]), {"x": d, "y": [e, None]}, [], {}]
    assert conveyor.flatten(nested) == [a, b, c, d, e]


@pytest.mark.parametrize(
    ("struct", "flat"),
    [(None, []), ("abc", ["abc"]), (5, [5]), ({"k": "v"}, ["v"]), (((("deep",),),), ["deep"])],
    ids=["none", "string-leaf", "int-leaf", "dict-values", "deep-tuple"],
)
def test_flatten_treats_strings_and_scalars_as_leaves(struct: object, flat: list[object]):
    """Strings and scalars are leaves, None is nothing, dicts contribute their values."""
    assert conveyor.flatten(struct) == flat


def test_flatten_of_a_single_task_is_that_task():
    """A lone task flattens to a one-element list."""
    task = TtPlain(name="solo")
    assert conveyor.flatten(task) == [task]


def test_deps_flattens_requires(tmp_path: Path):
    """deps() returns the requirements flattened in order."""
    task = TtNested(root=str(tmp_path))
    assert [dep.paths[0] for dep in task.deps()] == [
        f"{tmp_path}/one",
        f"{tmp_path}/two",
        f"{tmp_path}/three",
    ]


def test_default_requires_gives_no_deps():
    """A task that does not override requires() has no dependencies."""
    assert TtPlain(name="a").deps() == []


@pytest.mark.parametrize("kind", sorted(BAD_REQUIRES))
def test_deps_rejects_anything_but_tasks(kind: str):
    """requires() returning non-tasks raises TaskDefinitionError naming task and expectation."""
    task = TtBadRequires(kind=kind)
    with pytest.raises(conveyor.TaskDefinitionError) as info:
        task.deps()
    message = str(info.value)
    assert info.value.task_id == task.task_id
    assert "TtBadRequires" in message
    assert "requires()" in message
    assert "expected" in message.lower() and "Task" in message


def test_input_mirrors_the_nesting_of_requires(tmp_path: Path):
    """input() has the same dict/list/tuple shape as requires(), with outputs at the leaves."""
    task = TtNested(root=str(tmp_path))
    expected = {
        "one": [conveyor.LocalTarget(f"{tmp_path}/one")],
        "many": [
            [conveyor.LocalTarget(f"{tmp_path}/two")],
            ([conveyor.LocalTarget(f"{tmp_path}/three")],),
        ],
    }
    got = task.input()
    assert got == expected
    assert isinstance(got["many"][1], tuple)


# --- complete() ----------------------------------------------------------------------------


def test_default_complete_is_false_without_outputs():
    """A task with no outputs is never complete by default."""
    assert TtFile().complete() is False


def test_default_complete_requires_every_output_to_exist(tmp_path: Path):
    """complete() is True only once every output exists."""
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    task = TtFile(paths=[str(first), str(second)])
    first.write_text("1")
    assert task.complete() is False
    second.write_text("2")
    assert task.complete() is True


def test_wrapper_task_is_complete_when_all_requirements_are(tmp_path: Path):
    """WrapperTask.complete() follows its requirements' completeness."""
    wrapper = TtWrapper(root=str(tmp_path))
    (tmp_path / "a").write_text("a")
    assert wrapper.complete() is False
    (tmp_path / "b").write_text("b")
    assert wrapper.complete() is True


def test_external_tasks_are_external_and_others_are_not(tmp_path: Path):
    """is_external() is True for ExternalTask subclasses only."""
    assert TtExternal.is_external() is True
    assert TtExternal(path=str(tmp_path / "x")).is_external() is True
    assert TtPlain.is_external() is False
    assert TtWrapper.is_external() is False


def test_external_task_completeness_is_its_output(tmp_path: Path):
    """An ExternalTask is complete exactly when the data made elsewhere exists."""
    task = TtExternal(path=str(tmp_path / "made-elsewhere.csv"))
    assert task.complete() is False
    (tmp_path / "made-elsewhere.csv").write_text("x")
    assert task.complete() is True


# --- load_task_class -----------------------------------------------------------------------


def test_load_task_class_finds_a_defined_class():
    """A class is found again from its module and family."""
    assert load_task_class(__name__, "TtPlain") is TtPlain
    assert load_task_class(__name__, "etl.daily.TtNamespaced") is TtNamespaced


def test_load_task_class_imports_the_module(task_module: Any):
    """A module not yet imported is imported and its class returned."""
    module = task_module(
        """
        import conveyor

        class TtFreshlyImported(conveyor.Task):
            pass
        """
    )
    cls = load_task_class(module, "TtFreshlyImported")
    assert cls.__name__ == "TtFreshlyImported" and cls.__module__ == module


def test_load_task_class_lists_known_families_for_an_unknown_one():
    """An unknown family raises TaskLoadError listing the families defined in the module."""
    with pytest.raises(conveyor.TaskLoadError) as info:
        load_task_class(__name__, "TtNoSuchTask")
    message = str(info.value)
    assert "TtNoSuchTask" in message
    assert "TtPlain" in message and "etl.daily.TtNamespaced" in message


def test_load_task_class_reports_a_missing_module():
    """A module that does not exist raises TaskLoadError naming it."""
    with pytest.raises(conveyor.TaskLoadError, match="tt_no_such_module_xyz"):
        load_task_class("tt_no_such_module_xyz", "Anything")


def test_load_task_class_reports_a_module_that_fails_to_import(task_module: Any):
    """A module raising at import time becomes TaskLoadError with the original error."""
    module = task_module("raise RuntimeError('boom at import')\n")
    with pytest.raises(conveyor.TaskLoadError) as info:
        load_task_class(module, "Anything")
    assert module in str(info.value) and "boom at import" in str(info.value)


def test_the_binding_shared_with_events_cannot_be_changed_by_a_plugin(tmp_path: Path):
    """Event params are the task's own read-only string form (it also carries the binding the
    next equal task reuses): a plugin can change neither its items nor its attributes."""
    from conveyor.testing import RecordingPlugin

    recorder = RecordingPlugin()
    task = TtPlain(name="bound", n=4)
    with conveyor.Worker(config=conveyor.Config(), plugins=[recorder]) as worker:
        worker.add(task)
    [event, *_] = recorder.events("task_complete_checked")
    for change in (
        lambda: setattr(event.params, "task_id", "forged"),
        lambda: event.params.__setitem__("n", "5"),
    ):
        with pytest.raises(TypeError):
            change()
    assert TtPlain(name="bound", n=4).task_id == task.task_id
    assert TtPlain(name="bound", n=4).to_str_params() == {"name": "bound", "n": "4"}
