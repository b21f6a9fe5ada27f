"""What runs inside an attempt's child process (fork and subprocess alike)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import datetime
import gc
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import ConveyorError, TaskLoadError
from ..loaders import task_loader
from ..protocol import AttemptSpec
from ..task import is_task_like, task_defaults_in_use, task_loader_of, use_task_defaults
from ..tasklike import TaskLike, TaskLoader
from .attempt import end_attempt, run_attempt
from .base import FAILED, AttemptRequest, ExecutorContext, Outcome
from .channel import AttemptStage, PipeSink, Stage, task_ref

__all__ = [
    "arm_parent_death",
    "attempt_spec",
    "rebuild_and_run",
    "reset_signals",
    "run_in_child",
    "start_watchdog",
]

_PR_SET_PDEATHSIG = 1
# A real-time signal that task code has no reason to touch: the kernel sends it to the attempt
# process when the worker dies, and its handler kills the attempt's whole process group.
_DEATH_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else None


def _load_prctl() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()  # loaded in the worker, before any fork


def _kill_group(signum: int = 0, frame: object = None) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def arm_parent_death(worker_pid: int, dog_fd: int) -> None:
    """Make sure the attempt's process group dies with the worker (SIGKILL included).

    On Linux the kernel is asked (``PR_SET_PDEATHSIG``) to send a real-time signal whose
    handler kills the group; elsewhere a watchdog thread does it when the pipe ``dog_fd``,
    whose write end only the worker holds, reaches end of file.
    """
    if _prctl is not None and _DEATH_SIGNAL is not None:
        signal.signal(_DEATH_SIGNAL, _kill_group)
        if _prctl(_PR_SET_PDEATHSIG, int(_DEATH_SIGNAL), 0, 0, 0) == 0:  # type: ignore[operator]
            if os.getppid() != worker_pid:  # the worker died before the request took effect
                _kill_group()
            return
    start_watchdog(dog_fd)


def start_watchdog(dog_fd: int) -> None:
    """Kill this process group when the pipe ``dog_fd`` reaches end of file (worker gone)."""

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
    gc.freeze()  # the child's collections then leave the worker's objects (and pages) alone
    sink = PipeSink(msg_fd)
    # the supervisor learns when run() starts: a timeout before it is explained differently

    def running() -> None:
        sink(Stage(AttemptStage.RUNNING))

    outcome = run_attempt(request, sink, on_run=running, end_hooks=False)
    sink(outcome)
    # the plugins' end (flushing what the attempt made) comes after the outcome is sent: it
    # counts against neither the attempt's timeout nor its duration, only [worker] kill_grace
    end_attempt(request, outcome)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def attempt_spec(request: AttemptRequest, context: ExecutorContext | None = None) -> AttemptSpec:
    """The attempt as it travels to another process (no pickle; see rebuild_and_run), with
    ``context``'s kill grace and logging settings."""
    task = request.task
    deps = request.deps
    in_use = task_defaults_in_use()
    context = context or ExecutorContext()
    loader = task_loader_of(task)
    if deps is not None and (
        len(deps) > _DEPS_SENT or any(task_loader_of(dep) != loader for dep in deps)
    ):
        deps = None  # the child calls requires() itself (its loader rebuilds only its kind)
    return AttemptSpec(
        module=task.task_module,
        family=task.task_family,
        task_id=request.task_id,
        params=dict(task.task_params),
        attempt=request.attempt,
        timeout=request.timeout,
        check_complete=request.check_complete,
        # the requirements the worker knows, so that the child checks those rather than
        # calling requires() again (a range's would look at its dates again)
        deps=None if deps is None else tuple(map(task_ref, deps)),
        # the [tasks.*] defaults in use, for the tasks the child makes (requires(), input())
        task_defaults=_plain(in_use[0]) if in_use and in_use[0] else {},
        task_default_sources=dict(in_use[1]) if in_use and in_use[0] else {},
        # and [worker] task_id_style, so that the child's task ids are the worker's
        task_id_style=in_use[2] if in_use else "conveyor",
        kill_grace=context.kill_grace,
        log_level=context.log_level,
        log_format=context.log_format,
        loader=loader,  # (what task_policy().loader says)
        env=dict(request.env),
        plugins=request.plugins,
        memory_limit=request.memory_limit,
    )


