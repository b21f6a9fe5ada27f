"""What runs on the Dask workers: one attempt, in a child process supervised there.

:func:`run_attempt` is the function the executor submits. It starts conveyor's ``subprocess``
runner for the attempt on the Dask worker's machine (the Dask worker never imports the task),
forwards status messages, progress and tracking URLs to the conveyor worker as Dask events
while the attempt runs, and returns the attempt's outcome as one JSON line. Timeouts and the
kill of the whole process tree are the local supervisor's, exactly as under ``subprocess``.

Dask may run a task again after the worker running it was lost. A first run claims the attempt
(a Dask ``Event`` named after its key); a second run finds the claim and returns
:data:`LOST` at once, which the conveyor worker reports as a process death. If the conveyor
worker goes away (its client disconnects, so the scheduler releases the future), the attempt
is stopped within :data:`CHECK_EVERY` seconds.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from conveyor.executors.base import ExecutorContext, Message, Note, Outcome
from conveyor.executors.channel import encode
from conveyor.executors.subproc import SubprocessExecutor
from distributed import Event, get_client, get_worker

__all__ = [
    "CHECK_EVERY",
    "LOST",
    "STOPPED",
    "claim_name",
    "result_of",
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
_executors: dict[tuple[float, str, str], SubprocessExecutor] = {}
_running: dict[str, tuple[SubprocessExecutor, int]] = {}  # attempt key -> (executor, pid)


def _executor(kill_grace: float, log_level: str, log_format: str) -> SubprocessExecutor:
    """This Dask worker's subprocess executor for these settings (one supervisor thread)."""
    key = (kill_grace, log_level, log_format)
    with _lock:
        executor = _executors.get(key)
        if executor is None:
            context = ExecutorContext(1, kill_grace, {}, log_level, log_format)
            executor = _executors[key] = SubprocessExecutor(context)
        return executor


def stop_name(topic: str) -> str:
    """The name of the Dask Event an executor (its notes' ``topic``) sets when interrupted."""
    return f"{topic}-stop"


def claim_name(key: str) -> str:
    """The name of the Dask Event that marks the attempt ``key`` as started."""
    return f"conveyor-claim-{key}"


def run_attempt(
    spec: dict[str, Any],
    timeout: float,
    kill_grace: float,
    log_level: str,
    log_format: str,
    topic: str,
    stop: str = "",
) -> str:
    """Run the attempt ``spec`` here; its outcome as a JSON line, :data:`LOST` or
    :data:`STOPPED`. ``stop`` names the Event the executor sets when it is interrupted."""
    worker = get_worker()
    key = str(spec["key"])
    client = get_client()
    claim = Event(claim_name(key), client=client)
    if claim.is_set():
        return LOST  # started before, on a worker that was lost: never run twice
    claim.set()
    stopped = Event(stop, client=client) if stop else None
    if stopped is not None and stopped.is_set():
        return STOPPED  # queued when its worker was interrupted
    done = threading.Event()
    outcome: list[Outcome] = []

    def sink(message: Message) -> None:
        if isinstance(message, Note):
            worker.log_event(topic, {"key": key, "line": encode(message).decode()})
        else:
            outcome.append(message)
            done.set()

    executor = _executor(kill_grace, log_level, log_format)
    pid = executor.start_spec({k: v for k, v in spec.items() if k != "key"}, timeout, sink)
    with _lock:
        _running[key] = (executor, pid)
    if stopped is not None and stopped.is_set():  # interrupted while it was being started
        executor.stop(pid, "an interruption of the conveyor worker", hard=False)
    try:
        while not done.wait(CHECK_EVERY):
            task = worker.state.tasks.get(key)
            if task is None or task.state in ("cancelled", "released", "forgotten"):
                executor.stop(pid, "the conveyor worker went away", hard=False)
    finally:
        with _lock:
            _running.pop(key, None)
    return result_of(outcome[0])


def result_of(outcome: Outcome) -> str:
    """The outcome as the submitted function returns it: the channel's JSON line (which
    rebuilds dynamic dependencies) and the fields only a supervisor sets."""
    return json.dumps(
        {
            "line": encode(outcome).decode(),
            "timeout": outcome.timeout,
            "exitcode": outcome.exitcode,
            "signal": outcome.signal,
        }
    )


def stop_attempts(keys: list[str], reason: str, hard: bool) -> int:
    """Stop the attempts ``keys`` that run on this Dask worker (run with ``Client.run``); how
    many were found here."""
    found = 0
    for key in keys:
        with _lock:
            entry = _running.get(key)
        if entry is not None:
            executor, pid = entry
            executor.stop(pid, reason, hard)
            found += 1
    return found
