"""Entry point of a ``subprocess`` attempt: ``python -m conveyor.executors.runner``.

Reads one :class:`~conveyor.protocol.AttemptSpec` as JSON from standard input; its arguments
are the message and watchdog descriptors and the worker's pid (``MSG_FD DOG_FD WORKER_PID``).
It rebuilds the task and runs it, reporting through the message pipe like a forked child.
This is the supervised child of an executor; a remote runner uses ``python -m
conveyor.attempt`` instead, which starts and supervises this one.
"""

from __future__ import annotations

import json
import os
import sys

from ..config import LoggingSettings
from ..log import configure_logging
from ..protocol import AttemptSpec, decode
from .child import arm_parent_death, rebuild_and_run, reset_signals


def main(argv: list[str] | None = None) -> int:
    """Run the attempt described on standard input; exit 0 once its outcome is sent."""
    msg_fd, dog_fd, worker_pid = (int(arg) for arg in (argv or sys.argv[1:]))
    spec = decode(AttemptSpec, json.loads(sys.stdin.buffer.read()), strict=False)
    reset_signals()
    arm_parent_death(worker_pid, dog_fd)
    configure_logging(LoggingSettings(level=spec.log_level, format=spec.log_format))
    rebuild_and_run(spec, msg_fd)
    os._exit(0)  # like a forked child: threads the task left behind must not keep it alive


if __name__ == "__main__":
    sys.exit(main())
