"""ASGI middleware in front of the API: bearer token first, then the body-size limit.

The token is checked from the headers alone, before any byte of the body is read, and compared
with :func:`hmac.compare_digest`. A ``Content-Length`` over the limit is refused at once; a body
that turns out larger while streaming is refused as soon as it crosses the limit.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

__all__ = ["Guard"]

Scope = dict[str, Any]
Message = dict[str, Any]


class _TooLarge(Exception):
    """The body crossed the limit while being read."""


class Guard:
    """Wraps an ASGI app with authentication and a request-size limit."""

    def __init__(self, app: Any, *, token: str, max_request_bytes: int) -> None:
        """Guard ``app``; an empty ``token`` turns authentication off."""
        self.app = app
        self._token = token.encode()
        self.max = max_request_bytes
        self.api_requests = 0  # served at /health, for operators and benchmarks

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """Refuse unauthenticated or oversized requests; pass the rest on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        if scope["path"].startswith("/api/"):
            self.api_requests += 1
        if scope["path"].startswith("/api/") and self._token and not self._authorised(headers):
            await _reply(
                send, 401, "missing or invalid bearer token", {"www-authenticate": "Bearer"}
            )
            return
        if self._announced_too_large(headers):
            await _reply(send, 413, f"request body larger than {self.max} bytes")
            return
        await self._call_limited(scope, receive, send)

    def _authorised(self, headers: dict[str, bytes]) -> bool:
        scheme, _, given = headers.get("authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)

    def _announced_too_large(self, headers: dict[str, bytes]) -> bool:
        try:
            return int(headers.get("content-length", b"0")) > self.max
        except ValueError:
            return False

    async def _call_limited(self, scope: Scope, receive: Any, send: Any) -> None:
        seen = 0
        too_large = False
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, too_large
            message: Message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max:
                    too_large = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if too_large:
                return  # the app's own answer to the interrupted read is replaced by a 413
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not too_large:
                raise
        if too_large and not started:
            await _reply(send, 413, f"request body larger than {self.max} bytes")


async def _reply(send: Any, status: int, error: str, extra: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
