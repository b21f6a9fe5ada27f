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
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import structlog

from .. import events as ev
from ..backends import load_backend
from ..config import Config
from ..core.states import TaskState, Trigger, advance
from ..errors import ConveyorError, DependencyCycle, SchedulerUnavailable, TaskLoadError
from ..executors.base import (
    NEEDS_DEPS,
    PROCESS_DIED,
    SUCCEEDED,
    TIMED_OUT,
    AttemptRequest,
    Executor,
    ExecutorContext,
    Interrupted,
    Message,
    Note,
    Outcome,
)
from ..plugins import HookRelay, load_hook_plugins
from ..scheduler import resolve_config
from ..scheduler.policy import DISABLED, DONE, PENDING, UNKNOWN, TaskSpec, Work
from ..task import Task, load_task_class
from ..transports.base import SchedulerTransport
from .builtin_plugins import SummaryPlugin, TransitionLogPlugin
from .checks import ParallelChecks, SequentialChecks
from .graph import Node, find_cycle, label
from .outbox import Outbox
from .report import RunReport, build_report
from .signals import install_signal_handlers

__all__ = ["Worker"]

log = structlog.get_logger("conveyor.worker")
_ids = itertools.count(1)
_WAKE = object()


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
    ) -> None:
        """Resolve the configuration, load plugins and backends; PluginError/ConfigError."""
        self.config = resolve_config(config)
        self.settings = self.config.worker
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{next(_ids)}"
        self.hooks = HookRelay()
        self._summary = SummaryPlugin()
        self._register_plugins(plugins)
        self._transport = scheduler if scheduler is not None else self._make_transport()
        self._outbox = Outbox(self._transport, self.config.scheduler)
        self._executor = self._make_executor()
        self._isolator: Executor | None = None
        self._interrupted = ""
        for notifier in self.config.notifiers.enabled:
            # selected notifiers must exist (exit 2 otherwise); dispatching to them comes with
            # the notifier issue
            load_backend("conveyor.notifiers", notifier)
        self._graph: dict[str, Node] = {}
        self._requested: list[str] = []
        self._running: dict[str, Node] = {}
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._loop_thread = threading.get_ident()
        self._draining = False
        self._scheduled = 0
        self.report: RunReport | None = None

    # --- set-up ---------------------------------------------------------------------------

    def _register_plugins(self, extra: Sequence[object]) -> None:
        self.hooks.register(self._summary, "conveyor.summary")
        transition_log = TransitionLogPlugin()
        if transition_log.enabled:
            self.hooks.register(transition_log, "conveyor.transition-log")
        loaded, _failures = load_hook_plugins(self.config.plugins)
        for source in loaded:
            self.hooks.register(source.plugin, source.name)
        for index, plugin in enumerate(extra):
            name = getattr(plugin, "name", None) or f"{type(plugin).__name__}-{index}"
            self.hooks.register(plugin, str(name))

    def _make_transport(self) -> SchedulerTransport:
        factory = load_backend("conveyor.schedulers", self.config.scheduler.transport)
        transport: SchedulerTransport = factory(self.config)
        return transport

    def _make_executor(self, name: str | None = None) -> Executor:
        name = name or self.settings.executor
        if name == "auto":
            name = "inline" if self.settings.workers == 1 else _PROCESS_EXECUTOR
        cls = load_backend("conveyor.executors", name)
        schema = getattr(cls, "settings_schema", {})
        logging = self.config.logging
        context = ExecutorContext(
            self.settings.workers,
            self.settings.kill_grace,
            self.config.backend_settings("executors", name, schema),
            logging.level,
            "json" if logging.format == "auto" else logging.format,
        )
        executor: Executor = cls(context)
        return executor

    def _executor_for(self, timeout: float) -> Executor:
        """The configured executor, or — for a timeout it cannot enforce — a process one."""
        if not timeout or self._executor.can_kill:
            return self._executor
        if self._isolator is None:
            self._isolator = self._make_executor(_PROCESS_EXECUTOR)
        return self._isolator

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
        """Release the executors (waits for attempts still running)."""
        self._executor.close()
        if self._isolator is not None:
            self._isolator.close()

    # --- transitions ----------------------------------------------------------------------

    def _transit(
        self, node: Node, trigger: Trigger, event_cls: type[ev.Event], **fields: Any
    ) -> None:
        """Apply one transition to ``node`` and fire its hook (the only way states change)."""
        node.state = advance(node.state, trigger)
        if not self.hooks.wants(event_cls.hook):
            return
        task = node.task
        self.hooks.fire(
            event_cls(
                task_id=node.task_id,
                family=task.task_family,
                module=task.task_module,
                params=node.params,
                worker_id=self.id,
                timestamp=time.time(),
                state=_STATE_NAMES[node.state],
                **fields,
            )
        )

    # --- the graph walk -------------------------------------------------------------------

    def add(self, task: Task) -> bool:
        """Walk ``task``'s graph and register it; False if any task in it is broken."""
        if not isinstance(task, Task):
            raise TypeError(f"Worker.add() takes a conveyor.Task, got {type(task).__name__}")
        self._requested.append(task.task_id)
        return self._walk([task])

    def _walk(self, roots: Iterable[Task], recheck: Iterable[str] = ()) -> bool:
        recheck_ids = set(recheck)
        checks = self._checks()
        visited: set[str] = set()
        specs: list[TaskSpec] = []
        pending: list[str] = []
        try:
            # reversed: the sequential walk is LIFO, so the first root is registered first
            for root in reversed(list(roots)):
                self._submit(root, checks, visited, recheck_ids)
            while checks.outstanding():
                task, complete, error = checks.next()
                node = self._graph[task.task_id]
                if error:
                    self._broken(node, error, "complete", specs)
                    continue
                # reversed: the sequential walk is depth-first (LIFO), so the first
                # requirement is visited (and registered) first
                for dep in reversed(self._visit(node, complete, specs, pending)):
                    self._submit(dep, checks, visited, recheck_ids)
        finally:
            checks.close()
        self._break_cycles(pending, specs)
        if self._running or self._outbox.pending:  # mid-run: must not be lost in an outage
            self._outbox.send("add_tasks", self.id, specs, self.settings.assistant)
        else:
            self._transport.add_tasks(self.id, specs, self.settings.assistant)
        graph = self._graph
        return not any(graph[t].state is TaskState.BROKEN for t in visited)

    def _checks(self) -> SequentialChecks | ParallelChecks:
        if self.settings.parallel_scheduling:
            threads = max(2, self.settings.workers)
            return ParallelChecks(threads, self.settings.complete_check_timeout)
        return SequentialChecks()

    def _submit(
        self,
        task: Task,
        checks: SequentialChecks | ParallelChecks,
        visited: set[str],
        recheck: set[str],
    ) -> None:
        task_id = task.task_id
        if task_id in visited:
            return
        visited.add(task_id)
        node = self._graph.get(task_id)
        if node is None:
            node = Node(task, task_id, task.to_str_params(), external=task.is_external())
            self._graph[task_id] = node
        elif task_id not in recheck or node.state not in _RECHECKABLE:
            return
        checks.submit(node.task)

    def _visit(
        self, node: Node, complete: bool, specs: list[TaskSpec], pending: list[str]
    ) -> list[Task]:
        """Record a check result; register the task; return the dependencies to walk."""
        if complete:
            self._transit(node, Trigger.CHECKED_COMPLETE, ev.CompleteChecked, complete=True)
            specs.append(TaskSpec(node.task_id, *self._identity(node), status=DONE))
            return []
        self._transit(node, Trigger.CHECKED_INCOMPLETE, ev.CompleteChecked, complete=False)
        if node.state is TaskState.PENDING:  # an external task re-checked
            return []
        deps, status, runnable = self._requirements(node, specs)
        if deps is None:
            return []
        node.deps = tuple(dep.task_id for dep in deps)
        self._transit(
            node,
            Trigger.DEPS_FOUND,
            ev.DependenciesDiscovered,
            dependencies=node.deps,
            dynamic=False,
        )
        specs.append(self._spec(node, status, runnable))
        pending.append(node.task_id)
        return deps

    def _requirements(
        self, node: Node, specs: list[TaskSpec]
    ) -> tuple[list[Task] | None, str, bool]:
        """The dependencies to walk, the status to register and whether it may run here."""
        task = node.task
        if node.external:
            return [], PENDING, self.settings.retry_external_tasks
        if task.disabled:
            node.error = f"{task!r} is disabled (disabled = True on its class); it never runs"
            return [], DISABLED, False
        limit = self.settings.task_limit
        if limit and self._scheduled >= limit and node.attempts == 0:
            node.limited = True
            return [], PENDING, False
        try:
            deps = task.deps()
        except Exception as exc:
            self._broken(node, _requires_error(task, exc), "requires", specs)
            return None, UNKNOWN, False
        self._scheduled += 1
        return deps, PENDING, True

    def _broken(self, node: Node, error: str, phase: str, specs: list[TaskSpec]) -> None:
        node.error = error
        self._transit(node, Trigger.BROKEN, ev.TaskBroken, error=error, phase=phase)
        specs.append(self._spec(node, UNKNOWN, False, explanation=error))
        log.error("task broken", task_id=node.task_id, phase=phase, error=error)

    def _break_cycles(self, pending: list[str], specs: list[TaskSpec]) -> None:
        while (cycle := find_cycle(pending, self._graph)) is not None:
            error = str(DependencyCycle([label(self._graph[t].task) for t in cycle]))
            for task_id in dict.fromkeys(cycle):
                self._broken(self._graph[task_id], error, "requires", specs)

    def _identity(self, node: Node) -> tuple[str, str, Mapping[str, str]]:
        task = node.task
        return task.task_family, task.task_module, node.params

    def _spec(self, node: Node, status: str, runnable: bool, explanation: str = "") -> TaskSpec:
        task = node.task
        return TaskSpec(
            node.task_id,
            *self._identity(node),
            status=status,
            deps=node.all_deps(),
            priority=task.priority,
            resources=task.resources,
            runnable=runnable,
            retry_count=task.retry_count,
            explanation=explanation,
        )

    def tasks(self) -> dict[str, Task]:
        """Every task of this worker's graph, by task id."""
        return {task_id: node.task for task_id, node in self._graph.items()}

    # --- running --------------------------------------------------------------------------

    def run(self) -> bool:
        """Run until nothing is left for this worker; True iff everything it ran succeeded."""
        self._loop_thread = threading.get_ident()
        self._draining = False
        self._interrupted = ""
        self.hooks.fire(ev.WorkerStarted(worker_id=self.id, timestamp=time.time()))
        stop_ping = self._start_pinger()
        restore = install_signal_handlers(self) if self.settings.install_signal_handlers else None
        try:
            self._loop()
        finally:
            if restore is not None:
                restore()
            stop_ping.set()
        self.report = build_report(
            self._graph,
            self._requested,
            self._transport,
            self._summary,
            self._interrupted,
            self._outbox.unreported(),
        )
        self.hooks.fire(
            ev.WorkerStopped(
                worker_id=self.id,
                timestamp=time.time(),
                ok=self.report.ok,
                summary=self.report.summary,
            )
        )
        return self.report.ok

    def _loop(self) -> None:
        slots = max(1, self.settings.workers)
        while True:
            self._drain_inbox()
            if not self._outbox.flush():
                if self._outbox.expired():
                    log.error("gave up reporting to the scheduler", tasks=len(self._running))
                    return
                self._wait_for_message(self._outbox.seconds_to_retry())
                continue
            if self._draining:
                if not self._running:
                    return
                self._wait_for_message(None)
                continue
            if len(self._running) >= slots:
                self._wait_for_message(None)
                continue
            try:
                work = self._transport.get_work(self.id, self.settings.assistant)
            except SchedulerUnavailable as exc:
                log.error("scheduler unreachable; asking for no more work", error=str(exc))
                if not self._running:
                    return
                self._wait_for_message(None)
                continue
            if work is not None:
                self._start(work)
            elif self._running:
                self._wait_for_message(None)
            elif not self._keep_waiting():
                return
            else:
                pause = self.settings.wait_interval + random.uniform(0, self.settings.wait_jitter)
                self._wait_for_message(pause)

    def _keep_waiting(self) -> bool:
        if not self.settings.keep_alive:
            return False
        left = self._transport.work_left(self.id)
        if self.settings.count_uniques:
            return left.unique_pending > 0
        return left.pending + left.running_elsewhere > 0

    def _wait_for_message(self, timeout: float | None) -> None:
        try:
            message = self._inbox.get(timeout=timeout)
        except queue.Empty:
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
            self._handle(message)
        else:
            self._inbox.put(message)

    def _start(self, work: Work) -> None:
        node = self._graph.get(work.task_id) or self._adopt(work)
        if node is None:
            return
        node.attempts += 1
        timeout = self._timeout_of(node.task)
        executor = self._executor_for(timeout)
        self._running[node.task_id] = node
        self._transit(
            node,
            Trigger.STARTED,
            ev.TaskStarted,
            executor=executor.name,
            attempt=node.attempts,
        )
        graph = self._graph
        known = tuple(graph[d].task for d in node.deps if d in graph)
        request = AttemptRequest(
            node.task,
            node.task_id,
            node.attempts,
            timeout,
            self.settings.check_complete_on_run,
            known if len(known) == len(node.deps) else None,
        )
        executor.start(request, self._post)

    def _timeout_of(self, task: Task) -> float:
        if task.worker_timeout is not None:
            return float(task.worker_timeout)
        return float(self.settings.timeout)

    def _adopt(self, work: Work) -> Node | None:
        """A task another worker registered (assistant mode): load it from task_modules only."""
        try:
            task = self._load_foreign(work)
        except ConveyorError as exc:
            self._outbox.send("task_failed", self.id, work.task_id, str(exc))
            log.error("refused task", task_id=work.task_id, error=str(exc))
            return None
        node = Node(task, work.task_id, dict(work.params), TaskState.PENDING)
        self._graph[work.task_id] = node
        return node

    def _load_foreign(self, work: Work) -> Task:
        allowed = self.settings.task_modules
        if not any(work.module == m or work.module.startswith(m + ".") for m in allowed):
            raise TaskLoadError(
                f"task {work.task_id} is from module {work.module!r}, which is not in "
                f"[worker] task_modules ({', '.join(allowed) or 'empty'}); refused without "
                "importing it"
            )
        cls = load_task_class(work.module, work.family)
        return cls.from_str_params(work.params)

    # --- messages from executors ----------------------------------------------------------

    def _handle(self, message: Message) -> None:
        if isinstance(message, Note):
            self._on_note(message)
        else:
            self._on_outcome(message)

    def _on_note(self, note: Note) -> None:
        node = self._running.get(note.task_id)
        if node is None:
            return
        trigger, event_cls, field = _NOTES[note.kind]
        self._transit(node, trigger, event_cls, **{field: note.value})
        # a lost status message is not worth holding the run for
        with contextlib.suppress(SchedulerUnavailable):
            self._transport.annotate(note.task_id, note.kind, note.value)

    def _on_outcome(self, outcome: Outcome) -> None:
        node = self._running.pop(outcome.task_id, None)
        if node is None:
            return
        if outcome.kind == SUCCEEDED:
            self._outbox.send("task_done", self.id, node.task_id)
            self._transit(node, Trigger.SUCCEEDED, ev.TaskSucceeded, duration=outcome.duration)
        elif outcome.kind == NEEDS_DEPS:
            self._on_new_deps(node, outcome.new_deps)
        else:
            self._on_failure(node, outcome)

    def _on_failure(self, node: Node, outcome: Outcome) -> None:
        node.error = outcome.error or outcome.kind
        reschedule = self._may_reschedule(node, outcome.missing)
        if not reschedule:
            self._outbox.send("task_failed", self.id, node.task_id, node.error)
        if outcome.kind == TIMED_OUT:
            self._transit(node, Trigger.TIMED_OUT, ev.TaskTimedOut, timeout=outcome.timeout)
        elif outcome.kind == PROCESS_DIED:
            self._transit(
                node,
                Trigger.PROCESS_DIED,
                ev.ProcessDied,
                exitcode=outcome.exitcode,
                signal=outcome.signal,
            )
        else:
            self._transit(
                node,
                Trigger.FAILED,
                ev.TaskFailed,
                error=node.error,
                exception_type=outcome.exception_type,
                duration=outcome.duration,
            )
        log.error("task failed", task_id=node.task_id, error=node.error)
        if reschedule:
            self._walk([node.task], recheck=(node.task_id, *outcome.missing))

    def _may_reschedule(self, node: Node, missing: Sequence[str]) -> bool:
        if not missing:
            return False
        counts = node.reschedules
        for task_id in missing:
            counts[task_id] = counts.get(task_id, 0) + 1
        return all(counts[t] <= self.settings.max_reschedules for t in missing)

    def _on_new_deps(self, node: Node, new_deps: Sequence[Task]) -> None:
        ids = tuple(dep.task_id for dep in new_deps)
        seen = set(node.dynamic)
        node.dynamic.extend(t for t in dict.fromkeys(ids) if t not in seen)
        self._transit(
            node, Trigger.DEPS_YIELDED, ev.DependenciesDiscovered, dependencies=ids, dynamic=True
        )
        self._walk(new_deps)
        self._outbox.send(
            "add_tasks", self.id, [self._spec(node, PENDING, True)], self.settings.assistant
        )

    # --- liveness and signals -------------------------------------------------------------

    def _start_pinger(self) -> threading.Event:
        stop = threading.Event()
        interval = self.settings.ping_interval

        def ping() -> None:
            while not stop.wait(interval):
                try:
                    self._transport.ping(self.id)
                except Exception as exc:  # the pinger must survive any error
                    log.warning("ping failed", error=str(exc))

        if interval > 0:
            threading.Thread(target=ping, name="conveyor-ping", daemon=True).start()
        return stop

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
        self._interrupted = self._interrupted or signal_name
        self._draining = True
        for executor in (self._executor, self._isolator):
            stop = getattr(executor, "interrupt", None)
            if stop is not None:
                stop(signal_name, hard)
        self._inbox.put(_WAKE)
        if getattr(self._executor, "active", False) and threading.get_ident() == self._loop_thread:
            raise Interrupted(signal_name)


_PROCESS_EXECUTOR = "fork" if hasattr(os, "fork") else "subprocess"
_STATE_NAMES = {state: state.name for state in TaskState}
_RECHECKABLE = frozenset({TaskState.COMPLETE, TaskState.DONE, TaskState.FAILED, TaskState.PENDING})
_NOTES: dict[str, tuple[Trigger, type[ev.Event], str]] = {
    "status_message": (Trigger.STATUS_MESSAGE, ev.TaskStatusMessage, "message"),
    "progress": (Trigger.PROGRESS, ev.TaskProgress, "percentage"),
    "tracking_url": (Trigger.TRACKING_URL, ev.TaskTrackingUrl, "url"),
}


def _requires_error(task: Task, exc: Exception) -> str:
    if isinstance(exc, ConveyorError):
        return str(exc)
    return f"{task!r}.requires() raised:\n{traceback.format_exc()}"
