"""The in-process scheduler: :class:`Scheduler`, configured from ``[scheduler]``.

The policy itself lives in :mod:`conveyor.scheduler.policy` and is shared by the central
server; this module only binds it to the configuration.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ..config import Config, SchedulerSettings, resolve_config
from .policy import SchedulerCore, TaskSpec, Work, WorkLeft

__all__ = ["Scheduler", "TaskSpec", "Work", "WorkLeft", "resolve_config"]


class Scheduler(SchedulerCore):
    """The in-process scheduler, usable directly and shareable by several Workers.

    ``config`` is a Config, a path to a worker.toml, None (discovered), or the resolved
    ``[scheduler]`` settings alone; keyword overrides are ``[scheduler]`` keys
    (``retry_delay=…``, ``resources={"db": 1}``).
    """

    def __init__(
        self,
        config: Config | SchedulerSettings | str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        **overrides: Any,
    ) -> None:
        """Build the scheduler from the ``[scheduler]`` policy keys."""
        if isinstance(config, SchedulerSettings):
            config = Config(scheduler=config)
        cfg = resolve_config(config)
        if overrides:
            cfg = cfg.with_section("scheduler", **overrides)
        s = cfg.scheduler
        super().__init__(
            retry_delay=s.retry_delay,
            retry_backoff=s.retry_backoff,
            retry_max_delay=s.retry_max_delay,
            retry_jitter=s.retry_jitter,
            retry_count=s.retry_count,
            disable_window=s.disable_window,
            disable_persist=s.disable_persist,
            worker_disconnect_delay=s.worker_disconnect_delay,
            remove_delay=s.remove_delay,
            resources=s.resources,
            clock=clock,
        )

    @property
    def in_process(self) -> bool:
        """True: a worker in this process may call this scheduler's ``get_work`` and
        ``task_done`` directly, with the fields their requests would carry, instead of building
        each request for :meth:`call` (the answers are the same; nothing is carried with
        ``get_work``, since a result costs no more to report at once). False when a subclass,
        or the instance, replaces ``call``, ``get_work`` or ``task_done``: every request then
        goes through ``call``, as through any transport."""
        cls, own = type(self), vars(self)
        return all(
            getattr(cls, name) is getattr(SchedulerCore, name) and name not in own
            for name in _DIRECT
        )


_DIRECT = ("call", "get_work", "task_done")  # what a worker calls directly (see in_process)
