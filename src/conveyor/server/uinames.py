"""The web UI's names for the protocol's values, generated from :mod:`conveyor.protocol`.

The UI's JavaScript must not spell a task status or an attempt outcome on its own: it imports
them from ``ui/names.js``, which :func:`render` writes from the protocol's ``StrEnum``\\ s. The
file is checked in (the UI is served as it is, without a build step), and a test fails when it
is out of date; regenerate it with::

    python -m conveyor.server.uinames
"""

from __future__ import annotations

import enum
import json
from pathlib import Path

from ..protocol import AttemptEnd, TaskStatus

__all__ = ["NAMES_JS", "render", "write"]

NAMES_JS = Path(__file__).parent / "ui" / "names.js"
"""Where the generated module lives."""


def _words(value: enum.StrEnum) -> str:
    """How the UI shows a value: its words (``timed_out`` → ``timed out``)."""
    return str(value).replace("_", " ")


def render() -> str:
    """The text of ``ui/names.js``."""
    states = json.dumps([str(s) for s in TaskStatus])
    ends = {str(e): _words(e) for e in AttemptEnd}
    lines = [
        "// Generated from conveyor.protocol by `python -m conveyor.server.uinames`: do not edit.",
        "// A test fails when this file is out of date.",
        "",
        "/** Every task status, in the order the UI lists them (protocol.TaskStatus). */",
        f"export const STATES = {states};",
        "",
        "/** Each task status by name: `STATUS.FAILED` rather than a string of one's own. */",
        "export const STATUS = Object.freeze({",
        *(f"  {s}: {json.dumps(str(s))}," for s in TaskStatus),
        "});",
        "",
        "/** Each attempt outcome (protocol.AttemptEnd) and how the UI shows it. */",
        "export const ATTEMPT_ENDS = {",
        *(f"  {json.dumps(key)}: {json.dumps(text)}," for key, text in ends.items()),
        "};",
        "",
    ]
    return "\n".join(lines)


def write() -> Path:
    """Write ``ui/names.js``; its path."""
    NAMES_JS.write_text(render(), encoding="utf-8")
    return NAMES_JS


if __name__ == "__main__":
    print(write())
