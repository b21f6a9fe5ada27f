"""luigid's RPC on conveyor's server: unmodified Luigi 3 workers against ``conveyor scheduler``.

With ``[server] luigi_rpc = true`` the server also serves the routes Luigi's
``RemoteScheduler`` (``luigi/rpc.py``) calls, ``/api/<method>``, each taking Luigi's
form-encoded body ``data=<JSON object of the method's arguments>`` and answering
``{"response": ...}`` as luigid does. So ``luigi --module m Task --scheduler-url
http://user:TOKEN@host:8082/`` runs against conveyor's scheduler: its tasks land in the same
durable state, under the same fencing and in the same UI as conveyor workers' tasks.

Theory of operation
-------------------
Nothing here touches the scheduler's records: every Luigi call is translated into conveyor's
own protocol requests (:data:`conveyor.protocol.ROUTES`) and run through
:meth:`~.app.SchedulerService.call` (or ``query`` for a read), so each accepted change is
committed to the state store before Luigi is answered and the server's plugins hear of it.

- ``add_task`` is either a *registration* (the worker's scheduling pass: ``runnable`` is a
  bool) -> :class:`~conveyor.protocol.AddTasks` with one :class:`~conveyor.protocol.TaskSpec`
  (``loader = "luigi"``, Luigi's task id, family, module and string params), or a *report* of
  a task the worker was handed (``runnable`` None, or a hand-out known for that worker and
  task): ``DONE`` -> :class:`~conveyor.protocol.TaskDone`, ``FAILED`` ->
  :class:`~conveyor.protocol.TaskFailed` with Luigi's ``expl``, ``PENDING`` with
  ``new_deps`` (dynamic dependencies) -> a registration adding those dependencies, which
  ends the attempt; ``RUNNING`` (a tracking URL) -> :class:`~conveyor.protocol.Annotate`.
- Luigi sends no attempt number: the ``Work.attempt`` handed out by ``get_work`` is kept per
  (worker, task) and named in the report, so a late report of a task the scheduler took back
  and handed out again is refused (fencing). After a server restart, when that memory is
  gone, the attempt is read from the task's stored attempt history (the latest hand-out to
  that worker). A refused report is answered 200 with ``{"response": null, "refused": why}``
  (Luigi ignores ``add_task``'s answer; an HTTP error would make it retry for a minute and
  then crash the worker), logged, and given to the ``report refused`` hook.
- ``get_work`` -> :class:`~conveyor.protocol.GetWork` (``current_tasks`` is ``running``:
  a hand-out the worker does not know of goes back to PENDING) and
  :class:`~conveyor.protocol.WorkLeftRequest` for the counts Luigi's keep-alive reads.
- Luigi worker ids (``Worker(salt=..., workers=1, host=..., username=..., pid=...)``) are
  used as conveyor worker ids as they are when they fit :data:`~conveyor.protocol.IDENTIFIER`
  (so the UI shows what Luigi logs); otherwise, deterministically, with control characters
  replaced and, if too long, shortened with a hash of the whole id.

Reads for Luigi's tools (``task_list``, ``graph``, ``dep_graph``, ``fetch_error``,
``task_search``, ``get_task_status_message`` ...) come from the state store's
:class:`~.stores.TaskReads`, answered in luigid's shapes with the fields conveyor keeps.
The other methods of Luigi's RPC are answered as luigid does when the feature is off
(scheduler messages, pause, batch emails, ``add_task_batcher``: batching is not done) or with
a JSON error 501 naming the method.

Arguments are read as leniently as luigid reads them where a Luigi worker may send odd
values (``Infinity``/``NaN`` read as null, fractional ``priority`` and ``resources`` rounded,
a status message that is not a string made one), since an error answer makes the ``luigi``
process fail. Errors: a body without ``data``, ``data`` that is not a JSON object, or an
argument of the wrong shape is a 400 JSON error naming the argument; a ``GET`` of a method
that changes state is 405. The :class:`~.guard.Guard` checks Host and Origin (and, on these
routes, ``Sec-Fetch-Site`` and ``Referer``), Basic auth (the password must be the token) and
``application/x-www-form-urlencoded``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..errors import StaleReport
from ..protocol import (
    IDENTIFIER,
    IDENTIFIER_MAX_LENGTH,
    AddTasks,
    Annotate,
    Explanation,
    FieldError,
    GetWork,
    NoteKind,
    Ping,
    TaskDone,
    TaskFailed,
    TaskInfo,
    TaskStatus,
    WorkAnswer,
    WorkLeft,
    WorkLeftRequest,
    decode,
)
from .hooks import REPORT_REFUSED

if TYPE_CHECKING:
    from .app import SchedulerService

__all__ = [
    "LUIGI_LOADER",
    "LUIGI_METHODS",
    "LUIGI_PATHS",
    "BadArgument",
    "LuigiRpc",
    "NotSupported",
    "conveyor_worker_id",
    "luigi_routes",
    "parse_data",
    "parse_form",
]

log = structlog.get_logger("conveyor.server")

LUIGI_LOADER = "luigi"
"""The task loader named on every task a Luigi worker registers (``TaskSpec.loader``)."""
_REMEMBERED = 100_000
"""The most hand-outs remembered for fencing (the oldest are forgotten first; a report of a
forgotten one is fenced through the stored attempt history instead)."""


class BadArgument(ValueError):
    """An argument of a Luigi call that is missing or of the wrong type (answered 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotSupported(Exception):
    """A method of Luigi's RPC that conveyor does not serve (answered 501)."""


# --- arguments ----------------------------------------------------------------------------------


def _get(args: Mapping[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``args[name]`` if it is a ``kind`` (bools are not numbers), else ``default`` when it is
    absent or None; BadArgument otherwise."""
    value = args.get(name)
    if value is None:
        if default is _REQUIRED:
            raise BadArgument(name, "required")
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise BadArgument(name, f"expected {_kind_name(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise BadArgument(name, f"expected {_kind_name(kinds)}, got {_json_type(value)}")
    return value


_REQUIRED = object()


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    names.update({list: "a list", dict: "an object"})
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _json_type(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _string_list(args: Mapping[str, Any], name: str) -> tuple[str, ...]:
    items = _get(args, name, list, [])
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise BadArgument(f"{name}[{i}]", f"expected a string, got {_json_type(item)}")
    return tuple(items)


def _params(args: Mapping[str, Any]) -> dict[str, str]:
    """Luigi's ``params`` (``to_str_params()``: strings); a value a custom ``serialize()``
    made something else is kept as its JSON text (``3`` -> ``"3"``), as luigid keeps it."""
    items = _get(args, "params", dict, {})
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in items.items()}


def _number(args: Mapping[str, Any], name: str) -> float | None:
    """A number argument (a boolean counts as 0 or 1, as in Python); None when absent, null
    or non-finite; BadArgument for any other shape."""
    value = _get(args, name, (int, float, bool), None)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return float(value) if isinstance(value, float) else int(value)


def _priority(args: Mapping[str, Any]) -> int:
    """Luigi's ``priority``: any finite number, rounded to the nearest integer, halves up
    (``1.5`` -> 2, ``-1.5`` -> -1), so a higher priority never becomes a lower one; absent or
    non-finite: 0."""
    value = _number(args, "priority")
    if value is None:
        return 0
    return value if isinstance(value, int) else math.floor(value + 0.5)


def _resources(args: Mapping[str, Any]) -> dict[str, int]:
    """Luigi's ``resources``: amounts rounded up (``{"gpu": 0.5}`` takes 1), negative ones
    read as 0, null or non-finite ones left out; a value that is not a number is a
    BadArgument."""
    items = _get(args, "resources", dict, {})
    out = {}
    for key, value in items.items():
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        if not isinstance(value, int | float):
            raise BadArgument(f"resources.{key}", f"expected a number, got {_json_type(value)}")
        out[key] = max(0, math.ceil(value))
    return out


def _retry_count(args: Mapping[str, Any]) -> int | None:
    """``retry_policy_dict.retry_count``: luigid disables a task once its failures reach it,
    so a fraction is rounded up and a negative count is 0; null or non-finite: the server's
    default."""
    policy = _get(args, "retry_policy_dict", dict, {})
    value = policy.get("retry_count")
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if not isinstance(value, int | float):
        field = "retry_policy_dict.retry_count"
        raise BadArgument(field, f"expected a number, got {_json_type(value)}")
    return max(0, math.ceil(value))


def _text(value: Any) -> str:
    """A message as text: a string as it is, null as "", anything else ``str()``."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _explanation(value: Any) -> str:
    """Luigi's ``expl``: a report sends ``json.dumps(expl)``, scheduling sends plain text."""
    if value is None:
        return ""
    if not isinstance(value, str):
        return json.dumps(value)
    try:
        inner = json.loads(value)
    except ValueError:
        return value
    return inner if isinstance(inner, str) else ("" if inner is None else value)


def parse_form(body: bytes) -> dict[str, Any]:
    """The arguments of a Luigi call from its form body (``data=<JSON object>``); BadArgument
    naming what is wrong."""
    try:
        text = body.decode("utf-8")
        form = urllib.parse.parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadArgument("data", f"the body is not a form (data=<JSON object>): {exc}") from None
    values = form.get("data")
    if not values:
        raise BadArgument("data", "the form has no data field; Luigi sends data=<JSON object>")
    if len(values) > 1:
        raise BadArgument("data", "the form has more than one data field")
    return parse_data(values[0])


def parse_data(raw: str) -> dict[str, Any]:
    """The JSON object of a ``data`` field; BadArgument if it is not one.

    Python's ``json.dumps`` (what Luigi sends) writes ``Infinity``, ``-Infinity`` and ``NaN``
    for non-finite floats (``max_batch_size=float("inf")``): here they are read as null, so
    each argument takes its default (nothing non-finite can reach the stored state). Strings
    that are not valid Unicode (lone surrogates) are refused, as on conveyor's own routes.
    """
    try:
        data = json.loads(raw, parse_constant=_non_finite)
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # (lone surrogates raise here)
    except RecursionError:
        raise BadArgument("data", "the data field is nested too deeply") from None
    except UnicodeEncodeError:
        message = "the data field holds a string that is not valid Unicode"
        raise BadArgument("data", message) from None
    except ValueError as exc:
        raise BadArgument("data", f"the data field is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadArgument("data", f"expected a JSON object, got {_json_type(data)}")
    return data


def _non_finite(name: str) -> None:
    """``Infinity``, ``-Infinity`` or ``NaN`` in Luigi's JSON: read as null."""
    return None


# --- worker ids ---------------------------------------------------------------------------------


def conveyor_worker_id(luigi_id: str) -> str:
    """The conveyor worker id of a Luigi worker id: the id itself when it fits
    :data:`~conveyor.protocol.IDENTIFIER`; otherwise control characters become ``?`` and an id
    still too long keeps its start and ends with ``#`` and 16 hex digits of its SHA-256."""
    if not IDENTIFIER.problem(luigi_id):
        return luigi_id
    if not luigi_id:
        raise BadArgument("worker", "expected a non-empty string")
    cleaned = "".join(c if c.isprintable() or c == " " else "?" for c in luigi_id)
    if len(cleaned) <= IDENTIFIER_MAX_LENGTH:
        return cleaned
    digest = hashlib.sha256(luigi_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return cleaned[: IDENTIFIER_MAX_LENGTH - 17] + "#" + digest


def _worker(args: Mapping[str, Any]) -> str:
    return conveyor_worker_id(_get(args, "worker", str, _REQUIRED))


# --- the translation ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Method:
    """One method of Luigi's RPC: its handler and whether it changes state (POST only)."""

    handler: Callable[[Mapping[str, Any]], Any]
    changes: bool


class LuigiRpc:
    """The methods of Luigi's RPC, translated into conveyor's requests on ``service``."""

    def __init__(self, service: SchedulerService) -> None:
        """Serve Luigi's calls through ``service`` (its scheduler, store and hooks)."""
        self.service = service
        self._lock = threading.Lock()
        self._attempts: OrderedDict[tuple[str, str], int] = OrderedDict()
        service.on_promote.append(self._forget_all)  # (another server may have led meanwhile)

    def _forget_all(self) -> None:
        with self._lock:
            self._attempts.clear()

    # --- the conveyor calls ---------------------------------------------------------------

    def _call(self, request: Any) -> Any:
        return self.service.call(self.service.core.call, request)

    def _query(self, request: Any) -> Any:
        return self.service.query(self.service.core.call, request)

    def _remember(self, worker_id: str, task_id: str, attempt: int) -> None:
        with self._lock:
            self._attempts[(worker_id, task_id)] = attempt
            self._attempts.move_to_end((worker_id, task_id))
            while len(self._attempts) > _REMEMBERED:
                self._attempts.popitem(last=False)

    def _forget(self, worker_id: str, task_id: str) -> None:
        with self._lock:
            self._attempts.pop((worker_id, task_id), None)

    def _handed_out(self, worker_id: str, task_id: str) -> int | None:
        """The attempt of ``task_id`` last handed to ``worker_id``: remembered, else read
        from the task's stored record (running there, or the latest such attempt in its
        history); None if it was never handed to that worker."""
        with self._lock:
            known = self._attempts.get((worker_id, task_id))
        if known is not None:
            return known
        core = self.service.core

        def look() -> int | None:
            rec = core.peek(task_id)  # (read only, under the service's lock)
            if rec is None:
                return None
            if rec.status == TaskStatus.RUNNING and rec.worker == worker_id and rec.attempt:
                return rec.attempt
            for entry in reversed(rec.attempts or ()):
                if entry.worker == worker_id:
                    return entry.attempt
            return None

        return self.service.query(look)

    # --- add_task -------------------------------------------------------------------------

    def add_task(self, args: Mapping[str, Any]) -> Any:
        """Register a task, or take the report of one this worker was handed."""
        task_id = _get(args, "task_id", str, _REQUIRED)
        worker_id = _worker(args)
        raw_status = _get(args, "status", str, "PENDING")
        if raw_status == "SUSPENDED":
            raw_status = "PENDING"  # (an old Luigi status; luigid reads it as PENDING too)
        try:
            status = TaskStatus(raw_status)
        except ValueError:
            choices = ", ".join(s.value for s in TaskStatus)
            raise BadArgument("status", f"expected one of {choices}, got {raw_status!r}") from None
        runnable = _get(args, "runnable", bool, None)
        assistant = bool(_get(args, "assistant", bool, False))
        expl = _explanation(args.get("expl"))
        if status == TaskStatus.RUNNING:
            return self._running(worker_id, task_id, _text(args.get("tracking_url")))
        attempt = None
        if runnable is None or status == TaskStatus.FAILED:
            attempt = self._handed_out(worker_id, task_id)
        if status == TaskStatus.DONE and attempt is not None:
            done = TaskDone(worker_id, task_id, attempt, expl)  # (expl: on_success()'s text)
            return self._report(worker_id, task_id, done)
        if status == TaskStatus.FAILED and attempt is not None:
            failed = TaskFailed(worker_id, task_id, expl, attempt)
            return self._report(worker_id, task_id, failed)
        if runnable is None and status in (TaskStatus.DONE, TaskStatus.FAILED):
            why = (
                f"the report of task {task_id} by worker {worker_id} was refused: the task "
                "was never handed to that worker"
            )
            return self._refused("add_task", worker_id, task_id, 0, why)
        if status == TaskStatus.FAILED:
            status = TaskStatus.UNKNOWN  # (broken before it ran: a registration cannot fail)
        deps = _string_list(args, "deps") + _string_list(args, "new_deps")
        spec = {
            "task_id": task_id,
            "family": _get(args, "family", str, ""),
            "module": _get(args, "module", str, ""),
            "params": _params(args),
            "status": status.value,
            "deps": list(deps),
            "priority": _priority(args),
            "resources": _resources(args),
            "runnable": True if runnable is None else runnable,
            "retry_count": _retry_count(args),
            "explanation": expl,
            "loader": LUIGI_LOADER,
        }
        request = _decode(
            AddTasks, {"worker_id": worker_id, "tasks": [spec], "assistant": assistant}
        )
        if runnable is None:  # (sent from run(): new_deps; it ends the attempt)
            return self._from_run(worker_id, task_id, attempt, request)
        self._call(request)
        return None

    def _holds(self, worker_id: str, task_id: str, attempt: int | None) -> bool:
        """Whether ``worker_id`` runs ``task_id`` now (its current ``attempt``, if given);
        call under the service's lock."""
        rec = self.service.core.peek(task_id)
        if rec is None or rec.status != TaskStatus.RUNNING or rec.worker != worker_id:
            return False
        return attempt is None or rec.attempt == attempt

    def _from_run(
        self, worker_id: str, task_id: str, attempt: int | None, request: AddTasks
    ) -> Any:
        """Apply a registration sent from a task's run() (``runnable`` None: dynamic
        dependencies) only if the worker holds the task's current attempt; refused otherwise.
        The check and the change are one :meth:`~.app.SchedulerService.call`, so no reclaim
        comes between them."""
        core = self.service.core

        def apply() -> bool:
            if attempt is None or not self._holds(worker_id, task_id, attempt):
                return False
            core.call(request)
            return True

        applied = self.service.call(apply)
        self._forget(worker_id, task_id)  # (that attempt ended, either way)
        if applied:
            return None
        held = (
            "was never handed to that worker"
            if attempt is None
            else (f"attempt {attempt} is no longer that worker's (the task was taken back)")
        )
        why = f"the report of task {task_id} by worker {worker_id} was refused: the task {held}"
        return self._refused("add_task", worker_id, task_id, attempt or 0, why)

    def _running(self, worker_id: str, task_id: str, url: str) -> Any:
        """Luigi's ``RUNNING`` report: the worker is alive; its tracking URL is stored only
        while the task runs on that worker (a late one from a reclaimed worker is refused)."""
        core = self.service.core
        note = self._annotate(task_id, NoteKind.TRACKING_URL, url) if url else None

        def apply() -> bool:
            core.call(Ping(worker_id))
            if note is None:
                return True
            if not self._holds(worker_id, task_id, None):
                return False
            core.call(note)
            return True

        if self.service.call(apply):
            return None
        with self._lock:
            attempt = self._attempts.get((worker_id, task_id), 0)
        why = (
            f"the tracking URL of task {task_id} from worker {worker_id} was refused: the task "
            "is not running on that worker"
        )
        return self._refused("add_task", worker_id, task_id, attempt, why)

    def _annotate(self, task_id: str, kind: NoteKind, value: str | float) -> Annotate:
        note: Annotate = _decode(Annotate, {"task_id": task_id, "kind": kind.value, "value": value})
        return note

    def _report(self, worker_id: str, task_id: str, report: TaskDone | TaskFailed) -> Any:
        try:
            self._call(report)
        except StaleReport as exc:
            name = "task_done" if isinstance(report, TaskDone) else "task_failed"
            return self._refused(name, worker_id, task_id, report.attempt, str(exc))
        finally:
            self._forget(worker_id, task_id)
        return None

    def _refused(self, route: str, worker_id: str, task_id: str, attempt: int, why: str) -> Any:
        log.warning("stale report refused", route=f"luigi {route}", error=why)
        hooks = self.service.hooks
        if hooks.wants(REPORT_REFUSED):
            hooks.refused(route, worker_id, task_id, attempt, why)
        return _Refused(why)

    # --- work -----------------------------------------------------------------------------

    def get_work(self, args: Mapping[str, Any]) -> Any:
        """The best task for the worker, with the counts Luigi's keep-alive reads."""
        worker_id = _worker(args)
        assistant = bool(_get(args, "assistant", bool, False))
        current = args.get("current_tasks")
        running = None if current is None else _string_list(args, "current_tasks")
        request = _decode(
            GetWork,
            {"worker_id": worker_id, "assistant": assistant}
            | ({} if running is None else {"running": list(running)})
            # a Luigi assistant can build Luigi's tasks only, never a conveyor task
            | ({"loaders": [LUIGI_LOADER]} if assistant else {}),
        )
        answer: WorkAnswer = self._call(request)
        reply = self._counts(self._query(WorkLeftRequest(worker_id)))
        work = answer.work
        if work is None:
            reply["task_id"] = None
            return reply
        self._remember(worker_id, work.task_id, work.attempt)
        reply.update(
            task_id=work.task_id,
            task_family=work.family,
            task_module=work.module or None,
            task_params=dict(work.params),
        )
        return reply

    def count_pending(self, args: Mapping[str, Any]) -> Any:
        """The counts of :meth:`get_work`, without asking for a task."""
        worker_id = _worker(args)
        return self._counts(self._query(WorkLeftRequest(worker_id)))

    def _counts(self, left: WorkLeft) -> dict[str, Any]:
        return {
            "n_pending_tasks": left.pending,
            "n_unique_pending": left.unique_pending,
            "n_pending_last_scheduled": left.last_scheduled,
            "running_tasks": [],
            "worker_state": "active",
        }

    def ping(self, args: Mapping[str, Any]) -> Any:
        """Keep the worker alive; it is never sent messages."""
        self._call(Ping(_worker(args)))
        return {"rpc_messages": []}

    def add_worker(self, args: Mapping[str, Any]) -> Any:
        """A worker says who it is: counted as seen (its info is not kept)."""
        self._call(Ping(_worker(args)))
        return None

    # --- notes from run() -----------------------------------------------------------------

    def set_task_status_message(self, args: Mapping[str, Any]) -> Any:
        """Store the status message of a running task."""
        task_id = _get(args, "task_id", str, _REQUIRED)
        message = _text(args.get("status_message"))  # (luigid keeps whatever it is sent)
        self._call(self._annotate(task_id, NoteKind.STATUS_MESSAGE, message))
        return None

    def set_task_progress_percentage(self, args: Mapping[str, Any]) -> Any:
        """Store the progress of a running task (a number, or a string of one, clamped to
        0-100; null or non-finite: nothing stored)."""
        task_id = _get(args, "task_id", str, _REQUIRED)
        raw = args.get("progress_percentage")
        if isinstance(raw, str):
            try:
                raw = float(raw)
            except ValueError:
                raise BadArgument(
                    "progress_percentage", f"expected a number, got {raw!r}"
                ) from None
        value = _number({"progress_percentage": raw}, "progress_percentage")
        if value is None:
            return None
        self._call(self._annotate(task_id, NoteKind.PROGRESS, min(100.0, max(0.0, value))))
        return None

    def get_task_status_message(self, args: Mapping[str, Any]) -> Any:
        """``{"taskId", "statusMessage"}`` ({} for an unknown task)."""
        task_id = _get(args, "task_id", str, _REQUIRED)
        found = self.service.reads.detail(task_id)
        if found is None:
            return {}
        return {"taskId": task_id, "statusMessage": found.status_message}

    def get_task_progress_percentage(self, args: Mapping[str, Any]) -> Any:
        """``{"taskId", "progressPercentage"}`` ({} for an unknown task)."""
        task_id = _get(args, "task_id", str, _REQUIRED)
        found = self.service.reads.detail(task_id)
        if found is None:
            return {}
        return {"taskId": task_id, "progressPercentage": found.progress}

    # --- reads for Luigi's tools ----------------------------------------------------------

    def fetch_error(self, args: Mapping[str, Any]) -> Any:
        """The task's stored explanation, as luigid's ``fetch_error``."""
        task_id = _get(args, "task_id", str, _REQUIRED)
        explanation = self._query(Explanation(task_id)).explanation
        return {"taskId": task_id, "error": explanation, "displayName": task_id}

    def _tasks(self) -> tuple[TaskInfo, ...]:
        self.service.query(self.service.core.statuses, ())  # (retries due now are applied)
        return self.service.reads.task_infos()

    def task_list(self, args: Mapping[str, Any]) -> Any:
        """The tasks (of one ``status`` if given; ``search``: text in the id), by id."""
        status = _get(args, "status", str, "")
        search = _get(args, "search", str, "")
        return {
            info.task_id: _serialize(info)
            for info in self._tasks()
            if (not status or info.status == status) and search in info.task_id
        }

    def task_search(self, args: Mapping[str, Any]) -> Any:
        """The tasks whose id holds ``task_str``, grouped by status."""
        text = _get(args, "task_str", str, _REQUIRED)
        found: dict[str, dict[str, Any]] = {}
        for info in self._tasks():
            if text in info.task_id:
                found.setdefault(info.status.value, {})[info.task_id] = _serialize(info)
        return found

    def graph(self, args: Mapping[str, Any]) -> Any:
        """Every task, by id (luigid's ``graph``)."""
        return {info.task_id: _serialize(info) for info in self._tasks()}

    def dep_graph(self, args: Mapping[str, Any]) -> Any:
        """The task and what it depends on, transitively (``include_done``: DONE ones too)."""
        task_id = _get(args, "task_id", str, _REQUIRED)
        include_done = _get(args, "include_done", bool, True)
        infos = {info.task_id: info for info in self._tasks()}
        out: dict[str, Any] = {}
        stack = [task_id]
        while stack:
            current = stack.pop()
            info = infos.get(current)
            if info is None or current in out:
                continue
            if not include_done and info.status == TaskStatus.DONE and current != task_id:
                continue
            out[current] = _serialize(info)
            stack.extend(info.dependencies)
        return out

    # --- what conveyor answers as luigid does with the feature off ------------------------

    def _nothing(self, args: Mapping[str, Any]) -> Any:
        return None

    def _not_paused(self, args: Mapping[str, Any]) -> Any:
        return {"paused": False}

    def _no_pause(self, args: Mapping[str, Any]) -> Any:
        return {"enabled": False}

    def _no_message(self, args: Mapping[str, Any]) -> Any:
        return {"message_id": None}

    def _no_response(self, args: Mapping[str, Any]) -> Any:
        return {"response": None}

    def _no_resources(self, args: Mapping[str, Any]) -> Any:
        return {}

    def _false(self, args: Mapping[str, Any]) -> Any:
        return False

    def methods(self) -> dict[str, _Method]:
        """Every method of Luigi 3's RPC this server answers, by name."""
        changes = {
            "add_task": self.add_task,
            "add_worker": self.add_worker,
            "get_work": self.get_work,
            "ping": self.ping,
            "add_task_batcher": self._nothing,  # (batching is not done: each task runs alone)
            "set_task_status_message": self.set_task_status_message,
            "set_task_progress_percentage": self.set_task_progress_percentage,
            "announce_scheduling_failure": self._nothing,
            "add_scheduler_message_response": self._nothing,
            "send_scheduler_message": self._no_message,
            "decrease_running_task_resources": self._nothing,
            "report_task_statistics": self._nothing,
            "update_metrics_task_started": self._nothing,
            "update_resources": self._false,
            "update_resource": self._false,
        }
        reads = {
            "count_pending": self.count_pending,
            "get_task_status_message": self.get_task_status_message,
            "get_task_progress_percentage": self.get_task_progress_percentage,
            "get_scheduler_message_response": self._no_response,
            "get_running_task_resources": self._no_resources,
            "fetch_error": self.fetch_error,
            "task_list": self.task_list,
            "task_search": self.task_search,
            "graph": self.graph,
            "dep_graph": self.dep_graph,
            "is_paused": self._not_paused,
            "is_pause_enabled": self._no_pause,
            "has_task_history": self._false,
        }
        return {
            **{name: _Method(fn, True) for name, fn in changes.items()},
            **{name: _Method(fn, False) for name, fn in reads.items()},
            **{name: _Method(_unsupported(name), True) for name in _UNSUPPORTED},
        }


_UNSUPPORTED = (
    "disable_worker",
    "forgive_failures",
    "mark_as_done",
    "set_worker_processes",
    "pause",
    "unpause",
    "prune",
    "re_enable_task",
    "inverse_dep_graph",
    "worker_list",
    "resource_list",
)
"""Luigi RPC methods answered 501: conveyor's UI and ``/api/v1/`` routes do most of these
instead; ``disable_worker`` is not done (a disabled worker would have to be stored)."""


_INSTEAD = {
    "disable_worker": (
        "conveyor does not disable workers; send the Luigi worker SIGUSR1 (it stops asking "
        "for work and exits once its running tasks end) or stop it"
    ),
}
"""What to do instead, for the unsupported methods the web UI does not do either."""


def _unsupported(name: str) -> Callable[[Mapping[str, Any]], Any]:
    instead = _INSTEAD.get(name, "use its web UI or its /api/v1/ routes instead")

    def handler(args: Mapping[str, Any]) -> Any:
        raise NotSupported(
            f"Luigi's RPC method {name!r} is not supported by conveyor's server; {instead} "
            "(see docs/server.md)"
        )

    return handler


LUIGI_METHODS = (
    "add_task",
    "add_worker",
    "get_work",
    "ping",
    "add_task_batcher",
    "set_task_status_message",
    "set_task_progress_percentage",
    "announce_scheduling_failure",
    "add_scheduler_message_response",
    "send_scheduler_message",
    "decrease_running_task_resources",
    "report_task_statistics",
    "update_metrics_task_started",
    "update_resources",
    "update_resource",
    "count_pending",
    "get_task_status_message",
    "get_task_progress_percentage",
    "get_scheduler_message_response",
    "get_running_task_resources",
    "fetch_error",
    "task_list",
    "task_search",
    "graph",
    "dep_graph",
    "is_paused",
    "is_pause_enabled",
    "has_task_history",
    *_UNSUPPORTED,
)
"""Every method of Luigi 3's RPC (``luigi.scheduler.RPC_METHODS``) that has a route here."""
LUIGI_PATHS = frozenset(f"/api/{name}" for name in LUIGI_METHODS)
"""The paths of those routes (the guard treats them as Luigi's: form bodies, Basic auth)."""


@dataclass(frozen=True, slots=True)
class _Refused:
    """The answer to a refused report: 200, ``response`` null, and why."""

    why: str


def _decode(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """``decode(cls, data)``, its FieldError a BadArgument naming the Luigi argument."""
    try:
        return decode(cls, dict(data))
    except FieldError as exc:
        field = exc.field.removeprefix("tasks[0].")
        names = {"worker_id": "worker", "explanation": "expl", "value": "value"}
        head, dot, rest = field.partition(".")
        shown = names.get(head, head) + dot + rest
        message = str(exc).partition(": ")[2] or str(exc)
        raise BadArgument(shown, message) from None


def _serialize(info: TaskInfo) -> dict[str, Any]:
    """A task in the shape luigid's visualiser and tools read (the fields conveyor keeps)."""
    shown = ", ".join(f"{k}={v}" for k, v in info.params.items())
    return {
        "name": info.family,
        "display_name": f"{info.family}({shown})",
        "status": info.status.value,
        "params": dict(info.params),
        "deps": list(info.dependencies),
        "workers": [info.worker] if info.worker else [],
        "worker_running": info.worker,
        "priority": info.priority,
        "status_message": info.status_message,
        "progress_percentage": info.progress,
        "tracking_url": info.tracking_url or None,
    }


# --- routes -------------------------------------------------------------------------------------


def _error(status: int, message: str, field: str = "") -> JSONResponse:
    return JSONResponse({"error": message, **({"field": field} if field else {})}, status)


def luigi_routes(service: SchedulerService) -> list[Route]:
    """The ``/api/<method>`` routes of Luigi's RPC, served through ``service``; a method that
    changes state takes ``POST`` only (``GET``: 405), a read takes ``GET`` too (``data`` in
    the query string, as Luigi's visualiser sends it)."""
    rpc = LuigiRpc(service)
    return [
        Route(
            f"/api/{name}",
            _endpoint(name, method),
            methods=["POST"] if method.changes else ["GET", "POST"],
            name=f"luigi_{name}",
        )
        for name, method in rpc.methods().items()
    ]


def _endpoint(name: str, method: _Method) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def endpoint(request: Request) -> JSONResponse:
        try:
            if request.method == "GET":
                raw = request.query_params.get("data")
                args = {} if raw is None else parse_data(raw)
            else:
                args = parse_form(await request.body())
            result = await asyncio.to_thread(method.handler, args)
        except BadArgument as exc:
            return _error(400, f"{name}: {exc}", exc.field)
        except NotSupported as exc:
            return _error(501, str(exc))
        if isinstance(result, _Refused):
            return JSONResponse({"response": None, "refused": result.why})
        return JSONResponse({"response": result})

    return endpoint
