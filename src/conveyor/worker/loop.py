"""The worker loop: the glue between the pure state machine and the outside world.

``Worker.add()`` walks the graph (complete() checks, requires(), registration); ``Worker.run()``
asks the scheduler for work, hands it to the executor and turns every message that comes back
into a state transition, a hook and a scheduler update. All of that happens on the thread that
called ``run()``; executors may report from any thread through :meth:`Worker._post`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import random
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

import structlog

from .. import events as ev
from ..backends import GROUPS, build_backend, installed_names
from ..clock import SYSTEM, Clock
from ..config import Config, resolve_config
from ..core.machine import HAND_OUT, HandOut, on_hand_out, on_outcome
from ..core.states import TaskState, Trigger
from ..core.summary import WorkerSummary
from ..errors import (
    ConfigError,
    ConveyorError,
    SchedulerUnavailable,
    StaleReport,
    TaskLoadError,
)
from ..executors.base import (
    FAILED,
    NEEDS_DEPS,
    SUCCEEDED,
    AttemptRequest,
    Executor,
    ExecutorContext,
    Interrupted,
    Message,
    Note,
    Outcome,
    Suspended,
    complete_executor,
)
from ..executors.channel import truncate
from ..executors.deadline import DeadlinePolicy
from ..loaders import only_importing, task_loader
from ..parameters import allow_task_modules, task_modules_named
from ..plugins import (
    LOCAL,
    START_REFUSALS,
    AttemptHooks,
    LifecycleRelay,
    load_builtin_plugins,
    load_hook_plugins,
)
from ..protocol import (
    IDENTIFIER,
    MAX_BATCH,
    AddTasks,
    Annotate,
    AttemptEnd,
    AttemptOutcome,
    GetWork,
    NoteKind,
    Ping,
    Release,
    Statuses,
    StatusesAnswer,
    StopAttempt,
    TaskDone,
    TaskFailed,
    TaskSpec,
    TaskStatus,
    Work,
    WorkAnswer,
    WorkLeft,
    WorkLeftRequest,
)
from ..task import (
    Task,
    TaskDefaults,
    as_task,
    batch_of,
    load_task_class,
    requirements,
    take_id_style_in_use,
)
from ..tasklike import DEFAULT_LOADER, TaskLike
from ..transports.base import SchedulerTransport, TransportContext, as_transport
from .graph import Node
from .outbox import Outbox
from .report import RunReport, build_report
from .signals import install_signal_handlers
from .transitions import Transitions
from .walk import GraphWalk, requires_error

__all__ = ["PROCESS_EXECUTOR", "Worker"]

log = structlog.get_logger("conveyor.worker")
_ids = itertools.count(1)
_WAKE = object()
_SETTLED_EVERY = 10.0  # seconds between two looks at the submissions walked here
_CANCELLED = "a cancel on the scheduler"  # what stopped a cancelled attempt ("interrupted by …")


@dataclass(frozen=True, slots=True)
class _Stop:
    """Through the inbox, from the pinger: the scheduler said to stop these attempts."""

    attempts: tuple[StopAttempt, ...]


ATTEMPT_ENVIRONMENT = "conveyor_attempt_environment"
_NO_ENV: Mapping[str, str] = {}


class Worker:
    """Walks task graphs, registers them with a scheduler and runs what it is handed.

    Use it as a context manager::

        with conveyor.Worker() as worker:
            worker.add(MyTask(date="2026-11-30"))
            ok = worker.run()
    """

    def __init__(
        self,
        scheduler: SchedulerTransport | None = None,
        *,
        config: Config | str | os.PathLike[str] | None = None,
        worker_id: str | None = None,
        plugins: Sequence[object] = (),
        executor: Executor | str | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        """Resolve the configuration, load plugins and backends; PluginError/ConfigError.

        ``scheduler`` and ``executor`` may be ready backends (or, for the executor, a name);
        by default both are built from the configuration. ``clock`` is the time the worker
        reads and waits by (``conveyor.testing.FakeClock`` makes a run deterministic).
        """
        self.config = resolve_config(config)
        # the tasks this worker makes (dependencies, dynamic ones) take [tasks.*] from its file:
        # applied around its walks and its run, and in the constructing context until it closes
        # (tasks made in a `with Worker(...)` block); another worker's are not seen
        self._task_defaults = TaskDefaults(
            self.config.tasks, self.config.task_sources, self.config.worker.task_id_style
        )
        self._task_defaults.enter()
        # from here on a failure (a plugin that does not load, a notifier refused) undoes what
        # was done: the executor built is closed and the task defaults are put back
        try:
            self.settings = self.config.worker
            self.host = socket.gethostname()
            self.id = worker_id or f"{self.host}-{os.getpid()}-{next(_ids)}"
            _check_worker_id(self.id)
            self.clock = clock
            self.rand: Callable[[], float] = random.random  # jitter of the idle waits
            self.hooks = LifecycleRelay(START_REFUSALS)  # a notifier that cannot work: exit 2
            self._transit = Transitions(self.id, self.hooks, clock, self.host)
            self._register_plugins(plugins)
            self._transport = as_transport(
                scheduler if scheduler is not None else self._make_transport()
            )
            self._outbox = Outbox(
                self._transport, self.config.scheduler, clock.monotonic, self.rand
            )
            if executor is None or isinstance(executor, str):
                self._executor = self._make_executor(executor)
            else:
                self._executor = complete_executor(executor)
            self._isolator: Executor | None = None
            self._interrupted = ""
            self._unreachable = ""  # why the loop stopped: the scheduler did not answer get_work
            self._batched = False  # whether the scheduler takes results with get_work
            # the in-process scheduler, called directly (see _in_process): results are
            # reported as they come and work is asked for by a method call, no request built
            self._direct = False
            self._spread = 0.0  # seconds the last answer's attempts took to start, after the first
            self._env_generation = -1  # the plugins' generation _env_wanted was asked for
            self._env_wanted = False  # whether a plugin answers conveyor_attempt_environment
            self._contact = 0.0  # clock.monotonic() of the last call the scheduler answered
            self._lease = 0.0  # how long the scheduler keeps an attempt of a silent worker
            self._fenced_for = -1.0  # the _contact of the outage the attempts were stopped for
            self._unfenceable = 0.0  # a lease too short to fence in, once warned about
            self._running_at_interrupt = 0
            self._interrupt_log: dict[str, Any] = {}  # logged by the loop (see interrupt())
            self._graph: dict[str, Node] = {}
            self._in_run = False
            self._walker = GraphWalk(self.settings, self._graph, self._transit, self._register)
            self._requested: list[str] = []
            self._running: dict[str, Node] = {}
            self._stopping: set[str] = set()  # running ids the scheduler said to stop
            self._batches: dict[str, tuple[Node, ...]] = {}  # running batch task id -> members
            self._in_batches: dict[str, str] = {}  # member id -> its running batch task's id
            # whether get_work asks for batch hand-outs: an assistant always (it may be handed
            # anyone's), another worker once it registered a batchable task (until then the
            # field stays out, and an older scheduler never sees it)
            self._batches_asked = self.settings.assistant
            self._suspended: dict[str, Suspended] = {}  # run()s paused at a yield, by task id
            # submitted tasks walked here and not done yet -> the ids their walk registered
            self._submitted: dict[str, set[str]] = {}
            self._settled_at = -_SETTLED_EVERY  # when _let_go_settled last asked
            # an assistant names the loaders it can rebuild tasks with, when there are others
            # than conveyor's (left out, the server hands it conveyor tasks only, as before)
            self._loaders = _assistant_loaders() if self.settings.assistant else None
            self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
            self._loop_thread = threading.get_ident()
            self._draining = False
            self.report: RunReport | None = None
            # last: every plugin is registered and the backends are built (a failure above
            # configures nothing, so nothing is unconfigured either)
            self.hooks.configure(self.config)
        except BaseException:
            self._undo_init(built_executor=executor is None or isinstance(executor, str))
            raise

    # --- set-up ---------------------------------------------------------------------------

    def _undo_init(self, built_executor: bool) -> None:
        """Undo what a failed ``__init__`` changed: close the executor it built (a fork server's
        child process among them), and put back the task defaults (a plugin that refused its
        configuration undid its own set-up, and the relay unconfigured the others)."""
        made: list[Callable[[], object]] = []
        if built_executor and (executor := getattr(self, "_executor", None)) is not None:
            made.append(executor.close)
        for close in made:
            try:
                close()
            except Exception as exc:  # the failure being raised matters more
                log.warning("could not close what a failed worker set up", error=str(exc))
        self._task_defaults.leave()

    def _register_plugins(self, extra: Sequence[object]) -> None:
        # conveyor's own first (the summary, the logs, the notifier dispatch), then the others
        builtin = load_builtin_plugins(self.config, relay=self.hooks)
        loaded, _failures = load_hook_plugins(self.config.plugins)
        self._entry_point_plugins = frozenset(s.name for s in loaded if s.distribution != LOCAL)
        self._attempt_hooks: dict[tuple[str, ...], tuple[AttemptHooks | None, tuple[str, ...]]]
        self._attempt_hooks = {}
        for source in (*builtin, *loaded):
            self.hooks.register(source.plugin, source.name)
        for index, plugin in enumerate(extra):
            name = getattr(plugin, "name", None) or f"{type(plugin).__name__}-{index}"
            self.hooks.register(plugin, str(name))

    def _make_transport(self) -> SchedulerTransport:
        config = self.config
        transport: SchedulerTransport = build_backend(
            "conveyor.schedulers",
            config.scheduler.transport,
            config,
            lambda settings: TransportContext(config.scheduler, settings),
        )
        return transport

    def _make_executor(self, name: str | None = None) -> Executor:
        name = name or self.settings.executor
        if name == "auto":
            name = "inline" if self.settings.workers == 1 else PROCESS_EXECUTOR
        workers, kill_grace = self.settings.workers, self.settings.kill_grace
        logging = self.config.logging
        executor = build_backend(
            "conveyor.executors",
            name,
            self.config,
            # log format "auto" is decided in the child, on the same stderr
            lambda settings: ExecutorContext(
                workers, kill_grace, settings, logging.level, logging.format, clock=self.clock
            ),
        )
        return complete_executor(executor)

    def _executor_for(self, timeout: float) -> Executor:
        """The configured executor, or — for a timeout it cannot enforce — a process one
        (the deadline policy decides which)."""
        if not DeadlinePolicy.needs_isolation(self._executor, timeout):
            return self._executor
        if self._isolator is None:
            self._isolator = self._make_executor(PROCESS_EXECUTOR)
        return self._isolator

    def _prepare_isolator(self) -> None:
        """Create the process executor for timed tasks now, before run() starts its threads,
        if a task of the graph will need it: a fork server made while the worker has one
        thread is a fork of it and knows every task class, ``__main__``'s included."""
        if self._isolator is not None:
            return
        timeouts = [self.settings.timeout]
        if not self._executor.can_kill:  # (else the timeouts are not looked at)
            timeouts += [(n.policy or n.task_policy()).timeout or 0 for n in self._graph.values()]
        if DeadlinePolicy.any_needs_isolation(self._executor, timeouts):
            self._isolator = self._make_executor(PROCESS_EXECUTOR)

    def __enter__(self) -> Worker:
        """Enter the context: the worker is ready."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leave the context: wait for and release the executor."""
        self.close()

    def close(self) -> None:
        """Release the executors (waits for attempts still running), unconfigure the plugins
        (``conveyor_unconfigure``, with ``[notifiers] flush_timeout``: the notifier dispatch
        delivers what is queued within it) and finish every run() left suspended at a yield."""
        try:
            self._executor.close()
            if self._isolator is not None:
                self._isolator.close()
        finally:  # (an interrupt while waiting must not lose the plugins' last flush)
            try:
                self.hooks.unconfigure(self.config.notifiers.flush_timeout)
                while self._suspended:
                    self._suspended.popitem()[1].close()
            finally:
                self._task_defaults.leave()

    def add(self, task: TaskLike) -> bool:
        """Walk ``task``'s graph and register it; False if any task in it is broken.

        ``task`` is a :class:`conveyor.Task`, any other :class:`~conveyor.TaskLike`, or an
        object an installed task loader adapts (a ``luigi.Task`` with the luigi plugin)."""
        adapted = as_task(task)
        if adapted is None:
            raise TypeError(
                f"Worker.add() takes a task (conveyor.Task or conveyor.TaskLike: task_id, "
                "task_family, task_module, task_params, task_policy(), complete(), "
                f"requires(), run()), got {type(task).__name__}"
            )
        task = adapted
        with self._task_defaults.applied():
            if isinstance(task, Task):  # (made before this worker's config set its id style)
                take_id_style_in_use(task)
            self._requested.append(task.task_id)
            return self._walker.walk([task])

    def _register(self, specs: list[TaskSpec]) -> None:
        """Registration's one path: to the scheduler now before the run; during it through the
        outbox, which survives an outage and keeps registrations in order with results."""
        if not self._batches_asked:
            for spec in specs:
                if spec.batch is not None:
                    self._batches_asked = True  # (asked for from now on: see _loop)
                    break
        if self._in_run:
            self._outbox.send(AddTasks(self.id, tuple(specs), self.settings.assistant))
        else:
            self._transport.call(AddTasks(self.id, tuple(specs), self.settings.assistant))

    def tasks(self) -> dict[str, TaskLike]:
        """Every task of this worker's graph, by task id."""
        return {task_id: node.task for task_id, node in self._graph.items()}

    # --- running --------------------------------------------------------------------------

    def run(self) -> bool:
        """Run until nothing is left for this worker; True iff everything it ran succeeded."""
        self._loop_thread = threading.get_ident()
        self._draining = False
        self._interrupted = ""
        self._unreachable = ""
        self._running_at_interrupt = 0
        self._interrupt_log = {}
        self._contact = self.clock.monotonic()
        self._direct = _in_process(self._transport)
        started = self.clock.time()  # the run's duration in the summary: stopped - started
        # the fork server first: plugins (the notifier dispatch) start threads on worker_started
        self._prepare_isolator()
        self.hooks.fire(ev.WorkerStarted(worker_id=self.id, timestamp=started, host=self.host))
        stop_ping = self._start_pinger()
        restore = install_signal_handlers(self) if self.settings.install_signal_handlers else None
        self._in_run = True
        try:
            with self._task_defaults.applied():  # (run() may be called from another thread)
                self._loop()
        finally:
            self._in_run = False
            if restore is not None:
                restore()
            stop_ping.set()
        stopped = self.clock.time()  # the worker_stopped event's timestamp too
        self.report = build_report(
            self._graph,
            self._requested,
            self._transport,
            self._interrupted,
            self._outbox.unreported(),
            self._running_at_interrupt,
            unreachable=self._unreachable,
            duration=max(0.0, stopped - started),
            render=lambda facts: self.hooks.summary(  # conveyor.summary's, unless replaced
                WorkerSummary(worker_id=self.id, timestamp=stopped, host=self.host, facts=facts)
            ),
        )
        self._release()
        self.hooks.fire(
            ev.WorkerStopped(
                worker_id=self.id,
                timestamp=stopped,
                host=self.host,
                ok=self.report.ok,
                summary=self.report.summary,
            )
        )
        return self.report.ok

    def _release(self) -> None:
        """Tell the scheduler this run no longer needs its tasks, so that a worker id living
        on through many runs does not keep them all (best effort: a transport that fails to,
        or a scheduler out of reach, leaves them to be pruned when the worker is gone)."""
        if self._unreachable or self._outbox.pending:
            return
        # the tasks of this worker's graph only: other runs sharing the worker id (several
        # Workers with one worker_id) keep theirs
        task_ids = tuple(self._graph)
        if not task_ids:
            return
        try:
            self._transport.call(Release(self.id, task_ids))
        except Exception as exc:  # any transport's failure: the run's result stands
            error = str(exc) if isinstance(exc, ConveyorError) else f"{type(exc).__name__}: {exc}"
            log.info("could not release this run's tasks at the scheduler", error=error)

    def _loop(self) -> None:
        slots = max(1, self.settings.workers)
        lingered = False  # whether the next ask has waited _LINGER for more results already
        inbox, outbox = self._inbox, self._outbox
        running, in_batches = self._running, self._in_batches
        settings = self.settings
        # the in-process scheduler (its ``in_process`` says so): asked by a plain method call,
        # with nothing carried (each result was reported as it came, see _report_done)
        direct = self._direct
        asked: GetWork | None = None  # the last request, asked again while nothing changed
        answer: WorkAnswer
        while True:
            if self._interrupt_log:
                log.warning("interrupted; stopping running tasks", **self._interrupt_log)
                self._interrupt_log = {}
            if not inbox.empty():
                self._drain_inbox()
            if not outbox.flush():
                if outbox.expired():
                    if not running:
                        log.error("gave up reporting to the scheduler")
                        return
                    self._wait_for_message(None)  # running attempts finish; results wait too
                else:
                    self._wait_for_message(outbox.seconds_to_retry())
                continue
            if self._draining:
                outbox.send_held()
                if not running:
                    return
                self._wait_for_message(None)
                continue
            if len(running) >= slots:
                outbox.send_held()
                self._wait_for_message(None)
                continue
            if not lingered and self._batched and running and self._should_linger(slots):
                lingered = True
                # attempts handed out together end about as far apart as they were started
                # (a fork server starts them one after the other): wait that much longer
                self._wait_for_message(_LINGER + self._spread)
                continue
            lingered = False
            free = min(slots - len(running), MAX_BATCH)
            if direct:
                busy = (*running, *in_batches) if in_batches else tuple(running)
                try:
                    answer = self._transport.get_work(  # type: ignore[attr-defined]
                        self.id,
                        settings.assistant,
                        busy,
                        self._loaders,
                        free,
                        (),
                        (),
                        settings.labels,
                        self._batches_asked,
                    )
                except SchedulerUnavailable as exc:  # (never, in-process: as below all the same)
                    if not self._unanswered(exc):
                        return
                    continue
                self._contact = self.clock.monotonic()
                done: tuple[TaskDone, ...] = ()
                failed: tuple[TaskFailed, ...] = ()
            else:
                if self._batched:
                    done, failed = outbox.take_held(_CARRIED_TEXT)
                else:  # (a scheduler that stopped taking them: after a fail-over, say)
                    outbox.send_held()
                    done, failed = (), ()
                # (results still held are of attempts the scheduler must not take back)
                if in_batches or outbox.holding:
                    busy = (*running, *in_batches, *outbox.held_task_ids())
                else:
                    busy = tuple(running)
                if (  # (asked again as it is only if it carried nothing either)
                    asked is None
                    or done
                    or failed
                    or asked.done
                    or asked.failed
                    or asked.running != busy
                    or asked.max_tasks != free
                    or asked.batches != self._batches_asked
                ):
                    asked = GetWork(
                        self.id,
                        settings.assistant,
                        busy,
                        self._loaders,
                        free,
                        done,
                        failed,
                        settings.labels,  # (always: a run without labels has none)
                        batches=self._batches_asked,
                    )
                try:
                    answer = self._transport.call(asked)
                    self._contact = self.clock.monotonic()
                except SchedulerUnavailable as exc:
                    outbox.requeue((*done, *failed), exc)
                    if done or failed:
                        continue  # the outbox retries them until rpc_give_up_after, as any report
                    if not self._unanswered(exc):
                        return
                    continue
                except Exception as exc:
                    if not (done or failed):
                        raise
                    # refused with the results it carried (a scheduler older than batches after
                    # a fail-over): they go back, and from now on by their own routes
                    outbox.unhold((*done, *failed))
                    self._batched = False
                    log.warning(
                        "the scheduler refused results carried by get_work; sending them by "
                        "their own routes",
                        error=str(exc),
                    )
                    continue
                self._batched = answer.batched
            if answer.stop:
                self._stop_attempts(answer.stop)
            for refused in answer.refused:
                log.warning(
                    "the scheduler refused a stale report; dropped",
                    task_id=refused.task_id,
                    error=refused.error,
                )
            work = answer.work
            if work is not None:
                self._start(work)
                if answer.more:
                    first = self.clock.monotonic()
                    for more in answer.more:
                        self._start(more)
                    self._spread = min(_LINGER_MORE, self.clock.monotonic() - first)
                else:
                    self._spread = 0.0  # (one attempt started: nothing staggered)
            elif outbox.holding:
                continue  # results the last ask had no room for go with the next
            elif running and settings.assistant and self.clock.blocks:
                # an assistant's work comes from elsewhere (submitted, other workers' graphs),
                # not only from its own attempts' ends: ask again with a slot still free
                self._wait_for_message(settings.wait_interval)
            elif running:
                self._wait_for_message(None)
            elif not self._keep_waiting():
                return
            else:
                self._let_go_settled()
                pause = settings.wait_interval + settings.wait_jitter * self.rand()
                self._wait_for_message(pause)

    def _unanswered(self, exc: SchedulerUnavailable) -> bool:
        """After a ``get_work`` the scheduler did not answer (``exc``), carrying nothing: wait
        for what is running, or (``keep_alive``) for the scheduler; False: the loop ends."""
        log.error("scheduler unreachable; asking for no more work", error=str(exc))
        if self._running:
            self._wait_for_message(None)
        elif self.settings.keep_alive:  # a long-running worker waits for it to return
            self._wait_for_message(self.settings.wait_interval)
        else:
            self._unreachable = str(exc)
            return False
        return True

    def _should_linger(self, slots: int) -> bool:
        """Whether to wait a little (:data:`_LINGER`) for more attempts to end before asking:
        when most slots are still busy and the results held would otherwise go one by one, so
        that one request carries several (a batch-taking scheduler only; never on a fake
        clock, whose time a wait would move)."""
        busy = len(self._running)
        return (
            self._batched
            and busy > 0
            and 2 * (slots - busy) < slots
            and self._outbox.holding
            and self.clock.blocks
        )

    def _report_done(self, node: Node, explanation: str) -> None:
        """Report the success of ``node``'s attempt: to the in-process scheduler by its method,
        at once (unless reports wait in the outbox: behind them), else as :meth:`_report`."""
        if self._direct and not self._outbox.pending:
            try:
                self._transport.task_done(  # type: ignore[attr-defined]
                    self.id, node.task_id, node.hand_out, explanation
                )
            except StaleReport as exc:  # (as the outbox would: another attempt owns the task)
                log.warning("the scheduler refused a stale report; dropped", error=str(exc))
            return
        self._report(TaskDone(self.id, node.task_id, node.hand_out, explanation))

    def _report(self, result: TaskDone | TaskFailed) -> None:
        """Report an attempt's result: with the next ``get_work`` to a scheduler that takes
        reports so (its answers say ``batched``), else at once by the result's own route."""
        if self._batched:
            self._outbox.hold(result)
        else:
            self._outbox.send(result)

    def _keep_waiting(self) -> bool:
        if not self.settings.keep_alive:
            return False
        if self.settings.assistant:
            return True  # a long-running assistant waits for work until it is stopped
        try:
            left: WorkLeft = self._transport.call(WorkLeftRequest(self.id))
        except SchedulerUnavailable:
            return True  # keep_alive: wait for the scheduler to come back
        if self.settings.count_uniques:
            return left.unique_pending > 0
        return left.pending + left.running_elsewhere > 0

    def _wait_for_message(self, timeout: float | None) -> None:
        """Handle the next executor message, waiting at most ``timeout`` (None: until one)."""
        try:
            if timeout is None or self.clock.blocks:
                message = self._inbox.get(timeout=timeout)
            else:  # a fake clock: let the time pass at once if nothing is waiting
                message = self._inbox.get_nowait()
        except queue.Empty:
            if timeout is not None and not self.clock.blocks:
                self.clock.sleep(timeout)
            return
        if message is not _WAKE:
            self._handle(message)

    def _drain_inbox(self) -> None:
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return
            if message is not _WAKE:
                self._handle(message)

    def _post(self, message: Message) -> None:
        """Deliver an executor message: now on the loop thread, else through the inbox."""
        if threading.get_ident() == self._loop_thread:
            if type(message) is Outcome:  # (the usual message, without _handle's tests)
                self._on_outcome(message)
            else:
                self._handle(message)
        else:
            self._inbox.put(message)

    def _start(self, work: Work) -> None:
        batch = work.batch
        if batch and len(batch) > 1:
            self._start_batch(work)
            return
        if self._interrupted:
            # the signal came while get_work was on its way: never start it; report it
            # failed like the attempts the interruption stopped
            explanation = f"not started: the worker was interrupted by {self._interrupted}"
            self._outbox.send(
                TaskFailed(self.id, work.task_id, explanation, work.attempt, AttemptEnd.INTERRUPTED)
            )
            return
        if work.walk:  # a submitted task whose graph nobody walked: walk it first
            self._walk_submitted(work)
            return
        task_id = work.task_id
        running = self._running
        if task_id in running:  # (a batch's own task: ",".join made a real id)
            log.warning(
                "scheduler handed out a task whose id a running batch has; it waits for it",
                task_id=task_id,
            )
            return
        node = self._graph.get(task_id)
        decision = HAND_OUT.get(None if node is None else node.state, HandOut.IGNORE)
        if node is None or decision is not HandOut.START:
            node = self._not_started(work, node, decision)
            if node is None:
                return
        node.attempts += 1
        node.hand_out = work.attempt
        self._lease = work.lease or self._lease
        policy = node.policy or node.task_policy()
        timeout = float(self.settings.timeout if policy.timeout is None else policy.timeout)
        # (no timeout: the configured executor, whatever it can enforce; see _executor_for)
        executor = self._executor_for(timeout) if timeout else self._executor
        running[task_id] = node
        node.executor = executor.name
        transit = self._transit
        event_cls = transit.move(node, Trigger.STARTED)
        started = (
            None
            if event_cls is None
            else transit.fire(node, event_cls, executor=node.executor, attempt=node.attempts)
        )
        hooks = self.hooks
        if self._env_generation != hooks.generation:  # (asked once per set of plugins)
            self._env_generation = hooks.generation
            self._env_wanted = hooks.wants(ATTEMPT_ENVIRONMENT)
        if self._env_wanted:
            env, plugins, attempt_hooks = self._attempt_plugins(node, started)
        else:
            env, plugins, attempt_hooks = _NO_ENV, (), None
        deps = node.deps
        if deps:
            graph = self._graph
            known = tuple([graph[d].task for d in deps if d in graph])  # (a list: faster)
        else:
            known = ()
        limit = policy.memory_limit  # (the task's memory_limit)
        request = AttemptRequest(
            node.task,
            task_id,
            node.attempts,
            timeout,
            self.settings.check_complete_on_run,
            known if len(known) == len(deps) else None,
            resume := self._resumable(node, executor) if self._suspended else None,
            env,
            plugins,
            attempt_hooks,
            memory_limit=self.settings.memory_limit if limit is None else limit,
        )
        if self._interrupted:  # ... or while this attempt was being set up (its start hooks)
            if resume is not None:
                resume.close()
            self._post(
                Outcome(
                    task_id,
                    FAILED,
                    error=f"interrupted by {self._interrupted}",
                    exception_type="Interrupted",
                    interrupted=True,
                )
            )
            return
        if resume is not None and node.notes:
            # the resumed run() set these before its yield; the hand-out cleared them
            with contextlib.suppress(SchedulerUnavailable):
                for kind, value in node.notes.items():
                    self._transport.call(Annotate(task_id, NoteKind(kind), value))
        executor.start(request, self._post)

    def _not_started(self, work: Work, node: Node | None, decision: HandOut) -> Node | None:
        """A hand-out whose task is not simply started (``decision``, from ``node``'s state):
        the node adopted (to start), or None when the hand-out ends here (adoption refused,
        re-checked, walked afresh, or in no state to run)."""
        if decision is HandOut.ADOPT:
            node = self._adopt(work)
        if node is None:
            return None  # adoption refused it (reported failed)
        if decision is HandOut.RECHECK:
            # the walk registers DONE, or PENDING to be handed out and run again
            self._walker.walk([node.task], recheck=(node.task_id,))
            return None
        if decision is HandOut.IGNORE:
            if node.state is TaskState.UNKNOWN:  # broken here, handed out all the same: walked
                self._walk_submitted(work)  # afresh, which ends the hand-out either way
                return None
            log.warning(
                "scheduler handed out a task in an unexpected state",
                task_id=node.task_id,
                state=node.state.name,
            )
            return None
        return node

    def _start_batch(self, work: Work) -> None:
        """Run a batch hand-out (:attr:`Work.batch`) as one attempt: the task made of its
        members (:func:`conveyor.task.batch_task`), under any executor; each member is
        started here, and ends as the batch does (:meth:`_on_batch_outcome`)."""
        members: list[Node] = []
        for member in work.batch:
            one = replace(work, task_id=member.task_id, params=member.params, batch=())
            node = self._graph.get(member.task_id)
            decision = on_hand_out(None if node is None else node.state)
            if decision is HandOut.ADOPT:
                node = self._adopt(one)
            if node is None:
                continue  # adoption refused it (reported failed)
            if decision is HandOut.RECHECK:  # complete here: the walk registers it DONE
                self._walker.walk([node.task], recheck=(node.task_id,))
            elif decision is HandOut.IGNORE:
                log.warning(
                    "scheduler handed out a task in an unexpected state",
                    task_id=node.task_id,
                    state=node.state.name,
                )
            elif any(m.task_id == node.task_id for m in members):
                continue  # (named twice)
            else:
                members.append(node)
        if len(members) <= 1 or self._interrupted:
            for node in members:  # (one left: an attempt of its own, as any task's)
                self._start(replace(work, task_id=node.task_id, params=node.params, batch=()))
            return
        error = ""
        try:
            task = batch_of([node.task for node in members])
            if task.task_id in self._running:
                raise TaskLoadError(f"the batch's task {task.task_id} is running already")
        except Exception as exc:  # a batch_method that raised, or a value it made refused
            error = str(exc) if isinstance(exc, ConveyorError) else f"{type(exc).__name__}: {exc}"
            error = f"the batch of {len(members)} tasks could not be made: {error}"
        if error:  # each member started and failed, as if the batch's attempt had failed
            log.error("refused batch", task_id=work.task_id, error=error)
            for node in members:
                node.attempts += 1
                node.hand_out = work.attempt
                self._transit(
                    node, Trigger.STARTED, executor=self._executor.name, attempt=node.attempts
                )
            failed = Outcome(work.task_id, FAILED, error=error, exception_type="BatchNotMade")
            self._on_batch_outcome(tuple(members), failed)
            return
        runner = Node(task, task.task_id, task.task_params)
        runner.attempts, runner.hand_out = 1, work.attempt
        self._lease = work.lease or self._lease
        timeout = self._timeout_of(runner)
        executor = self._executor_for(timeout)
        runner.executor = executor.name
        first: ev.Event | None = None
        for node in members:
            suspended = self._suspended.pop(node.task_id, None)
            if suspended is not None:  # (a run() paused alone: the batch runs from the top)
                suspended.close()
            node.attempts += 1
            node.hand_out = work.attempt
            node.executor = executor.name
            self._in_batches[node.task_id] = runner.task_id
            started = self._transit(
                node, Trigger.STARTED, executor=node.executor, attempt=node.attempts
            )
            first = first or started
        self._running[runner.task_id] = runner
        self._batches[runner.task_id] = tuple(members)
        env, plugins, hooks = self._attempt_plugins(runner, first)
        request = AttemptRequest(
            task,
            runner.task_id,
            runner.attempts,
            timeout,
            self.settings.check_complete_on_run,
            None,
            None,
            env,
            plugins,
            hooks,
            memory_limit=self._memory_limit_of(runner),
        )
        log.info("batch started", task_id=runner.task_id, members=len(members))
        executor.start(request, self._post)

    def _on_batch_outcome(self, members: tuple[Node, ...], outcome: Outcome) -> None:
        """End each member of a batch as its one attempt ended: done, or failed alike (a
        batch's run() may not yield dependencies: that fails it)."""
        for node in members:
            self._in_batches.pop(node.task_id, None)
            self._stopping.discard(node.task_id)
        if outcome.suspended is not None:
            outcome.suspended.close()
        if outcome.kind is SUCCEEDED:
            text = truncate(outcome.explanation)
            for node in members:
                node.last, node.notes = None, None
                node.succeeded = True
                node.found_complete = outcome.found_complete
                self._report_done(node, text)
                ended = {**_ended_fields(node, outcome), "explanation": text}
                if outcome.found_complete:
                    self._transit(node, Trigger.SUCCEEDED, skipped=True, **ended)
                else:
                    self._transit(node, Trigger.SUCCEEDED, **ended)
            for node in members:
                if node.task_id in self._submitted:
                    self._let_go(node.task_id)
            return
        if outcome.kind is NEEDS_DEPS:
            names = ", ".join(repr(dep) for dep in outcome.new_deps[:3])
            outcome = replace(
                outcome,
                kind=FAILED,
                error=f"the run() of a batch yielded dependencies ({names}); a batch task's "
                "run() may not yield (declare them in requires())",
                exception_type="BatchYielded",
                new_deps=(),
            )
        trigger = on_outcome(outcome.kind).trigger
        error = truncate(outcome.error or outcome.kind)
        how, no_retry = _ended(outcome), _not_retried(members[0].task, outcome)
        for node in members:
            node.last, node.notes, node.error = outcome, None, error
            self._report(TaskFailed(self.id, node.task_id, error, node.hand_out, how, no_retry))
            fields = _failure_fields(trigger, error, outcome)
            self._transit(node, trigger, **fields, **_ended_fields(node, outcome))

    def _attempt_plugins(
        self, node: Node, started: ev.Event | None
    ) -> tuple[Mapping[str, str], tuple[str, ...], AttemptHooks | None]:
        """What the ``conveyor_attempt_environment`` plugins give the attempt of ``node`` just
        ``started`` (its TaskStarted event, if one was built): its variables, the entry-point
        plugins to load where it runs, and (for the in-process executors) the worker's own
        attempt hooks of the plugins that answered."""
        if not self.hooks.wants(ATTEMPT_ENVIRONMENT):
            return _NO_ENV, (), None
        if started is None:
            started = self._transit.event(
                node, ev.TaskStarted, executor=node.executor, attempt=node.attempts
            )
        env, answered = self.hooks.attempt_environment(started)
        if not answered:
            return env or _NO_ENV, (), None
        made = self._attempt_hooks.get(answered)
        if made is None:  # (the same plugins answer attempt after attempt: made once)
            hooks = AttemptHooks(self.hooks, answered, True)
            loadable = tuple(name for name in answered if name in self._entry_point_plugins)
            made = self._attempt_hooks[answered] = (hooks if hooks else None, loadable)
        return env, made[1], made[0]

    def _resumable(self, node: Node, executor: Executor) -> Suspended | None:
        """The paused run() of ``node`` if ``executor`` is the one that paused it, else None
        (a paused run() handed to another executor is closed: that one starts from the top)."""
        paused = self._suspended.pop(node.task_id, None)
        if paused is not None and executor is not self._executor:
            paused.close()
            return None
        return paused

    def _memory_limit_of(self, node: Node) -> int:
        limit = (node.policy or node.task_policy()).memory_limit  # (the task's memory_limit)
        return self.settings.memory_limit if limit is None else limit

    def _timeout_of(self, node: Node) -> float:
        timeout = (node.policy or node.task_policy()).timeout  # (the task's worker_timeout)
        if timeout is not None:
            return float(timeout)
        return float(self.settings.timeout)

    def _adopt(self, work: Work) -> Node | None:
        """A task another worker registered (assistant mode): load it from task_modules only,
        and learn its requirements (re-checked before it runs, like every task's)."""
        try:
            task = self._load_foreign(work)
        except Exception as exc:  # a refused module, bad parameters, or an __init__ that raised
            self._refuse(work, exc)
            return None
        node = Node(task, work.task_id, ev.Params(work.params))
        self._graph[work.task_id] = node
        try:
            deps = requirements(task)
        except Exception as exc:  # requires() is user code: broken, as the walk would say
            node.error = requires_error(task, exc)
            self._transit(node, Trigger.BROKEN, error=node.error, phase="requires")
            spec = self._walker.spec(node, TaskStatus.UNKNOWN, False, explanation=node.error)
            self._outbox.send(AddTasks(self.id, (spec,), self.settings.assistant))
            return None
        node.deps = tuple(dep.task_id for dep in deps)
        self._transit(node, Trigger.ADOPTED, dependencies=node.deps, dynamic=False)
        return node

    def _walk_submitted(self, work: Work) -> None:
        """A hand-out to walk rather than run (:attr:`Work.walk`: a submitted task whose graph
        no worker walked; or one this worker had found broken): walk its graph as
        ``conveyor run`` would, re-checking the tasks of it this worker knew already (an
        output found earlier may be gone since), and register what it needs. A task new here
        is loaded from task_modules only. The registration of the task ends the hand-out (it
        is sent even when the walk had nothing new to say), and the scheduler hands the task
        out again once its dependencies are done, or takes it as done if it is complete."""
        node = self._graph.get(work.task_id)
        if node is None:
            try:
                task = self._load_foreign(work)
            except Exception as exc:  # a refused module, bad parameters, an __init__ that raised
                self._refuse(work, exc)
                return
        else:
            task = node.task
            if node.state is TaskState.UNKNOWN:  # broken when last looked at: afresh
                del self._graph[work.task_id]
        log.info("walking a handed-out task", task_id=work.task_id)
        registered: set[str] = set()
        walker = self._walker

        def register(specs: list[TaskSpec]) -> None:
            registered.update(spec.task_id for spec in specs)
            self._register(specs)

        walker.register = register
        try:
            walker.walk([task], recheck=(work.task_id, *self._graph))
        finally:
            walker.register = self._register
        node = self._graph[work.task_id]
        if work.task_id not in registered:  # (known here, waiting for its dependencies)
            self._register([walker.spec(node, TaskStatus.PENDING, not node.external)])
        if work.walk:
            self._submitted.setdefault(work.task_id, set()).update(registered)
            if node.state is TaskState.COMPLETE:
                self._let_go(work.task_id)

    def _let_go_settled(self) -> None:
        """Let go of the submissions walked here that settled elsewhere: run by another
        assistant (``DONE``), cancelled or disabled, or no longer known to the scheduler.
        Asked at most every :data:`_SETTLED_EVERY` seconds, while idle."""
        now = self.clock.monotonic()
        if not self._submitted or now < self._settled_at + _SETTLED_EVERY:
            return
        self._settled_at = now
        roots = tuple(self._submitted)
        try:
            answer: StatusesAnswer = self._transport.call(Statuses(roots))
        except SchedulerUnavailable:
            return  # (asked again later)
        known = answer.statuses
        for root in roots:
            if known.get(root) in (None, TaskStatus.DONE, TaskStatus.DISABLED):
                self._let_go(root)

    def _let_go(self, root: str) -> None:
        """A submitted task walked here is done: release the tasks its walks registered
        that no other pending submission of this worker needs (the scheduler may prune them
        ``remove_delay`` later) and forget those not running, so that a long-lived assistant
        holds only what is in progress, however much is submitted to it."""
        mine = self._submitted.pop(root, None)
        if not mine:
            return
        for others in self._submitted.values():
            mine -= others
        busy = (*self._running, *self._in_batches, *self._suspended)
        mine.difference_update(busy)
        if not mine:
            return
        self._outbox.send(Release(self.id, tuple(sorted(mine))))
        for task_id in mine:
            self._graph.pop(task_id, None)

    def _refuse(self, work: Work, exc: Exception) -> None:
        """Report a hand-out whose task could not be loaded here failed, with the reason."""
        error = str(exc) if isinstance(exc, ConveyorError) else f"{type(exc).__name__}: {exc}"
        self._outbox.send(TaskFailed(self.id, work.task_id, error, work.attempt))
        log.error("refused task", task_id=work.task_id, error=error)

    def _load_foreign(self, work: Work) -> TaskLike:
        allowed = self.settings.task_modules
        if not _allowed(work.module, allowed):
            raise TaskLoadError(
                f"task {work.task_id} is from module {work.module!r}, which is not in "
                f"[worker] task_modules ({', '.join(allowed) or 'empty'}); refused without "
                "importing it"
            )
        if work.loader != DEFAULT_LOADER:  # another framework's task (a luigi.Task): its loader,
            # which may import only task_modules to resolve what the parameters name
            with only_importing(lambda module: _allowed(module, allowed)):
                loader = task_loader(work.loader)
                task: TaskLike = loader.load(work.module, work.family, work.params)
            self._check_rebuilt_id(work, task)
            return task
        cls = load_task_class(work.module, work.family)
        # a task-class value (RangeDaily's `of`) may import its module if task_modules allows
        named = task_modules_named(cls.parameters(), work.params)
        with allow_task_modules(m for m in named if _allowed(m, allowed)):
            task = cls.from_str_params(work.params)
        self._check_rebuilt_id(work, task)
        return task

    @staticmethod
    def _check_rebuilt_id(work: Work, task: TaskLike) -> None:
        if task.task_id != work.task_id:
            raise TaskLoadError(
                f"task {work.task_id} rebuilt here has the id {task.task_id}: the worker that "
                "registered it and this one make ids differently (give both the same [worker] "
                "task_id_style and [tasks] tables)"
            )

    # --- messages from executors ----------------------------------------------------------

    def _handle(self, message: Message | _Stop) -> None:
        if isinstance(message, _Stop):
            self._stop_attempts(message.attempts)
        elif isinstance(message, Note):
            self._on_note(message)
        else:
            self._on_outcome(message)

    def _stop_attempts(self, attempts: Sequence[StopAttempt]) -> None:
        """Stop the running attempts the scheduler names (their tasks were cancelled) as a
        SIGTERM would, through the executor running each; they end failed (interrupted). An
        executor that cannot stop one attempt (``inline``, ``thread``) lets it run to its end;
        the scheduler keeps the task cancelled either way."""
        for stop in attempts:
            node = self._running.get(stop.task_id)
            if node is None and stop.task_id in self._in_batches:
                if stop.task_id not in self._stopping:
                    self._stopping.add(stop.task_id)  # (said once)
                    log.warning(
                        "task cancelled on the scheduler; it runs in a batch with others, "
                        "which runs to its end",
                        task_id=stop.task_id,
                    )
                continue
            if node is None or node.hand_out != stop.attempt or node.task_id in self._stopping:
                continue  # (ended meanwhile, or already being stopped)
            self._stopping.add(node.task_id)
            runner = next(
                (e for e in (self._executor, self._isolator) if e and e.name == node.executor),
                None,
            )
            stop_one = getattr(runner, "stop_attempt", None)
            if stop_one is not None and stop_one(node.task_id, _CANCELLED):
                log.warning(
                    "task cancelled on the scheduler; stopping its attempt", task_id=node.task_id
                )
            else:
                log.warning(
                    "task cancelled on the scheduler; this executor cannot stop one attempt, "
                    "so it runs to its end",
                    task_id=node.task_id,
                    executor=node.executor,
                )

    def _on_note(self, note: Note) -> None:
        node = self._running.get(note.task_id)
        if node is None:
            return
        # (a batch's note is each member's)
        for one in self._batches.get(note.task_id, (node,)):
            trigger, field = _NOTES[note.kind]
            self._transit(one, trigger, **{field: note.value})
            one.notes = one.notes or {}
            one.notes[note.kind] = note.value
            # a lost status message is not worth holding the run for
            with contextlib.suppress(SchedulerUnavailable):
                self._transport.call(Annotate(one.task_id, NoteKind(note.kind), note.value))

    def _on_outcome(self, outcome: Outcome) -> None:
        task_id = outcome.task_id
        node = self._running.pop(task_id, None)
        if node is None:
            return
        if self._stopping:
            self._stopping.discard(task_id)
        if self._batches:
            members = self._batches.pop(task_id, None)
            if members is not None:
                self._on_batch_outcome(members, outcome)
                return
        if outcome.suspended is None:
            node.notes = None  # only a run() that will resume needs them again
        if outcome.kind is SUCCEEDED:  # (on_outcome's trigger for a success, whatever is missing)
            node.last = None  # (kept for a failure only: the summary says how it ended)
            node.succeeded = True
            node.found_complete = found = outcome.found_complete
            text = outcome.explanation
            if text:
                text = truncate(text)
            self._report_done(node, text)
            event_cls = self._transit.move(node, Trigger.SUCCEEDED)
            if event_cls is not None:
                ended = {**_ended_fields(node, outcome), "explanation": text}
                if found:
                    self._transit.fire(node, event_cls, skipped=True, **ended)
                else:
                    self._transit.fire(node, event_cls, **ended)
            if self._submitted and task_id in self._submitted:
                self._let_go(task_id)
            return
        # kept for the summary, which says how a failed task ended
        node.last = outcome
        yielded = outcome.kind is NEEDS_DEPS
        missing = self._ran_and_incomplete(outcome.new_deps) if yielded else outcome.missing
        limit = self.settings.max_reschedules
        decision = on_outcome(outcome.kind, missing, node.reschedules, limit)
        trigger = decision.trigger
        if missing:
            node.reschedules = dict(decision.reschedules)
        if trigger is Trigger.DEPS_YIELDED:
            self._on_new_deps(node, outcome.new_deps, outcome.suspended)
            return
        if yielded:  # given up on a yielded dependency that stays incomplete
            if outcome.suspended is not None:
                outcome.suspended.close()
            error = self._still_incomplete(node, missing)
            outcome = node.last = replace(
                outcome, kind=FAILED, error=error, exception_type="UnfulfilledDependency"
            )
        node.error = truncate(outcome.error or outcome.kind)
        if not decision.reschedule:
            how, no_retry = _ended(outcome), _not_retried(node.task, outcome)
            self._report(
                TaskFailed(self.id, node.task_id, node.error, node.hand_out, how, no_retry)
            )
        fields = _failure_fields(trigger, node.error, outcome)
        self._transit(node, trigger, **fields, **_ended_fields(node, outcome))
        if decision.reschedule:
            self._walker.walk([node.task], recheck=(node.task_id, *outcome.missing))

    def _ran_and_incomplete(self, yielded: Sequence[TaskLike]) -> tuple[str, ...]:
        """The yielded dependencies that already ran successfully here (still incomplete)."""
        graph = self._graph
        ids = (dep.task_id for dep in yielded)
        return tuple(t for t in ids if (node := graph.get(t)) is not None and node.succeeded)

    def _still_incomplete(self, node: Node, missing: Sequence[str]) -> str:
        graph = self._graph
        names = ", ".join(repr(graph[t].task) for t in missing)
        limit = self.settings.max_reschedules
        return (
            f"{node.task!r}: run() yielded {names}, which ran successfully but is still "
            f"incomplete (given up after max_reschedules = {limit}; with "
            "check_complete_on_run = false a run() that does not make its output looks like a "
            "success)"
        )

    def _on_new_deps(
        self, node: Node, new_deps: Sequence[TaskLike], suspended: Suspended | None
    ) -> None:
        ids = tuple(dep.task_id for dep in new_deps)
        dynamic = node.dynamic
        if dynamic is None:
            dynamic = node.dynamic = {}
        added = tuple(t for t in dict.fromkeys(ids) if t not in dynamic)
        dynamic.update(dict.fromkeys(added))
        self._transit(node, Trigger.DEPS_YIELDED, dependencies=ids, dynamic=True)
        graph = self._graph
        known = [t for t in ids if t in graph]
        # re-check yielded tasks seen before: one that was done may have vanished since
        self._walker.walk(new_deps, recheck=known)
        if known and self._walker.break_cycles_from([node.task_id]):
            if suspended is not None:
                suspended.close()  # a task in a cycle never runs again
            return
        if suspended is not None:
            self._suspended[node.task_id] = suspended
        # a registration merges dependencies: naming only the new ones keeps a run() that
        # yields many small batches linear
        spec = self._walker.spec(node, TaskStatus.PENDING, True, deps=node.deps + added)
        self._register([spec])

    # --- liveness and signals -------------------------------------------------------------

    def _start_pinger(self) -> threading.Event:
        stop = threading.Event()
        interval = self.settings.ping_interval

        def ping() -> None:
            wait = interval
            while not stop.wait(wait):
                quiet = self.clock.monotonic() - self._contact
                if quiet < interval:
                    # the scheduler answered this worker within the interval (a get_work,
                    # whose answer says what to stop too): it knows the worker is alive, and a
                    # ping would tell it nothing more (one request fewer per interval). The
                    # next one goes an interval after that answer, not later: the worker is
                    # never quiet for longer than an interval, as with a ping every interval
                    wait = interval - quiet
                    continue
                wait = interval
                try:
                    answered = self._transport.call(Ping(self.id))
                    self._contact = self.clock.monotonic()
                    told = getattr(answered, "stop", ())  # (an older scheduler: Ok)
                    if told:
                        self._inbox.put(_Stop(tuple(told)))
                except Exception as exc:  # the pinger must survive any error
                    log.warning("ping failed", error=str(exc))

        def watch() -> None:  # apart from the pinger, whose call may hang for its retries
            while not stop.wait(min(interval, _FENCE_CHECK)):
                try:
                    self._fence_if_out_of_touch()
                except Exception as exc:  # must survive, like the pinger
                    log.warning("fencing check failed", error=str(exc))

        if interval > 0:
            threading.Thread(target=ping, name="conveyor-ping", daemon=True).start()
            threading.Thread(target=watch, name="conveyor-fence", daemon=True).start()
        return stop

    def _fence_if_out_of_touch(self) -> None:
        """Stop the running attempts when the scheduler has not answered for most of its lease
        (it is about to give them to another worker): one running instance per task, always.

        Their reports (failed, interrupted) wait in the outbox until the scheduler is back,
        which refuses them if it handed the tasks out again meanwhile.
        """
        lease, contact = self._lease, self._contact
        silent = self.clock.monotonic() - contact
        if not lease or not self._running or self._fenced_for == contact:
            return
        settings = self.settings
        timeout = self.config.scheduler.rpc_timeout
        after = fence_after(lease, settings.kill_grace, settings.ping_interval, timeout)
        if after is None:
            if self._unfenceable != lease:  # said once per lease
                self._unfenceable = lease
                log.warning(
                    "cannot fence: the scheduler's lease leaves no room to stop attempts in "
                    "time; shorten ping_interval, rpc_timeout or kill_grace",
                    lease=lease,
                )
            return
        if silent < after or self._contact != contact:  # (an answer came meanwhile)
            return
        self._fenced_for = contact
        reason = f"fencing (no answer from the scheduler for {silent:.1f} s of a {lease:g} s lease)"
        log.error(
            "scheduler out of reach; stopping running attempts before it gives them to another "
            "worker",
            silent=round(silent, 1),
            lease=lease,
            running=len(self._running),
        )
        for executor in (self._executor, self._isolator):
            if executor is not None and executor.can_kill:
                executor.interrupt(reason, False)
            elif executor is not None:
                log.warning("cannot stop attempts of this executor", executor=executor.name)

    def drain(self) -> None:
        """Stop asking for work; let running attempts finish (what SIGUSR1 does)."""
        self._draining = True
        self._inbox.put(_WAKE)

    def interrupt(self, signal_name: str, hard: bool = False) -> None:
        """Stop asking for work and kill running attempts (what SIGTERM / SIGINT do).

        Process attempts get SIGTERM on their whole tree, then SIGKILL after ``kill_grace``
        (at once when ``hard``); an inline attempt running in this thread is interrupted by
        raising :class:`~conveyor.executors.base.Interrupted` into it. They are reported
        failed (interrupted) and the run's exit code becomes 128 + the signal number.
        """
        if not self._interrupted:
            self._running_at_interrupt = len(self._running)
        self._interrupted = self._interrupted or signal_name
        self._draining = True
        # logged by the loop, not here: this may run in a signal handler on a thread that
        # holds the log stream's lock
        self._interrupt_log = {"signal": signal_name, "hard": hard}
        for executor in (self._executor, self._isolator):
            if executor is not None:
                executor.interrupt(signal_name, hard)
        self._inbox.put(_WAKE)
        if self._executor.active and threading.get_ident() == self._loop_thread:
            raise Interrupted(signal_name)


