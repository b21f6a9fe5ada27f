"""The conveyor worker's side of the ``dask`` executor: submitting attempts, hearing back."""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from conveyor.attempt import executor_message, spec_of
from conveyor.errors import ConfigError
from conveyor.executors.base import (
    FAILED,
    PROCESS_DIED,
    AttemptRequest,
    ExecutorContext,
    Note,
    Outcome,
    Sink,
)
from conveyor.protocol import FieldError, decode_attempt_message, encode
from conveyor.settings import Field
from dask.utils import parse_bytes
from distributed import Client, Event, Future, LocalCluster
from distributed.client import FutureCancelledError
from distributed.scheduler import KilledWorker

from .logs import follow_level, worker_process_level
from .remote import LOST, STOPPED, claim_name, run_attempt, stop_attempts, stop_name

__all__ = ["CLOSE_WAIT", "DaskExecutor"]

CLOSE_WAIT = 60.0  # seconds close() waits for attempts in flight to report


def _memory(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if value.strip() == "auto":
        return True
    try:
        parse_bytes(value)
    except (ValueError, TypeError):
        return False
    return True


class DaskExecutor:
    """Runs each attempt on a Dask worker, in a child process supervised there."""

    name: ClassVar[str] = "dask"
    can_kill: ClassVar[bool] = True
    active = False  # attempts run on the cluster
    settings_schema: ClassVar[Mapping[str, Field]] = {
        "address": Field("str", "", doc="scheduler of an existing cluster, tcp://host:8786"),
        "scheduler_file": Field("str", "", doc="or its scheduler file"),
        "n_workers": Field("int", 2, ge=1, doc="LocalCluster worker processes"),
        "threads_per_worker": Field("int", 1, ge=1),
        "memory_limit": Field("str", "auto", check=_memory, expect='"auto" or a size like "2GiB"'),
        "map_resources": Field("bool", False, doc="task resources become Dask resources"),
        "connect_timeout": Field("seconds", 30.0, gt=0),
    }

    def __init__(self, context: ExecutorContext | None = None) -> None:
        """Join the cluster the settings name, or start a LocalCluster closed with us."""
        self.context = context or ExecutorContext()
        settings = {
            **{k: f.default for k, f in self.settings_schema.items()},
            **self.context.settings,
        }
        self.map_resources = bool(settings["map_resources"])
        self._cluster: LocalCluster | None = None
        timeout = float(settings["connect_timeout"])
        follow_level(self.context.log_level)  # Dask's loggers no chattier than conveyor's
        if settings["address"] and settings["scheduler_file"]:
            raise ConfigError(
                "executors.dask: set address or scheduler_file, not both",
                key="executors.dask.address",
            )
        try:
            if settings["address"]:
                self._client = Client(settings["address"], timeout=timeout, set_as_default=False)
            elif settings["scheduler_file"]:
                _wait_for_file(settings["scheduler_file"], timeout)
                self._client = Client(
                    scheduler_file=settings["scheduler_file"],
                    timeout=timeout,
                    set_as_default=False,
                )
            else:
                self._cluster = LocalCluster(
                    n_workers=int(settings["n_workers"]),
                    threads_per_worker=int(settings["threads_per_worker"]),
                    memory_limit=settings["memory_limit"],
                    processes=True,
                    dashboard_address="127.0.0.1:0",  # (None still opens one, on 8787)
                    silence_logs=worker_process_level(self.context.log_level),
                )
                self._client = Client(self._cluster, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError) as exc:  # unreachable, refused, no scheduler file
            if self._cluster is not None:
                self._cluster.close()
            key = "scheduler_file" if settings["scheduler_file"] else "address"
            where = settings[key] or "a LocalCluster"
            raise ConfigError(
                f"executors.dask.{key}: cannot reach the Dask scheduler at {where}: {exc}",
                key=f"executors.dask.{key}",
            ) from None
        self._topic = f"conveyor-notes-{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        # attempt key -> id, sink, future, the task loader that rebuilds its yielded dependencies
        # (and the starting thread's context, with the worker's [tasks.*] defaults: yielded
        # dependencies are rebuilt in it, on Dask's threads)
        self._open: dict[str, tuple[str, Sink, Future[Any], str, contextvars.Context]] = {}
        self._reporting = 0  # outcomes taken out of _open and not yet handed to their sink
        self._idle = threading.Condition(self._lock)
        self._interrupted = ""  # the reason of interrupt(), once called
        try:
            self._client.subscribe_topic(self._topic, self._on_note)
        except BaseException:
            self._client.close()
            if self._cluster is not None:
                self._cluster.close()
            raise

    @property
    def client(self) -> Client:
        """The Dask client (for embedders and tests)."""
        return self._client

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Submit the attempt to the cluster; its notes and outcome come back to ``sink``."""
        task = request.task
        key = f"conveyor-{request.task_id}-{request.attempt}-{uuid.uuid4().hex[:8]}"
        attempt = spec_of(request, self.context)
        context = contextvars.copy_context()
        spec = encode(attempt)
        options: dict[str, Any] = {
            "key": key,
            "pure": False,
            "retries": 0,
            "priority": int(getattr(task, "priority", 0) or 0),
        }
        resources = getattr(task, "resources", None) or {}
        if self.map_resources and resources:
            options["resources"] = wanted = {str(k): float(v) for k, v in dict(resources).items()}
            if not self._can_run(wanted):  # Dask would wait forever for such a worker
                sink(
                    Outcome(
                        request.task_id,
                        FAILED,
                        error=f"no Dask worker has the resources {wanted} (map_resources = "
                        "true: start workers with --resources)",
                        exception_type="NoWorker",
                    )
                )
                return
        future = self._client.submit(
            run_attempt, spec, key, self._topic, stop_name(self._topic), **options
        )
        with self._lock:
            self._open[key] = (request.task_id, sink, future, attempt.loader, context)
        future.add_done_callback(self._on_done)

    def _can_run(self, wanted: Mapping[str, float]) -> bool:
        """Whether some worker of the cluster has every resource in ``wanted``, enough."""
        workers = self._client.scheduler_info().get("workers", {})
        return any(
            all(float(info.get("resources", {}).get(k, 0)) >= v for k, v in wanted.items())
            for info in workers.values()
        )

    def _on_note(self, event: tuple[float, Any]) -> None:
        """A status message, progress or tracking URL from an attempt still running."""
        _, body = event
        if not isinstance(body, dict):
            return
        with self._lock:
            entry = self._open.get(str(body.get("key")))
        if entry is None:  # its outcome is in: a late note would come after it
            return
        task_id, sink, _, loader, context = entry
        try:
            message = context.run(
                executor_message, decode_attempt_message(body.get("message")), task_id, loader
            )
        except FieldError:
            return  # (not a note of this version's: nothing to show)
        if isinstance(message, Note):
            sink(message)

    def _on_done(self, future: Future[Any]) -> None:
        with self._lock:
            entry = self._open.pop(str(future.key), None)
            if entry is None:
                return
            self._reporting += 1  # close() waits for this outcome to reach its sink
        try:
            task_id, sink, _, loader, context = entry
            sink(context.run(self._outcome, task_id, future, loader))
            self._forget(str(future.key))
        finally:
            with self._lock:
                self._reporting -= 1
                self._idle.notify_all()

    def _outcome(self, task_id: str, future: Future[Any], loader: str) -> Outcome:
        lost = Outcome(
            task_id,
            PROCESS_DIED,
            error="the Dask worker running the attempt was lost; Dask does not run it again",
            exception_type="ProcessDied",
        )
        try:
            result = future.result()
        except KilledWorker:
            return lost
        except FutureCancelledError:
            if not self._interrupted:  # not ours: the cluster dropped it (a lost connection)
                return replace(lost, error="the Dask cluster cancelled the attempt")
            return Outcome(task_id, FAILED, error=f"interrupted by {self._interrupted}",
                           exception_type="Interrupted", interrupted=True)  # fmt: skip
        except Exception as exc:  # the function itself failed on the Dask worker
            return Outcome(
                task_id,
                FAILED,
                error=f"the Dask worker could not run the attempt: {type(exc).__name__}: {exc}",
                exception_type=type(exc).__name__,
            )
        if result == LOST:
            return lost
        if result == STOPPED:
            return Outcome(task_id, FAILED, error=f"interrupted by {self._interrupted}",
                           exception_type="Interrupted", interrupted=True)  # fmt: skip
        why = ""
        try:
            message = executor_message(decode_attempt_message(result), task_id, loader)
        except Exception as exc:  # (a garbled result, or a dependency that cannot be rebuilt)
            message, why = None, f": {exc}"
        if isinstance(message, Outcome):
            return message
        return Outcome(task_id, FAILED, error=f"no outcome from the Dask worker{why}",
                       exception_type="ChannelError")  # fmt: skip

    def _forget(self, key: str) -> None:
        # (a cleared Event is deleted; if the cluster is closing, the claim goes with it)
        with contextlib.suppress(Exception):
            Event(claim_name(key), client=self._client).clear()

    def interrupt(self, reason: str, hard: bool = False) -> None:
        """Stop every attempt in flight, on whichever Dask worker runs it or will start it
        (never blocks): the running ones through their supervisors, the queued ones by an
        Event they check before and after they start."""
        with self._lock:
            self._interrupted = self._interrupted or reason
            keys = list(self._open)
        if not keys:
            return

        def stop() -> None:
            with contextlib.suppress(Exception):
                Event(stop_name(self._topic), client=self._client).set()
            with contextlib.suppress(Exception):  # a lost worker's attempt is reported lost
                self._client.run(stop_attempts, keys, reason, hard)

        threading.Thread(target=stop, name="conveyor-dask-stop", daemon=True).start()

    def close(self) -> None:
        """Wait for the attempts in flight to report (at most CLOSE_WAIT seconds: a cluster
        that stopped answering cannot keep the worker forever), then leave the cluster
        (closing the LocalCluster this executor started, with every process of it)."""
        deadline = time.monotonic() + CLOSE_WAIT
        with self._lock:
            while (self._open or self._reporting) and time.monotonic() < deadline:
                self._idle.wait(timeout=1.0)
            left = list(self._open.items())
            self._open.clear()
        for _, (task_id, sink, *_rest) in left:
            sink(
                Outcome(
                    task_id,
                    PROCESS_DIED,
                    error="the Dask cluster did not report the attempt's end",
                    exception_type="ProcessDied",
                )
            )
        with contextlib.suppress(Exception):
            Event(stop_name(self._topic), client=self._client).clear()
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


def _wait_for_file(path: str, timeout: float) -> None:
    """Wait up to ``timeout`` for the scheduler file (distributed would wait forever)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no scheduler file {path!r} after {timeout:g} s")
        time.sleep(0.05)
