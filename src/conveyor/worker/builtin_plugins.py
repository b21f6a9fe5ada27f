"""conveyor's own features written as plugins of its hooks: the transition and failure logs
and the execution summary.

They are registered through the same :class:`~conveyor.plugins.HookRelay` as a third party's
plugin, by name from :data:`conveyor.plugins.BUILTIN_PLUGINS` (the notifier dispatch, the
fourth, lives in :mod:`conveyor.notifiers.dispatch`); if one of them needed something the hooks
do not give, a hook would be missing.
"""

from __future__ import annotations

import logging

import structlog

from .. import events as ev
from ..config import Config
from ..core.summary import WorkerSummary, render_summary
from ..hookspecs import hookimpl
from ..secrets import hide_secret_params

__all__ = [
    "FailureLogPlugin",
    "SummaryPlugin",
    "TransitionLogPlugin",
    "failure_log",
    "transition_log",
]


class _LogPlugin:
    """Logs transitions as one structlog event each, at ``level``, with task_id, family,
    worker_id and state.

    ``enabled`` is False when the configured level filters out ``level``; the worker then does
    not register the plugin at all, which keeps the per-task cost low when nobody would read
    the lines.
    """

    level = logging.INFO

    def __init__(self) -> None:
        """Bind the ``conveyor.worker`` logger."""
        self.log = structlog.get_logger("conveyor.worker").bind()
        is_enabled_for = getattr(self.log, "is_enabled_for", None)
        self.enabled = is_enabled_for is None or bool(is_enabled_for(self.level))

    def _log(self, event: ev.Event, **extra: object) -> None:
        self.log.log(
            self.level,
            event.hook.removeprefix("conveyor_"),
            task_id=event.task_id,
            family=event.family,
            worker_id=event.worker_id,
            state=event.state,
            **extra,
        )


class TransitionLogPlugin(_LogPlugin):
    """Logs every ordinary transition at info; failures are :class:`FailureLogPlugin`'s."""

    @hookimpl
    def conveyor_task_complete_checked(self, event: ev.CompleteChecked) -> None:
        """Log a completeness check."""
        self._log(event, complete=event.complete)

    @hookimpl
    def conveyor_task_dependencies_discovered(self, event: ev.DependenciesDiscovered) -> None:
        """Log discovered dependencies."""
        self._log(event, dependencies=len(event.dependencies), dynamic=event.dynamic)

    @hookimpl
    def conveyor_task_started(self, event: ev.TaskStarted) -> None:
        """Log an attempt's start."""
        self._log(event, executor=event.executor, attempt=event.attempt)

    @hookimpl
    def conveyor_task_status_message(self, event: ev.TaskStatusMessage) -> None:
        """Log a status message."""
        self._log(event, message=hide_secret_params(event.message, event.params))

    @hookimpl
    def conveyor_task_progress(self, event: ev.TaskProgress) -> None:
        """Log progress."""
        self._log(event, percentage=event.percentage)

    @hookimpl
    def conveyor_task_tracking_url(self, event: ev.TaskTrackingUrl) -> None:
        """Log a tracking URL."""
        self._log(event, url=hide_secret_params(event.url, event.params))

    @hookimpl
    def conveyor_task_succeeded(self, event: ev.TaskSucceeded) -> None:
        """Log a success."""
        self._log(event, duration=round(event.duration, 6))


class FailureLogPlugin(_LogPlugin):
    """Logs each failed, timed-out, dead or broken task as one error event, explanation included.

    A separate plugin so that it stays registered when only errors are logged.
    """

    level = logging.ERROR

    @hookimpl
    def conveyor_task_broken(self, event: ev.TaskBroken) -> None:
        """Log a broken task with what was wrong."""
        self._log(event, phase=event.phase, error=hide_secret_params(event.error, event.params))

    @hookimpl
    def conveyor_task_failed(self, event: ev.TaskFailed) -> None:
        """Log a failure with its explanation."""
        self._log(
            event,
            exception_type=event.exception_type,
            duration=round(event.duration, 6),
            error=hide_secret_params(event.error, event.params),
        )

    @hookimpl
    def conveyor_task_timed_out(self, event: ev.TaskTimedOut) -> None:
        """Log a timeout."""
        self._log(event, timeout=event.timeout)

    @hookimpl
    def conveyor_task_process_died(self, event: ev.ProcessDied) -> None:
        """Log a dead attempt process."""
        self._log(event, exitcode=event.exitcode, signal=event.signal)


def transition_log(config: Config, relay: object = None) -> TransitionLogPlugin | None:
    """The ``conveyor.transition-log`` plugin, or None when info lines are filtered out."""
    plugin = TransitionLogPlugin()
    return plugin if plugin.enabled else None


def failure_log(config: Config, relay: object = None) -> FailureLogPlugin | None:
    """The ``conveyor.failure-log`` plugin, or None when error lines are filtered out."""
    plugin = FailureLogPlugin()
    return plugin if plugin.enabled else None


class SummaryPlugin:
    """The execution summary (``conveyor.summary``): Luigi's, counts per category grouped by
    family and a verdict line, rendered by :func:`~conveyor.core.summary.render_summary`.

    It answers ``conveyor_worker_summary`` and is registered first, so a plugin registered after
    it — any third party's — is asked before it and may replace or extend its text.
    """

    name = "conveyor.summary"

    @classmethod
    def for_config(cls, config: Config, relay: object = None) -> SummaryPlugin:
        """The plugin (every worker has a summary; the configuration changes nothing)."""
        return cls()

    @hookimpl
    def conveyor_worker_summary(self, event: WorkerSummary) -> str:
        """The summary text of the run's facts."""
        return render_summary(event.facts)
