"""conveyor.testing re-exports every conformance check from the package itself."""

from __future__ import annotations

import importlib

import pytest

import conveyor.testing

CHECKS = {
    "check_executor": "conveyor.testing.executors",
    "check_transport": "conveyor.testing.transports",
    "check_state_store": "conveyor.testing.stores",
    "check_notifier": "conveyor.testing.notifiers",
}


def test_every_check_imports_from_the_package() -> None:
    """The four checks import from conveyor.testing in one statement."""
    from conveyor.testing import (
        check_executor,
        check_notifier,
        check_state_store,
        check_transport,
    )

    assert all(
        callable(c) for c in (check_executor, check_notifier, check_state_store, check_transport)
    )


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_is_the_object_of_its_submodule(name: str) -> None:
    """conveyor.testing's check is the very function its submodule defines."""
    submodule = importlib.import_module(CHECKS[name])
    assert getattr(conveyor.testing, name) is getattr(submodule, name)


def test_every_check_is_in_all() -> None:
    """Each check is listed in conveyor.testing.__all__."""
    assert set(CHECKS) <= set(conveyor.testing.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name the package does not have raises AttributeError naming it."""
    with pytest.raises(AttributeError, match="check_nothing"):
        conveyor.testing.check_nothing  # noqa: B018


def test_timeless_drops_only_the_verdicts_duration() -> None:
    """timeless() removes "in 0.3 s" / "after 2 min 5 s" from a verdict and nothing else."""
    from conveyor.testing import timeless

    assert timeless("Verdict: failed in 0.1 s - x in 2 s - y") == "Verdict: failed - x in 2 s - y"
    assert timeless("Verdict: incomplete after 1 h 3 min - z") == "Verdict: incomplete - z"
    assert timeless("Verdict: succeeded - every") == "Verdict: succeeded - every"
