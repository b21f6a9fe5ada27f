"""The web UI (docs/ui.md): its files under ``/ui/``, its reads under ``/ui/api/``, its actions.

Theory of operation
-------------------
The page is static: hand-written ES modules and CSS shipped in the wheel
(``conveyor/server/ui/``), read once when the app is built. It draws everything from JSON, with
DOM text APIs only, so nothing a task or worker supplies is ever interpreted as HTML.

- **Reads** (``GET /ui/api/...``) run in a worker thread and go only through the state
  store's :class:`~.stores.TaskReads` (typed values of :mod:`conveyor.protocol`, turned into
  JSON field for field here): they never take the scheduler's lock, so a busy UI cannot delay a
  worker's call, and any store that passes ``conveyor.testing.check_state_store`` serves the
  UI. Only the workers view asks the scheduler itself, for what only it knows and no store
  keeps (last contact, resource use), which costs O(workers + running tasks).
- **Live**: the page polls ``GET /ui/api/changes`` once a second; the answer is the latest
  change number (``TaskReads.changes_since`` asked for no ids: one row read by the built-in
  stores), and the page re-reads its view when it moved. Polling
  needs no long-lived connection, so it survives a server restart and a buffering proxy, and
  nothing keeps the server from stopping. The same answer carries the server's ``role`` and
  the ``leader``'s URL, so the page learns within a second that the server it shows leads,
  or stands by.
- **Actions** (``POST /ui/api/retry``, ``reenable``, ``retry-failed``, ``cancel``) go through
  the scheduler's lock like a worker's call, are committed before the answer, and each is one
  audit log line naming the action, the tasks and the session. *Retry all failed* reads the ids it
  changes in one read from a store that can list them (:class:`~.stores.CanListIds`), else
  page by page through the list.
- **A standby** (a server that shares its store with a leader, :mod:`.leadership`) serves the
  same reads from the store, so its UI shows what the leader stored; it is read-only: an
  action answers 503 with ``Retry-After`` and ``{"error", "leader"}`` (the leader's URL, ""
  while none is known) and changes nothing, and the page hides its action buttons and says
  which server leads. Its workers view answers ``live: false``: the workers the store knows
  of, never a last contact or resource use (only the leader knows those).
- **Access**: without ``[server] token`` the UI is open (the server then listens on loopback
  only). With one, ``POST /ui/login`` exchanges the token (compared in constant time) for a
  random session id in an ``HttpOnly``, ``SameSite=Strict`` cookie; sessions live in memory
  for :data:`SESSION_SECONDS` (a restart signs everybody out). Without a valid cookie every
  ``/ui/api/`` route answers 401, except ``GET /ui/api/session``: it answers 200 with
  ``signed_in: false``, which tells the page to show its sign-in form.

The :class:`~.guard.Guard` in front has already checked the Host and Origin, that every
``POST`` is JSON, the body size, and it adds the security headers (CSP) to every answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import hmac
import importlib.resources
import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import UnknownTask
from ..protocol import TaskFilters, TaskStatus, encode
from .hooks import UI_ACTION
from .stores import PAGE_MAX, CanListIds, Unstored

if TYPE_CHECKING:
    from ..protocol import CancelAnswer
    from ..scheduler.policy import SchedulerCore
    from .app import SchedulerService
    from .stores import TaskReads

__all__ = ["SESSION_COOKIE", "SESSION_SECONDS", "Sessions", "ui_routes"]

log = structlog.get_logger("conveyor.server.ui")

SESSION_COOKIE = "conveyor_session"
SESSION_SECONDS = 12 * 3600
"""How long a sign-in lasts."""
_MAX_SESSIONS = 10_000  # the oldest goes first beyond this: sign-ins cannot fill the memory
_MAX_IDS = 10_000  # task ids one action may name
_ACTION_CHUNK = 1_000  # tasks changed per turn of the scheduler's lock
_WRONG_TOKEN_DELAY = 0.5  # seconds before a wrong token is answered
_LOGGED_IDS = 100  # task ids an audit line names (it counts them all)
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_STATES = tuple(TaskStatus)


class Sessions:
    """Signed-in browsers: random ids, each valid for :data:`SESSION_SECONDS`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """No sessions yet."""
        self._clock = clock
        self._until: dict[str, float] = {}  # (insertion order = age)
        self._lock = threading.Lock()

    def start(self) -> str:
        """A new session's id."""
        session = secrets.token_urlsafe(32)
        with self._lock:
            while len(self._until) >= _MAX_SESSIONS:
                del self._until[next(iter(self._until))]
            self._until[session] = self._clock() + SESSION_SECONDS
        return session

    def valid(self, session: str | None) -> bool:
        """Whether ``session`` is a live session's id (an expired one is forgotten)."""
        if not session:
            return False
        with self._lock:
            until = self._until.get(session)
            if until is None:
                return False
            if until < self._clock():
                del self._until[session]
                return False
            return True

    def end(self, session: str | None) -> None:
        """Forget ``session``."""
        with self._lock:
            self._until.pop(session or "", None)


