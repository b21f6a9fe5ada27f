"""What runs inside an attempt's child process (fork and subprocess alike)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from .attempt import run_attempt
from .base import AttemptRequest
from .channel import PipeSink

__all__ = ["run_in_child", "start_watchdog"]


def start_watchdog(dog_fd: int) -> None:
    """Kill this process group when the worker dies.

    The worker holds the write end of a pipe whose read end is ``dog_fd`` and never writes to
    it; when the worker exits for any reason (SIGKILL included) the read returns end of file
    and the whole group — the attempt process and the processes it started — is killed.
    """

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(dog_fd, 1):
                pass
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="conveyor-watchdog", daemon=True).start()


def reset_signals() -> None:
    """Default dispositions for the signals the worker handles (the task may set its own)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_DFL)


def run_in_child(request: AttemptRequest, msg_fd: int) -> None:
    """Run the attempt and send its notes and outcome to the worker through ``msg_fd``."""
    sink = PipeSink(msg_fd)
    sink(run_attempt(request, sink))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
