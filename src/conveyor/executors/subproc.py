"""The ``subprocess`` executor: a fresh Python interpreter per attempt.

The child (``python -m conveyor.executors.runner``) receives the task as an
:class:`~conveyor.protocol.AttemptSpec` (module, family and string parameters) on its standard
input — never a pickle — imports the module, rebuilds the
task and runs it. It works where forking is unsafe, at the price of an interpreter start per
attempt. The worker's ``sys.path`` is passed on, so the child imports what the worker could.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import ClassVar

from ..protocol import AttemptSpec, encode
from .base import AttemptRequest, Sink
from .child import attempt_spec
from .proctree import MARK_VARIABLE
from .supervisor import Child, ProcessExecutor

__all__ = ["SubprocessExecutor"]


class SubprocessExecutor(ProcessExecutor):
    """Runs each attempt in a new interpreter in its own session; enforces timeouts and
    memory limits."""

    name: ClassVar[str] = "subprocess"

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Start the runner for the attempt and hand it to the supervisor."""
        self.start_spec(attempt_spec(request, self.context), sink, request.memory_limit)

    def start_spec(self, spec: AttemptSpec, sink: Sink, memory_limit: int = 0) -> int:
        """Start the runner for an attempt described by ``spec`` (no task object needed, so a
        process that never imported the task's module can run it, as ``python -m
        conveyor.attempt`` does); its pid. ``spec.timeout`` is enforced here, and
        ``memory_limit`` (bytes of resident memory of the attempt's process tree; 0: none)."""
        msg_r, msg_w = os.pipe()
        dog_r, dog_w = os.pipe()
        payload = json.dumps(encode(spec), separators=(",", ":"))
        runner_args = (msg_w, dog_r, os.getpid())
        mark = self.supervisor.next_mark()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            MARK_VARIABLE: mark,  # inherited by what the task starts
        }
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "conveyor.executors.runner", *map(str, runner_args)],
                stdin=subprocess.PIPE,
                pass_fds=(msg_w, dog_r),
                start_new_session=True,
                env=env,
            )
        except OSError:  # nothing started
            self.supervisor.release_mark(mark)
            for fd in (msg_r, dog_w):
                os.close(fd)
            raise
        finally:
            os.close(msg_w)
            os.close(dog_r)
        child = Child(
            proc.pid,
            spec.task_id,
            sink,
            msg_r,
            dog_w,
            spec.timeout,
            popen=proc,
            mark=mark,
            startup="interpreter start-up",
            loader=spec.loader,
            memory_limit=memory_limit,
        )
        self.supervisor.watch(child)
        assert proc.stdin is not None
        try:
            proc.stdin.write(payload.encode())
            proc.stdin.close()
        except OSError:
            pass  # the child died before reading: the supervisor reports PROCESS_DIED
        return proc.pid

    def stop(self, pid: int, reason: str, hard: bool = False) -> None:
        """Stop one running attempt (by the pid start_spec returned) as interrupted."""
        self.supervisor.stop(pid, reason, hard)