_CARRIED_TEXT = 65536
"""The most characters of explanations one ``get_work`` carries with its results (the rest wait
for the next ask), so that a request stays well under the server's ``max_request_bytes`` even
when every character is escaped in JSON."""
_LINGER = 0.01
"""Seconds a worker with most of its slots busy waits for more attempts to end before it
asks for work with the results it holds (one request then carries several); longer by the time
the attempts of the last answer took to start after its first (at most :data:`_LINGER_MORE`),
since attempts started together end about as far apart as they were started."""
_LINGER_MORE = 0.04
"""The most seconds a linger is made longer by the attempts' start spread."""


def fence_after(
    lease: float, kill_grace: float, ping_interval: float, rpc_timeout: float
) -> float | None:
    """Seconds without an answer after which a worker stops its attempts: early enough that
    SIGTERM and ``kill_grace`` fit in the ``lease`` (with a second to spare). None when that
    is sooner than a healthy worker can go without an answer (a ping interval plus a call's
    timeout, plus a second): fencing would then stop attempts of a worker that is fine."""
    at = lease - kill_grace - 1.0
    return at if at >= ping_interval + rpc_timeout + 1.0 else None


def _in_process(transport: SchedulerTransport) -> bool:
    """Whether ``transport`` is the in-process scheduler as conveyor made it (its
    ``in_process`` is True: no method of the protocol overridden), which a worker may call by
    its methods (``get_work``, ``task_done``) instead of building requests for ``call``: the
    same calls, without the requests and answers a transport would carry."""
    # (looked up on the class: a wrapper that passes unknown attributes on to a scheduler it
    # wraps is a transport of its own, whose call() must see every request)
    declared = getattr(type(transport), "in_process", None)
    return isinstance(declared, property) and transport.in_process is True  # type: ignore[attr-defined]


