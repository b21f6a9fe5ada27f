"""A real ``conveyor scheduler`` (with a token) and a real ``conveyor run`` worker: after a run
with known outcomes, the server's ``/metrics`` and the worker's textfile count them exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from prom_support import (
    SECRET,
    Server,
    by_label,
    conveyor_run,
    finish,
    histogram_counts_match,
    parse,
    value,
)

EXPECTED_ATTEMPTS = {
    ("Succeeds", "succeeded"): 3.0,
    ("Raises", "failed"): 1.0,
    ("Sleeps", "timed_out"): 1.0,
    ("KillsItself", "process_died"): 1.0,
}


@pytest.mark.timeout(180)
def test_a_run_with_known_outcomes_is_counted_exactly_by_server_and_worker(
    workdir: Path, marker: str
) -> None:
    """3 succeeded, 1 failed, 1 timed out, 1 died (no retries): both sides count exactly
    that, every duration histogram's count matches its counter, and the server's gauges,
    request counts and queue waits agree with what happened."""
    server = Server(workdir, marker)
    server.start()
    textfile = workdir / "worker.prom"
    proc = conveyor_run(
        workdir,
        "Outcomes",
        marker,
        "--root", str(workdir / "out"), "--executor", "fork",
        config=f'[prometheus]\ntextfile = "{textfile}"\ninterval = 60\n',
        server=server,
    )  # fmt: skip
    code, out, err = finish(proc, timeout=120)
    assert code == 1, (out + err)[-3000:]

    worker_text = textfile.read_text(encoding="utf-8")
    worker = parse(worker_text)
    assert by_label(worker, "conveyor_task_attempts_total", "family", "outcome") == (
        EXPECTED_ATTEMPTS
    )
    histogram_counts_match(worker, "conveyor_task_attempts", "conveyor_task_duration_seconds")

    server_text = server.metrics()
    scraped = parse(server_text)
    assert by_label(scraped, "conveyor_task_attempts_total", "family", "outcome") == (
        EXPECTED_ATTEMPTS
    )
    histogram_counts_match(scraped, "conveyor_task_attempts", "conveyor_task_duration_seconds")
    states = by_label(scraped, "conveyor_tasks", "state")
    assert states == {
        ("PENDING",): 1.0,  # Outcomes itself: some of its dependencies failed
        ("RUNNING",): 0.0,
        ("DONE",): 3.0,
        ("FAILED",): 3.0,
        ("DISABLED",): 0.0,
        ("UNKNOWN",): 0.0,
    }
    assert value(scraped, "conveyor_scheduler_is_leader") == 1.0
    # the one worker that ran: it stopped, but is not declared gone before
    # worker_disconnect_delay has passed
    assert value(scraped, "conveyor_workers") == 1.0
    get_work = value(
        scraped, "conveyor_scheduler_requests_total", route="/api/v1/get_work", code="200"
    )
    assert get_work is not None and get_work > 0, server_text
    requests = by_label(scraped, "conveyor_scheduler_requests_total", "route", "code")
    latencies = by_label(scraped, "conveyor_scheduler_request_duration_seconds_count", "route")
    for route in {r for r, _ in requests}:
        total = sum(n for (r, _), n in requests.items() if r == route)
        assert latencies[(route,)] == total, (route, requests, latencies)
    waits = by_label(scraped, "conveyor_task_queue_wait_seconds_count", "family")
    assert waits == {("Succeeds",): 3.0, ("Raises",): 1.0, ("Sleeps",): 1.0, ("KillsItself",): 1.0}
    for text in (worker_text, server_text):
        assert SECRET not in text
        assert str(workdir / "out") not in text  # (the root parameter's value)
