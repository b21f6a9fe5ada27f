"""Every hook conveyor fires, with when it fires and what it receives.

Almost all hooks are *observers*: they receive one frozen ``event`` (see
:mod:`conveyor.events`) and their return value is ignored. The worker's run in the worker's
process, on the worker's loop thread, in the order of the worker's transitions; events from
child processes are forwarded first. The central server's (``conveyor_scheduler_*``, at the end
of this module) run in the server's process, after the change they report was committed. The
exceptions: the lifecycle hooks ``conveyor_configure``/``conveyor_unconfigure`` take a
configuration and a timeout, ``conveyor_worker_summary`` returns the summary text (or None), and
``conveyor_scheduler_routes`` returns routes, ``conveyor_attempt_environment`` returns
variables, and ``conveyor_attempt_begin``/``conveyor_attempt_end`` run where the attempt runs.
conveyor calls each implementation separately: one that raises is logged with its plugin's name
and does not stop the other implementations, the task or the worker.

Implement a hook with the marker ``conveyor.hookimpl``::

    import conveyor

    class MyPlugin:
        @conveyor.hookimpl
        def conveyor_task_failed(self, event: conveyor.events.TaskFailed) -> None:
            ...

Rules every plugin can rely on:

* every attempt that starts (``conveyor_task_started``) ends with exactly one of
  ``succeeded`` / ``failed`` / ``timed_out`` / ``process_died``, or with
  ``conveyor_task_dependencies_discovered(dynamic=True)`` when ``run()`` yielded incomplete
  dependencies;
* ``conveyor_worker_started`` is the first event of a ``Worker.run()`` and
  ``conveyor_worker_stopped`` the last;
* ``conveyor_configure(config)`` comes before every other hook of a worker, exactly once per
  plugin (it is historic), and ``conveyor_unconfigure(flush_timeout)`` after every other, from
  ``Worker.close()``. These two take their named argument instead of an ``event``. A plugin
  whose ``conveyor_configure`` returns ``False`` leaves the worker: no other hook of it is
  called there.

conveyor's own features are plugins of these hooks, registered first and by name
(:data:`conveyor.plugins.BUILTIN_PLUGINS`): ``conveyor.transition-log``,
``conveyor.failure-log``, ``conveyor.summary`` (``conveyor_worker_summary``) and
``conveyor.notify`` (the notifier dispatch: ``conveyor_configure`` builds the notifiers,
``conveyor_worker_started`` starts its sender thread, ``conveyor_unconfigure`` flushes it).
"""

from __future__ import annotations

from collections.abc import Mapping

import pluggy

from . import events as ev
from .config import Config
from .core.summary import WorkerSummary

PROJECT = "conveyor"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# --- worker lifecycle -------------------------------------------------------------------------


@hookspec(historic=True)
def conveyor_configure(config: Config) -> bool | None:
    """A worker was built: here is its configuration.

    Called once per ``Worker``, at the end of its construction (``Worker(...)``, and so in
    ``conveyor run`` before the first task is added), after every plugin of the worker is
    registered and its scheduler transport and executor are built, and before any other hook
    of that worker fires. ``config`` is the worker's resolved :class:`~conveyor.config.Config`,
    frozen: read the settings you need here (``config.worker``, ``config.notifiers``,
    ``config.backends``, ...) rather than reading files or the environment yourself.

    The hook is *historic*: a plugin registered later (``worker.hooks.register(plugin, name)``)
    is called with the same ``config`` when it is registered, so every plugin of a worker is
    configured exactly once, whenever it joins. It runs on the thread that builds (or, for a
    late plugin, registers into) the worker. Start no thread here that must not survive a
    ``fork``: a process executor may fork after it; start such threads lazily, from
    ``conveyor_worker_started``. An implementation that raises is logged with its plugin's name
    and does not stop the other implementations or the worker (the plugin's other hooks still
    fire).

    On a worker, one exception is the way to refuse a configuration that can never work:
    raising :class:`~conveyor.errors.ConfigError` or :class:`~conveyor.errors.PluginError`
    (``BackendNotFound`` included) makes the worker's construction fail with that error
    (``conveyor run`` exits 2 with its message; conveyor's notifier dispatch refuses an
    ``email`` notifier with nobody to mail this way). The plugins configured before are then
    unconfigured (``flush_timeout`` 0), the ones after are not configured, and the worker
    undoes the rest of its set-up (its executor is closed). A plugin that refuses cleans up
    what its own ``conveyor_configure`` started: it is not unconfigured. For a plugin
    registered late, the refusal is raised from ``register`` and the plugin is unregistered.
    The central server refuses the same way: ``conveyor scheduler`` exits 2 with the message.

    Returning ``False`` (that value, not any false one) leaves the worker or server: a plugin
    that finds it has nothing to do there (tracing turned off, no Luigi task in the process)
    is unregistered from it right after this call, so none of its other hooks is called there,
    ``conveyor_unconfigure`` included, and no event is built for it alone: an installed
    plugin that is turned off costs a task nothing. Start nothing before returning ``False``.
    A later ``Worker`` asks again. ``None`` (or anything else) keeps the plugin.
    """


