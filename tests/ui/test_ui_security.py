"""The web UI's safety rules (SPEC §9 Safety, Self-contained, Access without a token, "No GET
ever changes state"): security headers on every /ui response, task and worker values shown as
text only, no request to another host, the JS + CSS budget of a view, CSRF refusals.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from ui_support import (
    XSS_IMG,
    XSS_SCRIPT,
    XSS_TASK_ID,
    XSS_URL,
    XSS_WORKER,
    UiServer,
    check_security_headers,
    fail_through_api,
    graph_route,
    list_route,
    rows_become,
    task_route,
    ui_url,
)

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

Population = Any  # conftest.Population
BUDGET = 200_000  # bytes of JS + CSS per page view (SPEC §9: 200 KB uncompressed)
FOREIGN = "http://evil.invalid"


def _views(populated: Population) -> list[tuple[str, str, str]]:
    """(name, hash route, a selector that is there once the view is drawn) of every view."""
    ids = populated.ids
    return [
        ("overview", "/", '[data-testid="count-DONE"]'),
        ("tasks", list_route(), '[data-testid="task-row"]'),
        ("task", task_route(ids["bad"]), '[data-testid="task-error"]'),
        (
            "graph",
            graph_route(ids["pipeline"], down=True),
            '[data-testid="graph"][data-node-count]',
        ),
        ("workers", "/workers", '[data-testid="worker-row"]'),
    ]


def _visit_every_view(page: Any, populated: Population) -> None:
    for _, route, ready in _views(populated):
        page.goto(ui_url(populated.server, route))
        page.reload()  # each view loaded from its own URL, not only by hash navigation
        page.locator(ready).first.wait_for()


def test_security_headers_on_every_ui_response(page: Any, populated: Population) -> None:
    """CSP (default-src 'self', no unsafe-inline/unsafe-eval for scripts, frame-ancestors
    'none') and nosniff on every /ui response: the page, its files, every data route, errors
    and refusals; JS is text/javascript and CSS text/css."""
    server = populated.server
    seen: list[Any] = []
    page.on("response", lambda response: seen.append(response))
    _visit_every_view(page, populated)
    ui = [r for r in seen if r.url.startswith(server.url + "/ui")]
    assert any(r.url.endswith(".js") for r in ui), [r.url for r in ui]
    for response in ui:
        check_security_headers(response.url, response.all_headers())
    for response in ui:
        kind = response.all_headers().get("content-type", "")
        if response.url.endswith(".js"):
            assert kind.startswith("text/javascript"), (response.url, kind)
        if response.url.endswith(".css"):
            assert kind.startswith("text/css"), (response.url, kind)
    bad = quote(populated.ids["bad"], safe="")
    done = populated.ids["good1"]
    gets = [
        "/ui",
        "/ui/",
        "/ui/api/session",
        "/ui/api/summary",
        "/ui/api/changes?since=0",
        "/ui/api/tasks",
        "/ui/api/tasks?state=NOPE",
        "/ui/api/tasks?limit=nope",
        "/ui/api/families",
        f"/ui/api/task?id={bad}",
        "/ui/api/task?id=no-such-task",
        f"/ui/api/graph?id={bad}&down=1",
        "/ui/api/graph?id=no-such-task",
        "/ui/api/workers",
        "/ui/no-such-file.js",
        "/ui/api/no-such-route",
    ]
    statuses = {}
    for path in gets:
        reply = server.request("GET", path)
        statuses[path] = reply.status
        check_security_headers(path, reply.headers)
    assert statuses["/ui/api/task?id=no-such-task"] == 404
    assert statuses["/ui/no-such-file.js"] == 404
    assert 400 <= statuses["/ui/api/tasks?state=NOPE"] < 500
    # refusals of POSTs (about a DONE task, so nothing could change even if accepted)
    body = {"task_ids": [done]}
    for path, headers, status in [
        ("/ui/api/retry", {"Origin": FOREIGN}, 403),
        ("/ui/api/retry", {"Content-Type": "text/plain"}, 415),
        ("/ui/login", {"Origin": FOREIGN}, 403),
    ]:
        reply = server.request("POST", path, body, headers)
        assert reply.status == status, (path, headers, reply.status)
        check_security_headers(f"POST {path}", reply.headers)


def test_the_page_has_no_inline_script_or_style(populated: Population) -> None:
    """index.html loads its scripts as files (ES modules) and has no inline script, style,
    style= or on...= attribute, which the CSP would block."""
    html = populated.server.request("GET", "/ui/").body.decode()
    assert "<html" in html.lower()
    scripts = re.findall(r"<script\b([^>]*)>", html, re.I)
    assert scripts, html[:500]
    for attributes in scripts:
        assert re.search(r"\bsrc\s*=", attributes), f"an inline script: <script{attributes}>"
        assert re.search(r"""\btype\s*=\s*["']?module""", attributes), attributes
    assert not re.search(r"<style\b", html, re.I)
    assert not re.search(r"\sstyle\s*=", html, re.I)
    assert not re.search(r"\son[a-z]+\s*=", html, re.I)


