"""A third party's notifier: appends every message it is sent to a JSON-lines file."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, ClassVar

from conveyor.notifiers import Message, RetryAfter
from conveyor.settings import Field

_KEYS = ("task_id", "family", "module", "worker_id", "state", "owner_email", "host")


class JsonLinesNotifier:
    """``[notifiers.jsonl] path = "..."``; ``fail_first = N`` raises RetryAfter(0) N times."""

    settings_schema: ClassVar[Mapping[str, Field]] = {
        "path": Field("str", required=True, doc="file to append messages to"),
        "fail_first": Field("int", 0, ge=0),
        "timeout": Field("seconds", 5.0, gt=0),
    }

    def __init__(self, settings: Mapping[str, Any]) -> None:
        """Keep the file's path."""
        self.path = settings["path"]
        self.failures_left = settings["fail_first"]
        self._lock = threading.Lock()

    def send(self, message: Message) -> None:
        """Append the message, every field of it, as one JSON line."""
        with self._lock:
            if self.failures_left:
                self.failures_left -= 1
                raise RetryAfter(0)
            record = {
                "kind": message.kind,
                "subject": message.subject,
                "text": message.text,
                "recipients": list(message.recipients),
                "worker_id": message.worker_id,
                "host": message.host,
                # what identifies each event (its params and error carry real values)
                "events": [
                    {"type": type(e).__name__, **{k: v for k, v in asdict(e).items() if k in _KEYS}}
                    for e in message.events
                ],
            }
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(record, default=str) + "\n")


class RefusingNotifier:
    """``[notifiers.refuses]``: every send fails (RetryAfter(0), so retries come at once);
    ``max_retries`` is the dispatch's own key."""

    settings_schema: ClassVar[Mapping[str, Field]] = {
        "max_retries": Field("int", 0, ge=0),
        "timeout": Field("seconds", 5.0, gt=0),
    }

    def __init__(self, settings: Mapping[str, Any]) -> None:
        """Nothing to keep."""
        self.tries = 0

    def send(self, message: Message) -> None:
        """Refuse."""
        self.tries += 1
        raise RetryAfter(0)
