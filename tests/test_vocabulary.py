"""One name per concept (issue 21, item 6): the web UI's names are generated from the
protocol's enums and checked in up to date, and the notification kinds are one enum."""

from __future__ import annotations

import re

import pytest

from conveyor.notifiers import KINDS
from conveyor.protocol import AttemptEnd, NotifyKind, TaskStatus
from conveyor.server import uinames

pytestmark = pytest.mark.timeout(60)

UI = uinames.NAMES_JS.parent


def test_the_ui_names_module_is_up_to_date() -> None:
    """``ui/names.js`` is what ``python -m conveyor.server.uinames`` writes now: an enum
    changed without regenerating it fails here (and so in CI)."""
    assert uinames.NAMES_JS.read_text(encoding="utf-8") == uinames.render(), (
        "ui/names.js is out of date: run `python -m conveyor.server.uinames`"
    )


def test_the_ui_names_module_holds_every_status_and_outcome() -> None:
    """The generated module lists every TaskStatus in order and every AttemptEnd."""
    text = uinames.render()
    assert f"STATES = {[str(s) for s in TaskStatus]}".replace("'", '"') in text
    for status in TaskStatus:
        assert f'  {status}: "{status}",' in text
    for end in AttemptEnd:
        assert f'  "{end}": "{str(end).replace("_", " ")}",' in text


def test_no_other_ui_module_spells_the_statuses_or_outcomes() -> None:
    """The UI's scripts take every status and outcome from names.js (``STATUS.FAILED``)
    rather than writing one as a string of their own."""
    for script in sorted(UI.glob("*.js")):
        if script.name == "names.js":
            continue
        text = script.read_text(encoding="utf-8")
        for status in TaskStatus:
            assert not re.search(rf"[\"'`]{status}[\"'`]", text), (script.name, status)
        assert "process_died" not in text and "timed_out" not in text, script.name


def test_notification_kinds_are_one_enum() -> None:
    """``notifiers.KINDS`` and ``[notifiers] on``'s choices come from NotifyKind."""
    from conveyor.config import _NOTIFY_ON

    assert tuple(NotifyKind) == KINDS
    assert set(_NOTIFY_ON) == {str(k) for k in NotifyKind} - {"aggregate"}