@hookspec
def conveyor_unconfigure(flush_timeout: float) -> None:
    """The worker is closing: release what ``conveyor_configure`` set up.

    Called once per ``Worker``, from ``Worker.close()`` (the end of a ``with Worker()`` block;
    ``conveyor run`` closes its worker before it exits), after the executors have stopped and
    every attempt's outcome hook has fired, so it is the last hook of that worker. It runs on
    the thread that calls ``close()``. ``flush_timeout`` is ``[notifiers] flush_timeout``: the
    seconds a plugin may spend in total delivering what it still holds (buffered metrics,
    queued messages) before giving up; the worker waits for each implementation in turn, so a
    plugin that ignores the bound delays the worker's exit. A failing implementation is logged
    and the others still run. Only plugins that were configured are unconfigured: a worker
    whose construction failed calls neither hook.
    """


@hookspec
def conveyor_worker_started(event: ev.WorkerStarted) -> None:
    """A worker begins ``run()``.

    Fires once per ``Worker.run()`` call, before any task is asked for, and after the worker
    has started the fork servers of its process executors (the one its timed tasks need
    included): a thread started here is never alive when those fork, which is why conveyor's
    notifier dispatch starts its sender thread here. The task fields of the event are ``""``
    and ``{}``; ``worker_id`` names the worker.
    """


@hookspec(firstresult=True)
def conveyor_worker_summary(event: WorkerSummary) -> str | None:
    """A ``Worker.run()`` has finished: return its execution summary's text, or None.

    Called once per ``run()``, after every attempt's outcome hook and before
    ``conveyor_worker_stopped`` (whose ``summary`` is the text returned here, as is
    ``RunReport.summary``, which ``conveyor run`` prints). ``event.facts`` is a frozen
    :class:`~conveyor.core.summary.SummaryFacts`: every task of the graph with its
    :class:`~conveyor.core.summary.Category` (where it ended, from the scheduler's final
    statuses and this worker's books), its family, a ``label(task_id)`` function, the requested
    tasks, the one-line reasons of failed and broken tasks, the tasks' notes and parameters,
    the interruption or outage that stopped the run, and its duration.

    Unlike the observers, the first string returned is used: the implementation registered
    last is asked first, and conveyor's own (``conveyor.summary``, registered first, which
    returns :func:`~conveyor.core.summary.render_summary` of the facts) last. A plugin
    replaces the summary by returning its text, adds to it by returning
    ``render_summary(event.facts)`` plus its own lines, and only observes by returning None.
    One that raises or returns neither a str nor None is logged with its plugin's name and the
    next is asked; if none answers (``conveyor.summary`` disabled), the summary is empty. The
    exit code and ``RunReport.ok`` come from the facts, never from the text.
    """


@hookspec
def conveyor_worker_stopped(event: ev.WorkerStopped) -> None:
    """A worker's ``run()`` is about to return.

    ``ok`` is what ``run()`` returns (True iff everything this worker ran succeeded) and
    ``summary`` the execution summary text. Fires after every attempt's outcome hook.
    """


# --- scheduling (graph walk) ------------------------------------------------------------------


@hookspec
def conveyor_task_complete_checked(event: ev.CompleteChecked) -> None:
    """A task's ``complete()`` returned a real bool (``event.complete``).

    Fires during the graph walk for every task reached (the walk does not descend below a
    complete task), and again when an external task is re-checked.
    """


@hookspec
def conveyor_task_dependencies_discovered(event: ev.DependenciesDiscovered) -> None:
    """A task's dependencies are known.

    With ``dynamic=False``: ``requires()`` was evaluated during the graph walk of an incomplete
    task; ``dependencies`` are their task ids (possibly empty). With ``dynamic=True``: ``run()``
    yielded tasks that are not all complete; the attempt ends here, the worker schedules them
    and runs the task again later from the top.
    """


