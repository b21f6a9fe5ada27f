"""The central scheduler's HTTP API: the in-process policy (`SchedulerCore`) over JSON.

The :class:`~.guard.Guard` in front checks what the headers alone can tell: the ``Host`` and
``Origin`` are this server's own, the bearer token on ``/api/v1/`` routes when a token is set
(in constant time), ``Content-Type: application/json`` on every ``POST``, and the body size
(413 without reading it). State changes only through ``POST``; malformed JSON or fields get a
4xx JSON error naming the field. Each state-changing call runs under one lock and its changes
are committed to the state store before the response is sent.

A commit that fails (a full or read-only disk, a state file deleted under the server) is rolled
back in memory too: the scheduler's state is reloaded from the store, as at a restart, so what
the server serves is what is stored. Until a write succeeds again, every state change is
answered 503 with ``Retry-After`` and changes nothing; reads go on, and time changes nothing
(no retry is woken, no silent worker declared gone). Every error answer is JSON: whatever
raises is logged once with its traceback and answered ``{"error": ...}`` 500.

The server's plugins (:mod:`.hooks`) are told what a call changed once it is committed, after
the lock is released and before the call is answered; what was rolled back they never see.

With a store several servers share (:class:`~.stores.CanLead`), one server leads and the
others stand by (:mod:`.leadership`): a standby answers every worker-facing call and every
state change 503 with ``Retry-After`` and ``{"leader": URL}``, serves the web UI read-only from
the store, and says which server leads in ``/health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import json
import threading
import time
import unicodedata
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..errors import ConfigError, StaleReport, StateStoreError, UnknownTask
from ..protocol import ROUTES, CancelAnswer, FieldError, TaskList, decode, encode
from ..scheduler.persist import compact_encoder, to_row
from ..scheduler.policy import SchedulerCore, TaskRecord
from .guard import Guard
from .hooks import REPORT_REFUSED, REQUEST, ServerHooks
from .hosts import OwnAddress
from .leadership import LEADER, STANDBY, Campaign
from .luigi_rpc import luigi_routes
from .schema import openapi_document
from .stores import (
    CanCompact,
    CanLead,
    CanProbe,
    CanSaveStakeholders,
    Deposed,
    StateStore,
    TaskReads,
    Unstored,
    UnusableRow,
    Workers,
)
from .view import SchedulerView
from .webui import ui_routes

__all__ = [
    "LEADER",
    "RETRY_AFTER",
    "STANDBY",
    "NotLeader",
    "SchedulerService",
    "Unstored",
    "create_app",
    "not_leader_answer",
]

log = structlog.get_logger("conveyor.server")
T = TypeVar("T")

RETRY_AFTER = 2
"""Seconds a 503 for a state store that refuses writes asks the client to wait."""
STANDBY_RETRY_AFTER = 1
"""Seconds a standby's 503 asks the client to wait (one that has a leader hint follows it)."""


class NotLeader(Exception):
    """A call refused because this server does not lead: 503 with ``Retry-After`` and
    ``{"leader": URL}`` (the leader's public URL, "" while none is known); nothing changed."""

    def __init__(self, leader: str) -> None:
        """``leader``: the URL of the server that leads, "" if none is known."""
        where = f"the leader is {leader}" if leader else "no leader is known yet; ask again"
        super().__init__(f"this scheduler is a standby and changes nothing: {where}")
        self.leader = leader


def not_leader_answer(exc: NotLeader, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A standby's answer to ``exc``: 503, ``Retry-After`` and ``{"error", "leader"}``."""
    return JSONResponse(
        {"error": str(exc), "leader": exc.leader},
        status_code=503,
        headers={**(headers or {}), "Retry-After": str(STANDBY_RETRY_AFTER)},
    )


_READS = tuple(name for name, v in vars(TaskReads).items() if callable(v) and name[0] != "_")
"""The methods of :class:`~.stores.TaskReads`, which every state store must have."""

GROUP_MAX = 16
"""The most calls committed in one transaction (group commit: see :meth:`SchedulerService.call`)."""

_SHUTTING_DOWN = "the scheduler is shutting down; nothing was changed"
_UNANSWERED = "the call could not be applied; nothing was changed"


class _Refused:
    """What a call is to raise once its group is committed: its refusal (StaleReport,
    UnknownTask), or for a call of a loop's batch any error (``call_async``)."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class _Group:
    """Calls applied under the lock whose changes one later commit stores: each call's result
    (by thread), and once ``done`` is set, the commit's ``error`` (None: stored)."""

    __slots__ = ("done", "error", "results")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Exception | None = None
        self.results: dict[int, Any] = {}

    def result_of(self, thread: int) -> Any:
        """The result of the call made by ``thread``; what it raised, or the commit's error
        (a fresh exception for each call: they are raised in several threads at once)."""
        result = self.results.pop(thread)
        error = self.error
        if isinstance(error, NotLeader):
            raise NotLeader(error.leader)
        if error is not None:
            raise Unstored(str(error))
        if isinstance(result, _Refused):
            raise result.exc
        return result


class _Queued:
    """A call waiting for its loop's next batch (:meth:`SchedulerService.call_async`)."""

    __slots__ = ("args", "fn", "future")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], future: asyncio.Future[Any]
    ) -> None:
        self.fn, self.args, self.future = fn, args, future


