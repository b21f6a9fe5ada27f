"""ASGI middleware in front of the app: who may ask, then what they may send.

Every check but the last reads the headers alone, before any byte of the body; in order:

1. ``Host`` must name this server, else 421 (DNS rebinding; see :mod:`.hosts`);
2. an ``Origin``, when there is one, must be the server's own, else 403 (another site's page);
3. ``OPTIONS`` (a CORS preflight) is answered 204 with nothing that approves another origin;
4. ``/api/`` routes, and the routes plugins contribute (:attr:`Guard.protected`: ``/metrics``…),
   need ``Authorization: Bearer <token>`` when a token is set, else 401, compared with
   :func:`hmac.compare_digest`;
5. every ``POST`` (the API's, and the web UI's sign-in and actions) must be
   ``Content-Type: application/json`` (parameters such as ``charset`` allowed), else 415: a
   page can send a form or ``text/plain`` body to another site without asking first, but not
   JSON;
6. a ``Content-Length`` over the limit gets 413; a body that turns out larger while it is
   streamed in gets 413 as soon as it crosses the limit.

Luigi's RPC routes (``/api/add_task`` ...; :data:`~.luigi_rpc.LUIGI_PATHS`) are checked the
same way, except for what Luigi sends: with ``luigi_rpc`` on, they take HTTP Basic auth whose
password is the token (the user name is not looked at; UTF-8 or Latin-1 encoded) instead of a
bearer token, and ``application/x-www-form-urlencoded`` bodies instead of JSON. A cross-site
form can send one, so more is asked of a request there: besides the ``Origin`` check above, a
``Sec-Fetch-Site`` other than ``same-origin`` or ``none`` is refused 403, and so is, when
there is no ``Origin``, a ``Referer`` naming another origin; and a 401 there carries no
``WWW-Authenticate`` challenge (a browser would ask for credentials, then send them along on
other sites' form posts). With ``luigi_rpc`` off they answer 404 saying how to turn it on.

Each refusal is a JSON error ``{"error": ...}`` saying what was wrong and what was expected.
Whatever the app raises ends here too: logged with its traceback, and answered (if nothing
was sent yet) with a JSON 500 that carries none; but a client that hung up before its body
ended is neither logged nor answered.
When :attr:`Guard.on_request` is set (a plugin implements ``conveyor_scheduler_request``), it
is told each request's route (as declared, or :data:`UNMATCHED` / :data:`REFUSED`), method,
status and duration once the answer is sent.
Every answer, the guard's own and the app's, carries :data:`SECURITY_HEADERS` (a strict
Content-Security-Policy, ``nosniff``, no framing, no referrer).
Whatever the guard answers itself closes the connection, and so does any answer the app sends
before the request's body was read to its end. Without ``Connection: close``, uvicorn keeps
the connection and reads the rest of the body to throw it away, however large the
``Content-Length`` (or endless the chunked body) is.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import structlog
from starlette.requests import ClientDisconnect

from .hosts import OwnAddress
from .luigi_rpc import LUIGI_PATHS

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "Guard"]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)

Scope = dict[str, Any]
Message = dict[str, Any]
Headers = dict[bytes, bytes]  # (names lower-case)
Refusal = tuple[int, str, dict[str, str]]

log = structlog.get_logger("conveyor.server")

_CLOSE = (b"connection", b"close")
_PASSED = "conveyor.passed"  # (in the scope: the guard handed the request to the app)
_PREFLIGHT = "conveyor.preflight"  # (in the scope: the guard answered a CORS preflight)
UNMATCHED = "(unmatched)"
"""The route name of a request whose path no route serves (a 404)."""
REFUSED = "(refused)"
"""The route name of a request the guard refused itself (401, 403, 404, 413, 415, 421)."""
PREFLIGHT = "(preflight)"
"""The route name of an ``OPTIONS`` request, which the guard answers itself (204)."""
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods named as they are; any other counts as ``OTHER`` (bounded for metric labels)."""
_JSON = b"application/json"
_FORM = b"application/x-www-form-urlencoded"
_LUIGI_OFF = (
    "no such route: Luigi's RPC routes are off on this server; set [server] luigi_rpc = true "
    "to serve Luigi workers (see docs/server.md)"
)


_OWN_HOSTS_KEPT = 64
"""The most ``Host`` headers remembered as this server's at a time (its names are its own on
any port, and a server bound to any address takes any IP address: when full, it starts again,
and the forms in use are remembered again at their next request)."""


class _TooLarge(Exception):
    """The body crossed the limit while being read."""