def test_root_and_ui_redirect_to_the_page(populated: Population) -> None:
    """GET / and GET /ui redirect (307) to ui/; GET /ui/ is the HTML page."""
    server = populated.server
    for path in ("/", "/ui"):
        reply = server.request("GET", path)
        assert reply.status == 307, (path, reply.status)
        assert reply.headers["location"].endswith("ui/"), reply.headers
    page = server.request("GET", "/ui/")
    assert page.status == 200
    assert page.headers["content-type"].startswith("text/html")


def test_only_files_of_the_ui_directory_are_served(populated: Population) -> None:
    """Names that are not files of the UI directory are 404, traversal included."""
    server = populated.server
    for path in [
        "/ui/webui.py",
        "/ui/../app.py",
        "/ui/%2e%2e/app.py",
        "/ui/..%2fapp.py",
        "/ui/..%2f..%2fserver%2fapp.py",
        "/ui/%2fetc%2fpasswd",
    ]:
        reply = server.request("GET", path)
        assert reply.status == 404, (path, reply.status, reply.body[:200])
        assert b"import" not in reply.body and b"root:" not in reply.body, path


def test_without_a_token_the_ui_is_open(page: Any, populated: Population) -> None:
    """With no [server] token: the session says no sign-in is needed, data routes answer
    without a cookie, and the page shows the overview, not a sign-in form."""
    server = populated.server
    session = server.json("GET", "/ui/api/session")
    assert session["auth_required"] is False, session
    assert server.request("GET", "/ui/api/summary").status == 200
    page.goto(ui_url(server, "/"))
    expect(page.locator('[data-testid="count-DONE"]')).to_be_visible()
    expect(page.locator('[data-testid="signin-form"]')).to_have_count(0)


def test_get_never_changes_state(page: Any, populated: Population) -> None:
    """GET every /ui/ route, including the action routes with the arguments an action would
    take, and browse every view: no task changes."""
    server = populated.server
    ids = populated.ids
    before = server.snapshot()
    summary = server.json("GET", "/ui/api/summary")["counts"]
    failed = quote(ids["bad"], safe="")
    disabled = quote(ids["fragile"], safe="")
    for path in [
        f"/ui/api/retry?task_ids={failed}&task_ids={disabled}",
        f"/ui/api/retry?task_ids=%5B%22{failed}%22%5D",
        f"/ui/api/reenable?task_ids={disabled}",
        "/ui/api/retry-failed",
        "/ui/api/retry-failed?family=Bad",
        "/ui/login?token=x",
        "/ui/logout",
    ]:
        reply = server.request("GET", path)
        assert reply.status in (404, 405), (path, reply.status)
    for path in [
        "/ui/",
        "/ui/api/session",
        "/ui/api/summary",
        "/ui/api/changes?since=0",
        "/ui/api/tasks?state=FAILED",
        "/ui/api/families",
        f"/ui/api/task?id={failed}",
        f"/ui/api/graph?id={failed}&down=1",
        "/ui/api/workers",
    ]:
        assert server.request("GET", path).status == 200, path
    _visit_every_view(page, populated)
    page.goto(ui_url(server, task_route(ids["fragile"])))
    expect(page.locator('[data-testid="task-state"]')).to_have_text("DISABLED")
    assert server.snapshot() == before
    assert server.json("GET", "/ui/api/summary")["counts"] == summary


