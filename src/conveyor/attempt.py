"""``python -m conveyor.attempt``: one :class:`~conveyor.protocol.AttemptSpec` in, its
:data:`~conveyor.protocol.AttemptMessage`\\ s out: the entry point of every remote runner.

Theory of operation
-------------------
A worker describes an attempt as data (:func:`spec_of`): the task's module, family and string
parameters, its id, the attempt number, the timeout, the kill grace and the ``[tasks.*]``
defaults in force. Wherever that JSON object lands — a Dask worker, a Kubernetes pod, a batch
job — ``python -m conveyor.attempt`` reads it on standard input and runs the attempt under
conveyor's own supervision, exactly as the ``subprocess`` executor does: a fresh interpreter in
its own process group and session, the timeout enforced (SIGTERM to the whole process tree,
SIGKILL ``kill_grace`` seconds later), leftovers swept. It writes every message as one JSON line
of the protocol's codec on standard output (:func:`~conveyor.protocol.encode_attempt_message`:
``note`` lines while it runs, then exactly one of ``succeeded``, ``failed``,
``timed_out``, ``died`` or ``needs_dependencies``) and exits with the code of that end
(:data:`EXIT_CODES`). What the task prints goes to standard error, never into the messages.

SIGTERM or SIGINT stops the attempt like an interruption of a worker (TERM to its tree, KILL
after the grace; a second signal kills at once): it ends ``failed`` with cause
``interrupted``. A standard input that is not an AttemptSpec is one line on standard error and
exit code 2 (:data:`EXIT_USAGE`).

A runner that lives in a Python process (the Dask plugin) may use :class:`AttemptRunner`
instead of a process of its own, and :func:`executor_message` to turn the messages it gets back
into the executor protocol's :class:`~conveyor.executors.base.Note` and
:class:`~conveyor.executors.base.Outcome`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from types import FrameType

from .executors.base import AttemptRequest, ExecutorContext, Message, Note, Outcome
from .executors.channel import from_wire, to_wire
from .executors.child import attempt_spec
from .executors.subproc import SubprocessExecutor
from .protocol import (
    AttemptMessage,
    AttemptMessageKind,
    AttemptSpec,
    FieldError,
    Stage,
    attempt_message_kind,
    decode,
    encode_attempt_message,
)
from .tasklike import DEFAULT_LOADER

__all__ = [
    "EXIT_CODES",
    "EXIT_USAGE",
    "AttemptRunner",
    "RunningAttempt",
    "executor_message",
    "main",
    "message_line",
    "spec_of",
]

EXIT_CODES: Mapping[AttemptMessageKind, int] = {
    AttemptMessageKind.SUCCEEDED: 0,
    AttemptMessageKind.FAILED: 1,
    AttemptMessageKind.TIMED_OUT: 3,
    AttemptMessageKind.DIED: 4,
    AttemptMessageKind.NEEDS_DEPENDENCIES: 5,
}
"""The exit code of ``python -m conveyor.attempt`` for each way an attempt ends."""
EXIT_USAGE = 2
"""Standard input was not one AttemptSpec (or arguments were given): nothing ran."""

Emit = Callable[[AttemptMessage], None]


def spec_of(request: AttemptRequest, context: ExecutorContext | None = None) -> AttemptSpec:
    """The :class:`~conveyor.protocol.AttemptSpec` of a worker's attempt ``request`` (with
    ``context``'s kill grace and logging settings, and the ``[tasks.*]`` defaults in force)."""
    return attempt_spec(request, context)


def executor_message(
    message: AttemptMessage, task_id: str, loader: str = DEFAULT_LOADER
) -> Note | Outcome | None:
    """The executor protocol's message for ``message`` of attempt ``task_id`` (a dynamic
    dependency is rebuilt from its module, family and parameters by the task loader
    ``loader``: the attempt's ``AttemptSpec.loader``); None for a ``stage``."""
    converted = from_wire(message, task_id, loader)
    return None if isinstance(converted, Stage) else converted


def message_line(message: AttemptMessage) -> bytes:
    """``message`` as the JSON line ``python -m conveyor.attempt`` writes."""
    return (json.dumps(encode_attempt_message(message), separators=(",", ":")) + "\n").encode()