def session_name(session: str | None) -> str:
    """How logs name a session: a short hash of its id (never the id, which is a secret)."""
    if not session:
        return "none"
    return "s-" + hashlib.sha256(session.encode()).hexdigest()[:12]


def _files() -> dict[str, tuple[bytes, str]]:
    """The page's files by name: bytes and content type."""
    found = {}
    for entry in importlib.resources.files("conveyor.server").joinpath("ui").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return found


class _Problem(Exception):
    """A request the UI refuses: status and message (and the field at fault)."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.field = field


_NO_STORE = {"cache-control": "no-store"}


def _error(exc: _Problem) -> JSONResponse:
    body = {"error": str(exc), **({"field": exc.field} if exc.field else {})}
    return JSONResponse(body, status_code=exc.status, headers=_NO_STORE)


def _json(body: Any) -> JSONResponse:
    return JSONResponse(body, headers=_NO_STORE)


def _filters(query: Mapping[str, str]) -> TaskFilters:
    state = query.get("state", "")
    if state and state not in _STATES:
        raise _Problem(
            422,
            f"state {state!r} is not a task state; expected one of " + ", ".join(_STATES),
            "state",
        )
    return TaskFilters(
        state=state,
        family=query.get("family", ""),
        worker=query.get("worker", ""),
        text=query.get("q", "").strip(),
    )


def _integer(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    value = _optional_integer(query, name, low, high)
    return default if value is None else value


def _optional_integer(query: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = query.get(name, "")
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise _Problem(422, f"{name} {raw!r} is not an integer", name) from None
    if not low <= value <= high:
        raise _Problem(422, f"{name} {value} is out of range; expected {low} to {high}", name)
    return value


def _text_field(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise _Problem(422, f"{name} must be a string", name)
    return value


def _task_ids(body: Mapping[str, Any]) -> list[str]:
    ids = body.get("task_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _Problem(422, "task_ids must be a list of task id strings", "task_ids")
    if not ids or len(ids) > _MAX_IDS:
        raise _Problem(422, f"task_ids must name 1 to {_MAX_IDS} tasks", "task_ids")
    return ids


async def _body(request: Request) -> dict[str, Any]:
    from .app import load_json

    try:
        body = load_json(await request.body())
    except ValueError as exc:
        raise _Problem(400, str(exc)) from None
    if not isinstance(body, dict):
        raise _Problem(422, "the request body must be a JSON object")
    return body


def ui_routes(service: SchedulerService, *, token: str) -> list[BaseRoute]:
    """The UI's routes for ``service``; ``token`` ("" for none) guards its data."""
    files = _files()
    sessions = Sessions()
    core = service.core
    expected = token.encode()

    def session_of(request: Request) -> str | None:
        return request.cookies.get(SESSION_COOKIE)

    def check(request: Request) -> None:
        if expected and not sessions.valid(session_of(request)):
            raise _Problem(401, "sign in first: this scheduler needs its token")

    from .app import NotLeader, not_leader_answer  # (app imports this module)

    def guarded(fn: Callable[[Request], Any], *, open_: bool = False) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                if not open_:
                    check(request)
                result = await fn(request)
            except _Problem as exc:
                return _error(exc)
            except NotLeader as exc:  # a standby, or a leader that stepped down meanwhile
                return not_leader_answer(exc, _NO_STORE)
            return result if isinstance(result, Response) else _json(result)

        return endpoint

    # Reads run on one thread of their own, which also encodes their answers: however many
    # pages are open, the UI takes at most that thread (and never the event loop, nor the
    # pool the worker routes fall back to) for its queries and its JSON.
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="conveyor-ui")

    async def answer(work: Callable[[], Any]) -> Response:
        def encoded() -> bytes:
            return json.dumps(work(), ensure_ascii=False, separators=(",", ":")).encode()

        body = await asyncio.get_running_loop().run_in_executor(pool, encoded)
        return Response(body, media_type="application/json", headers=_NO_STORE)

    async def read(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    store = service.reads

    def latest() -> int:
        return store.changes_since(0, 0).seq

    def must_lead() -> None:
        """NotLeader (503, nothing changed) unless this server leads."""
        if not service.leading():
            raise NotLeader(service.leader)

    # --- the page ---------------------------------------------------------------------------

    async def to_ui(request: Request) -> Response:
        return RedirectResponse("ui/", 307)  # relative: right under a proxy's path prefix too

    async def file(request: Request) -> Response:
        name = request.path_params.get("name") or "index.html"
        if name in ("login", "logout"):  # (their POST routes did not match: another method)
            return JSONResponse(
                {"error": f"/ui/{name} takes POST with a JSON body"},
                status_code=405,
                headers={"allow": "POST"},
            )
        found = files.get(name)
        if found is None:
            return JSONResponse({"error": f"no UI file named {name!r}"}, status_code=404)
        body, kind = found
        return Response(body, media_type=kind, headers={"cache-control": "no-cache"})

    # --- sign-in ------------------------------------------------------------------------------

    async def session(request: Request) -> Any:
        return {
            "auth_required": bool(expected),
            "signed_in": not expected or sessions.valid(session_of(request)),
        }

    async def login(request: Request) -> Response:
        body = await _body(request)
        given = body.get("token")
        if not isinstance(given, str):
            raise _Problem(422, "token must be a string", "token")
        if not expected:
            return _json({"signed_in": True})
        if not hmac.compare_digest(given.encode(), expected):
            client = request.client.host if request.client else "?"
            log.warning("ui sign-in refused: wrong token", client=client)
            await asyncio.sleep(_WRONG_TOKEN_DELAY)  # guessing costs time
            raise _Problem(401, "wrong token")
        new = sessions.start()
        log.info("ui sign-in", session=session_name(new))
        response = _json({"signed_in": True})
        response.set_cookie(
            SESSION_COOKIE,
            new,
            max_age=SESSION_SECONDS,
            path=None,  # the browser's default: the UI's directory, under any proxy prefix
            httponly=True,
            samesite="strict",
            secure=_https(request),
        )
        return response

    async def logout(request: Request) -> Response:
        await _body(request)
        old = session_of(request)
        if sessions.valid(old):
            log.info("ui sign-out", session=session_name(old))
        sessions.end(old)
        response = _json({"signed_in": False})
        response.set_cookie(
            SESSION_COOKIE, "", max_age=0, path=None, httponly=True, samesite="strict"
        )
        return response

    # --- reads --------------------------------------------------------------------------------

    async def summary(request: Request) -> Any:
        return await answer(lambda: encode(store.summary()))

    async def changes(request: Request) -> Any:
        # not on the reads' thread: the one-second poll never waits behind a big graph
        seq = await asyncio.to_thread(latest)
        service.leading()  # (a lease that ran out shows at once)
        return _json({"seq": seq, "role": service.role, "leader": service.leader})

    async def families(request: Request) -> Any:
        return await answer(lambda: {"families": list(store.families())})

    async def tasks(request: Request) -> Any:
        query = request.query_params
        filters = _filters(query)
        limit = _integer(query, "limit", 50, 1, PAGE_MAX)
        cursor = _optional_integer(query, "cursor", 0, 2**62)

        def work() -> dict[str, Any]:
            seq = latest()  # (first: the page is at least this new)
            found = store.page(filters, cursor, limit)
            nxt = found.next
            rows = encode(found.tasks)
            return {"tasks": rows, "next": None if nxt is None else str(nxt), "seq": seq}

        return await answer(work)

    def task_id_of(request: Request) -> str:
        task_id = request.query_params.get("id", "")
        if not task_id:
            raise _Problem(422, "id (the task id) is required", "id")
        return task_id

    def unknown(task_id: str) -> _Problem:
        return _Problem(404, f"the scheduler has no task {task_id!r}", "id")

    async def task(request: Request) -> Any:
        task_id = task_id_of(request)

        def work() -> dict[str, Any]:
            seq = latest()
            found = store.detail(task_id)
            if found is None:
                raise unknown(task_id)
            return {"task": encode(found), "seq": seq}

        return await answer(work)

    async def graph(request: Request) -> Any:
        task_id = task_id_of(request)
        down = request.query_params.get("down", "0") not in ("", "0", "false")

        def work() -> dict[str, Any]:
            seq = latest()
            found = store.graph(task_id, down)
            if found is None:
                raise unknown(task_id)
            return {**encode(found), "seq": seq}

        return await answer(work)

    async def workers(request: Request) -> Any:
        if not service.leading():
            # Who is connected, when each was last heard from and what it runs are known to
            # the leader alone (they are not stored); a standby's own state in memory is not
            # live. It lists the workers the store knows of, and says so.
            def stored() -> dict[str, Any]:
                known = [
                    {"worker_id": w.worker_id, "assistant": w.assistant} for w in store.workers()
                ]
                return {"live": False, "leader": service.leader, "workers": known, "resources": []}

            return await answer(stored)
        listed = await asyncio.to_thread(core.worker_list)
        used = await asyncio.to_thread(core.resource_list)
        return {"live": True, "workers": listed, "resources": used}

    # --- actions ------------------------------------------------------------------------------

    async def act(
        request: Request, action: str, apply: Callable[[list[str]], list[str]], ids: list[str]
    ) -> Any:
        changed: list[str] = []
        refused = ""
        for start in range(0, len(ids), _ACTION_CHUNK):  # worker calls get their turn between
            chunk = ids[start : start + _ACTION_CHUNK]
            try:
                changed += await asyncio.to_thread(service.call, apply, chunk)
            except (Unstored, NotLeader) as exc:  # the store stopped taking writes part way,
                # or another server took the lease
                if not changed:
                    raise  # (503: nothing was changed)
                refused = str(exc)
                break
        done = set(changed)
        skipped = [t for t in dict.fromkeys(ids) if t not in done]
        await audit(request, action, changed, skipped)
        return {"changed": changed, "skipped": skipped, **({"error": refused} if refused else {})}

    async def audit(
        request: Request, action: str, changed: list[str], skipped: list[str], **more: Any
    ) -> None:
        """One audit log line for an applied action, then the plugins' ``ui_action`` hook."""
        who = session_name(session_of(request)) if expected else "open"
        log.info(
            "ui action",
            action=action,
            tasks=changed[:_LOGGED_IDS],
            changed=len(changed),
            skipped=len(skipped),
            session=who,
            **more,
        )
        if service.hooks.wants(UI_ACTION):
            await asyncio.to_thread(
                service.hooks.ui_action, action, changed, len(skipped), who, _LOGGED_IDS
            )

    async def retry(request: Request) -> Any:
        must_lead()
        return await act(request, "retry", core.retry_now, _task_ids(await _body(request)))

    async def reenable(request: Request) -> Any:
        must_lead()
        return await act(request, "reenable", core.reenable, _task_ids(await _body(request)))

    async def retry_failed(request: Request) -> Any:
        must_lead()
        body = await _body(request)
        filters = TaskFilters(
            state=TaskStatus.FAILED,
            family=_text_field(body, "family"),
            worker=_text_field(body, "worker"),
            text=_text_field(body, "q").strip(),
        )
        ids = await read(_matching_ids, store, filters)
        return await act(request, "retry all failed", core.retry_now, ids)

    async def cancel(request: Request) -> Any:
        must_lead()
        body = await _body(request)
        task_id = body.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise _Problem(422, "task_id (the id of the task to cancel) is required", "task_id")
        downstream = body.get("downstream", False)
        if not isinstance(downstream, bool):
            raise _Problem(422, "downstream must be true or false", "downstream")
        by = f"UI session {session_name(session_of(request))}" if expected else "UI (open)"
        # committed before the answer, through the scheduler's lock, like a worker's call
        done = await asyncio.to_thread(service.call, _cancel_known, core, task_id, downstream, by)
        if done is None:
            raise _Problem(404, f"the scheduler has no task {task_id!r}", "task_id")
        changed, kept = list(done.cancelled), list(done.kept)
        await audit(request, "cancel", changed, kept, downstream=downstream)
        return {"changed": changed, "skipped": kept, "stopping": list(done.stopping)}

    api = [
        ("summary", summary, "GET"),
        ("changes", changes, "GET"),
        ("families", families, "GET"),
        ("tasks", tasks, "GET"),
        ("task", task, "GET"),
        ("graph", graph, "GET"),
        ("workers", workers, "GET"),
        ("retry", retry, "POST"),
        ("reenable", reenable, "POST"),
        ("retry-failed", retry_failed, "POST"),
        ("cancel", cancel, "POST"),
    ]
    return [
        Route("/", to_ui, methods=["GET"]),
        Route("/ui", to_ui, methods=["GET"]),
        Route("/ui/", file, methods=["GET"]),
        Route("/ui/api/session", guarded(session, open_=True), methods=["GET"]),
        Route("/ui/login", guarded(login, open_=True), methods=["POST"]),
        Route("/ui/logout", guarded(logout, open_=True), methods=["POST"]),
        *(Route(f"/ui/api/{name}", guarded(fn), methods=[method]) for name, fn, method in api),
        Route("/ui/{name:str}", file, methods=["GET"]),
    ]


def _cancel_known(
    core: SchedulerCore, task_id: str, downstream: bool, by: str
) -> CancelAnswer | None:
    """:meth:`~.policy.SchedulerCore.cancel`, or None for a task the scheduler does not know.

    The unknown task is answered as a value, not raised through :meth:`SchedulerService.call`:
    an exception there rolls the scheduler back by reloading the whole state from the store,
    which a mistyped id must not cost (``cancel`` refuses one before it changes anything)."""
    try:
        return core.cancel(task_id, downstream, by)
    except UnknownTask:
        return None


def _matching_ids(store: TaskReads, filters: TaskFilters) -> list[str]:
    """The id of every task ``filters`` match (for an action on all of them): in one read
    from a store that can list them (:class:`~.stores.CanListIds`), else page by page."""
    if isinstance(store, CanListIds):
        return list(store.task_ids(filters))
    ids: list[str] = []
    cursor: int | None = None
    while True:
        found = store.page(filters, cursor, PAGE_MAX)
        ids += (entry.task_id for entry in found.tasks)
        if found.next is None:
            return ids
        cursor = found.next


def _https(request: Request) -> bool:
    """Whether the browser reached the UI over HTTPS (directly, or says a proxy)."""
    forwarded = request.headers.get("x-forwarded-proto", "")
    return request.url.scheme == "https" or forwarded.split(",")[0].strip() == "https"
