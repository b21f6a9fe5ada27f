"""The Grafana dashboard shipped in ``dashboards/conveyor.json``: valid JSON, a ``datasource``
variable every panel uses, and queries that name only metrics the plugin exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from conveyor_prometheus.metrics import ServerMetrics, WorkerMetrics, state_families

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboards" / "conveyor.json"
METRIC = re.compile(r"\bconveyor_[a-z_]+\b")


def exported_names() -> set[str]:
    """Every sample name a worker's or the server's registry exposes (one observation of
    each labelled family, so that its samples exist)."""
    names: set[str] = set()
    worker = WorkerMetrics(CollectorRegistry(), 10)
    worker.attempt("F", "succeeded", 1.0)
    worker.notifications.labels("email", "sent").inc()
    server = ServerMetrics(CollectorRegistry(), 10)
    server.attempt("F", "failed", 2.0)
    server.waited("F", 0.5)
    server.request("/api/v1/get_work", 200, 0.001)
    for registry in (worker.registry, server.registry):
        for family in registry.collect():
            names.update(sample.name for sample in family.samples)
    names.update(family.name for family in state_families())
    return names


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels, those inside rows included."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return [p for p in found if p.get("type") != "row"]


def test_every_query_names_only_exported_metrics() -> None:
    """Each panel's queries use the ``${datasource}`` variable and name at least one metric,
    all of them exported by the plugin; every exported family is on the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    exported = exported_names()
    used: set[str] = set()
    found = panels(dashboard)
    assert len(found) >= 10
    for panel in found:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            names = set(METRIC.findall(target["expr"]))
            assert names, (panel["title"], target["expr"])
            assert names <= exported, (panel["title"], names - exported)
            used |= names
    families = {
        "conveyor_task_attempts_total",
        "conveyor_task_duration_seconds_bucket",
        "conveyor_task_queue_wait_seconds_bucket",
        "conveyor_tasks",
        "conveyor_workers",
        "conveyor_scheduler_is_leader",
        "conveyor_scheduler_requests_total",
        "conveyor_scheduler_request_duration_seconds_bucket",
        "conveyor_notifications_total",
    }
    assert families <= exported
    assert used == families


def test_the_job_variable_picks_one_job_of_any_conveyor_series() -> None:
    """The ``job`` variable is single-select without "All" (the server and the workers count
    the same attempts: both at once would count each twice), filled from the jobs of every
    ``conveyor_*`` series (a server-only or a worker-only job is offered too), and every
    panel query filters on it."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    job = {v["name"]: v for v in dashboard["templating"]["list"]}["job"]
    assert job["type"] == "query"
    assert job["datasource"]["uid"] == "${datasource}"
    assert job["multi"] is False and job["includeAll"] is False
    assert "allValue" not in job
    query = 'label_values({__name__=~"conveyor_.*"}, job)'
    assert job["query"]["query"] == query and job["definition"] == query
    for panel in panels(dashboard):
        for target in panel["targets"]:
            for name in METRIC.findall(target["expr"]):
                # every metric selector of the query filters on the chosen job
                assert re.search(rf'\b{name}\{{[^}}]*job=~"\$job"', target["expr"]), (
                    panel["title"],
                    target["expr"],
                )
