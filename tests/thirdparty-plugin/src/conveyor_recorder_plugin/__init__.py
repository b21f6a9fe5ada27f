"""A third-party conveyor plugin: appends every hook event as a JSON line to a file.

It is inert unless ``CONVEYOR_RECORDER_OUT`` names the file to write.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os

import conveyor
from conveyor import hookspecs
from conveyor.testing import hook_names


class RecorderPlugin:
    """Implements every conveyor hook."""

    def _write(self, hook: str, event: object) -> None:
        path = os.environ.get("CONVEYOR_RECORDER_OUT")
        if not path:
            return
        record = {"hook": hook, **dataclasses.asdict(event)}  # type: ignore[call-overload]
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, default=str) + "\n")


def _recorder(name: str):  # type: ignore[no-untyped-def]
    def record(self: RecorderPlugin, event: object) -> None:
        self._write(name, event)

    record.__name__ = name
    return conveyor.hookimpl(record)


for _name in hook_names():
    # the observer hooks: each receives one event (the lifecycle and route hooks do not)
    if tuple(inspect.signature(getattr(hookspecs, _name)).parameters) == ("event",):
        setattr(RecorderPlugin, _name, _recorder(_name))
