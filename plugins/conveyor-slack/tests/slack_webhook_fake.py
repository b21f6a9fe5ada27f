"""A real HTTP server on 127.0.0.1 standing in for a Slack incoming webhook (for the tests)."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET_PATH = "/services/T0SECRET1/B0SECRET2/xoxSECRETxTOKEN3"
SECRET_MARKER = "SECRET"  # in every part of SECRET_PATH that must stay hidden


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer of the fake webhook."""

    status: int = 200
    body: str = "ok"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Received:
    """One request the fake webhook received."""

    path: str
    headers: dict[str, str]
    body: Any


class FakeWebhook:
    """A Slack webhook on 127.0.0.1: records each POST, answers with queued replies (then with
    ``default``, 200 "ok" unless changed)."""

    def __init__(self) -> None:
        """Bind a free port; serving starts with :meth:`start`."""
        self.received: list[Received] = []
        self.replies: deque[Reply] = deque()
        self.default = Reply()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        """The webhook URL, secret path included."""
        return f"http://127.0.0.1:{self.server.server_address[1]}{SECRET_PATH}"

    def reply(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        """Answer the next request so."""
        self.replies.append(Reply(status, body, headers or {}))

    def always(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        """Answer every request (after the queued replies) so."""
        self.default = Reply(status, body, headers or {})

    def record(self, request: Received) -> Reply:
        """Keep ``request``; the reply it gets."""
        with self._lock:
            self.received.append(request)
            return self.replies.popleft() if self.replies else self.default

    def start(self) -> None:
        """Serve on a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


def _handler_for(hook: FakeWebhook) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            reply = hook.record(Received(self.path, dict(self.headers.items()), body))
            data = reply.body.encode()
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the tests read ``hook.received``."""

    return Handler
