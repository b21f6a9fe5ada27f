"""The ``fork`` executor: one forked child process per attempt.

The child shares everything the worker had imported (no start-up cost), runs in its own
process group, and reports through a pipe (see :mod:`conveyor.executors.channel`). The
:class:`~conveyor.executors.supervisor.Supervisor` enforces timeouts and reaps it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import ClassVar

from .base import AttemptRequest, Sink
from .child import arm_parent_death, reset_signals, run_in_child
from .proctree import MARK_VARIABLE
from .supervisor import Child, ProcessExecutor

__all__ = ["ForkExecutor"]


class ForkExecutor(ProcessExecutor):
    """Runs each attempt in a forked child; enforces timeouts on the whole process tree."""

    name: ClassVar[str] = "fork"

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Fork a child for the attempt and hand it to the supervisor."""
        msg_r, msg_w = os.pipe()
        dog_r, dog_w = os.pipe()
        # taken after the pipes exist: a descriptor number freed by a finished attempt may
        # have just been reused for this attempt's own pipe, which the child must keep
        inherited = [fd for fd in self.supervisor.own_fds() if fd not in (msg_w, dog_r)]
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        worker_pid = os.getpid()
        mark = self.supervisor.next_mark()
        try:
            pid = os.fork()
        except OSError:  # e.g. out of processes: nothing started
            self.supervisor.release_mark(mark)
            for fd in (msg_r, msg_w, dog_r, dog_w):
                os.close(fd)
            raise
        if pid == 0:  # pragma: no cover - runs in the child, measured by the process tests
            os.environ[MARK_VARIABLE] = mark  # inherited by what the task starts
            _child(request, worker_pid, msg_w, dog_r, [msg_r, dog_w, *inherited])
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race
        os.close(msg_w)
        os.close(dog_r)
        child = Child(pid, request.task_id, sink, msg_r, dog_w, request.timeout, mark=mark)
        self.supervisor.watch(child)


def _child(
    request: AttemptRequest, worker_pid: int, msg_w: int, dog_r: int, close: list[int]
) -> None:
    code = 0
    try:
        os.setpgid(0, 0)
        reset_signals()
        for fd in close:
            with contextlib.suppress(OSError):
                os.close(fd)
        arm_parent_death(worker_pid, dog_r)
        run_in_child(request, msg_w)
    except BaseException:  # the worker sees PROCESS_DIED with this code
        code = 70
    finally:
        os._exit(code)