def _answer(answered: Iterable[tuple[_Queued, Any]]) -> None:
    """On the loop: give each call of a committed batch its result, or what it raised."""
    for item, outcome in answered:
        future = item.future
        if future.done():  # (its request went away meanwhile, or it was answered)
            continue
        if isinstance(outcome, _Refused):
            exc = outcome.exc
            if isinstance(exc, StopIteration):  # (which a future cannot hold)
                raised = exc
                exc = RuntimeError(f"the call raised {type(exc).__name__}: {exc}")
                exc.__cause__ = raised
            future.set_exception(exc)
        else:
            future.set_result(outcome)


class SchedulerService:
    """Runs policy calls one at a time and commits their changes before returning."""

    def __init__(
        self,
        core: SchedulerCore,
        store: StateStore,
        where: str = "",
        hooks: ServerHooks | None = None,
    ) -> None:
        """Serve ``core`` (already restored) and persist its changes to ``store``, which
        ``where`` names in logs (``sqlite state.db``); ``hooks`` delivers the committed
        changes to the server's plugins (None: there are none).

        The web UI reads the store itself, through its :class:`~.stores.TaskReads`: a store
        that does not implement it is refused (ConfigError, exit 2 at start-up; the store is
        closed first), never mirrored into another.
        """
        missing = [m for m in _READS if not callable(getattr(store, m, None))]
        if missing or not isinstance(store, TaskReads):
            store.close()
            name = f"{type(store).__module__}.{type(store).__qualname__}"
            raise ConfigError(
                f"state store {where or name} ({name}) does not implement TaskReads: it lacks "
                + ", ".join(missing)
                + "; a state store answers the web UI's reads itself (see docs/plugins.md)"
            )
        self.core = core
        self.store = store
        self._interest_apart = _saves_stakeholders(store)
        self.where = where or type(store).__name__
        self.lock = threading.Lock()
        self.failure = ""
        """Why the store refuses writes ("" while it takes them); the server answers 503."""
        self._logged: set[str] = set()  # kinds of storage error logged since the last success
        self._reloaded = True  # whether the state in memory is known to be what is stored
        self._closed = False
        self.reads: TaskReads = store
        core.track_changes()
        core.keep_history = True
        self.hooks = hooks or ServerHooks()
        self.hooks.attach(core)
        self.public_url = ""
        """This server's URL as workers and the other servers reach it."""
        self.role = LEADER
        """``LEADER``, or ``STANDBY`` while another server (or none yet) leads a shared store."""
        self.leader = ""
        """The leader's public URL ("" while none is known; this server's own when it leads)."""
        self.term = 0
        """The term of the lease this server's state was loaded under (0: never led)."""
        self.on_promote: list[Callable[[], None]] = []
        """Called (under the lock) when the server starts to lead: to drop what was kept in
        memory from an earlier time it led (the state itself is reloaded)."""
        self.lease_deadline: float | None = None
        """When the lease this server leads by runs out unless renewed (``clock``'s time;
        None: the store is not shared). Past it, the server stops acknowledging at once."""
        self.clock: Callable[[], float] = time.monotonic
        self.campaign: Campaign | None = None
        """The :class:`~.leadership.Campaign` that keeps the lease of a shared store."""
        self._door = threading.Lock()  # guards _entering and _closed
        # per event loop, the calls of call_async waiting for the batch it runs next (each
        # list is touched by its own loop's thread only; a loop closed first is let go)
        self._queued: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Queued]] = (
            weakref.WeakKeyDictionary()
        )
        self._entering = 0  # calls waiting for (or about to take) the lock
        # per loop, the calls handed to the one pool thread that applies them, not yet taken
        # by it (see _run_queued); guarded by _handing
        self._handed: dict[asyncio.AbstractEventLoop, list[_Queued]] = {}
        self._handing = threading.Lock()
        self._group: _Group | None = None  # calls applied, their commit left to the next
        self._grouped = 0  # how many calls _group holds

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Apply ``fn(*args)`` and commit every change it made; :class:`Unstored` (nothing
        changed) if the store cannot take it. The plugins are told what it changed after the
        lock is released.

        Group commit: when another call is already waiting for the lock, this one's changes
        are left for that call to commit together with its own (up to :data:`GROUP_MAX`
        calls in one transaction), and this call waits for that commit before it returns. So
        nothing is acknowledged before it is stored, and a busy server makes one commit for
        several requests instead of one each."""
        with self._door:
            self._entering += 1
        group: _Group | None = None
        try:
            with self.lock:
                with self._door:
                    self._entering -= 1
                try:
                    outcome = self._apply_grouped(fn, *args)
                finally:
                    self._settle_group()
            if isinstance(outcome, _Group):
                group = outcome
                group.done.wait()
                return group.result_of(threading.get_ident())  # type: ignore[no-any-return]
            return outcome
        finally:
            self.hooks.deliver()

    async def call_async(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`call` for the event loop: ``fn(*args)`` applied and committed together with
        every other call the loop queued in the same turn (up to :data:`GROUP_MAX` in one
        transaction), with the same results and errors as :meth:`call` and nothing answered
        before it is stored. The loop applies and commits them itself, no thread woken for
        them, unless another thread holds the lock or the store refuses writes: then a thread
        of the pool does, so that the loop never waits for a lock, a probe or a reload. The
        plugins are told what changed before the caller is answered, in a thread of the pool
        and only when one wants to be told."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._closed:
            raise Unstored(_SHUTTING_DOWN)
        queued = self._queued.get(loop)
        if queued is None:  # the first of this turn: the batch runs once the turn is over
            loop.call_soon(self._run_queued, loop, context=contextvars.Context())
            queued = self._queued[loop] = []
        queued.append(_Queued(fn, args, future))
        try:
            return await future
        finally:  # (as call() does: the plugins are told before the caller is answered, in
            # a thread of the pool, so a slow plugin holds up neither the loop nor the others)
            if self.hooks.pending():
                await asyncio.to_thread(self.hooks.deliver)

    def _run_queued(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: the calls it queued in the turn that ended, :data:`GROUP_MAX` at a
        time, each batch applied, committed and answered here while the lock is free and the
        state sound; from the first call that finds it otherwise, the rest are handed, in
        order, to a thread of the pool. While that thread has calls left, the next turns'
        calls are handed to it too, after them: one thread waits for a long hold of the lock
        (a reload at a take-over), not one a turn, which would take every thread of the pool
        that the plugins' deliveries and the web UI's poll for changes share. Every call is
        answered, 503 if all else fails."""
        queued = self._queued.pop(loop, [])
        done = 0  # the calls answered here
        handed = len(queued)  # (from there on, the thread answers)
        try:
            with self._handing:
                waiting = self._handed.get(loop)
                if waiting is not None:  # (its thread takes them after those it has)
                    waiting.extend(queued)
                    handed = 0
                    return
            while done < len(queued):
                if not self.lock.acquire(blocking=False):
                    break
                try:
                    batch = queued[done : done + GROUP_MAX]
                    outcomes = self._settle(batch, inline=True)  # (maybe of a part of it)
                finally:
                    self.lock.release()
                if not outcomes:  # (a probe or a reload comes first: not on the loop)
                    break
                _answer(zip(batch, outcomes, strict=False))
                done += len(outcomes)
            else:
                return
            with self._handing:
                self._handed[loop] = queued[done:]
            try:
                loop.run_in_executor(None, self._run_in_thread, loop)
            except BaseException as exc:  # (no thread takes them, nor could a turn since:
                # the next turns must not wait for one; the finally below answers them 503)
                with self._handing:
                    del self._handed[loop]
                if not isinstance(exc, RuntimeError):  # (the loop or its pool is closing)
                    raise
            else:
                handed = done
        finally:
            _answer((item, _Refused(Unstored(_UNANSWERED))) for item in queued[:handed])

    def _run_in_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """In a thread of the pool: :meth:`_run_queued`'s work for the calls handed for
        ``loop``, :data:`GROUP_MAX` at a time in the order they were handed, waiting for the
        lock as long as it takes, until none is left; the answers go back to ``loop`` (503
        for any call that could not be applied)."""
        batch: list[_Queued] = []
        finished = False
        try:
            while True:
                with self._handing:
                    handed = self._handed[loop]
                    if not handed:
                        del self._handed[loop]  # (the next turn that must wait hands anew)
                        finished = True
                        return
                    batch = handed[:GROUP_MAX]
                    del handed[:GROUP_MAX]
                with self.lock:
                    outcomes = self._settle(batch)
                with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
                    loop.call_soon_threadsafe(_answer, list(zip(batch, outcomes, strict=True)))
                batch = []
        finally:
            if not finished:  # (the handed calls are still this thread's: no other took them)
                with self._handing:
                    batch += self._handed.pop(loop, [])
                refused = [(item, _Refused(Unstored(_UNANSWERED))) for item in batch]
                if refused:
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(_answer, refused)

    def _settle(self, batch: list[_Queued], inline: bool = False) -> list[Any]:
        """Under the lock: apply and commit ``batch`` (:meth:`_apply_batch`, ``inline`` as
        it says); whatever escapes that (a reload that failed half way, a ``SystemExit`` from
        a store) is logged, marks the state untrusted (reads and writes refused until a reload
        succeeds: the next call probes the store and reloads first) and answers the batch
        503."""
        try:
            return self._apply_batch(batch, inline)
        except BaseException as exc:
            self._reloaded = False
            self.core.frozen = True
            self.failure = (
                "the scheduler's state is not known to be what is stored (a call failed half"
                " way); nothing was changed"
            )
            with contextlib.suppress(BaseException):  # (even a failing log)
                self._note_failure(exc)  # (names the error)
                log.exception("scheduler call failed", error=f"{type(exc).__name__}")
            return [_Refused(Unstored(self.failure)) for _ in batch]

    def _apply_batch(self, batch: list[_Queued], inline: bool = False) -> list[Any]:
        """Under the lock: apply each call of ``batch`` and commit them all at once; each
        call's result, or a :class:`_Refused` of what it is to raise. ``inline`` (on the event
        loop): stop before a call that would probe the store or reload the state first (a
        call's fault was undone by a reload that failed): the outcomes of the calls before
        it, the rest left to the caller."""
        outcomes: list[Any] = []
        applied: list[int] = []  # the calls whose changes wait for the commit
        closed = self._closed  # (a batch begun before close() is committed whole)
        for item in batch:
            if inline and (self.failure or not self._reloaded):
                break  # (nothing applied is left uncommitted: the reload undid it)
            try:
                if closed:  # (queued before close(): its store is closed, or closing)
                    raise Unstored(_SHUTTING_DOWN)
                self._check_leader()
                self._check_writable()
            except Exception as exc:  # (NotLeader, Unstored: nothing changed)
                outcomes.append(_Refused(exc))
                continue
            try:
                result: Any = item.fn(*item.args)
            except (StaleReport, UnknownTask) as exc:  # refused; what it saw is committed
                result = _Refused(exc)
            except BaseException as exc:  # a fault half way: the state is reloaded
                self._roll_back()  # (what the calls before it changed is undone too)
                undone = self.failure or "the change was undone; nothing was changed"
                for i in applied:
                    outcomes[i] = _Refused(Unstored(undone))
                applied.clear()
                if not isinstance(exc, Exception):  # (SystemExit: not the loop's to raise)
                    exc = Unstored(f"the call was interrupted ({type(exc).__name__})")
                outcomes.append(_Refused(exc))
                continue
            applied.append(len(outcomes))
            outcomes.append(result)
        if applied:
            try:
                self._commit_or_roll_back()
            except NotLeader as exc:
                for i in applied:
                    outcomes[i] = _Refused(NotLeader(exc.leader))
            except Exception:  # (Unstored)
                for i in applied:
                    outcomes[i] = _Refused(Unstored(self.failure))
            except BaseException:  # (SystemExit from a store): nothing acknowledged, and
                # the next call reloads the stored state (the loop must go on)
                for i in applied:
                    outcomes[i] = _Refused(Unstored(self.failure))
        return outcomes

    def query(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` for an answer: committed like :meth:`call` (time may have changed
        something), or, while the store refuses writes, answered from what is stored (the
        scheduler is frozen meanwhile: nothing changes); Unstored if even that is not known
        (the stored state could not be reloaded)."""
        try:
            with self.lock:
                self._check_leader()
                if not self.failure:
                    with contextlib.suppress(Unstored):
                        return self._apply(fn, *args)  # (checks the role again: cheap)
                if not self._reloaded:
                    raise Unstored(self.failure)
                try:
                    return fn(*args)
                finally:
                    self.hooks.discard()  # (frozen: nothing it did is stored)
        finally:
            self.hooks.deliver()

    def _apply_grouped(self, fn: Callable[..., T], *args: Any) -> T | _Group:
        """:meth:`call` under the lock: its result once committed, or the open group whose
        commit a call waiting for the lock will make (this call's result kept in it)."""
        if not self._entering:
            return self._apply(fn, *args)
        self._check_leader()
        self._check_writable()
        try:
            result: Any = fn(*args)
        except (StaleReport, UnknownTask) as exc:  # refused, but what it saw is committed
            result = _Refused(exc)
        except BaseException:  # a fault half way (or SystemExit): what it changed is not kept
            self._roll_back()
            raise
        if self._group is None:
            self._group = _Group()
        self._group.results[threading.get_ident()] = result
        self._grouped += 1
        return self._group

    def _settle_group(self) -> None:
        """Before the lock is let go: commit the open group unless a call waiting for the lock
        will (a call that found the lock taken always takes it next or later)."""
        if self._group is None or (self._entering and self._grouped < GROUP_MAX):
            return
        with contextlib.suppress(Unstored, NotLeader):  # (its calls are told by _end_group)
            self._commit_or_roll_back()

    def _end_group(self, error: Exception | None) -> None:
        """The open group's changes are stored (``error`` None) or not: tell its calls."""
        group, self._group, self._grouped = self._group, None, 0
        if group is not None:
            group.error = error
            group.done.set()

    def _apply(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`call` under the lock, committed at once (with the open group, if any)."""
        self._check_leader()
        self._check_writable()
        try:
            result = fn(*args)
        except (StaleReport, UnknownTask):  # refused before any change to the tasks (a
            # worker may have been seen): kept, not rolled back by reloading the whole state
            self._commit_or_roll_back()
            raise
        except BaseException:  # a fault half way (or SystemExit): what it changed is not kept
            self._roll_back()
            raise
        self._commit_or_roll_back()
        return result

    def leading(self) -> bool:
        """Whether this server leads now: a leader whose lease ran out by its own clock (not
        renewed in time) steps down here, whatever the store says later."""
        if (
            self.role == LEADER
            and self.lease_deadline is not None
            and self.clock() >= self.lease_deadline
        ):
            self.step_down("", "its lease ran out before it could renew it")
        return self.role == LEADER

    def _check_leader(self) -> None:
        """NotLeader unless this server leads, with a lease that has not run out."""
        if not self.leading():
            raise NotLeader(self.leader)

    def promote(self, records: list[TaskRecord], workers: Workers, until: float, term: int) -> None:
        """Lead from now on under the lease's ``term``, with the state ``records`` and
        ``workers`` loaded from the store after the lease was taken (as a restart: every known
        worker counts as just seen), the lease running until ``until`` (``clock``'s time).
        The store's saves carry ``term`` from here on, not before: a call still running under
        an earlier term has finished (it held the lock) or is refused."""
        from .main import collector_paused

        with self.lock:
            self._end_group(NotLeader(self.leader))  # (a group open as the server stepped down)
            with collector_paused():
                self.core.reload(records, workers)
            self.hooks.discard()
            for forget in self.on_promote:
                forget()
            if isinstance(self.store, CanLead):
                self.store.fence(term)
            self.term = term
            self.failure = ""
            self._logged.clear()
            self._reloaded = True
            self.lease_deadline = until
            self.leader = self.public_url
            self.role = LEADER
            self.core.frozen = False

    def step_down(self, leader: str, why: str, *, stopping: bool = False) -> None:
        """Stand by from now on (``leader``: who leads instead, "" if not known): every call
        is refused until :meth:`promote`; the state in memory is not used again. Logged as an
        error unless the server is ``stopping``."""
        was = self.role
        self.role = STANDBY
        self.leader = leader
        self.core.frozen = True
        if isinstance(self.store, CanLead):
            self.store.fence(0)  # (a call under way commits nothing from now on)
        if was == LEADER:
            with contextlib.suppress(OSError):
                if stopping:
                    log.info("giving up the lead", reason=why)
                else:
                    log.error("stepping down: not the leader any more", reason=why, leader=leader)

    def _check_writable(self) -> None:
        """While the store refuses writes, probe it; Unstored until a write succeeds."""
        if not self.failure:
            return
        try:
            if isinstance(self.store, CanProbe):
                self.store.probe()
        except Deposed:
            self.step_down("", "another server took the lease")
            raise NotLeader("") from None
        except Exception as exc:
            self._note_failure(exc)
            raise Unstored(self.failure) from None
        self._roll_back()  # as a restart: every known worker counts as just seen
        if not self._reloaded:
            raise Unstored(self.failure)
        with contextlib.suppress(OSError):  # (a log on the same full disk must not stop us)
            log.warning("state store writable again; accepting changes", state=self.where)
        self.failure = ""
        self._logged.clear()
        self.core.frozen = False

    def _commit_or_roll_back(self) -> None:
        """Commit; if that fails, reload the stored state over what the call changed, and
        refuse changes (Unstored) until a write succeeds."""
        try:
            self._commit()
        except Deposed:  # another server leads now: nothing of this call was written
            self.hooks.discard()
            self.step_down("", "another server took the lease")
            self._end_group(NotLeader(""))
            raise NotLeader("") from None
        except Exception as exc:
            self._note_failure(exc)
            self.core.frozen = True
            self._roll_back()
            raise Unstored(self.failure) from None
        except BaseException as exc:  # (SystemExit from a store; ^C on an embedder's thread)
            # what the calls changed was taken for the save and may not be stored: nothing is
            # acknowledged, and the next call reloads the stored state before it goes on
            self._reloaded = False  # (not trusted: a read is refused too until a reload)
            self._note_failure(exc)
            self.core.frozen = True
            self._end_group(Unstored(self.failure))
            raise
        self.hooks.committed()
        self._end_group(None)

    def _roll_back(self) -> None:
        """Replace the scheduler's state with what the store holds, as a restart would. If
        the store cannot be read either, the state in memory is not trusted: writes and reads
        are refused until a later reload succeeds."""
        from .main import collector_paused, records_of  # (main builds this module's app)

        # the open group's changes are undone with the rest: its calls are told so
        self._end_group(Unstored(self.failure or "the change was undone; nothing was changed"))
        try:
            with collector_paused():
                records, workers = records_of(self.store, self.where)
                self.core.reload(records, workers)
            self._reloaded = True
        except BaseException as exc:  # (SystemExit too: then raised again, untrusted)
            self._reloaded = False
            self.core.frozen = True
            self._note_failure(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.hooks.discard()  # what the plugins were to be told of is undone

    def _note_failure(self, exc: BaseException) -> None:
        """Remember why writes fail; log each kind of error once until writes succeed."""
        kind = f"{type(exc).__name__}: {exc}"
        self.failure = f"the state store cannot store changes ({kind}); nothing was changed"
        self._log_once(
            kind, "state store refused a write; refusing state changes until it takes one"
        )

    def _log_once(self, kind: str, event: str) -> None:
        """Log ``event`` with the error ``kind``, once per kind until writes succeed again."""
        if kind not in self._logged:
            self._logged.add(kind)
            with contextlib.suppress(OSError):  # (a log on the same full disk)
                log.error(event, state=self.where, error=kind)

    def _commit(self) -> None:
        """Write what changed since the last commit (and what was removed) to the store."""
        apart = self._interest_apart
        if apart is not None:  # (changed stakeholders and runners alone: not whole rows)
            records, workers, interest = self.core.take_changes_apart()
        else:
            (records, workers), interest = self.core.take_changes(), []
        gone_tasks, gone_workers = self.core.take_removals()
        rows = [to_row(r) for r in records]
        if apart is not None and interest:
            apart.save_stakeholders(
                rows, workers, interest, gone_tasks=gone_tasks, gone_workers=gone_workers
            )
        else:
            self.store.save(rows, workers, gone_tasks=gone_tasks, gone_workers=gone_workers)

    def close(self, flush_timeout: float) -> None:
        """Unconfigure the plugins (``conveyor_unconfigure``, bounded by ``flush_timeout``
        each), then close the store; again is a no-op. Called as the server shuts down (its
        lifespan's end: uvicorn re-raises a SIGTERM after that, so nothing later runs)."""
        with self._door:
            if self._closed:
                return
            self._closed = True  # (a batch a loop begins from now on is answered 503)
        # a batch being committed meanwhile ends first (bounded; those begun later are
        # refused): what it changed is stored before the store is closed
        if self.lock.acquire(timeout=flush_timeout + 30):
            self.lock.release()
        try:
            if self.campaign is not None:
                self.campaign.stop()  # (resigns the lease: a standby takes it at its next look)
            self.hooks.relay.unconfigure(flush_timeout)
        finally:
            self.store.close()

    def tick(self) -> None:
        """Apply time-based changes (retries, disconnected workers) even when nobody calls,
        and give back space the store freed; while the store refuses writes, probe it."""
        with contextlib.suppress(Unstored, NotLeader):
            self.call(self.core.statuses, ())
        if isinstance(self.store, CanCompact) and not self.failure and self.role == LEADER:
            try:
                self.store.compact()
            except Exception as exc:  # (space not given back yet; the next commit will tell)
                kind = f"compaction: {type(exc).__name__}: {exc}"
                self._log_once(kind, "state store compaction failed")


def _saves_stakeholders(store: StateStore) -> CanSaveStakeholders | None:
    """``store`` if its class sets stakeholders in place (:class:`CanSaveStakeholders`) and
    its ``save`` is not overridden below the class that does (a subclass of the SQLite store
    that overrides ``save`` alone sees every change there, as whole rows); else None."""
    if not isinstance(store, CanSaveStakeholders) or "save" in getattr(store, "__dict__", {}):
        return None  # (nor a save set on the object itself)
    classes = type(store).__mro__

    def depth(name: str) -> int | None:
        return next((i for i, cls in enumerate(classes) if name in vars(cls)), None)

    # (a store that has them through __getattr__, a proxy of another, is given whole rows
    # through the save it defines: that may check a lease the other does not know)
    own, save = depth("save_stakeholders"), depth("save")
    return store if own is not None and save is not None and own <= save else None


def _handlers(service: SchedulerService) -> dict[str, Callable[[Any], Any]]:
    """Each worker-facing route of :data:`~conveyor.protocol.ROUTES`: its decoded request in,
    the scheduler core's answer out (:meth:`SchedulerCore.call`, the one dispatcher), run by
    :meth:`SchedulerService.call_async` (committed), or by :meth:`SchedulerService.query` for
    a route that only asks (answered from what is stored while the store refuses writes)."""
    core = service.core

    async def query(request: Any) -> Any:
        return await asyncio.to_thread(service.query, core.call, request)

    return {
        name: query if route.query else functools.partial(service.call_async, core.call)
        for name, route in ROUTES.items()
    }


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json(raw: bytes) -> Any:
    """Parse a request body strictly: ValueError (with the reason) for anything not plain JSON.

    NaN and Infinity, nesting too deep to handle, and strings that are not valid Unicode (lone
    surrogates) are refused here, so nothing the server stores can fail to be written back.
    """
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("the request body is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"the request body is not valid JSON: {exc}") from None
    if _may_hold_surrogates(raw):
        _check_unicode(body)
    return body


def _may_hold_surrogates(raw: bytes) -> bool:
    """Whether parsing ``raw`` can have made a lone surrogate: False only for UTF-8 without a
    ``\\ud``/``\\uD`` escape and without an encoded surrogate (``json.loads`` decodes bytes
    with ``surrogatepass``: the bytes ED A0-BF ... become one; any ED byte counts here, which
    is also the first of some valid characters, whose strings are then checked)."""
    if not isinstance(raw, bytes | bytearray) or json.detect_encoding(raw) != "utf-8":
        return True
    return b"\\ud" in raw or b"\\uD" in raw or b"\xed" in raw


def _check_unicode(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    "the request body holds a string that is not valid Unicode"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _error(
    status: int, message: str, field: str = "", headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = {"error": message, **({"field": field} if field else {})}
    return JSONResponse(body, status_code=status, headers=headers)


_CLAIMED_MAX = 200  # characters of who a submit or cancel says it is from
_HIDDEN = frozenset({"Cc", "Cf", "Cs"})  # control, format (bidi overrides), lone surrogates


_STAMPED = frozenset({"submit", "cancel"})  # the routes whose ``by`` the server fills in


def caller_of(decoded: Any, token: str) -> Any:
    """A :class:`~conveyor.protocol.Submit` or :class:`~conveyor.protocol.Cancel` whose ``by``
    says who asks as this server let them in: ``"<what they said> via API token"`` (or
    ``via API, no token`` on a server without one); what a caller says cannot be checked, how
    it was let in can, so the last ``via …`` is always the server's. What they said loses its
    control and format characters (a bidi override could garble the rest) and is cut to
    200 characters."""
    how = "API token" if token else "API, no token"
    spaced = "".join(" " if c.isspace() else c for c in str(decoded.by))
    printable = "".join(c for c in spaced if unicodedata.category(c) not in _HIDDEN)
    claimed = " ".join(printable.split())[:_CLAIMED_MAX]
    return dataclasses.replace(decoded, by=f"{claimed} via {how}" if claimed else how)


Respond = Callable[[bytes], Awaitable[JSONResponse]]
"""A worker-facing route's answer to a request's body (:func:`_post_route`)."""


def _post_route(
    name: str,
    handler: Callable[[Any], Awaitable[Any]],
    hooks: ServerHooks,
    stamp: Callable[[Any], Any] | None = None,
) -> tuple[Route, Respond]:
    """The route ``/api/v1/<name>``, and its answer to a body (which :class:`_Posts` calls
    without the route)."""
    request_cls = ROUTES[name].request

    async def respond(raw: bytes) -> JSONResponse:
        try:
            body = load_json(raw)
        except ValueError as exc:
            return _error(400, str(exc))
        try:
            decoded = decode(request_cls, body)
        except FieldError as exc:
            return _error(422, str(exc), exc.field)
        if stamp is not None:
            decoded = stamp(decoded)
        try:
            result = await handler(decoded)
        except UnknownTask as exc:  # (cancel: nothing changed)
            return _error(404, str(exc), "task_id")
        except StaleReport as exc:  # fenced: another attempt owns the task; nothing changed
            log.warning("stale report refused", route=name, error=str(exc))
            if hooks.wants(REPORT_REFUSED):
                who, task, attempt = decoded.worker_id, decoded.task_id, decoded.attempt
                await asyncio.to_thread(hooks.refused, name, who, task, attempt, str(exc))
            return _error(409, str(exc), "attempt")
        for refused in getattr(result, "refused", ()):  # stale reports a get_work carried
            log.warning("stale report refused", route=refused.route, error=refused.error)
            if hooks.wants(REPORT_REFUSED):
                who, task, attempt = decoded.worker_id, refused.task_id, refused.attempt
                await asyncio.to_thread(
                    hooks.refused, refused.route, who, task, attempt, refused.error
                )
        if stamp is not None:  # submit, cancel: one audit line each, as the UI's actions
            log.info("api action", action=name, by=decoded.by, **_audited(decoded, result))
        return _Answer(encode(result))

    async def endpoint(request: Request) -> JSONResponse:
        # (:class:`_Posts` answers the route's POSTs; the route names it and makes Starlette
        # answer other methods 405 and keep plugin routes off its path)
        return await respond(await request.body())

    return Route(f"/api/v1/{name}", endpoint, methods=["POST"], name=name), respond


_encode_answer = compact_encoder(ensure_ascii=False, allow_nan=False)


class _Answer(JSONResponse):
    """A worker-facing route's answer: the text of Starlette's ``JSONResponse`` (compact,
    UTF-8, NaN refused) from an encoder built once."""

    def render(self, content: Any) -> bytes:
        """``content`` as JSON bytes."""
        return _encode_answer(content).encode()


Handler = Callable[[Request, Exception], Awaitable[JSONResponse]]


class _Posts:
    """In front of the Starlette app: a ``POST`` to a worker-facing route (``get_work``,
    ``add_tasks`` ...) is answered here, without the router, the middleware and the request
    object, which took about a sixth of the app's instructions for such a request; every
    other request goes to the app. The answers, the errors and the names the guard tells the
    plugins are the app's: the route's own :data:`Respond`, the app's exception handlers
    (Starlette's way: the nearest class of the exception's; the handler of ``Exception``
    answers 500, also for an error of another handler, and the exception goes on to the
    guard, which logs it). Starlette would look an error of a handler up again among the
    handlers first; none of the app's handlers raises one that has a handler of its own."""

    def __init__(
        self,
        app: Any,
        posts: Mapping[str, tuple[Route, Respond]],
        handlers: Mapping[type[Exception], Handler],
    ) -> None:
        """``posts``: each path → its route (the guard's name for it) and its answer;
        ``handlers``: the app's exception handlers (coroutines, as the app's are)."""
        self.app = app
        self.posts = posts
        self.handlers = handlers
        self._last = handlers.get(Exception)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Answer a worker-facing ``POST``; pass anything else on."""
        post = self.posts.get(scope["path"]) if scope["type"] == "http" else None
        if post is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        route, respond = post
        scope["route"], scope["endpoint"], scope["path_params"] = route, route.endpoint, {}
        raw = await _body(receive)
        if raw is None:  # (the client went away: nobody to answer)
            return
        try:
            response = await respond(raw)
        except Exception as exc:
            await self._answer_error(scope, receive, send, exc)
            return
        await response(scope, receive, send)

    async def _answer_error(
        self, scope: dict[str, Any], receive: Any, send: Any, exc: Exception
    ) -> None:
        """Answer ``exc`` as the app would; raise it on (to the guard) if it is unexpected."""
        handler = next((self.handlers[k] for k in type(exc).__mro__ if k in self.handlers), None)
        if handler is None:
            raise exc
        request = Request(scope, receive, send)
        try:
            response = await handler(request, exc)
        except Exception as failed:  # (as in the app: the 500 of Exception's handler)
            if self._last is None or handler is self._last:
                raise
            handler, exc = self._last, failed
            response = await handler(request, exc)
        await response(scope, receive, send)
        if handler is self._last:
            raise exc


async def _body(receive: Any) -> bytes | None:
    """A request's whole body (None if the client went away before it was read)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _audited(request: Any, answer: Any) -> dict[str, Any]:
    """What the audit line of a submit or cancel says besides who: the task, and for a
    cancel how many tasks it cancelled (the first ids) and stopped."""
    if isinstance(answer, CancelAnswer):
        return {
            "task_id": request.task_id,
            "downstream": request.downstream,
            "cancelled": len(answer.cancelled),
            "tasks": list(answer.cancelled[:_AUDITED_IDS]),
            "stopping": len(answer.stopping),
        }
    return {"task_id": answer.task_id, "status": str(answer.status)}


_AUDITED_IDS = 20  # task ids an audit line names at most


def create_app(
    service: SchedulerService,
    *,
    token: str,
    max_request_bytes: int,
    address: OwnAddress,
    flush_timeout: float = 5.0,
    luigi_rpc: bool = False,
) -> Starlette:
    """The ASGI application serving ``service`` as the server at ``address``; when it shuts
    down, the service is closed (its plugins given ``flush_timeout`` to flush). With
    ``luigi_rpc``, Luigi's RPC routes are served too (:mod:`.luigi_rpc`)."""
    handlers = _handlers(service)
    document = openapi_document()
    guard = Guard(
        None,
        token=token,
        max_request_bytes=max_request_bytes,
        address=address,
        luigi_rpc=luigi_rpc,
    )

    def stamp(decoded: Any) -> Any:
        return caller_of(decoded, token)

    async def health(request: Request) -> JSONResponse:
        service.leading()  # (a lease that ran out shows at once, not at the next look)
        return JSONResponse(
            {
                "status": "ok",
                "api_requests": guard.api_requests,
                "max_request_bytes": max_request_bytes,
                "stale_reports": service.core.stale_reports,
                "state_store_error": service.failure,
                "role": service.role,
                "leader": service.leader,
            }
        )

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(document)

    def task_infos() -> TaskList:
        # The store holds every change the scheduler made: each accepted call is committed
        # before it is answered, and the time-based ones (retries due, workers lost) are
        # committed by the tick, and here for those due now, so the list reflects this moment
        # (while the store refuses writes the scheduler is frozen: nothing changes). The list
        # itself is read through TaskReads, not under the scheduler's lock.
        if service.leading():  # (a standby reads what the leader stored)
            service.query(service.core.statuses, ())
        return TaskList(service.reads.task_infos())

    async def tasks(request: Request) -> JSONResponse:
        listed = await asyncio.to_thread(task_infos)
        return JSONResponse(encode(listed))

    async def workers(request: Request) -> JSONResponse:
        # On the scheduler: when each worker was last seen changes on every ping and is not
        # stored (that would be a write per ping); see docs/decisions.md.
        if not service.leading():
            raise NotLeader(service.leader)
        listed = await asyncio.to_thread(service.core.worker_list)  # (a reload holds its lock)
        return JSONResponse({"workers": listed})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def ticker() -> None:
            while True:
                await asyncio.sleep(1.0)
                try:
                    await asyncio.to_thread(service.tick)
                except Exception:  # (a fault must not stop the clock: logged, tried again)
                    log.exception("scheduler tick failed")

        task = asyncio.create_task(ticker())
        if service.campaign is not None:
            service.campaign.start()
        try:
            yield
        finally:
            task.cancel()
            await asyncio.to_thread(service.close, flush_timeout)

    posts = [
        _post_route(name, handlers[name], service.hooks, stamp if name in _STAMPED else None)
        for name in ROUTES
    ]
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/api/v1/tasks", tasks, methods=["GET"]),
        Route("/api/v1/workers", workers, methods=["GET"]),
        *(route for route, _ in posts),
        *ui_routes(service, token=token),
        *(luigi_routes(service) if luigi_rpc else ()),
    ]
    # (PluginError, exit 2, for one that collides); the guard asks the token on each
    contributed = service.hooks.routes(routes, SchedulerView(service))
    guard.protected = tuple(r.path_regex for r in contributed if isinstance(r, Route))
    routes += contributed
    if service.hooks.wants(REQUEST):
        guard.on_request = service.hooks.request
        # (an endpoint serving several routes, or none, is named by Starlette's own scope)
        served = [r for r in routes if isinstance(r, Route)]
        endpoints = [r.endpoint for r in served]
        guard.route_names = {r.endpoint: r.path for r in served if endpoints.count(r.endpoint) == 1}

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        # (a 405's Allow header, which Starlette's router puts on the exception, is kept)
        headers = getattr(exc, "headers", None)
        return _error(status, str(getattr(exc, "detail", "")) or "error", headers=headers)

    async def unstored(request: Request, exc: Exception) -> JSONResponse:
        return _error(503, str(exc), headers={"Retry-After": str(RETRY_AFTER)})

    async def unreadable(request: Request, exc: Exception) -> JSONResponse:
        # (a read the store cannot answer now, e.g. its database is restarting: no traceback)
        log.warning("state store read failed", path=request.url.path, error=str(exc))
        return _error(503, str(exc), headers={"Retry-After": str(RETRY_AFTER)})

    async def unusable(request: Request, exc: Exception) -> JSONResponse:
        # (a row edited behind the server's back: said as it is, no traceback)
        log.warning("a stored row is unusable", path=request.url.path, error=str(exc))
        return _error(500, str(exc))

    async def not_leader(request: Request, exc: Exception) -> JSONResponse:
        return not_leader_answer(exc if isinstance(exc, NotLeader) else NotLeader(""))

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        # (Starlette raises the exception on after this answer: the guard logs it)
        return _error(500, "internal error: the server failed to answer; it is logged")

    errors: dict[type[Exception], Handler] = {
        HTTPException: http_error,
        Unstored: unstored,
        UnusableRow: unusable,
        StateStoreError: unreadable,
        NotLeader: not_leader,
        Exception: internal_error,
    }
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=dict(errors))
    guard.app = _Posts(app, {route.path: (route, respond) for route, respond in posts}, errors)
    return guard  # type: ignore[return-value]