def _check_worker_id(worker_id: str) -> None:
    """ConfigError unless ``worker_id`` is an identifier the protocol carries (a scheduler
    server would refuse every request naming it, 422)."""
    problem = IDENTIFIER.problem(worker_id)
    if problem:
        shown = worker_id if len(worker_id) <= 60 else worker_id[:57] + "..."
        raise ConfigError(f"worker_id {shown!r}: {problem}", key="worker_id")


def _assistant_loaders() -> tuple[str, ...] | None:
    """Every installed task loader's name, or None when conveyor's own is the only one."""
    names = tuple(installed_names(GROUPS["task_loader"]))
    return None if set(names) <= {DEFAULT_LOADER} else names


def _allowed(module: str, allowed: Sequence[str]) -> bool:
    """Whether ``[worker] task_modules`` (``allowed``) lets this worker import ``module``."""
    return any(module == m or module.startswith(m + ".") for m in allowed)


def _ended(outcome: Outcome) -> AttemptEnd:
    """How a failed attempt ended, for the scheduler's attempt history."""
    if outcome.interrupted:
        return AttemptEnd.INTERRUPTED
    if outcome.kind in (AttemptOutcome.TIMED_OUT, AttemptOutcome.PROCESS_DIED):
        return AttemptEnd(str(outcome.kind))
    return AttemptEnd.FAILED


