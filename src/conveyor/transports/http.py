"""The ``http`` transport: the worker's side of the central scheduler's JSON API.

One persistent HTTP/1.1 connection per thread (the worker's loop and its keep-alive thread);
every call retried ``rpc_retries`` times with capped, jittered exponential backoff when the
answer is transient — a connection error, a timeout, a 5xx or a body that is not JSON. When
the budget is spent the call raises :class:`~conveyor.errors.SchedulerUnavailable`; the
worker then stops asking for work and keeps its results until the scheduler is back. A 4xx
answer is not retried: it names what the server refused. The token is sent only in the
``Authorization`` header and never appears in an error or a log line.

TLS (``https://`` URLs): one :class:`ssl.SSLContext` per transport, made when it is built —
the system's CAs, or only those of ``[scheduler] ca_file`` (pinning replaces the system's
store, for this transport alone: the process's default context, which task code uses, is left
as it is), hostname checking on, and the client certificate ``client_cert`` / ``client_key``
loaded for a proxy that asks for one. A TLS failure that retrying cannot cure — a certificate
that does not verify, a host name it does not cover, a server that wants or refuses the client
certificate, a port that does not speak TLS — is not retried either: it raises a
ConveyorError naming the URL, the reason and the key to change, like a 4xx.

Several schedulers (``[scheduler] url`` lists several URLs, one leader and its standbys): the
transport talks to one of them at a time, the *current* one, shared by its threads (a thread's
connection follows it). A standby answers 503 with ``{"leader": URL}``: the transport switches
to that leader and sends the call again at once, without counting an attempt — but only the
first time a call is pointed at a given server, so standbys that point at each other end in
the normal budget. A hint is followed only if it is a URL of the same scheme as the configured
ones (an ``https://`` transport never downgrades to ``http://``); the leader it names is one of
the operator's servers and gets the token like the configured ones. A hinted server becomes the
current one only once it has answered; one that is not a configured URL and refuses the call —
a TLS failure that is not retried, or HTTP 401, 403, 407 or 421 (its ``public_url`` is an
address its certificate does not cover, or a proxy there does not take the token) — is an
unusable hint: the call goes on with the configured URLs, and that hint is not followed again
for ``_UNUSABLE_FOR`` seconds (the call's final error, if it fails, says why). An ignored hint
is logged as a warning once per distinct hint, then at debug. A connection that fails
(refused, reset, timed out) or a standby that knows no leader (``"leader": ""``, a fail-over
under way) moves the next attempt to the next URL of the list, after the usual backoff. The
server that answers is remembered. With several configured URLs, a call keeps trying, beyond
``rpc_retries`` attempts if need be, until ``[schedulers.http] failover_window`` seconds have
passed since its first attempt, so that it outlasts a fail-over (``leader_lease`` + 2 s). One
URL behaves as before: it is the only one, unless a standby there names a leader.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import structlog

from ..backoff import Backoff
from ..config import Config, SchedulerSettings, ServerSettings
from ..errors import ConfigError, ConveyorError, SchedulerUnavailable, StaleReport
from ..protocol import (
    DROPPABLE,
    ROUTES,
    AddTasks,
    FieldError,
    Ok,
    Release,
    Statuses,
    StatusesAnswer,
    TaskInfo,
    TaskList,
    TaskSpec,
    TaskStatus,
    decode,
    encode_request,
    route_of,
)
from ..secrets import redact_text
from ..settings import Field
from .base import TransportContext

__all__ = ["HttpTransport"]

log = structlog.get_logger("conveyor.transports.http")

_BATCH = 500  # task specs per add_tasks request
_UNUSABLE_FOR = 300.0  # seconds a hinted leader that refused a call is not followed again
_UNUSABLE_STATUSES = frozenset({401, 403, 407, 421})
"""A learnt leader's refusals that say "not this server for you" (its token, its proxy, a
misdirected request), as opposed to a refusal of the request itself (a 404, 409 or 422 that a
configured URL would give too)."""
_WARNED_MAX = 64  # distinct ignored hints logged as warnings (after that, at debug)
_DEFAULTS: dict[type[Any], dict[str, Any]] = {
    kind: {f.name: f.default for f in dataclasses.fields(kind) if f.name in names}
    for kind, names in DROPPABLE.items()
}
"""The default of each droppable field (what a request is sent with once a server refused it)."""
T = TypeVar("T")


class _Transient(Exception):
    """A failure worth retrying; ``wait``: how long the server asked to wait (Retry-After);
    ``leader``: a standby's ``leader`` (None when the answer has none); ``unreachable``: the
    server could not be talked to at all (the next attempt goes to the next URL)."""

    def __init__(
        self, message: str, wait: float = 0.0, leader: str | None = None, unreachable: bool = False
    ) -> None:
        super().__init__(message)
        self.wait = wait
        self.leader = leader
        self.unreachable = unreachable


@dataclass(frozen=True, slots=True)
class _Target:
    """One scheduler's address: ``where`` is ``scheme://host:port``, as errors name it."""

    https: bool
    host: str
    port: int
    base: str

    @property
    def where(self) -> str:
        """``scheme://host:port`` (the path left out)."""
        return f"{'https' if self.https else 'http'}://{self.host}:{self.port}"