_DEPS_SENT = 1000  # more requirements than this: the child calls requires() itself


def _plain(value: Any) -> Any:
    """The defaults as JSON data (TOML dates and times as their ISO text, which parameters
    read back)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return value


def rebuild_and_run(spec: AttemptSpec, msg_fd: int) -> None:
    """Rebuild the task ``spec`` names (module, family, string params) and run its attempt.

    A task that cannot be rebuilt, or whose rebuilt id differs, is reported as a failed
    attempt with the reason (``load_error``).
    """
    task_id = spec.task_id
    use_task_defaults(spec.task_defaults, spec.task_default_sources, spec.task_id_style)
    deps: tuple[TaskLike, ...] | None = None
    try:
        _set_environment(spec.env)  # (before the task's module runs: it may read them)
        loader = task_loader(spec.loader)
        task = _load(loader, spec.module, spec.family, spec.params)
        if spec.deps is not None:
            deps = tuple(_load(loader, d.module, d.family, d.params) for d in spec.deps)
        if task.task_id != task_id:
            raise ConveyorError(
                f"the task rebuilt in the attempt's process has id {task.task_id}, expected "
                f"{task_id}; its task_id must depend only on its parameters (and the worker's "
                "task_id_style and [tasks] tables be those in force when the task was made)"
            )
    except ConveyorError as exc:
        failure = Outcome(
            task_id, FAILED, error=str(exc), exception_type=type(exc).__name__, load_error=True
        )
        PipeSink(msg_fd)(failure)
        return
    PipeSink(msg_fd)(Stage(AttemptStage.LOADED))  # start-up is over: dependencies next
    request = AttemptRequest(task, task_id, spec.attempt, 0.0, spec.check_complete, deps)
    request.env, request.plugins = spec.env, spec.plugins
    if spec.plugins:  # loaded here (this is another process), and only when there are some
        from ..plugins import attempt_hooks

        request.hooks = attempt_hooks(spec.plugins)
    run_in_child(request, msg_fd)


def _set_environment(env: Mapping[str, str]) -> None:
    """Put ``env`` (``AttemptSpec.env``) in this process's environment; ConveyorError naming
    a variable the environment cannot hold (the attempt then fails with it, no traceback)."""
    for name, value in env.items():
        try:
            os.environ[name] = value
        except (ValueError, OSError, TypeError) as exc:
            raise ConveyorError(
                f"the attempt's environment variable {name!r} cannot be set: {exc}"
            ) from None


def _load(loader: TaskLoader, module: str, family: str, params: Mapping[str, str]) -> TaskLike:
    """The task rebuilt by ``loader``, the attempt's :class:`~conveyor.TaskLoader` (entry point
    of ``conveyor.task_loaders`` named by ``AttemptSpec.loader``; conveyor's own classes:
    ``"conveyor"``), under the defaults set above; TaskLoadError for what is not a task (a
    :class:`~conveyor.Task` or another :class:`~conveyor.TaskLike`: what this runner runs),
    and for any error the loader raises that is not conveyor's (a third party's loader, or
    the task's own constructor, raising ValueError…): the attempt then fails as a load error
    naming it, instead of the process dying with a traceback."""
    try:
        task = loader.load(module, family, params)
    except ConveyorError:
        raise
    except Exception as exc:
        raise TaskLoadError(
            f"the task loader could not rebuild {module}.{family}: {type(exc).__name__}: {exc}"
        ) from exc
    if not is_task_like(task):
        raise TaskLoadError(
            f"the task loader made {task!r}, which is not a task (conveyor.TaskLike: task_id, "
            "task_family, task_module, task_params, task_policy(), complete(), requires(), "
            "run())"
        )
    return task