def test_values_from_tasks_and_workers_are_only_text(page: Any, populated: Population) -> None:
    """Markup and javascript: in parameters, status messages, explanations, tracking URLs, task
    ids and worker ids is shown literally; nothing of it runs, no img of it exists, and the
    javascript: URL is not a link."""
    server = populated.server
    evil = populated.ids["evil"]

    def nothing_ran(where: str) -> None:
        assert page.evaluate("typeof window.__xss") == "undefined", where
        assert page.locator('img[src="x"]').count() == 0, where
        assert page.locator("b").filter(has_text="bold").count() == 0, where

    page.goto(ui_url(server, task_route(evil)))
    expect(page.locator('[data-testid="task-state"]')).to_have_text("FAILED")
    message = page.locator('[data-testid="task-status-message"]')
    expect(message).to_have_text(XSS_SCRIPT)
    error = page.locator('[data-testid="task-error"]')
    for payload in (XSS_IMG, XSS_SCRIPT, XSS_URL):
        assert payload in error.text_content()
    url = page.locator('[data-testid="task-tracking-url"]')
    expect(url).to_have_text(XSS_URL)
    assert url.evaluate("e => e.tagName") != "A"
    expect(url.locator("a")).to_have_count(0)
    assert page.locator('a[href^="javascript:"]').count() == 0
    url.click()
    body = page.locator("body")
    assert XSS_IMG in body.text_content()  # the img parameter, as text
    nothing_ran("detail of the Evil task")

    page.goto(ui_url(server, task_route(XSS_TASK_ID)))
    expect(page.locator('[data-testid="task-state"]')).to_have_text("PENDING")
    assert XSS_TASK_ID in body.text_content()
    assert XSS_SCRIPT in body.text_content()
    nothing_ran("detail of the task whose id is markup")

    page.goto(ui_url(server, list_route(q="__xss")))
    rows_become(page, [evil, XSS_TASK_ID], what="rows of the markup tasks")
    shown = " ".join(page.locator('[data-testid="task-row"]').all_text_contents())
    assert "<img src=x onerror=window.__xss=" in shown, shown
    nothing_ran("the task list")

    for task_id, nodes in ((evil, "2"), (XSS_TASK_ID, "1")):
        page.goto(ui_url(server, graph_route(task_id, down=True)))
        expect(page.locator('[data-testid="graph"]')).to_have_attribute("data-node-count", nodes)
        nothing_ran(f"the graph of {task_id}")

    page.goto(ui_url(server, "/workers"))
    rows = page.locator('[data-testid="worker-row"]')
    expect(rows.first).to_be_visible()
    workers = rows.evaluate_all("rows => rows.map(r => r.getAttribute('data-worker-id'))")
    assert XSS_WORKER in workers
    assert XSS_WORKER in body.text_content()
    nothing_ran("the workers view")
    assert page.js_errors == []


def test_no_request_leaves_the_servers_origin(context: Any, populated: Population) -> None:
    """Every request any view makes goes to the server's own origin (others are aborted and
    recorded: the page must work with no network)."""
    server = populated.server
    requested: list[str] = []
    foreign: list[str] = []

    def gate(route: Any) -> None:
        url = route.request.url
        requested.append(url)
        if url.startswith(server.url + "/") or url.startswith("data:"):
            route.continue_()
        else:
            foreign.append(url)
            route.abort()

    context.route("**/*", gate)
    page = context.new_page()
    page.js_errors = []
    _visit_every_view(page, populated)
    page.goto(ui_url(server, task_route(populated.ids["gated"])))
    expect(page.locator('[data-testid="task-progress"]')).to_have_text("42%")
    assert foreign == []
    assert len(requested) > 5
    assert all(u.startswith(server.url + "/") or u.startswith("data:") for u in requested)


def test_js_and_css_of_each_view_fit_the_budget(browser: Any, populated: Population) -> None:
    """The JS + CSS bytes each view loads (cold, in a fresh context) total at most 200 KB."""
    server = populated.server
    totals = {}
    for name, route, ready in _views(populated):
        ctx = browser.new_context()
        try:
            page = ctx.new_page()
            assets: list[Any] = []

            def keep(response: Any, assets: list[Any] = assets) -> None:
                path = response.url.split("?")[0]
                if response.request.resource_type in ("script", "stylesheet") or path.endswith(
                    (".js", ".mjs", ".css")
                ):
                    assets.append(response)

            page.on("response", keep)
            page.goto(ui_url(server, route))
            page.locator(ready).first.wait_for()
            page.wait_for_load_state("networkidle")
            assert assets, f"the {name} view loaded no JS at all"
            totals[name] = sum(len(r.body()) for r in assets)
        finally:
            ctx.close()
    print(f"JS + CSS bytes per view: {totals}")
    assert all(0 < total <= BUDGET for total in totals.values()), totals


# --- CSRF: a scheduler of its own, since a failing test would change state ----------------


@pytest.fixture
def csrf_server(tmp_path: Path, marker: str) -> Iterator[UiServer]:
    """A scheduler with FAILED tasks Csrf-1 and Csrf-2, made through the worker API."""
    server = UiServer(tmp_path / "srv", marker)
    server.start()
    fail_through_api(server, "csrf-worker", ["Csrf-1", "Csrf-2"])
    yield server
    server.kill()