def _target_of(url: str) -> _Target | None:
    """The address of an http(s) URL, or None if it is not one a connection can be made to."""
    if len(url) > 2048 or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    https = parts.scheme == "https"
    return _Target(https, parts.hostname, port or (443 if https else 80), parts.path.rstrip("/"))


def _unusable(exc: ConveyorError) -> bool:
    """Whether a learnt leader's refusal ``exc`` makes it an unusable hint."""
    return isinstance(exc, _TlsRefused) or (
        isinstance(exc, _Refused) and exc.status in _UNUSABLE_STATUSES
    )


def _leader_of(raw: bytes) -> str | None:
    """A standby's ``leader`` of a 503's JSON body ("" while it knows none), else None."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    leader = answer.get("leader") if isinstance(answer, dict) else None
    return leader if isinstance(leader, str) else None


def _seconds(header: str | None) -> float:
    """A ``Retry-After`` in seconds (0 when absent or an HTTP date, which is not followed)."""
    try:
        seconds = float(header) if header else 0.0
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def _error_of(raw: bytes) -> str:
    """``: <error>`` of a JSON error body (a 503's says why), else ""."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return ""
    error = answer.get("error") if isinstance(answer, dict) else None
    return f": {redact_text(error)[:300]}" if isinstance(error, str) and error else ""


class _Refused(ConveyorError):
    """A 4xx answer (not retried); ``status`` is its HTTP status, ``field`` the request field
    it names ("" if none)."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.field = field


class _TlsRefused(ConveyorError):
    """A TLS handshake that failed for a reason retrying cannot cure (not retried)."""

    def __init__(self, url: str, reason: str, hint: str) -> None:
        super().__init__(f"TLS with the scheduler at {url} failed: {reason}; {hint}")
        self.url = url
        self.reason = reason


class HttpTransport:
    """Talks to ``conveyor scheduler`` at ``[scheduler] url`` (to the leader, when it lists
    several)."""

    settings_schema: ClassVar[dict[str, Field]] = {
        "failover_window": Field(
            "seconds",
            30.0,
            ge=0,
            doc="with several [scheduler] url: a call keeps trying at least this long",
        ),
    }

    def __init__(self, context: TransportContext | Config) -> None:
        """Read the client keys of ``[scheduler]`` and, for ``https://``, build the TLS
        context; nothing is contacted yet. ConfigError for a URL it cannot use, a TLS file
        that does not load, or a TLS key set with an ``http://`` URL.

        A worker passes a :class:`TransportContext`; a whole ``Config`` is accepted too, for
        code that builds the transport by hand (``HttpTransport(conveyor.load_config())``).
        """
        if isinstance(context, Config):
            context = TransportContext.of(context)
        self.settings: SchedulerSettings = context.scheduler
        self.failover_window = float(
            context.settings.get("failover_window", self.settings_schema["failover_window"].default)
        )
        urls = self.settings.urls
        targets: list[_Target] = []
        for url in urls:
            target = _target_of(url)
            if target is None:
                shown = redact_text(url)
                raise ConfigError(
                    f"scheduler.url = {shown!r}; expected http(s)://host:port"
                    if len(urls) == 1
                    else f"scheduler.url lists {shown!r}; expected http(s)://host:port for each",
                    key="scheduler.url",
                )
            if target not in targets:
                targets.append(target)
        if len({t.https for t in targets}) > 1:
            raise ConfigError(
                "scheduler.url mixes http:// and https:// URLs; expected one scheme for all "
                "(the token and the TLS keys go to every one of them)",
                key="scheduler.url",
            )
        self._configured = tuple(targets)
        self._learnt: _Target | None = None  # a leader a standby named, not in the list
        self._current = targets[0]  # where calls go (the server that answered last)
        self._switching = threading.Lock()
        self._unusable: dict[_Target, tuple[float, str]] = {}  # refused hints: (until, why)
        self._warned: set[str] = set()  # ignored hints already logged as a warning
        self._https = targets[0].https
        self._tls: ssl.SSLContext | None = None
        if self._https:
            self._tls = _tls_context(self.settings)
        else:
            _check_plain(self.settings)
        self._local = threading.local()
        self._limit: int | None = None  # the server's max_request_bytes, once asked
        self._no_release = False  # the server has no release route (it predates it)
        self._dropped: dict[type[Any], set[str]] = {}  # fields the server refused (it predates)
        self.sleep: Callable[[float], None] = time.sleep  # replaceable, e.g. by a fake clock's
        self.clock: Callable[[], float] = time.monotonic
        self.rand: Callable[[], float] = random.random

    # --- which scheduler ----------------------------------------------------------------------

    @property
    def _where(self) -> str:
        """The current scheduler's ``scheme://host:port``."""
        return self._current.where

    def _candidates(self) -> tuple[_Target, ...]:
        """The configured schedulers and a leader learnt from a standby, in that order."""
        learnt = self._learnt
        return self._configured if learnt is None else (*self._configured, learnt)

    def _hint(self, leader: str | None) -> _Target | None:
        """The scheduler a standby's ``leader`` names, if it is one to follow, else None (a
        URL of another scheme, or a leader that refused a call lately: :meth:`_unusable_why`)."""
        if not leader:
            return None
        target = _target_of(leader)
        if target is None or target.https != self._https:
            self._ignored(
                leader,
                "ignored a standby's leader hint: expected a URL of the configured scheme",
                scheme="https" if self._https else "http",
            )
            return None
        if self._unusable_why(target):
            return None
        return target

    def _ignored(self, leader: str, event: str, **extra: str) -> None:
        """Log an ignored hint: a warning the first time ``leader`` is ignored, at debug after
        (a standby behind a load balancer names it in every answer)."""
        shown = redact_text(leader)[:200]
        with self._switching:
            first = shown not in self._warned and len(self._warned) < _WARNED_MAX
            if first:
                self._warned.add(shown)
        (log.warning if first else log.debug)(event, leader=shown, **extra)

    def _unusable_why(self, target: _Target) -> str:
        """Why ``target``, a hinted leader, is not followed now ("" if it may be)."""
        entry = self._unusable.get(target)
        if entry is None:
            return ""
        if self.clock() >= entry[0]:
            self._unusable.pop(target, None)
            return ""
        return entry[1]

    def _unusable_hint(self, target: _Target, exc: ConveyorError) -> str:
        """Remember that ``target``, a leader that is not a configured URL, refused a call
        (``exc``): it is not followed for ``_UNUSABLE_FOR`` seconds, and calls start at the
        configured URLs again. Why, for the call's final error."""
        why = f"the leader a standby named, {target.where}, was not used: {exc}"
        with self._switching:
            self._unusable[target] = (self.clock() + _UNUSABLE_FOR, why)
            if self._learnt == target:
                self._learnt = None
            if self._current == target:
                self._current = self._configured[0]
        self._ignored(
            target.where,
            "the leader a standby named refused the call; using the configured URLs",
            reason=str(exc),
        )
        return why

    def _next(self, old: _Target) -> _Target:
        """The scheduler after ``old`` in the list (``old`` itself if it is the only one); it
        becomes the current one if ``old`` still is."""
        candidates = self._candidates()
        index = candidates.index(old) if old in candidates else -1
        new = candidates[(index + 1) % len(candidates)]
        with self._switching:
            if self._current == old and new != old:
                self._current = new
                log.info(
                    "no answer from a scheduler; trying the next URL", at=old.where, to=new.where
                )
        return new

    def _after(self, origin: _Target) -> _Target:
        """The configured URL after ``origin`` (the first if ``origin`` is not configured)."""
        configured = self._configured
        index = configured.index(origin) if origin in configured else -1
        return configured[(index + 1) % len(configured)]

    def _settle(self, target: _Target, hinted: bool) -> None:
        """Remember ``target``, whose answer was the leader's: calls start there from now (a
        leader a standby named, ``hinted``, is learnt: it joins the URLs tried)."""
        with self._switching:
            if target not in self._configured:
                self._learnt = target
            old = self._current
            if old != target:
                self._current = target
                if hinted:
                    log.info("following a standby to the leader", at=old.where, to=target.where)

    # --- plumbing ---------------------------------------------------------------------------

    def _connection(self, target: _Target) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.target != target:
            self._drop_connection()
            conn = None
        if conn is None:
            timeout = self.settings.rpc_timeout
            if self._tls is not None:
                conn = http.client.HTTPSConnection(
                    target.host, target.port, timeout=timeout, context=self._tls
                )
            else:
                conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
            self._local.conn = conn
            self._local.target = target
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if has_body:
            headers["Content-Type"] = "application/json"
        if self.settings.token:
            headers["Authorization"] = f"Bearer {self.settings.token}"
        return headers

    def _once(self, target: _Target, method: str, route: str, data: bytes | None) -> Any:
        try:
            conn = self._connection(target)
            conn.request(
                method, target.base + route, body=data, headers=self._headers(data is not None)
            )
            response = conn.getresponse()
            status, raw = response.status, response.read()
            retry_after = response.getheader("Retry-After")
        except ssl.SSLError as exc:
            self._drop_connection()
            refused = _tls_refusal(exc, self.settings)
            if refused is not None:
                raise _TlsRefused(target.where, *refused) from None
            raise _Transient(f"{type(exc).__name__}: {exc}", unreachable=True) from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop_connection()
            raise _Transient(f"{type(exc).__name__}: {exc}", unreachable=True) from None
        if status >= 500:
            leader = _leader_of(raw) if status == 503 else None
            raise _Transient(f"HTTP {status}{_error_of(raw)}", _seconds(retry_after), leader)
        try:
            answer = json.loads(raw)
        except ValueError:
            raise _Transient(f"HTTP {status} with a body that is not JSON") from None
        if status >= 400:
            error = answer.get("error", "") if isinstance(answer, dict) else ""
            if status == 409:  # the report of an attempt that is no longer current: refused
                raise StaleReport(str(error) or f"{route}: the attempt is no longer current")
            field = answer.get("field", "") if isinstance(answer, dict) else ""
            raise _Refused(
                status,
                f"the scheduler at {target.where} refused {route}: HTTP {status} {error}",
                field if isinstance(field, str) else "",
            )
        return answer

    def _call(
        self,
        method: str,
        route: str,
        data: bytes | None = None,
        check: Callable[[Any], Any] | None = None,
        tries: int | None = None,
    ) -> Any:
        """The answer of ``route`` to the JSON body ``data`` (passed through ``check``, which
        raises _Transient for an answer that does not fit), retried with backoff up to
        ``tries`` attempts (default ``rpc_retries``; with several configured URLs, for at least
        ``failover_window`` seconds too); SchedulerUnavailable in the end. A standby's leader
        hint is followed at once, once per server and call, and becomes the current server only
        once it answers; a hinted leader outside the list that refuses (:func:`_unusable`) is
        left for the configured URLs. An unreachable server or a standby without a leader (or
        with a hint not followed) moves the next attempt to the next URL."""
        s = self.settings
        window = self.failover_window if tries is None and len(self._configured) > 1 else 0.0
        tries = max(1, s.rpc_retries if tries is None else tries)
        backoff = Backoff(s.rpc_retry_wait, s.rpc_retry_max_wait)
        until = self.clock() + window
        hinted: dict[_Target, _Target] = {}  # servers a hint sent this call to: who named them
        refusal = ""  # why a hinted leader was not used, for the final error
        target = self._current
        attempt = 0
        while True:
            try:
                answer = self._once(target, method, route, data)
                result = answer if check is None else check(answer)
            except _Transient as exc:
                last = f"{target.where}: {exc}" if len(self._candidates()) > 1 else str(exc)
                hint = self._hint(exc.leader)
                if hint is None and exc.leader:
                    named = _target_of(exc.leader)
                    refusal = (self._unusable_why(named) if named else "") or refusal
                if hint is not None and hint != target and hint not in hinted:
                    hinted[hint] = target  # a standby names the leader: go there now
                    target = hint
                    continue
                attempt += 1
                left = until - self.clock()
                if attempt >= tries and left <= 0:
                    break
                if hint is not None and hint != target:  # named again: followed, but counted
                    hinted.setdefault(hint, target)
                    target = hint
                elif exc.unreachable or (exc.leader is not None and hint is None):
                    target = self._next(target)
                wait = min(max(exc.wait, 0.0), s.rpc_retry_max_wait)
                pause = max(backoff.delay(attempt, self.rand), wait)
                self.sleep(min(pause, left) if attempt >= tries else pause)
                continue
            except (_TlsRefused, _Refused) as exc:
                if target in self._configured or not _unusable(exc):
                    raise
                # a learnt leader that refuses (its certificate, its token): back to the list
                refusal = last = self._unusable_hint(target, exc)
                target = self._after(hinted.get(target, target))
                continue
            if method == "POST" or target in hinted:  # (a standby answers reads too)
                self._settle(target, target in hinted)
            return result
        where = ", ".join(t.where for t in self._candidates())
        whom = f"the scheduler at {where}" if "," not in where else f"the schedulers at {where}"
        also = f"; {refusal}" if refusal and refusal != last else ""
        raise SchedulerUnavailable(
            f"{whom} did not answer {route} after {attempt} attempt(s): {last}{also}"
        )

    def _post(self, request: Any, tries: int | None = None) -> Any:
        """Send a protocol request to its route; its answer, checked against the protocol
        (``tries`` as for :meth:`_call`). A field of :data:`~conveyor.protocol.DROPPABLE` that
        the server refuses (422: it predates the field) is left at its default from then on,
        and the request sent again without it (as many times as the server refuses another
        such field)."""
        kind = type(request)
        for name in self._dropped.get(kind, ()):
            request = replace(request, **{name: _DEFAULTS[kind][name]})
        route = route_of(request).name
        while True:  # (one more droppable field dropped each time, so this ends)
            try:
                return self._post_json(route, _dumps(encode_request(request)), tries)
            except _Refused as exc:
                name = exc.field
                if exc.status != 422 or name not in DROPPABLE.get(kind, ()):
                    raise
                if getattr(request, name) == _DEFAULTS[kind][name]:
                    raise
                self._dropped.setdefault(kind, set()).add(name)
                log.info("the scheduler predates a field: sent without it", route=route, field=name)
                request = replace(request, **{name: _DEFAULTS[kind][name]})

    def _post_json(self, name: str, data: bytes, tries: int | None = None) -> Any:
        """POST the encoded request ``data`` to route ``name``; its answer, checked (``tries``
        as for :meth:`_call`)."""
        route = ROUTES[name]
        path = f"/api/v1/{name}"
        return self._call("POST", path, data, self._checker(route.answer, path), tries)

    def _checker(self, cls: type[T], route: str) -> Callable[[Any], T]:
        """Decode an answer as ``cls``; one that does not fit is retried like a 5xx."""

        def check(answer: Any) -> T:
            try:
                return decode(cls, answer, strict=False)  # a newer server may add fields
            except FieldError as exc:
                raise _Transient(f"an answer that does not fit the protocol: {exc}") from None

        return check

    # --- the transport protocol ---------------------------------------------------------------

    def call(self, request: Any) -> Any:
        """Send ``request`` to the server's route of its name (``POST /api/v1/<name>``, the
        fields at their default left out: :func:`~conveyor.protocol.encode_request`) and
        return the decoded answer; :class:`~conveyor.errors.StaleReport` for a 409,
        SchedulerUnavailable once the retries are spent, ConveyorError for another 4xx.

        Three requests are split to fit the server: ``AddTasks`` into requests of at most
        ``_BATCH`` tasks within its ``max_request_bytes``; ``Statuses`` and ``Release`` into
        ``_BATCH`` * 10 ids each (the answers joined). ``Release`` is tried once, without
        retries (it is sent as a run ends, often as the server goes too, and a lost one only
        delays pruning), and a server without the route (404) is not asked again.
        """
        special = _SPLIT.get(type(request))
        if special is not None:
            return special(self, request)
        return self._post(request)

    def _add_tasks(self, request: AddTasks) -> Ok:
        """Register tasks in requests of at most ``_BATCH`` tasks that fit the server's
        ``max_request_bytes``; ConveyorError naming the task, before anything is sent, when
        one task's registration alone is too large."""
        items = request.tasks
        if not items:
            return _OK
        head = encode_request(replace(request, tasks=()))
        head.pop("tasks", None)
        prefix = _dumps(head)[:-1] + b',"tasks":['  # the request, up to its list of tasks
        room = self._request_limit() - len(prefix) - 2  # the closing "]}"
        encoded: list[bytes] = []
        for spec in items:
            data = _dumps(encode_request(spec))
            if len(data) <= room:
                encoded.append(data)
                continue
            parts = _split_deps(spec, room)  # (the scheduler merges a task's dependencies)
            if parts is None:
                raise ConveyorError(
                    f"task {spec.task_id} cannot be registered: its registration is "
                    f"{len(data)} bytes, more than the scheduler at {self._where} accepts in "
                    f"one request (max_request_bytes = {self._request_limit()}); make its "
                    "parameters smaller"
                )
            encoded += parts
        for batch in _batches(encoded, room):
            self._post_json("add_tasks", prefix + b",".join(batch) + b"]}")
        return _OK

    def _request_limit(self) -> int:
        """The server's ``max_request_bytes``, asked once from ``/health`` (one try: a server
        that does not say, or is down, leaves the default limit; the registration retries).
        A TLS refusal is raised: the registration would meet it too."""
        if self._limit is None:
            try:
                limit = _health_limit(self._once(self._current, "GET", "/health", None))
            except _TlsRefused:
                raise
            except (_Transient, ConveyorError):
                limit = None
            self._limit = limit or ServerSettings().max_request_bytes
        return self._limit

    def _release(self, request: Release) -> Ok:
        """Release in requests of ``_BATCH`` * 10 ids, each tried once; a server that
        predates the route answers 404: that is no error, and it is not asked again."""
        if self._no_release:
            return _OK
        ids = request.task_ids
        parts = [request] if ids is None else [replace(request, task_ids=c) for c in _chunks(ids)]
        try:
            for part in parts:
                self._post(part, tries=1)
        except _Refused as exc:
            if exc.status not in (404, 405):
                raise
            self._no_release = True
        return _OK

    def _statuses(self, request: Statuses) -> StatusesAnswer:
        """Statuses asked ``_BATCH`` * 10 ids per request, the answers joined."""
        out: dict[str, TaskStatus] = {}
        for chunk in _chunks(request.task_ids):
            answer: StatusesAnswer = self._post(replace(request, task_ids=chunk))
            out.update(answer.statuses)
        return StatusesAnswer(out)

    def task_list(self) -> list[TaskInfo]:
        """The server's task list."""
        route = "/api/v1/tasks"
        answer: TaskList = self._call("GET", route, check=self._checker(TaskList, route))
        return list(answer.tasks)

    def worker_list(self) -> list[dict[str, Any]]:
        """The server's worker list."""
        return list(self._call("GET", "/api/v1/workers", check=_worker_rows))

    def close(self) -> None:
        """Close the calling thread's kept-alive connection (the next call opens another)."""
        self._drop_connection()


_OK = Ok()
_SPLIT: dict[type[Any], Callable[[HttpTransport, Any], Any]] = {
    AddTasks: HttpTransport._add_tasks,
    Release: HttpTransport._release,
    Statuses: HttpTransport._statuses,
}
"""The requests :meth:`HttpTransport.call` splits to fit the server; every other one is
posted as it is."""


def _chunks(ids: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """``ids`` cut into parts of ``_BATCH`` * 10 (none if there are none)."""
    step = _BATCH * 10
    for start in range(0, len(ids), step):
        yield ids[start : start + step]


# --- TLS ------------------------------------------------------------------------------------------

_TLS_KEYS = ("ca_file", "client_cert", "client_key")


def _check_plain(settings: SchedulerSettings) -> None:
    """An ``http://`` URL: a TLS key set with it is a ConfigError, not silently unused (the
    token would cross the network in clear text while the file says the scheduler is pinned)."""
    given = [f"scheduler.{key}" for key in _TLS_KEYS if getattr(settings, key)]
    if given:
        raise ConfigError(
            f"{', '.join(given)} set, but scheduler.url = {redact_text(settings.url)!r} is "
            "plain http, where they would not be used; expected an https:// URL (or remove "
            "them)",
            key=given[0],
        )


def _tls_context(settings: SchedulerSettings) -> ssl.SSLContext:
    """The transport's one TLS context: the system's CAs or only ``ca_file``'s, hostname
    checking on, the client certificate loaded when set; ConfigError naming the key when a
    file does not hold what it should."""
    try:
        context = ssl.create_default_context(cafile=settings.ca_file or None)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ConfigError(
            f"scheduler.ca_file: no CA certificate could be loaded from {settings.ca_file!r}: "
            f"{_load_text(exc)}; expected a PEM file of CA certificates",
            key="scheduler.ca_file",
        ) from None
    context.set_alpn_protocols(["http/1.1"])  # as http.client does with its own context
    if context.post_handshake_auth is not None:  # a TLS 1.3 server may ask for the cert late
        context.post_handshake_auth = True
    if settings.client_cert:
        _load_client_cert(context, settings)
    return context


def _load_client_cert(context: ssl.SSLContext, settings: SchedulerSettings) -> None:
    """Load ``client_cert`` and its key (``client_key``, or the same file) into ``context``;
    an encrypted key is refused rather than prompted for. No error quotes the key file."""
    cert, key = settings.client_cert, settings.client_key
    label = "scheduler.client_key" if key else "scheduler.client_cert"
    shown = repr(key or cert)

    def no_passphrase() -> bytes:
        raise ConfigError(
            f"{label}: the private key in {shown} is encrypted; expected an unencrypted key "
            "(conveyor does not ask for passphrases: protect the file by its permissions)",
            key=label,
        )

    try:
        context.load_cert_chain(cert, key or None, password=no_passphrase)
    except (OSError, ValueError) as exc:
        what = f"{cert!r} with the key in {shown}" if key else f"{cert!r} (certificate and key)"
        raise ConfigError(
            f"scheduler.client_cert: cannot load the client certificate {what}: "
            f"{_load_text(exc)}; expected PEM files of a certificate and its unencrypted key",
            key="scheduler.client_cert",
        ) from None


def _ssl_text(exc: Exception) -> str:
    """An ssl / OS error as a short reason, without OpenSSL's ``[LIB: CODE]`` and source
    location."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return _SSL_NOISE.sub("", text).rstrip(".") or type(exc).__name__


def _load_text(exc: Exception) -> str:
    """Why a certificate or key file could not be loaded, in words where OpenSSL's are terse."""
    reason = _LOAD_REASONS.get(str(exc.reason), "") if isinstance(exc, ssl.SSLError) else ""
    return reason or _ssl_text(exc)


_SSL_NOISE = re.compile(r"^\[[A-Z0-9_]+(: [A-Z0-9_]+)?\]\s*|\s*\(_ssl\.c:\d+\)$")
_LOAD_REASONS = {
    "KEY_VALUES_MISMATCH": "the key does not belong to the certificate",
    "NO_CERTIFICATE_OR_CRL_FOUND": "it holds no PEM certificate",
    "None": "not a PEM certificate and key",  # OpenSSL's "[SSL] PEM lib"
}

# handshake failures retrying cannot cure, by OpenSSL's reason: the server's alerts about the
# client certificate (missing, unknown, refused), a port that does not speak TLS, no version
# in common
_CLIENT_CERT_ALERTS = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"})
_NO_COMMON_VERSION = frozenset(
    {"TLSV1_ALERT_PROTOCOL_VERSION", "UNSUPPORTED_PROTOCOL", "NO_PROTOCOLS_AVAILABLE"}
)
_NAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


def _tls_refusal(exc: ssl.SSLError, settings: SchedulerSettings) -> tuple[str, str] | None:
    """(reason, what to change) for a TLS failure that retrying cannot cure, else None (an
    EOF or reset mid-handshake, a proxy restarting: transient, retried like any)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _verify_refusal(exc, settings)
    reason = str(exc.reason)
    if reason in _CLIENT_CERT_ALERTS:
        text = f"the server refused the handshake ({_ssl_text(exc)})"
        if settings.client_cert:
            hint = "it does not accept the client certificate [scheduler] client_cert = "
            return text, hint + repr(settings.client_cert)
        asks = "asks" if reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED" else "may ask"
        return text, f"it {asks} for a client certificate: set [scheduler] client_cert"
    if reason in _NOT_TLS:
        hint = "if it serves plain HTTP, expected an http:// URL"
        return f"the server does not speak TLS ({_ssl_text(exc)})", hint
    if reason in _NO_COMMON_VERSION:
        return f"no TLS version in common ({_ssl_text(exc)})", "check the proxy's TLS versions"
    return None


def _verify_refusal(
    exc: ssl.SSLCertVerificationError, settings: SchedulerSettings
) -> tuple[str, str]:
    """(reason, what to change) for a server certificate that did not verify."""
    why = (exc.verify_message or "").rstrip(".") or _ssl_text(exc)
    reason = f"its certificate did not verify: {why}"
    if exc.verify_code in _NAME_MISMATCH:
        return reason, "expected a host in [scheduler] url that the certificate is issued for"
    if settings.ca_file:
        return (
            reason,
            f"[scheduler] ca_file = {settings.ca_file!r} does not hold the CA that signed it",
        )
    return (
        reason,
        "the system's CAs do not trust it: set [scheduler] ca_file to the CA that signed it",
    )


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _split_deps(spec: TaskSpec, room: int) -> list[bytes] | None:
    """``spec``'s registration as several, each of at most ``room`` bytes, with its
    dependencies shared out among them in order (the scheduler merges the dependencies of
    registrations of one task); None if it does not fit even with a single dependency."""
    base = len(_dumps(encode_request(replace(spec, deps=("",)))))  # (one empty id: "deps":[""])
    if base - 2 > room:
        return None
    parts: list[bytes] = []
    chunk: list[str] = []
    size = base - 2  # (the two quotes of the empty id)
    for dep in spec.deps:
        cost = len(_dumps(dep)) + (1 if chunk else 0)
        if chunk and size + cost > room:
            parts.append(_dumps(encode_request(replace(spec, deps=tuple(chunk)))))
            chunk, size, cost = [], base - 2, len(_dumps(dep))
        if size + cost > room:
            return None  # (a single id too long for the room left)
        chunk.append(dep)
        size += cost
    parts.append(_dumps(encode_request(replace(spec, deps=tuple(chunk)))))
    return parts


def _batches(encoded: list[bytes], room: int) -> Iterator[list[bytes]]:
    """Consecutive runs of ``encoded`` specs, each at most ``_BATCH`` long and at most
    ``room`` bytes joined by commas (every single one fits)."""
    batch: list[bytes] = []
    size = 0
    for data in encoded:
        added = len(data) + (1 if batch else 0)
        if batch and (size + added > room or len(batch) >= _BATCH):
            yield batch
            batch, size, added = [], 0, len(data)
        batch.append(data)
        size += added
    if batch:
        yield batch


def _health_limit(answer: Any) -> int | None:
    limit = answer.get("max_request_bytes") if isinstance(answer, dict) else None
    return limit if type(limit) is int and limit > 0 else None


def _worker_rows(answer: Any) -> list[dict[str, Any]]:
    rows = answer.get("workers") if isinstance(answer, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise _Transient("an answer that does not fit the protocol: workers: expected a list")
    return rows
