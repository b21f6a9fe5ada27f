"""The UI behind a reverse proxy that serves it under a path prefix (docs/ui.md): every address
the page uses is relative, the session cookie is scoped by the browser to the prefixed UI, and
an action through the proxy passes the Host and Origin checks.

The proxy is a small real HTTP server on loopback that strips ``/conveyor`` and forwards the
request with the browser's own ``Host``, as the nginx example of docs/ui.md does.
"""

from __future__ import annotations

import http.client
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from ui_support import UiServer, fail_through_api

from conveyor.testing.processes import kill_marked, wait_for

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

PREFIX = "/conveyor"
TOKEN = "proxy-t0ken-7c1e5a"
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class PrefixProxy:
    """Forwards ``PREFIX/...`` to the server's ``/...``; anything else is 404."""

    def __init__(self, upstream_port: int) -> None:
        """Listen on a free loopback port (not yet serving)."""
        upstream = upstream_port
        self.forwarded: list[str] = []
        forwarded = self.forwarded

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def _forward(self) -> None:
                if not self.path.startswith(PREFIX + "/"):
                    self.send_error(404)
                    return
                path = self.path[len(PREFIX) :]
                forwarded.append(path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                connection = http.client.HTTPConnection("127.0.0.1", upstream, timeout=20)
                try:
                    connection.request(self.command, path, body=body, headers=headers)
                    answer = connection.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    for name, value in answer.getheaders():
                        if name.lower() not in _HOP:
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    connection.close()

            do_GET = do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The prefixed base URL the browser uses."""
        return f"http://127.0.0.1:{self.port}{PREFIX}"


@pytest.fixture
def proxied(tmp_path: Any) -> Iterator[tuple[UiServer, PrefixProxy]]:
    """A scheduler with a token and one FAILED task, behind a prefix-stripping proxy."""
    marker = uuid.uuid4().hex
    server = UiServer(tmp_path / "proxied", marker, token=TOKEN)
    server.start()
    proxy = PrefixProxy(server.port)
    proxy.thread.start()
    try:
        fail_through_api(server, "proxy-worker", ["Behind-Proxy"])
        yield server, proxy
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()
        server.kill()
        kill_marked("UITEST_MARKER", marker)


@pytest.mark.timeout(90)
def test_the_ui_works_under_a_path_prefix(
    page: Any, context: Any, proxied: tuple[UiServer, PrefixProxy]
) -> None:
    """From the prefix's root: the redirect lands on the prefixed UI, sign-in works and its
    cookie is scoped to the prefixed UI, the overview and the detail load, Retry now changes
    the task through the proxy, and every request the page made went through the prefix."""
    server, proxy = proxied
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.goto(proxy.url + "/")
    assert page.url.startswith(proxy.url + "/ui/"), page.url
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator('[data-testid="count-FAILED"]')).to_have_text("1")
    cookies = [c for c in context.cookies() if c["name"] == "conveyor_session"]
    assert [c["path"] for c in cookies] == [PREFIX + "/ui"], cookies
    assert cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict", cookies
    page.goto(proxy.url + "/ui/#/task/Behind-Proxy")
    expect(page.locator('[data-testid="task-error"]')).to_contain_text("ApiError")
    page.get_by_role("button", name="Retry now").click()
    dialog = page.locator('[data-testid="confirm-dialog"]')
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Confirm").click()
    wait_for(lambda: server.states()["Behind-Proxy"] == "PENDING", 30, "the retry to apply")
    assert "/ui/api/retry" in proxy.forwarded
    outside = [u for u in urls if not (u.startswith(proxy.url + "/") or u.startswith("data:"))]
    assert outside == [], outside
