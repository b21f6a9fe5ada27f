"""Entry point of a ``subprocess`` attempt: ``python -m conveyor.executors.runner``.

Reads one JSON object from standard input (module, family, string params, task id, attempt,
the message and watchdog descriptors, logging settings), rebuilds the task and runs it,
reporting through the message pipe like a forked child.
"""

from __future__ import annotations

import json
import os
import sys

from ..config import LoggingSettings
from ..log import configure_logging
from .child import arm_parent_death, rebuild_and_run, reset_signals


def main() -> int:
    """Run the attempt described on standard input; exit 0 once its outcome is sent."""
    spec = json.loads(sys.stdin.buffer.read())
    reset_signals()
    arm_parent_death(spec["worker_pid"], spec["dog_fd"])
    logging = spec.get("logging", {})
    configure_logging(
        LoggingSettings(level=logging.get("level", "info"), format=logging.get("format", "json"))
    )
    rebuild_and_run(spec, spec["msg_fd"])
    os._exit(0)  # like a forked child: threads the task left behind must not keep it alive


if __name__ == "__main__":
    sys.exit(main())
