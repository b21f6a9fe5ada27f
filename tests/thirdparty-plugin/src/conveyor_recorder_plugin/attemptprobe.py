"""A third-party plugin of the attempt seams, for conveyor's tests (entry point ``attemptprobe``).

It is inert unless ``CONVEYOR_TEST_ATTEMPT_PROBE`` names a directory in the worker's process:
then ``conveyor_attempt_environment`` answers ``PROBE_ATTEMPT`` (``<task_id>:<attempt>``) and
``PROBE_WORKER_PID``, and ``conveyor_attempt_begin``/``conveyor_attempt_end`` append one JSON
line each to ``<directory>/probe.jsonl``: where they ran (pid, thread), what they were given,
and the value of ``PROBE_ATTEMPT`` in ``os.environ`` there. A task whose family is listed in
``CONVEYOR_TEST_ATTEMPT_PROBE_SKIP`` (comma-separated) gets None: the plugin takes no part.
``CONVEYOR_TEST_ATTEMPT_PROBE_END_SLEEP`` makes its end take that long in an attempt's process.

Its own table ``[attemptprobe]`` (``label``, ``api_token``, ``flush_within``) is validated in
``conveyor_configure`` with ``Config.plugin_settings``; an absent table is all defaults.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import conveyor
from conveyor.config import Config
from conveyor.events import AttemptContext, TaskStarted
from conveyor.settings import Field

NAME = "attemptprobe"
"""The plugin's entry-point name (and the name of its table)."""
PROBE = "CONVEYOR_TEST_ATTEMPT_PROBE"
SKIP = "CONVEYOR_TEST_ATTEMPT_PROBE_SKIP"
END_SLEEP = "CONVEYOR_TEST_ATTEMPT_PROBE_END_SLEEP"
RECORDS = "probe.jsonl"


class AttemptProbePlugin:
    """Answers the attempt's environment and records begin/end where the attempt runs."""

    settings_schema: ClassVar[Mapping[str, Field]] = {
        "label": Field("str", "probe", doc="a name written into nothing; only validated"),
        "api_token": Field("str", "", doc="a secret-named key, for redaction tests"),
        "flush_within": Field("seconds", 1.0, gt=0),
    }

    def __init__(self) -> None:
        """No settings until configured."""
        self.settings: dict[str, Any] = {}

    @conveyor.hookimpl
    def conveyor_configure(self, config: Config) -> None:
        """Validate ``[attemptprobe]`` (ConfigError for an unknown key or a bad value)."""
        self.settings = config.plugin_settings(NAME, self.settings_schema)

    @conveyor.hookimpl
    def conveyor_attempt_environment(self, event: TaskStarted) -> Mapping[str, str] | None:
        """Variables for the attempt when the probe is on; None (no part) otherwise."""
        if not os.environ.get(PROBE):
            return None
        if event.family in os.environ.get(SKIP, "").split(","):
            return None
        return {
            "PROBE_ATTEMPT": f"{event.task_id}:{event.attempt}",
            "PROBE_WORKER_PID": str(os.getpid()),
        }

    @conveyor.hookimpl
    def conveyor_attempt_begin(self, attempt: AttemptContext) -> None:
        """Record where the attempt begins."""
        _record("begin", attempt, "")

    @conveyor.hookimpl
    def conveyor_attempt_end(self, attempt: AttemptContext, outcome: str) -> None:
        """Record where and how the attempt ended (then, in an attempt's own process, take
        ``CONVEYOR_TEST_ATTEMPT_PROBE_END_SLEEP`` seconds, like a slow flush)."""
        _record("end", attempt, outcome)
        pause = float(os.environ.get(END_SLEEP) or 0)
        if pause and not attempt.in_worker:
            time.sleep(pause)


def _record(hook: str, attempt: AttemptContext, outcome: str) -> None:
    directory = os.environ.get(PROBE)
    if not directory:
        return
    line = {
        "hook": hook,
        "task_id": attempt.task_id,
        "family": attempt.family,
        "attempt": attempt.attempt,
        "env": dict(attempt.env),
        "in_worker": attempt.in_worker,
        "outcome": outcome,
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "environ": os.environ.get("PROBE_ATTEMPT"),
    }
    # one write of one line in append mode: whole even with several processes appending
    fd = os.open(os.path.join(directory, RECORDS), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
