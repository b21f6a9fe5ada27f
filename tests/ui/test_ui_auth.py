"""Signing in to the web UI when the server has a token (SPEC §9 Access): every data and
action route answers 401 without the session cookie; a wrong token is 401 and logged without
the token; the right one gives an HttpOnly, SameSite=Strict cookie; logout ends the session.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ui_support import UiServer, audit_lines, fail_through_api, stderr_size, ui_url

from conveyor.testing.processes import wait_for

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

TOKEN = "ui-t0ken-Secret-9f2c7e"
WRONG = "wr0ng-Guess-4b1d88"
COOKIE = "conveyor_session"


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """A scheduler with a token, holding Auth-1 (PENDING), Auth-2 and Auth-3 (FAILED)."""
    from conveyor.testing.processes import kill_marked

    marker = uuid.uuid4().hex
    server = UiServer(tmp_path_factory.mktemp("ui-auth"), marker, token=TOKEN)
    server.start()
    try:
        fail_through_api(server, "auth-worker", ["Auth-2", "Auth-3"])
        server.add_tasks("auth-worker", [{"task_id": "Auth-1", "family": "Api", "module": "m"}])
        assert server.states() == {"Auth-1": "PENDING", "Auth-2": "FAILED", "Auth-3": "FAILED"}
        yield server
    finally:
        server.kill()
        kill_marked("UITEST_MARKER", marker)


def _sign_in(server: UiServer) -> str:
    """Sign in through POST /ui/login; the cookie header to send afterwards."""
    reply = server.request("POST", "/ui/login", {"token": TOKEN})
    assert reply.status == 200, reply.body
    assert reply.json() == {"signed_in": True}
    cookie = reply.headers.get("set-cookie", "")
    match = re.search(rf"{COOKIE}=([^;]+)", cookie)
    assert match, cookie
    return f"{COOKIE}={match.group(1)}"


GETS = [
    "/ui/api/summary",
    "/ui/api/changes?since=0",
    "/ui/api/tasks",
    "/ui/api/tasks?state=FAILED",
    "/ui/api/families",
    "/ui/api/task?id=Auth-2",
    "/ui/api/task?id=no-such-task",
    "/ui/api/graph?id=Auth-2",
    "/ui/api/workers",
]
POSTS = [
    ("/ui/api/retry", {"task_ids": ["Auth-2"]}),
    ("/ui/api/reenable", {"task_ids": ["Auth-2"]}),
    ("/ui/api/retry-failed", {"family": "", "worker": "", "q": ""}),
]


def test_every_data_and_action_route_needs_the_session(auth_server: UiServer) -> None:
    """Without a cookie (or with a made-up one) the data routes answer 401 and the
    actions 401 with nothing changed; the session route tells the page to sign in."""
    server = auth_server
    assert server.json("GET", "/ui/api/session") == {"auth_required": True, "signed_in": False}
    before = server.snapshot()
    for headers in (
        {},
        {"Cookie": f"{COOKIE}=forged-session-value"},
    ):
        for path in GETS:
            reply = server.request("GET", path, None, headers)
            assert reply.status == 401, (path, headers, reply.status)
            assert reply.error(), path
        for path, body in POSTS:
            reply = server.request("POST", path, body, {**headers, "Origin": server.url})
            assert reply.status == 401, (path, headers, reply.status)
    assert server.snapshot() == before
    cookie = _sign_in(server)
    for path in GETS:
        want = 404 if "no-such-task" in path else 200
        assert server.request("GET", path, None, {"Cookie": cookie}).status == want, path


def test_a_wrong_token_is_refused_and_logged_without_it(
    page: Any, context: Any, auth_server: UiServer
) -> None:
    """POST /ui/login with a wrong token: 401, no session cookie, a log line that holds
    neither the wrong token nor the right one; the page stays on the sign-in form."""
    server = auth_server
    since = stderr_size(server)
    reply = server.request("POST", "/ui/login", {"token": WRONG})
    assert reply.status == 401, reply.status
    assert reply.error()
    assert COOKIE not in reply.headers.get("set-cookie", "")
    wait_for(lambda: stderr_size(server) > since, 30, "a log line about the refused sign-in")
    page.goto(ui_url(server, "/"))
    form = page.locator('[data-testid="signin-form"]')
    expect(form).to_be_visible()
    page.get_by_label("Token").fill(WRONG + "-too")
    with page.expect_response(lambda r: r.url.endswith("/ui/login")) as answer:
        page.get_by_role("button", name="Sign in").click()
    assert answer.value.status == 401
    expect(form).to_be_visible()
    assert [c for c in context.cookies() if c["name"] == COOKIE] == []
    log = server.log()
    assert WRONG not in log and TOKEN not in log


def test_sign_in_then_sign_out(page: Any, context: Any, auth_server: UiServer) -> None:
    """The sign-in form posts the token as JSON with fetch; the cookie is HttpOnly and
    SameSite=Strict, the overview shows, a reload keeps the session; logout ends it on the
    server (the old cookie is refused) and the page asks to sign in again."""
    server = auth_server
    logins: list[Any] = []
    page.on("request", lambda r: logins.append(r) if r.url.endswith("/ui/login") else None)
    page.goto(ui_url(server, "/"))
    expect(page.locator('[data-testid="signin-form"]')).to_be_visible()
    expect(page.locator('[data-testid="count-PENDING"]')).to_have_count(0)
    token = page.get_by_label("Token")
    assert token.get_attribute("type") == "password"
    token.fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    pending = list(server.states().values()).count("PENDING")
    expect(page.locator('[data-testid="count-PENDING"]')).to_have_text(str(pending))
    expect(page.locator('[data-testid="signin-form"]')).to_have_count(0)
    [login] = logins
    assert login.method == "POST" and login.resource_type == "fetch", login.resource_type
    assert login.headers.get("content-type", "").startswith("application/json")
    assert login.post_data_json == {"token": TOKEN}

    [cookie] = [c for c in context.cookies() if c["name"] == COOKIE]
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["value"] and cookie["value"] != TOKEN
    assert COOKIE not in page.evaluate("document.cookie")
    page.reload()
    expect(page.locator('[data-testid="count-PENDING"]')).to_be_visible()
    assert page.evaluate("fetch('api/summary').then(r => r.status)") == 200

    answer = page.evaluate(
        "fetch('logout', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: '{}'}).then(async r => [r.status, await r.json()])"
    )
    assert answer == [200, {"signed_in": False}]
    assert page.evaluate("fetch('api/summary').then(r => r.status)") == 401
    replay = server.request(
        "GET", "/ui/api/summary", None, {"Cookie": f"{COOKIE}={cookie['value']}"}
    )
    assert replay.status == 401, "the session outlived its logout"
    page.reload()
    expect(page.locator('[data-testid="signin-form"]')).to_be_visible()
    assert TOKEN not in server.log()


def test_actions_in_a_session_are_audited_with_it_and_without_secrets(
    auth_server: UiServer,
) -> None:
    """Retry now from two signed-in sessions: each task is PENDING and each audit line names
    the action and the task, tells the two sessions apart, and holds neither the token nor a
    session cookie."""
    server = auth_server
    lines = []
    cookies = []
    for task_id in ("Auth-2", "Auth-3"):
        cookie = _sign_in(server)
        cookies.append(cookie)
        since = stderr_size(server)
        reply = server.request(
            "POST",
            "/ui/api/retry",
            {"task_ids": [task_id]},
            {"Cookie": cookie, "Origin": server.url},
        )
        assert reply.status == 200, reply.body
        assert reply.json() == {"changed": [task_id], "skipped": []}
        assert server.states()[task_id] == "PENDING"
        [line] = wait_for(
            lambda task_id=task_id, since=since: audit_lines(
                server, task_id, re.compile("retry", re.I), since
            ),
            30,
            f"an audit line naming the retry of {task_id}",
        )
        lines.append(line.replace(task_id, "<task>"))
    timestamps = re.compile(r"\d{4}-\d\d-\d\d[T ][\d:.]+Z?")
    first, second = (timestamps.sub("<time>", line) for line in lines)
    assert first != second, f"the audit lines do not name the session: {first}"
    log = server.log()
    assert TOKEN not in log
    for cookie in cookies:
        assert cookie.split("=", 1)[1] not in log