class Guard:
    """Wraps an ASGI app with the checks above."""

    def __init__(
        self,
        app: Any,
        *,
        token: str,
        max_request_bytes: int,
        address: OwnAddress,
        luigi_rpc: bool = False,
    ) -> None:
        """Guard ``app``; an empty ``token`` turns authentication off (nothing else);
        ``luigi_rpc``: Luigi's RPC routes are served (Basic auth and form bodies on them)."""
        self.app = app
        self.luigi_rpc = luigi_rpc
        self._token = token.encode()
        try:  # (a token Latin-1 cannot encode is compared as UTF-8 only)
            self._token_latin1 = token.encode("latin-1")
        except UnicodeEncodeError:
            self._token_latin1 = self._token
        self.max = max_request_bytes
        self.address = address
        self._own_hosts: set[bytes] = set()
        """``Host`` headers found to name this server (each parsed once, not per request)."""
        self.api_requests = 0  # served at /health, for operators and benchmarks
        self.protected: tuple[re.Pattern[str], ...] = ()
        """Paths besides ``/api/`` that need the token (the plugins' routes)."""
        self.on_request: Callable[[str, str, int, float], None] | None = None
        """Told ``(route, method, status, seconds)`` after each answer (None: nobody)."""
        self.route_names: dict[Any, str] = {}
        """Each route's endpoint → its declared path (the route that served a request, in
        every Starlette version: the router puts the endpoint in the request's scope)."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """Refuse what the checks refuse; pass the rest on, its body size limited; tell
        :attr:`on_request` how each request went."""
        if scope["type"] != "http" or self.on_request is None:
            await self._guard(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._guard(scope, receive, observed_send)
        finally:
            if status:  # (nothing answered: the client went away first; not a request served)
                method = scope["method"]
                self.on_request(
                    self._route_name(scope),
                    method if method in _METHODS else "OTHER",
                    status,
                    time.perf_counter() - started,
                )

    def _route_name(self, scope: Scope) -> str:
        """The declared path of the route that served ``scope``, else what answered it."""
        name = self.route_names.get(scope.get("endpoint"))
        if name is not None:
            return name
        path = getattr(scope.get("route"), "path", None)  # (newer Starlette names the route)
        if isinstance(path, str) and path:
            return path
        if scope.get(_PASSED):
            return UNMATCHED
        return PREFLIGHT if scope.get(_PREFLIGHT) else REFUSED

    async def _guard(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        api = scope["path"].startswith("/api/")
        if api:
            self.api_requests += 1
        elif self.protected and any(p.match(scope["path"]) for p in self.protected):
            api = True  # (a plugin's route: the token too)
        refusal = self._foreign(headers)
        if refusal is None and scope["method"] == "OPTIONS":
            scope[_PREFLIGHT] = True
            await _send(send, 204, b"", {"allow": "GET, POST, OPTIONS"})
            return
        if refusal is None and scope["path"] in LUIGI_PATHS:
            refusal = self._luigi_unacceptable(scope["method"], headers)
        else:
            refusal = refusal or self._unacceptable(scope["method"], headers, api)
        if refusal is not None:
            await _reply(send, *refusal)
            return
        await self._call_limited(scope, receive, send, _announces_body(headers))

    def _foreign(self, headers: Headers) -> Refusal | None:
        """421 for a Host that is not this server's, 403 for another site's Origin."""
        raw_host, raw_origin = headers.get(b"host"), headers.get(b"origin")
        if raw_host is None or raw_host not in self._own_hosts:
            problem = self.address.host_error(_text(raw_host))
            if problem or raw_host is None:
                return 421, problem, {}
            if len(self._own_hosts) >= _OWN_HOSTS_KEPT:
                self._own_hosts.clear()
            self._own_hosts.add(raw_host)
        if raw_origin is None:
            return None
        problem = self.address.origin_error(raw_origin.decode("latin-1"), _text(raw_host))
        return (403, problem, {}) if problem else None

    def _unacceptable(self, method: str, headers: Headers, api: bool) -> Refusal | None:
        """401 without the token, 415 for a POST body that is not JSON, 413 if too large."""
        if api and self._token and not self._authorised(headers):
            return 401, "missing or invalid bearer token", {"www-authenticate": "Bearer"}
        kind = headers.get(b"content-type")
        if method == "POST" and not _is_json(kind):
            shown = "none" if kind is None else repr(kind.decode("latin-1"))
            message = f"Content-Type {shown} is not accepted; expected application/json"
            return 415, message, {}
        if self._announced_too_large(headers):
            return 413, f"request body larger than {self.max} bytes", {}
        return None

    def _luigi_unacceptable(self, method: str, headers: Headers) -> Refusal | None:
        """For Luigi's routes: 404 when they are off, 401 without the token as the Basic
        password, 415 for a POST body that is not a form, 413 if too large."""
        if not self.luigi_rpc:
            return 404, _LUIGI_OFF, {}
        problem = self._cross_site(headers)
        if problem:
            return 403, problem, {}
        if self._token and not self._basic_authorised(headers):
            # (no WWW-Authenticate challenge: Luigi sends its credentials unasked, and a
            # browser that asked for them would send them along on cross-site form posts)
            message = "missing or invalid credentials: the Basic auth password must be the token"
            return 401, message, {}
        kind = headers.get(b"content-type")
        if method == "POST" and (kind or b"").partition(b";")[0].strip().lower() != _FORM:
            shown = "none" if kind is None else repr(kind.decode("latin-1"))
            message = (
                f"Content-Type {shown} is not accepted on Luigi's RPC routes; expected "
                "application/x-www-form-urlencoded (data=<JSON object>)"
            )
            return 415, message, {}
        if self._announced_too_large(headers):
            return 413, f"request body larger than {self.max} bytes", {}
        return None

    def _cross_site(self, headers: Headers) -> str:
        """For Luigi's routes (form bodies, which another site's page can post): why a
        request comes from a browser on another site ("" if it does not seem to). Luigi
        sends neither ``Sec-Fetch-Site`` nor ``Referer``; browsers send ``Sec-Fetch-Site``,
        and older ones a ``Referer`` when they leave out ``Origin``."""
        site = _text(headers.get(b"sec-fetch-site"))
        if site is not None and site.strip().lower() not in ("same-origin", "none"):
            return (
                f"Sec-Fetch-Site {site!r} refused: Luigi's RPC routes take no requests from "
                "another site's page"
            )
        referer = _text(headers.get(b"referer"))
        if referer is None or b"origin" in headers:  # (an Origin was checked already)
            return ""
        parts = urllib.parse.urlsplit(referer.strip())
        if not parts.scheme or not parts.netloc:
            return f"Referer {referer!r} refused: it names no origin"
        origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        problem = self.address.origin_error(origin, _text(headers.get(b"host")))
        return f"Referer refused: {problem}" if problem else ""

    def _basic_authorised(self, headers: Headers) -> bool:
        """Whether ``Authorization: Basic`` carries the token as its password, compared as
        UTF-8 bytes and as Latin-1 bytes (Luigi's requests-based fetcher encodes it Latin-1,
        its urllib one UTF-8), each in constant time."""
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            decoded = base64.b64decode(given.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        password = decoded.partition(b":")[2]
        as_utf8 = hmac.compare_digest(password, self._token)
        as_latin1 = hmac.compare_digest(password, self._token_latin1)
        return as_utf8 or as_latin1

    def _authorised(self, headers: Headers) -> bool:
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)

    def _announced_too_large(self, headers: Headers) -> bool:
        try:
            return int(headers.get(b"content-length", b"0")) > self.max
        except ValueError:
            return False

    async def _call_limited(self, scope: Scope, receive: Any, send: Any, unread: bool) -> None:
        """Call the app; 413 once the body crosses the limit, and ``Connection: close`` on an
        answer that starts while some of the body is still ``unread``."""
        seen = 0
        too_large = False
        started = False
        scope[_PASSED] = True

        async def limited_receive() -> Message:
            nonlocal seen, too_large, unread
            message: Message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max:
                    too_large = True
                    raise _TooLarge
                unread = unread and bool(message.get("more_body", False))
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if too_large:
                return  # the app's own answer to the interrupted read is replaced by a 413
            if message["type"] == "http.response.start":
                started = True
                extra = [*SECURITY_HEADERS, _CLOSE] if unread else SECURITY_HEADERS
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except ClientDisconnect:  # (the client hung up before its body ended: nobody to answer)
            return
        except Exception:
            if not too_large:  # a fault of the server's: logged here, answered JSON 500
                log.exception("request failed", method=scope["method"], path=scope["path"])
                if not started:
                    await _reply(send, 500, "internal error: the server failed to answer")
                return
        if too_large and not started:
            await _reply(send, 413, f"request body larger than {self.max} bytes")


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def _announces_body(headers: Headers) -> bool:
    """Whether the request says a body follows (chunked, or a Content-Length above 0)."""
    if b"transfer-encoding" in headers:
        return True
    return headers.get(b"content-length", b"0").strip() not in (b"", b"0")


def _is_json(content_type: bytes | None) -> bool:
    """``application/json``, whatever its parameters (``; charset=utf-8``)."""
    media = (content_type or b"").partition(b";")[0]
    return media.strip().lower() == _JSON


async def _reply(send: Any, status: int, error: str, extra: dict[str, str] | None = None) -> None:
    """A refusal: a JSON error, and the connection closed (an unread body is not drained)."""
    body = json.dumps({"error": error}).encode()
    await _send(send, status, body, {"content-type": "application/json", **(extra or {})})


async def _send(send: Any, status: int, body: bytes, headers: dict[str, str]) -> None:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    if status != 204:  # a 204 has no body and must not announce one
        raw.append((b"content-length", str(len(body)).encode()))
    raw += [*SECURITY_HEADERS, _CLOSE]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
