"""What runs on the Dask workers: one attempt, in a child process supervised there.

:func:`run_attempt` is the function the executor submits, with the attempt's
:class:`~conveyor.protocol.AttemptSpec` as JSON data. It runs the attempt with
:class:`conveyor.attempt.AttemptRunner` — what ``python -m conveyor.attempt`` runs, in the Dask
worker's process: conveyor's supervised child process on the Dask worker's machine (the Dask
worker itself imports the task only to rebuild the dynamic dependencies a ``run()`` yields) —
forwards status messages, progress and tracking URLs to the conveyor worker as Dask events while
the attempt runs, and returns how it ended as the protocol's JSON data
(:func:`~conveyor.protocol.encode_attempt_message`). Timeouts and the kill of the whole process
tree are that supervisor's, exactly as under ``subprocess``. Only conveyor's public API is used.

Dask may run a task again after the worker running it was lost. A first run claims the attempt
(a Dask ``Event`` named after its key); a second run finds the claim and returns
:data:`LOST` at once, which the conveyor worker reports as a process death. If the conveyor
worker goes away (its client disconnects, so the scheduler releases the future), the attempt
is stopped within :data:`CHECK_EVERY` seconds.
"""

from __future__ import annotations

import threading
from typing import Any

from conveyor.attempt import AttemptRunner, RunningAttempt
from conveyor.protocol import (
    AttemptMessage,
    AttemptSpec,
    Note,
    decode,
    encode_attempt_message,
)
from distributed import Event, get_client, get_worker

__all__ = [
    "CHECK_EVERY",
    "LOST",
    "STOPPED",
    "claim_name",
    "run_attempt",
    "stop_attempts",
    "stop_name",
]

STOPPED = "stopped"
"""What a run returns when its executor was interrupted before the attempt could start."""
LOST = "lost"
"""What a run returns when its attempt was already started once (its Dask worker was lost)."""
CHECK_EVERY = 0.5  # seconds between two checks that the conveyor worker still wants it

_lock = threading.Lock()
_runners: dict[tuple[float, str, str], AttemptRunner] = {}
_running: dict[str, RunningAttempt] = {}  # attempt key -> its attempt


def _runner(spec: AttemptSpec) -> AttemptRunner:
    """This Dask worker's runner for the spec's settings (one supervisor thread each)."""
    key = (spec.kill_grace, spec.log_level, spec.log_format)
    with _lock:
        runner = _runners.get(key)
        if runner is None:
            runner = _runners[key] = AttemptRunner(*key)
        return runner


def stop_name(topic: str) -> str:
    """The name of the Dask Event an executor (its notes' ``topic``) sets when interrupted."""
    return f"{topic}-stop"


def claim_name(key: str) -> str:
    """The name of the Dask Event that marks the attempt ``key`` as started."""
    return f"conveyor-claim-{key}"


def run_attempt(spec_data: dict[str, Any], key: str, topic: str, stop: str = "") -> Any:
    """Run the attempt ``spec_data`` (an AttemptSpec as JSON data) here, as the Dask task
    ``key``; how it ended as JSON data, or :data:`LOST` or :data:`STOPPED`. ``stop`` names the
    Event the executor sets when it is interrupted."""
    spec = decode(AttemptSpec, spec_data, "spec", strict=False)
    worker = get_worker()
    client = get_client()
    claim = Event(claim_name(key), client=client)
    if claim.is_set():
        return LOST  # started before, on a worker that was lost: never run twice
    claim.set()
    stopped = Event(stop, client=client) if stop else None
    if stopped is not None and stopped.is_set():
        return STOPPED  # queued when its worker was interrupted

    def emit(message: AttemptMessage) -> None:
        if isinstance(message, Note):
            worker.log_event(topic, {"key": key, "message": encode_attempt_message(message)})

    running = _runner(spec).start(spec, emit)
    with _lock:
        _running[key] = running
    if stopped is not None and stopped.is_set():  # interrupted while it was being started
        running.stop("an interruption of the conveyor worker")
    try:
        end = running.wait(CHECK_EVERY)
        while end is None:
            task = worker.state.tasks.get(key)
            if task is None or task.state in ("cancelled", "released", "forgotten"):
                running.stop("the conveyor worker went away")
            end = running.wait(CHECK_EVERY)
    finally:
        with _lock:
            _running.pop(key, None)
    return encode_attempt_message(end)


def stop_attempts(keys: list[str], reason: str, hard: bool) -> int:
    """Stop the attempts ``keys`` that run on this Dask worker (run with ``Client.run``); how
    many were found here."""
    found = 0
    for key in keys:
        with _lock:
            running = _running.get(key)
        if running is not None:
            running.stop(reason, hard)
            found += 1
    return found
