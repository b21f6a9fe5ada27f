"""The web UI's views (SPEC §9 Views), read in headless Chromium against a real scheduler that
real workers populated (the ``populated`` fixture): overview, task list with filters,
deep links and pagination, task detail, graph, workers and resources. Read-only.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from ui_support import (
    STATES,
    eventually,
    graph_route,
    list_route,
    row_ids,
    rows_become,
    screenshot,
    task_route,
    ui_url,
)

from conveyor.testing.processes import wait_for

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails on CI)
    expect = None

Population = Any  # conftest.Population


def _count(states: dict[str, str], state: str) -> int:
    return sum(1 for s in states.values() if s == state)


def _attempts(page: Any) -> list[dict[str, str | None]]:
    rows = page.locator('[data-testid="attempt-row"]')
    found: list[dict[str, str | None]] = rows.evaluate_all(
        "rows => rows.map(r => ({outcome: r.getAttribute('data-outcome'),"
        " worker: r.getAttribute('data-worker')}))"
    )
    return found


def _open_detail(page: Any, populated: Population, task_id: str, state: str) -> None:
    page.goto(ui_url(populated.server, task_route(task_id)))
    expect(page.locator('[data-testid="task-state"]')).to_have_text(state)


def test_overview_counts_are_the_apis_and_each_links_to_the_list(
    page: Any, populated: Population
) -> None:
    """Each state's count equals what GET /api/v1/tasks lists; it links to #/tasks?state=S, and
    following the FAILED one lists exactly the failed tasks."""
    states = populated.server.states()
    page.goto(ui_url(populated.server, "/"))
    for state in STATES:
        count = page.locator(f'[data-testid="count-{state}"]')
        expect(count).to_have_text(str(_count(states, state)))
        link = count.locator("xpath=ancestor-or-self::a[1]")
        expect(link).to_have_count(1)
        assert link.get_attribute("href").endswith(f"#/tasks?state={state}"), state
    assert _count(states, "DONE") >= 300  # the Bulk tasks are counted too
    assert all(_count(states, s) for s in STATES)  # no count is 0 here
    screenshot(page, "ui-overview.png")
    page.locator('[data-testid="count-FAILED"]').click()
    expect(page).to_have_url(ui_url(populated.server, "/tasks?state=FAILED"))
    rows_become(page, [t for t, s in states.items() if s == "FAILED"], what="FAILED rows")
    assert page.js_errors == []


@pytest.mark.parametrize(
    ("filters", "names"),
    [
        ({"state": "DISABLED"}, ["fragile"]),
        ({"state": "RUNNING"}, ["gated"]),
        ({"state": "UNKNOWN"}, ["broken"]),
        ({"family": "Good"}, ["good1", "good2"]),
        ({"state": "FAILED", "family": "Evil"}, ["evil"]),
        ({"q": "bAD__TMP"}, ["bad"]),  # case-insensitive, on the id
        ({"q": "window.__xss=1"}, ["evil", "markup"]),  # on the parameters' values
        ({"state": "PENDING", "q": "window.__xss=1"}, ["markup"]),
    ],
    ids=["disabled", "running", "unknown", "family", "state+family", "q-id", "q-params", "state+q"],
)
def test_list_filters(
    page: Any, populated: Population, filters: dict[str, str], names: list[str]
) -> None:
    """The list's state, family and text filters are the server's: a deep link shows exactly
    the matching tasks."""
    page.goto(ui_url(populated.server, list_route(**filters)))
    rows_become(page, [populated.ids[n] for n in names], what=f"rows for {filters}")


def test_list_filters_by_worker_and_by_a_parameter_only_text(
    page: Any, populated: Population
) -> None:
    """worker= keeps the tasks that worker runs; q= matches text that only the parameters hold
    (the root directory, which no task id shows)."""
    page.goto(ui_url(populated.server, list_route(worker=populated.gated_worker)))
    rows_become(page, [populated.ids["gated"]], what="the gated worker's rows")
    in_params = populated.root.parent.name  # "ui-populated0": in every worker task's root
    assert not any(in_params.lower() in t.lower() for t in populated.ids.values())
    page.goto(ui_url(populated.server, list_route(q=in_params.upper())))
    want = [v for k, v in populated.ids.items() if k not in ("markup", "broken")]
    rows_become(page, want, what=f"rows matching {in_params!r}")
    screenshot(page, "ui-tasks.png")


def test_a_deep_link_survives_a_reload(page: Any, populated: Population) -> None:
    """/ui/#/tasks?state=S&family=F&q=TEXT shows the same rows after a reload, in a new tab of
    another context too (a shared link)."""
    nothing = list_route(state="FAILED", q="warehouse")  # in an explanation, not id or params
    url = ui_url(populated.server, list_route(state="FAILED", family="Bad", q="BAD_"))
    page.goto(url)
    rows_become(page, [populated.ids["bad"]], what="the deep link's rows")
    page.reload()
    assert page.url == url
    rows_become(page, [populated.ids["bad"]], what="the rows after a reload")
    other = page.context.browser.new_context()
    try:
        shared = other.new_page()
        shared.goto(url)
        rows_become(shared, [populated.ids["bad"]], what="the rows of the shared link")
        # a filter nothing matches is an empty list, not the unfiltered one
        with shared.expect_response(lambda r: "api/tasks" in r.url and "warehouse" in r.url):
            shared.goto(ui_url(populated.server, nothing))
        eventually(lambda: row_ids(shared), [], 30, "rows of a filter nothing matches")
    finally:
        other.close()


def test_filters_chosen_in_the_form_go_into_the_url(page: Any, populated: Population) -> None:
    """Choosing a state and typing a text in the list's filter form puts them in the URL: the
    reload shows the same rows and the same filters. (The form's fields are found by their
    names, which are the URL's keys; the contract names no hook for them.)"""
    page.goto(ui_url(populated.server, list_route()))
    expect(page.locator('[data-testid="task-row"]').first).to_be_visible()
    page.locator('select[name="state"]').select_option("FAILED")
    expect(page).to_have_url(re.compile(r"#/tasks\?(.*&)?state=FAILED"))
    search = page.locator('input[name="q"]')
    search.fill("bad__tmp")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"#/tasks\?(.*&)?q=bad__tmp"))
    rows_become(page, [populated.ids["bad"]], what="rows of the form's filters")
    page.reload()
    rows_become(page, [populated.ids["bad"]], what="rows after the reload")
    expect(page.locator('select[name="state"]')).to_have_value("FAILED")
    expect(page.locator('input[name="q"]')).to_have_value("bad__tmp")


