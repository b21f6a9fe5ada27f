"""The metric families the plugin exports, each in a registry of its own (never the default one).

:class:`TaskMetrics` holds what both sides count per attempt (and, on a worker, per
notification); :class:`ServerMetrics` adds the central server's request and queue metrics and
a collector that reads the server's state when it is scraped. ``family`` is the only task
label, and :class:`FamilyFolder` bounds its values: past ``max_families`` distinct families,
every new one is counted as ``"other"``. No parameter value ever becomes a label.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from conveyor.protocol import TaskStatus
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from conveyor.server.view import SchedulerView
    from prometheus_client.metrics_core import Metric

__all__ = [
    "DURATION_BUCKETS",
    "OTHER_FAMILY",
    "OUTCOMES",
    "RPC_BUCKETS",
    "FamilyFolder",
    "ServerMetrics",
    "TaskMetrics",
    "WorkerMetrics",
    "state_families",
]

DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800,
    3600, 7200, 14400, 21600,
)  # fmt: skip
"""Seconds: from a 10 ms task to a 6 h one (task durations and queue waits)."""

RPC_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
)  # fmt: skip
"""Seconds: from 0.5 ms to 10 s (the central server's answers)."""

OUTCOMES: tuple[str, ...] = ("succeeded", "failed", "timed_out", "process_died", "interrupted")
"""The values of the ``outcome`` label."""

OTHER_FAMILY = "other"
"""The ``family`` label of the families beyond ``max_families``."""


class FamilyFolder:
    """The ``family`` label of a task: its family, for the first ``limit`` distinct families
    seen, and ``"other"`` for every family after them (so a flood of generated family names
    cannot grow the series without bound)."""

    def __init__(self, limit: int) -> None:
        """Keep at most ``limit`` (>= 1) families as labels of their own."""
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def label(self, family: str) -> str:
        """The label value for ``family`` (thread-safe)."""
        with self._lock:
            if family in self._seen:
                return family
            if len(self._seen) < self._limit:
                self._seen.add(family)
                return family
        return OTHER_FAMILY


class TaskMetrics:
    """Attempts by family and outcome and their durations, in ``registry``."""

    def __init__(self, registry: CollectorRegistry, max_families: int) -> None:
        """Create the families in ``registry`` (a registry of this plugin instance alone)."""
        self.registry = registry
        self.families = FamilyFolder(max_families)
        # prometheus_client appends "_total" to a counter's samples itself
        self.attempts = Counter(
            "conveyor_task_attempts",
            "Task attempts that ended, by task family and outcome.",
            ["family", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "conveyor_task_duration_seconds",
            "Wall time of the task attempts that ended, by task family and outcome.",
            ["family", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[str, str], tuple[Any, Any]] = {}

    def attempt(self, family: str, outcome: str, duration: float | None) -> None:
        """Count one ended attempt (and observe its duration, when known)."""
        children = self._children.get((family, outcome))
        if children is None:  # (looked up once per family and outcome: this runs per attempt)
            label = self.families.label(family)
            children = (self.attempts.labels(label, outcome), self.duration.labels(label, outcome))
            if len(self._children) < _CHILDREN_KEPT:
                self._children[(family, outcome)] = children
        children[0].inc()
        if duration is not None:
            children[1].observe(max(duration, 0.0))


_CHILDREN_KEPT = 10_000  # (family, outcome) pairs whose labelled metrics are kept at hand


class WorkerMetrics(TaskMetrics):
    """A worker's metrics: :class:`TaskMetrics` plus its notifier dispatch's deliveries."""

    def __init__(self, registry: CollectorRegistry, max_families: int) -> None:
        """Create the families in ``registry``."""
        super().__init__(registry, max_families)
        self.notifications = Counter(
            "conveyor_notifications",
            "Notification deliveries tried, by notifier and result (sent, failed, dropped).",
            ["notifier", "result"],
            registry=registry,
        )


class ServerMetrics(TaskMetrics):
    """The central server's metrics: :class:`TaskMetrics` plus requests, queue waits and the
    server's state (tasks per state, live workers, leadership) read when scraped."""

    def __init__(self, registry: CollectorRegistry, max_families: int) -> None:
        """Create the families in ``registry``; :meth:`watch` adds the state collector."""
        super().__init__(registry, max_families)
        self._request_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self.queue_wait = Histogram(
            "conveyor_task_queue_wait_seconds",
            "Seconds a task waited runnable before it was handed out, by task family.",
            ["family"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "conveyor_scheduler_requests",
            "HTTP requests the central server answered, by route and status code.",
            ["route", "code"],
            registry=registry,
        )
        self.request_duration = Histogram(
            "conveyor_scheduler_request_duration_seconds",
            "Seconds the central server took to answer an HTTP request, by route.",
            ["route"],
            buckets=RPC_BUCKETS,
            registry=registry,
        )
        self._watching = False

    def watch(self, view: SchedulerView) -> None:
        """Export the state of the server ``view`` shows (once; later calls do nothing)."""
        if not self._watching:
            self._watching = True
            self.registry.register(StateCollector(view))

    def waited(self, family: str, seconds: float) -> None:
        """Observe one hand-out's queue wait."""
        self.queue_wait.labels(self.families.label(family)).observe(max(seconds, 0.0))

    def request(self, route: str, code: int, seconds: float) -> None:
        """Count one answered request (cheap: it runs on the server's event loop)."""
        children = self._request_children.get((route, code))
        if children is None:  # (routes and codes are few: each pair looked up once)
            children = (self.requests.labels(route, str(code)), self.request_duration.labels(route))
            if len(self._request_children) < _CHILDREN_KEPT:
                self._request_children[(route, code)] = children
        children[0].inc()
        children[1].observe(seconds)


class StateCollector(Collector):
    """``conveyor_tasks{state}``, ``conveyor_workers`` and ``conveyor_scheduler_is_leader``,
    read from the server at each scrape (the task counts come from the state store: collect
    in a thread, not on the event loop).

    A standby exports no ``conveyor_tasks`` samples (the leader counts the same store, so a
    sum over all servers is not doubled), 0 workers and ``is_leader`` 0.
    """

    def __init__(self, view: SchedulerView) -> None:
        """Read ``view`` at each scrape."""
        self._view = view

    def describe(self) -> Iterable[Metric]:
        """The families, without samples (so registering reads nothing)."""
        return list(state_families())

    def collect(self) -> Iterable[Metric]:
        """The families with their current values."""
        leader = self._view.is_leader()
        tasks, workers, is_leader = state_families()
        if leader:
            counts = self._view.task_counts()
            for state in TaskStatus:
                tasks.add_metric([state.value], float(counts.get(state.value, 0)))
        workers.add_metric([], float(self._view.live_workers()))
        is_leader.add_metric([], 1.0 if leader else 0.0)
        return [tasks, workers, is_leader]


def state_families() -> Iterator[GaugeMetricFamily]:
    """The families of :class:`StateCollector`, empty: ``conveyor_tasks``,
    ``conveyor_workers`` and ``conveyor_scheduler_is_leader``."""
    yield GaugeMetricFamily(
        "conveyor_tasks",
        "Tasks the central server knows, by state (no samples on a standby).",
        labels=["state"],
    )
    yield GaugeMetricFamily(
        "conveyor_workers", "Workers the central server hears from (0 on a standby).", labels=[]
    )
    yield GaugeMetricFamily(
        "conveyor_scheduler_is_leader",
        "1 if this central server is the leader, 0 if it is a standby.",
        labels=[],
    )
