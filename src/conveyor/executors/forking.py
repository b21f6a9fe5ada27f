"""The ``fork`` executor: one forked child process per attempt, forked by a fork server.

Attempts are not forked by the worker, which has threads, but by its fork server (see
:mod:`conveyor.executors.zygote`), a single-threaded process started with the executor: a fork
of the worker when it has one thread at that moment (it then shares everything the worker had
imported), a fresh interpreter otherwise. The child runs in its own process group and reports
through a pipe straight to the worker (see :mod:`conveyor.executors.channel`); the
:class:`~conveyor.executors.supervisor.Supervisor` enforces timeouts and memory limits and
reports the outcome.
If the server dies, its running attempts are PROCESS_DIED and the next attempt starts a new one.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import ClassVar

import structlog

from .base import FAILED, AttemptRequest, ExecutorContext, Outcome, Sink
from .child import attempt_spec
from .supervisor import Child, ProcessExecutor
from .zygote import ForkServer, ServerGone, SpawnRefused

__all__ = ["ForkExecutor"]

log = structlog.get_logger("conveyor.executors")


class ForkExecutor(ProcessExecutor):
    """Runs each attempt in a forked child; enforces timeouts and memory limits on the whole
    process tree."""

    name: ClassVar[str] = "fork"

    def __init__(self, context: ExecutorContext | None = None) -> None:
        """Create the executor and start its fork server (before any thread of its own)."""
        self.context = context or ExecutorContext()
        self._server = self._new_server()  # first: it need not inherit the supervisor's pipe
        self._retired: list[ForkServer] = []  # dead ones, closed with the executor
        super().__init__(self.context)

    def _new_server(self) -> ForkServer:
        return ForkServer(self.context.log_level, self.context.log_format)

    def start(self, request: AttemptRequest, sink: Sink) -> None:
        """Have the fork server fork a child for the attempt and hand it to the supervisor."""
        spec = attempt_spec(request, self.context)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        since = self.supervisor.interrupts
        for retry in (False, True):
            if retry or not self._server.alive:
                self._replace_server()
            server = self._server
            msg_r, msg_w = os.pipe()
            dog_r, dog_w = os.pipe()
            mark = self.supervisor.next_mark()
            try:
                pid = server.spawn(spec, [msg_w, dog_r], mark)
            except ServerGone:
                if retry:
                    self._abandon(mark, msg_r, dog_w)
                    raise
                # fresh pipes for the retry: a child the dead server may have forked keeps
                # the write end of these until it dies
                self._abandon(mark, msg_r, dog_w)
                continue
            except SpawnRefused as exc:
                self._abandon(mark, msg_r, dog_w)
                sink(
                    Outcome(
                        request.task_id,
                        FAILED,
                        error=self._why(exc),
                        exception_type=exc.exception_type,
                        load_error=exc.load_error,
                    )
                )
                return
            except BaseException:
                self._abandon(mark, msg_r, dog_w)
                raise
            finally:
                os.close(msg_w)
                os.close(dog_r)
            timeout = request.timeout
            child = Child(
                pid,
                request.task_id,
                sink,
                msg_r,
                dog_w,
                timeout,
                mark=mark,
                server=server,
                loader=spec.loader,
                memory_limit=request.memory_limit,
            )
            self.supervisor.watch(child, since=since)
            return

    def _abandon(self, mark: str, *fds: int) -> None:
        self.supervisor.release_mark(mark)
        for fd in fds:
            os.close(fd)

    def _why(self, refused: SpawnRefused) -> str:
        why = str(refused)
        if refused.load_error and not self._server.forked:
            why += (
                "; this worker's fork server is a fresh interpreter (the worker already had "
                "threads when the executor was created), where a task defined in __main__ "
                "cannot be found: define it in an importable module"
            )
        return why

    def _replace_server(self) -> None:
        """Start a new fork server in place of one found dead (the supervisor still reads the
        old one's events, to learn that its attempts are over)."""
        old = self._server
        self._retired.append(old)
        self._server = self._new_server()
        log.warning(
            "the fork server had exited; started a new one", old_pid=old.pid, pid=self._server.pid
        )

    def close(self) -> None:
        """Wait for every attempt process to end and be reaped, then stop the fork server."""
        super().close()
        for server in (*self._retired, self._server):
            server.close()