def test_posts_need_json_and_the_servers_own_origin(csrf_server: UiServer) -> None:
    """A POST with a foreign Origin is 403, one that is not application/json is 415, and
    neither changes anything; the same request from the right origin as JSON works."""
    server = csrf_server
    before = server.snapshot()
    other_port = f"http://127.0.0.1:{server.port + 1 if server.port < 65535 else server.port - 1}"
    actions = [
        ("/ui/api/retry", {"task_ids": ["Csrf-1"]}),
        ("/ui/api/reenable", {"task_ids": ["Csrf-1"]}),
        ("/ui/api/retry-failed", {"family": "", "worker": "", "q": ""}),
        ("/ui/login", {"token": ""}),
        ("/ui/logout", {}),
    ]
    for path, body in actions:
        for origin in (FOREIGN, other_port, "null", f"https://127.0.0.1:{server.port}"):
            reply = server.request("POST", path, body, {"Origin": origin})
            assert reply.status == 403, (path, origin, reply.status, reply.body[:200])
        for kind in (
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            None,
        ):
            reply = server.request("POST", path, body, {"Content-Type": kind})
            assert reply.status == 415, (path, kind, reply.status, reply.body[:200])
        form = server.request(
            "POST",
            path,
            "task_ids=Csrf-1",
            {"Content-Type": "application/x-www-form-urlencoded", "Origin": server.url},
        )
        assert form.status == 415, (path, form.status)
        assert server.snapshot() == before, path
    accepted = server.request(
        "POST", "/ui/api/retry", {"task_ids": ["Csrf-1"]}, {"Origin": server.url}
    )
    assert accepted.status == 200, accepted.body
    assert accepted.json()["changed"] == ["Csrf-1"]
    assert server.states() == {"Csrf-1": "PENDING", "Csrf-2": "FAILED"}


def test_a_cross_site_form_cannot_act(page: Any, csrf_server: UiServer) -> None:
    """A page of another site that auto-submits a text/plain form (a body that is JSON) and
    fires a no-cors fetch at the action routes changes nothing."""
    server = csrf_server
    before = server.snapshot()
    action = f"{server.url}/ui/api/retry-failed"
    html = f"""<!doctype html><html><body>
<form id="f" method="post" enctype="text/plain" action="{action}">
<input name='{{"family":"","worker":"","q":"","x":"' value='"}}'>
</form>
<script>
fetch("{server.url}/ui/api/retry", {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: '{{"task_ids":["Csrf-2"]}}'}});
document.getElementById("f").submit();
</script></body></html>"""
    page.route(
        f"{FOREIGN}/**",
        lambda route: route.fulfill(status=200, content_type="text/html", body=html),
    )
    with page.expect_response(lambda r: r.url == action) as answer:
        page.goto(f"{FOREIGN}/attack")
    assert answer.value.status in (403, 415), answer.value.status
    assert server.snapshot() == before
    assert server.states() == {"Csrf-1": "FAILED", "Csrf-2": "FAILED"}


def test_bad_input_to_the_ui_routes_is_a_4xx(csrf_server: UiServer) -> None:
    """Malformed JSON, wrong fields and bad query values on the UI routes get a 4xx JSON error
    (never a 500 or a traceback) and change nothing; the server keeps serving."""
    server = csrf_server
    before = server.snapshot()
    own = {"Origin": server.url}
    posts: list[tuple[str, Any]] = [
        ("/ui/api/retry", b"{not json"),
        ("/ui/api/retry", b""),
        ("/ui/api/retry", b"[]"),
        ("/ui/api/retry", {"task_ids": "Csrf-1"}),
        ("/ui/api/retry", {"task_ids": [1, 2]}),
        ("/ui/api/retry", {}),
        ("/ui/api/reenable", {"task_ids": None}),
        ("/ui/api/retry-failed", {"family": 7}),
        ("/ui/api/retry-failed", b"\xff\xfe"),
        ("/ui/login", {"token": 5}),
        ("/ui/login", b"null"),
    ]
    for path, body in posts:
        reply = server.request("POST", path, body, own)
        assert 400 <= reply.status < 500, (path, body, reply.status, reply.body[:300])
        assert reply.error(), (path, body)
        assert b"Traceback" not in reply.body
    for path in [
        "/ui/api/tasks?limit=nope",
        "/ui/api/tasks?limit=100000",
        "/ui/api/tasks?cursor=%00",
        "/ui/api/tasks?state=%3Cscript%3E",
        "/ui/api/task",
        "/ui/api/graph",
    ]:
        reply = server.request("GET", path)
        assert 400 <= reply.status < 500, (path, reply.status, reply.body[:300])
        assert b"Traceback" not in reply.body
    assert server.snapshot() == before
    assert server.request("GET", "/health").status == 200