def _not_retried(task: TaskLike, outcome: Outcome) -> str:
    """Why the task's ``retry_policy`` does not retry this failed attempt ("": retry it).

    A failure's verdict comes with it (decided where its exception was raised); a time-out or
    a death is judged here, as :class:`~conveyor.TaskTimeout` / :class:`~conveyor.ProcessDied`
    against ``retry_on``. An interrupted attempt is the worker's doing: always retried.
    """
    kind = outcome.kind
    if outcome.interrupted or kind is FAILED:
        return "" if outcome.interrupted else outcome.not_retried
    retry = task.task_policy().retry_policy
    if retry is None or kind not in (AttemptOutcome.TIMED_OUT, AttemptOutcome.PROCESS_DIED):
        return ""
    return retry.not_retried_outcome(kind is AttemptOutcome.TIMED_OUT)


def _ended_fields(node: Node, outcome: Outcome) -> dict[str, Any]:
    """The fields every event that ends an attempt carries: which attempt, which executor ran
    it, and its wall time in seconds."""
    return {
        "attempt": node.attempts,
        "executor": node.executor,
        "duration": max(0.0, outcome.duration),
    }


def _failure_fields(trigger: Trigger, error: str, outcome: Outcome) -> dict[str, Any]:
    """The event fields of a failed, timed-out or dead attempt, besides :func:`_ended_fields`."""
    if trigger is Trigger.TIMED_OUT:
        return {"timeout": outcome.timeout}
    if trigger is Trigger.PROCESS_DIED:
        return {"exitcode": outcome.exitcode, "signal": outcome.signal}
    fields: dict[str, Any] = {"error": error, "exception_type": outcome.exception_type}
    if outcome.interrupted:
        fields["interrupted"] = True
    return fields


PROCESS_EXECUTOR = "fork" if hasattr(os, "fork") else "subprocess"
"""The process executor ``auto`` means with more than one slot (and ``conveyor worker``'s
default)."""
_FENCE_CHECK = 0.25  # seconds between two checks of how long the scheduler has been silent
_NOTES: dict[str, tuple[Trigger, str]] = {
    "status_message": (Trigger.STATUS_MESSAGE, "message"),
    "progress": (Trigger.PROGRESS, "percentage"),
    "tracking_url": (Trigger.TRACKING_URL, "url"),
}
