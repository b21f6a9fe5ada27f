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
from ..errors import ConveyorError
from ..log import configure_logging
from ..task import load_task_class
from .base import FAILED, AttemptRequest, Outcome
from .channel import PipeSink
from .child import arm_parent_death, reset_signals, run_in_child


def main() -> int:
    """Run the attempt described on standard input; exit 0 once its outcome is sent."""
    spec = json.loads(sys.stdin.buffer.read())
    reset_signals()
    arm_parent_death(spec["worker_pid"], spec["dog_fd"])
    logging = spec.get("logging", {})
    configure_logging(
        LoggingSettings(level=logging.get("level", "info"), format=logging.get("format", "json"))
    )
    try:
        task = load_task_class(spec["module"], spec["family"]).from_str_params(spec["params"])
        if task.task_id != spec["task_id"]:
            raise ConveyorError(
                f"the task rebuilt in the subprocess has id {task.task_id}, expected "
                f"{spec['task_id']}; its task_id must depend only on its parameters"
            )
    except ConveyorError as exc:
        PipeSink(spec["msg_fd"])(
            Outcome(spec["task_id"], FAILED, error=str(exc), exception_type=type(exc).__name__)
        )
        return 0
    request = AttemptRequest(task, spec["task_id"], spec["attempt"], 0.0, spec["check_complete"])
    run_in_child(request, spec["msg_fd"])
    os._exit(0)  # like a forked child: threads the task left behind must not keep it alive


if __name__ == "__main__":
    sys.exit(main())