@pytest.mark.timeout(90)
def test_the_list_paginates_three_hundred_tasks(page: Any, populated: Population) -> None:
    """300 tasks of one family come in pages; following next-page shows each exactly once."""
    page.goto(ui_url(populated.server, list_route(family="Bulk")))
    nxt = page.locator('[data-testid="next-page"]')
    expect(page.locator('[data-testid="task-row"]').first).to_be_visible()
    first = row_ids(page)
    assert 0 < len(first) < len(populated.bulk), len(first)
    seen = list(first)
    shown = first
    for _ in range(len(populated.bulk)):
        if len(seen) >= len(populated.bulk):
            break
        expect(nxt).to_be_enabled()
        nxt.click()
        now = _rows_after(page, shown)
        # the page either appends the next page ("more") or replaces the rows with it
        new = now[len(shown) :] if now[: len(shown)] == shown else now
        assert not set(new) & set(seen), "a task shown on two pages"
        seen.extend(new)
        shown = now
    assert sorted(seen) == sorted(populated.bulk)
    assert len(seen) == len(populated.bulk)
    # on the last page there is no next page
    if nxt.count():
        expect(nxt).to_be_disabled()


def _rows_after(page: Any, before: list[str], timeout: float = 10) -> list[str]:
    """The rows once they differ from ``before`` (the next page has been drawn)."""
    got: list[str] = []

    def changed() -> bool:
        nonlocal got
        got = row_ids(page)
        return bool(got) and got != before

    wait_for(changed, timeout, "the next page's rows")
    return got


def test_detail_of_a_failed_task(page: Any, populated: Population) -> None:
    """A FAILED task's detail: family, parameters, worker of each attempt, the explanation in
    full (the whole traceback), its dependents as links."""
    server = populated.server
    bad = populated.ids["bad"]
    api = server.tasks()[bad]
    _open_detail(page, populated, bad, "FAILED")
    error = page.locator('[data-testid="task-error"]')
    expect(error).to_contain_text("ValueError: the warehouse is on fire")
    assert error.text_content().strip() == api["explanation"].strip()
    assert error.evaluate("e => e.tagName") == "PRE"
    assert api["explanation"].startswith("Traceback")
    body = page.locator("body")
    expect(body).to_contain_text("Bad")
    expect(body).to_contain_text(api["params"]["root"])
    eventually(
        lambda: _attempts(page),
        [{"outcome": "failed", "worker": populated.pipeline_worker}],
        30,
        "the attempt rows",
    )
    dependent = page.locator(f'a[href$="#/task/{quote(populated.ids["pipeline"], safe="")}"]')
    expect(dependent.first).to_be_visible()
    screenshot(page, "ui-task.png")
    assert page.js_errors == []