@hookspec
def conveyor_task_broken(event: ev.TaskBroken) -> None:
    """``complete()`` or ``requires()`` raised or returned garbage while scheduling.

    ``phase`` is ``"complete"`` or ``"requires"``; ``error`` the traceback or explanation
    (a dependency cycle is reported here with phase ``"requires"``). The task's state is
    ``UNKNOWN``; its dependents stay pending; other branches of the graph still run.
    """


# --- attempts ---------------------------------------------------------------------------------


@hookspec
def conveyor_task_started(event: ev.TaskStarted) -> None:
    """The executor starts an attempt.

    ``executor`` names the executor that actually runs it; ``attempt`` counts this worker's
    runs of this task (1, 2, …; re-runs after dynamic dependencies included).
    """


@hookspec
def conveyor_attempt_environment(event: ev.TaskStarted) -> Mapping[str, str] | None:
    """Environment variables to give the attempt that just started, or None.

    Not an observer: called on the worker's loop thread right after
    ``conveyor_task_started`` (same ``event``) and before the executor is handed the attempt,
    only when some plugin implements it. The mappings every implementation returns are merged
    (a later plugin's value wins) into :attr:`conveyor.protocol.AttemptSpec.env`: the attempt's
    process (``fork``, ``subprocess``, the Dask plugin's ``python -m conveyor.attempt``, …)
    starts with them in ``os.environ``, and so does what the task starts. The in-process
    executors (``inline``, ``thread``) leave the worker's environment alone: there they reach
    the ``conveyor_attempt_begin`` implementations only, in ``AttemptContext.env``. (The
    OpenTelemetry plugin hands each attempt its span's ``TRACEPARENT`` this way.) Names and
    values must be strings; one that raises is logged and the attempt starts without its
    variables.
    """


@hookspec
def conveyor_attempt_begin(attempt: ev.AttemptContext) -> None:
    """An attempt is about to load its task and call ``run()``, *where it runs*.

    Unlike every other worker hook, this one and ``conveyor_attempt_end`` run where the
    attempt runs, for the plugins that answered ``conveyor_attempt_environment`` for it: in
    the attempt's own process under the process executors (such a plugin is loaded there by
    its ``conveyor.plugins`` entry-point name, without ``conveyor_configure``; a ``[plugins]
    local`` module or a ``Worker(plugins=...)`` object takes part only under the in-process
    executors), or on the worker's
    thread that runs it under ``inline`` and ``thread``, where ``attempt.in_worker`` is True.
    The environment of ``conveyor_attempt_environment`` is already in place. A plugin may set
    up what task code inside ``run()`` uses (a tracing context, a client); one that raises is
    logged and the attempt still runs.
    """


@hookspec
def conveyor_attempt_end(attempt: ev.AttemptContext, outcome: str) -> None:
    """The attempt that ``conveyor_attempt_begin`` announced has ended, where it ran.

    ``outcome`` is how it ended there (``succeeded``, ``failed``, ``needs_deps``, or
    ``interrupted`` when an interruption stopped it). In an attempt's own process it is called
    after the outcome is sent and before the process exits (the worker hears the outcome when
    it exits): a plugin can flush what the attempt produced there without it counting against
    the attempt's timeout or duration, within ``[worker] kill_grace``, after which the process
    is killed. Under ``inline`` and ``thread`` it is called before the outcome is reported.
    Not called when the attempt's process is killed (time-out, signal) or dies.
    """


@hookspec
def conveyor_notification_sent(event: ev.NotificationSent) -> None:
    """The notifier dispatch tried to deliver a notification: ``result`` says how it went.

    Fires on the dispatch's sender thread (not the worker's loop thread), once per try of each
    notifier: ``"sent"``, ``"failed"`` (tried again later) or ``"dropped"`` (given up after
    its retries, or pushed out of the full queue, once per enabled notifier).
    """


@hookspec
def conveyor_task_status_message(event: ev.TaskStatusMessage) -> None:
    """``self.set_status_message(text)`` was called inside ``run()``; ``message`` is the text."""


@hookspec
def conveyor_task_progress(event: ev.TaskProgress) -> None:
    """``self.set_progress_percentage(p)`` was called inside ``run()``; ``percentage`` is p."""


@hookspec
def conveyor_task_tracking_url(event: ev.TaskTrackingUrl) -> None:
    """``self.set_tracking_url(url)`` was called inside ``run()``; ``url`` is the URL."""


@hookspec
def conveyor_task_succeeded(event: ev.TaskSucceeded) -> None:
    """``run()`` returned and, when checked, the task is complete.

    ``duration`` is the attempt's wall time in seconds. Fires after ``on_success()``.
    """


