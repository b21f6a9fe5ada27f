"""The slack notifier inside a real worker: enabled from worker.toml, fed by the dispatcher."""

from __future__ import annotations

from pathlib import Path

import conveyor
import pytest
import structlog

from slack_webhook_fake import FakeWebhook

pytestmark = pytest.mark.timeout(60)


class SlackBoom(conveyor.Task):
    """Fails, with a secret parameter."""

    api_token = conveyor.Parameter(default="tok-never-shown")

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget("/nonexistent/conveyor-slack-boom")

    def run(self) -> None:
        raise RuntimeError(f"refused with {self.api_token}")


def _worker(tmp_path: Path, url: str, retries: int = 3) -> conveyor.Worker:
    config = tmp_path / "worker.toml"
    config.write_text(
        f"""
[notifiers]
enabled = ["slack"]
flush_timeout = 20
[notifiers.slack]
webhook_url = "{url}"
timeout = 5
max_retries = {retries}
"""
    )
    return conveyor.Worker(config=config)


def test_a_failure_reaches_the_webhook_as_block_kit_redacted(
    tmp_path: Path, webhook: FakeWebhook
) -> None:
    """One failing task, one POST: its header names the task, its text the error, and the
    secret parameter's value is in neither."""
    with _worker(tmp_path, webhook.url) as worker:
        worker.add(SlackBoom())
        assert worker.run() is False
    [received] = webhook.received
    body = received.body
    assert body["blocks"][0]["type"] == "header"
    assert body["blocks"][0]["text"]["text"].startswith("[conveyor] SlackBoom(api_token=***)")
    raw = str(body)
    assert "refused with ***" in raw
    assert "tok-never-shown" not in raw


def test_429_is_honoured_and_500s_are_retried_then_dropped(
    tmp_path: Path, webhook: FakeWebhook
) -> None:
    """A 429 with Retry-After: 0 is retried at once and delivered. An endpoint that always
    answers 500 gets 1 + max_retries tries, then the message is dropped with a log line; the
    run's result is the same as without a notifier."""
    webhook.reply(429, "rate_limited", {"Retry-After": "0"})
    (tmp_path / "a").mkdir()
    with _worker(tmp_path / "a", webhook.url) as limited:
        limited.add(SlackBoom())
        limited.run()
    assert len(webhook.received) == 2  # the 429, then the delivery

    webhook.received.clear()
    webhook.always(500, "internal_error")
    (tmp_path / "b").mkdir()
    worker = _worker(tmp_path / "b", webhook.url, retries=1)
    with structlog.testing.capture_logs() as logs, worker:
        worker.add(SlackBoom())
        assert worker.run() is False
        assert worker.report is not None
        assert worker.report.exit_code == 1
    assert len(webhook.received) == 2  # the first try and one retry
    dropped = [r for r in logs if r["event"] == "a notification was dropped after its retries"]
    assert [(r["notifier"], r["attempts"]) for r in dropped] == [("slack", 2)]
    for record in logs:
        assert "/services/" not in str(record)  # the webhook's secret path
