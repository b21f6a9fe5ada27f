"""The conformance check every notifier passes: :func:`check_notifier` (docs/notifiers.md).

It builds the notifier exactly as the worker does (its table validated against the class's
``settings_schema``, then ``cls(settings)``), sends a single and an aggregate
:class:`~conveyor.notifiers.Message` to the endpoint the settings point at, and — given
``failing_settings`` pointing at an endpoint that refuses or never answers — checks that a
failed delivery surfaces as an exception within ``timeout`` instead of hanging or passing
silently. What the endpoint received is the caller's to compare with the messages returned.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..events import Params, ProcessDied, TaskFailed, TaskTimedOut
from ..notifiers import Message
from ..settings import Field, validate_backend_settings

__all__ = ["check_notifier", "sample_messages"]


def sample_messages(worker_id: str = "check-worker", host: str = "check-host") -> list[Message]:
    """A single ``failed`` message and an ``aggregate`` of three, as the dispatcher makes them."""
    common: dict[str, Any] = {
        "module": "conveyor.testing.notifiers",
        "worker_id": worker_id,
        "host": host,
        "timestamp": 1_796_000_000.0,
        "state": "FAILED",
        "owner_email": ("owner@example.com",),
    }
    failed = TaskFailed(
        task_id="CheckReport_2026_12_01_0123456789",
        family="CheckReport",
        params=Params({"date": "2026-12-01"}),
        error="Traceback (most recent call last):\n  ...\nRuntimeError: the disk is full",
        exception_type="RuntimeError",
        duration=1.5,
        **common,
    )
    timed_out = TaskTimedOut(
        task_id="CheckReport_2026_12_02_0123456789",
        family="CheckReport",
        params=Params({"date": "2026-12-02"}),
        timeout=30.0,
        **common,
    )
    died = ProcessDied(
        task_id="CheckLoad_2026_12_02_0123456789",
        family="CheckLoad",
        params=Params({"date": "2026-12-02"}),
        exitcode=None,
        signal=9,
        **common,
    )
    single = Message(
        kind="failed",
        subject=f"[conveyor] CheckReport(date=2026-12-01) failed on {host}",
        text="CheckReport(date=2026-12-01) failed.\n\nRuntimeError: the disk is full\n",
        events=(failed,),
        recipients=("owner@example.com",),
        worker_id=worker_id,
        host=host,
    )
    aggregate = Message(
        kind="aggregate",
        subject=f"[conveyor] 3 notifications on {host}: 1 failed, 1 timed_out, 1 process_died",
        text="3 notifications: 1 failed, 1 timed_out, 1 process_died\n"
        "- failed: CheckReport(date=2026-12-01)\n"
        "- timed_out: CheckReport(date=2026-12-02)\n"
        "- process_died: CheckLoad(date=2026-12-02)\n",
        events=(failed, timed_out, died),
        recipients=("owner@example.com",),
        worker_id=worker_id,
        host=host,
    )
    return [single, aggregate]


def check_notifier(
    cls: type[Any],
    settings: Mapping[str, Any],
    *,
    failing_settings: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
    name: str = "under-test",
) -> list[Message]:
    """Check ``cls`` against the notifier protocol; the messages it delivered, in order.

    ``settings`` (a ``[notifiers.<name>]`` table as written in ``worker.toml``) must point at a
    working test endpoint; ``failing_settings``, if given, at one where delivery fails. Raises
    AssertionError listing every problem found.
    """
    problems: list[str] = []
    schema = getattr(cls, "settings_schema", None)
    if not isinstance(schema, Mapping) or not all(isinstance(f, Field) for f in schema.values()):
        raise AssertionError(f"{cls.__name__}.settings_schema must map keys to conveyor Fields")
    if not callable(getattr(cls, "send", None)):
        raise AssertionError(f"{cls.__name__} has no send(message) method")
    notifier = cls(validate_backend_settings("notifiers", name, settings, schema))
    messages = sample_messages()
    for message in messages:
        raised = _send_within(notifier, message, timeout)
        if raised == "hang":
            problems.append(f"send() of a {message.kind} message did not return in {timeout:g} s")
        elif raised is not None:
            problems.append(f"send() of a {message.kind} message raised {raised}")
    if failing_settings is not None:
        failing = cls(validate_backend_settings("notifiers", name, failing_settings, schema))
        raised = _send_within(failing, messages[0], timeout)
        if raised is None:
            problems.append("send() to the failing endpoint returned instead of raising")
        elif raised == "hang":
            problems.append(
                f"send() to the failing endpoint hung for {timeout:g} s instead of raising"
            )
    if problems:
        listed = "\n- ".join(problems)
        raise AssertionError(f"{cls.__name__} fails the notifier check:\n- {listed}")
    return messages


def _send_within(notifier: Any, message: Message, timeout: float) -> str | None:
    """None if ``send`` returned, ``"hang"`` if it did not in time, else what it raised."""
    outcome: list[str | None] = []

    def send() -> None:
        try:
            notifier.send(message)
        except Exception as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")
        else:
            outcome.append(None)

    thread = threading.Thread(target=send, name="conveyor-check-notifier", daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else "hang"