def test_detail_of_the_running_task(page: Any, populated: Population) -> None:
    """The RUNNING task's detail: status message, progress as a percentage, its http tracking
    URL as a link, its worker, its resource, a running attempt on that worker."""
    gated = populated.ids["gated"]
    _open_detail(page, populated, gated, "RUNNING")
    expect(page.locator('[data-testid="task-status-message"]')).to_have_text("halfway there")
    expect(page.locator('[data-testid="task-progress"]')).to_have_text("42%")
    url = page.locator('[data-testid="task-tracking-url"]')
    expect(url).to_have_text("http://tracking.invalid/job/42")
    link = page.locator('[data-testid="task-tracking-url"]')
    tag = link.evaluate("e => e.tagName")
    anchor = link if tag == "A" else link.locator("a")
    expect(anchor).to_have_attribute("href", "http://tracking.invalid/job/42")
    body = page.locator("body")
    expect(body).to_contain_text(populated.gated_worker)
    expect(body).to_contain_text("db")
    [attempt] = _attempts(page)
    assert attempt["worker"] == populated.gated_worker
    assert attempt["outcome"] in (None, ""), attempt  # still running


def test_attempt_outcomes(page: Any, populated: Population) -> None:
    """data-outcome names how each attempt ended: succeeded, failed, timed_out, process_died,
    interrupted;
    an UNKNOWN task shows why it is broken and has no attempt."""
    for name, state, outcome in [
        ("good1", "DONE", "succeeded"),
        ("fragile", "DISABLED", "failed"),
        ("slowpoke", "FAILED", "timed_out"),
        ("stuck", "FAILED", "interrupted"),
        ("dies", "FAILED", "process_died"),
    ]:
        worker = populated.stuck_worker if name == "stuck" else populated.pipeline_worker
        _open_detail(page, populated, populated.ids[name], state)
        eventually(
            lambda: _attempts(page),
            [{"outcome": outcome, "worker": worker}],
            30,
            f"the attempts of {name}",
        )
    expect(page.locator('[data-testid="task-error"]')).to_contain_text("exit code 4")
    # a task registered broken (UNKNOWN) has its reason and no attempt
    _open_detail(page, populated, populated.ids["broken"], "UNKNOWN")
    error = page.locator('[data-testid="task-error"]')
    expect(error).to_have_text("RuntimeError: cannot reach the share")
    assert _attempts(page) == []


def test_detail_of_a_blocked_task_links_its_dependencies(page: Any, populated: Population) -> None:
    """A PENDING task behind failures: every dependency is a link, and blocked-by names the
    FAILED and DISABLED ones (not the DONE ones)."""
    ids = populated.ids
    _open_detail(page, populated, ids["pipeline"], "PENDING")
    deps = ["good1", "good2", "bad", "fragile", "evil", "slowpoke", "dies"]
    for name in deps:
        link = page.locator(f'a[href$="#/task/{quote(ids[name], safe="")}"]')
        expect(link.first).to_be_visible()
    blocked = page.locator('[data-testid="blocked-by"]')
    for name in ["bad", "fragile", "evil", "slowpoke", "dies"]:
        expect(blocked).to_contain_text(ids[name])
    for name in ["good1", "good2"]:
        expect(blocked).not_to_contain_text(ids[name])
    page.locator(f'a[href$="#/task/{quote(ids["bad"], safe="")}"]').first.click()
    expect(page.locator('[data-testid="task-state"]')).to_have_text("FAILED")
    expect(page.locator('[data-testid="task-error"]')).to_contain_text("warehouse is on fire")


def test_graph_view(page: Any, populated: Population) -> None:
    """The graph of the blocked task holds it and its 7 dependencies; a dependency's graph is
    itself alone upstream, and with its dependent on request (?down=1)."""
    ids = populated.ids
    graph = page.locator('[data-testid="graph"]')
    page.goto(ui_url(populated.server, graph_route(ids["pipeline"])))
    expect(graph).to_have_attribute("data-node-count", "8")
    expect(page.locator('[data-testid="graph-truncated"]')).to_have_count(0)
    screenshot(page, "ui-graph.png")
    page.goto(ui_url(populated.server, graph_route(ids["bad"])))
    expect(graph).to_have_attribute("data-node-count", "1")
    page.goto(ui_url(populated.server, graph_route(ids["bad"], down=True)))
    expect(graph).to_have_attribute("data-node-count", "2")
    assert page.js_errors == []


def test_workers_and_resources(page: Any, populated: Population) -> None:
    """Every worker the API lists has a row (the gated one with its running task and host);
    the db resource's row names the task holding it."""
    server = populated.server
    page.goto(ui_url(server, "/workers"))
    rows = page.locator('[data-testid="worker-row"]')
    expect(rows).to_have_count(len(server.worker_ids()))
    ids = rows.evaluate_all("rows => rows.map(r => r.getAttribute('data-worker-id'))")
    assert set(ids) == server.worker_ids()
    gated = page.locator(f'[data-testid="worker-row"][data-worker-id="{populated.gated_worker}"]')
    expect(gated).to_contain_text(populated.ids["gated"])
    host = populated.gated_worker.rsplit("-", 2)[0]
    expect(gated).to_contain_text(host)
    db = page.locator('[data-testid="resource-row"][data-resource="db"]')
    expect(db).to_contain_text(populated.ids["gated"])
    expect(db).to_contain_text("2")
    screenshot(page, "ui-workers.png")
    assert page.js_errors == []