class RunningAttempt:
    """One attempt started by :class:`AttemptRunner`: stop it, or wait for its end."""

    def __init__(self, executor: SubprocessExecutor, emit: Emit) -> None:
        """Forward notes to ``emit``; the end is kept (and emitted) when it comes."""
        self._executor = executor
        self._emit = emit
        self._done = threading.Event()
        self.end: AttemptMessage | None = None
        """How the attempt ended (None while it runs)."""
        self.pid = 0
        """The pid of the attempt's supervised process."""

    def sink(self, message: Message) -> None:
        """The executor's sink: every message goes to ``emit``; an Outcome ends the attempt."""
        wire = to_wire(message)
        if isinstance(message, Outcome):
            self.end = wire
        self._emit(wire)
        if isinstance(message, Outcome):
            self._done.set()

    def stop(self, reason: str, hard: bool = False) -> None:
        """Stop the attempt as interrupted by ``reason`` (TERM to its tree, KILL after the
        kill grace; at once if ``hard``); it ends ``failed`` with cause ``interrupted``."""
        self._executor.stop(self.pid, reason, hard)

    def wait(self, timeout: float | None = None) -> AttemptMessage | None:
        """The end of the attempt, waiting at most ``timeout`` seconds (None: not yet)."""
        self._done.wait(timeout)
        return self.end


class AttemptRunner:
    """Runs attempts from their specs in supervised child processes of this process.

    One supervisor thread serves every attempt of the runner; each attempt runs in a fresh
    interpreter (``python -m conveyor.executors.runner``) in its own session, with the timeout
    of its spec and this runner's ``kill_grace``. Close the runner when done with it.
    """

    def __init__(
        self, kill_grace: float = 5.0, log_level: str = "info", log_format: str = "json"
    ) -> None:
        """A runner whose attempts get ``kill_grace`` and log as ``log_level``/``log_format``."""
        context = ExecutorContext(1, kill_grace, {}, log_level, log_format)
        self._executor = SubprocessExecutor(context)

    def start(self, spec: AttemptSpec, emit: Emit) -> RunningAttempt:
        """Start the attempt ``spec``; its messages go to ``emit`` (from another thread)."""
        running = RunningAttempt(self._executor, emit)
        running.pid = self._executor.start_spec(spec, running.sink, spec.memory_limit)
        return running

    def interrupt(self, reason: str, hard: bool = False) -> None:
        """Stop every running attempt as interrupted by ``reason``."""
        self._executor.interrupt(reason, hard)

    def close(self) -> None:
        """Wait for every attempt process to end and be reaped."""
        self._executor.close()


def _read_spec(data: bytes) -> AttemptSpec:
    """The spec on standard input; ValueError saying what is wrong with it."""
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"standard input is not JSON ({exc})") from None
    try:
        return decode(AttemptSpec, body, "spec", strict=False)
    except FieldError as exc:
        raise ValueError(f"standard input is not an AttemptSpec: {exc}") from None


def _private_stdout() -> int:
    """A descriptor of the real standard output, for messages alone; descriptor 1 becomes
    standard error, so that what the task (and conveyor's logging) prints stays out of them."""
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _writer(fd: int) -> Emit:
    lock = threading.Lock()

    def emit(message: AttemptMessage) -> None:
        data = message_line(message)
        with lock:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]

    return emit


def _on_signals(runner: AttemptRunner) -> None:
    """SIGTERM and SIGINT interrupt the attempt; a second one kills it at once."""
    seen: list[str] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        runner.interrupt(name, hard=bool(seen))
        seen.append(name)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handle)


def main(argv: list[str] | None = None) -> int:
    """Run the AttemptSpec on standard input; exit with its end's code (:data:`EXIT_CODES`)."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        print("usage: python -m conveyor.attempt < spec.json (no arguments)", file=sys.stderr)
        return EXIT_USAGE
    try:
        spec = _read_spec(sys.stdin.buffer.read())
    except ValueError as exc:
        print(f"conveyor.attempt: {exc}", file=sys.stderr)
        return EXIT_USAGE
    emit = _writer(_private_stdout())
    runner = AttemptRunner(spec.kill_grace, spec.log_level, spec.log_format)
    _on_signals(runner)
    try:
        end = runner.start(spec, emit).wait()
    finally:
        runner.close()
    assert end is not None  # (wait() without a timeout returns once the end is in)
    return EXIT_CODES[attempt_message_kind(end)]


if __name__ == "__main__":
    sys.exit(main())