@hookspec
def conveyor_task_failed(event: ev.TaskFailed) -> None:
    """The attempt failed: ``run()`` raised, left the task incomplete, a dependency was missing
    at run time, or the attempt could not be started.

    ``error`` is the failure explanation (what ``on_failure`` returned, else the traceback);
    ``exception_type`` the exception's class name; ``duration`` the attempt's wall time.
    """


@hookspec
def conveyor_task_timed_out(event: ev.TaskTimedOut) -> None:
    """The attempt exceeded ``timeout`` seconds and its whole process tree was killed."""


@hookspec
def conveyor_task_process_died(event: ev.ProcessDied) -> None:
    """The attempt's process ended without reporting a result.

    ``exitcode`` is its exit status, or ``signal`` the signal number that ended it.
    """


# --- the central server (conveyor scheduler) --------------------------------------------------
#
# These fire only in the `conveyor scheduler` process, through its own plugin manager (loaded
# from the same entry points and [plugins] settings of the server's configuration). Each event
# is delivered after the server's state lock is released and the change is committed to the
# state store, on a thread of the server's pool (never its event loop): the one that made the
# change, or one already delivering, which takes over the queue; deliveries are serialised, in
# commit order.


@hookspec
def conveyor_scheduler_task_changed(event: ev.SchedulerTaskChanged) -> None:
    """The central server moved a task's status, and the change is committed.

    ``task_id`` and ``family`` name the task, ``old_status`` and ``new_status`` are
    :class:`~conveyor.scheduler.policy.TaskStatus` values (``"PENDING"``, ``"RUNNING"``, …),
    ``cause`` why it moved, ``worker_id`` the worker concerned and ``attempt`` the task's
    latest attempt id. A change the state store did not take (and that was rolled back) is
    never delivered. Moves made by one request are delivered in the order they were made.
    """


@hookspec
def conveyor_scheduler_worker_seen(event: ev.SchedulerWorkerSeen) -> None:
    """A worker the central server did not know called it, or one it had declared gone.

    ``worker_id`` names it; ``returned`` is True for a worker that came back. Workers restored
    from the state store at start count as known (and so are not reported).
    """


@hookspec
def conveyor_scheduler_worker_lost(event: ev.SchedulerWorkerLost) -> None:
    """The central server declared a worker gone after ``worker_disconnect_delay`` of silence.

    ``running`` lists the tasks it was running; the ``conveyor_scheduler_task_changed``
    events of their failure (cause ``"worker gone"``) follow this one.
    """


@hookspec
def conveyor_scheduler_report_refused(event: ev.SchedulerReportRefused) -> None:
    """A worker's report of a task was refused as stale: the task was handed out again since.

    ``route`` is the call (``"task_done"`` / ``"task_failed"``), ``worker_id``, ``task_id``
    and ``attempt`` what the report said, ``reason`` the refusal the worker was answered (409).
    """


@hookspec
def conveyor_scheduler_ui_action(event: ev.SchedulerUiAction) -> None:
    """An operator's web-UI action (retry, re-enable, retry all failed) was applied.

    ``task_ids`` are the tasks it changed (at most the first 100), ``changed`` and ``skipped``
    the counts, ``who`` the UI session's name. Fires after the task-changed events it caused.
    """


@hookspec
def conveyor_scheduler_request(event: ev.SchedulerRequest) -> None:
    """The central server answered an HTTP request: its route, method, status code and time.

    Fires on the server's event loop, right after the answer is sent (also for the guard's
    own refusals), only when some plugin implements it; keep it cheap (count, observe) and
    never block in it. ``route`` is the route's declared path, never the raw one, so it is
    fit for a metric label.
    """


@hookspec
def conveyor_scheduler_routes(server: object) -> list[object] | None:
    """HTTP routes (``starlette.routing.Route`` objects) to serve from the central server.

    Not an observer: called once, when the server starts, with ``server``, a read-only
    :class:`~conveyor.server.view.SchedulerView` of it (tasks per state, live workers, its
    role) that the routes may read when they are called (typed ``object`` here, since the
    core installs without the server; an implementation may omit the argument); every
    implementation's list is mounted (a ``None`` return counts as none). The routes run
    behind the server's guard, so they get its Host/Origin checks, security headers, body
    limit and its bearer token when one is set (on every plugin route, whatever its path: a
    Prometheus ``bearer_token`` scrape of ``/metrics`` works). A route whose path a built-in
    route (or another plugin's) already serves, an item that is not a ``Route``, or an
    implementation that raises stops the start: one ``conveyor: error:`` line naming the
    plugin, exit code 2. Endpoints run on the server's event loop: one that blocks must run
    its work in a thread (``asyncio.to_thread``).
    """
