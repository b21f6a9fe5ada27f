"""``conveyor.build()``: run tasks and everything they need, and report as a RunResult."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import structlog

from .config import Config, resolve_config
from .log import configure_logging
from .task import as_task
from .tasklike import TaskLike
from .worker.loop import Worker

__all__ = ["RunResult", "build"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """What ``build()`` returns.

    ``ok``: every requested task is complete at the end. ``exit_code``: see docs/cli.md.
    ``summary``: the execution summary text. ``states``: task_id → final state for every task
    of the graph. ``errors``: task_id → failure explanation. ``tasks``: task_id → task (a
    :class:`conveyor.Task` or another :class:`~conveyor.TaskLike`).
    """

    ok: bool
    exit_code: int
    summary: str
    states: Mapping[str, str]
    errors: Mapping[str, str]
    tasks: Mapping[str, TaskLike]


def build(
    tasks: TaskLike | Iterable[TaskLike],
    *,
    config: Config | str | os.PathLike[str] | None = None,
    **overrides: Any,
) -> RunResult:
    """Run one task or several, and everything they need, with one worker.

    ``config`` is a worker.toml path, a Config, or None (discovered). ``overrides`` are
    ``[worker]`` keys plus ``scheduler_url=``, ``log_level=`` and ``log_format=``. Task
    failures never raise; a bad configuration raises ConfigError, a bad plugin or backend
    PluginError.
    """
    # (a task may be iterable: whether it is a task is asked first; a task of another
    # framework is adapted by its task loader, here and in Worker.add)
    single = as_task(tasks)
    requested = (
        [single]
        if single is not None
        else [as_task(task) or task for task in cast(Iterable[TaskLike], tasks)]
    )
    cfg = resolve_config(config).with_overrides(**overrides)
    if not structlog.is_configured() or "log_level" in overrides or "log_format" in overrides:
        configure_logging(cfg.logging)
    with Worker(config=cfg) as worker:
        for task in requested:
            worker.add(task)
        worker.run()
        graph = worker.tasks()
    report = worker.report
    assert report is not None
    ok = all(report.states.get(t.task_id) == "DONE" for t in requested)
    return RunResult(ok, report.exit_code, report.summary, report.states, report.errors, graph)
