"""Notification dispatch (SPEC §4.3): aggregation of bursts, retries, bounded queues and
flushing, a third party's notifier found through its entry point, and redaction everywhere."""

from __future__ import annotations

import importlib
import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

import conveyor
from conveyor.notifiers import Message, RetryAfter
from conveyor.notifiers.dispatch import Dispatcher
from conveyor.notifiers.messages import compose
from conveyor.testing.notifiers import check_notifier, sample_messages
from conveyor.testing.processes import wait_for

RunCli = Callable[..., subprocess.CompletedProcess[str]]
WriteModule = Callable[..., str]

TASKS = """
import conveyor


class Boom(conveyor.Task):
    owner_email = "owner@example.com, second@example.com"
    i = conveyor.IntParameter()
    password = conveyor.Parameter(default="hunter2-not-shown")

    def output(self):
        return conveyor.LocalTarget(f"/nonexistent/conveyor-boom-{self.i}")

    def run(self):
        raise RuntimeError(f"boom {self.i}: the password was {self.password}")


class Storm(conveyor.WrapperTask):
    n = conveyor.IntParameter(default=100)

    def requires(self):
        return [Boom(i=i) for i in range(self.n)]
"""


def _messages(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(body)
    return path


def _jsonl(tmp_path: Path, extra: str = "", notifiers: str = "") -> Path:
    return _config(
        tmp_path,
        f"""
[notifiers]
enabled = ["jsonl"]
{notifiers}
[notifiers.jsonl]
path = "{tmp_path / "messages.jsonl"}"
{extra}
""",
    )


def test_a_failure_storm_is_a_handful_of_messages_and_loses_no_task(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """100 tasks failing within a second: aggregate_after (5) single messages, then one
    aggregate; every failed task id is in some message, none twice."""
    module = importlib.import_module(task_module(TASKS))
    config = _jsonl(tmp_path)
    with conveyor.Worker(config=config) as worker:
        worker.add(module.Storm())
        assert worker.run() is False
    messages = _messages(tmp_path / "messages.jsonl")
    assert [m["kind"] for m in messages] == ["failed"] * 5 + ["aggregate"]
    covered = [e["task_id"] for m in messages for e in m["events"]]
    expected = {module.Boom(i=i).task_id for i in range(100)}
    assert sorted(covered) == sorted(expected)
    aggregate = messages[-1]
    assert "95 notifications" in aggregate["text"] and "95 failed" in aggregate["subject"]
    for task_id in covered[5:]:
        assert task_id in aggregate["text"]


def test_a_third_party_notifier_gets_every_field_of_the_message(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """The jsonl notifier of tests/thirdparty-plugin is found through its entry point and is
    sent Message objects with every field filled; run_finished sends the summary."""
    import socket

    module = importlib.import_module(task_module(TASKS))
    config = _jsonl(tmp_path, notifiers='on = ["failed", "run_finished"]')
    with conveyor.Worker(config=config, worker_id="w-fields") as worker:
        worker.add(module.Storm(n=1))
        worker.run()
    first, finished = _messages(tmp_path / "messages.jsonl")
    assert first["kind"] == "failed"
    assert first["recipients"] == ["owner@example.com", "second@example.com"]
    assert first["worker_id"] == "w-fields"
    assert first["host"] == socket.gethostname()
    assert first["subject"].startswith("[conveyor] Boom(i=0, password=***) failed on ")
    [event] = first["events"]
    assert event["type"] == "TaskFailed"
    assert event["owner_email"] == ["owner@example.com", "second@example.com"]
    assert event["host"] == socket.gethostname()
    for needle in ("Task id:", "Outcome:    failed (RuntimeError)", "Worker:     w-fields"):
        assert needle in first["text"]
    assert finished["kind"] == "run_finished"
    assert "did not succeed" in finished["subject"]
    assert "failed" in finished["text"]


def test_the_third_party_notifier_passes_check_notifier(tmp_path: Path) -> None:
    """The conformance check, with a path that works and one that cannot be written."""
    notifier_cls = conveyor.backends.load_backend("conveyor.notifiers", "jsonl")
    out = tmp_path / "checked.jsonl"
    sent = check_notifier(
        notifier_cls,
        {"path": str(out)},
        failing_settings={"path": str(tmp_path / "missing" / "dir.jsonl")},
        timeout=10,
    )
    assert [m["subject"] for m in _messages(out)] == [m.subject for m in sent]
    assert [m.kind for m in sent] == ["failed", "aggregate"]


def test_check_notifier_reports_a_notifier_that_hangs_or_swallows_failures() -> None:
    """The check itself can fail: a send that never returns, a failing endpoint that passes."""

    class Hangs:
        settings_schema: dict[str, Any] = {}

        def __init__(self, settings: object) -> None:
            self.release = threading.Event()

        def send(self, message: Message) -> None:
            self.release.wait(5)

    with pytest.raises(AssertionError, match="did not return"):
        check_notifier(Hangs, {}, timeout=0.2)

    class Silent:
        settings_schema: dict[str, Any] = {}

        def __init__(self, settings: object) -> None:
            pass

        def send(self, message: Message) -> None:
            pass

    with pytest.raises(AssertionError, match="returned instead of raising"):
        check_notifier(Silent, {}, failing_settings={}, timeout=1)


def test_retry_after_is_honoured_and_the_message_arrives_once(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """A notifier that asks twice to be retried (RetryAfter) gets the message on the third
    try, exactly once."""
    module = importlib.import_module(task_module(TASKS))
    config = _jsonl(tmp_path, extra="fail_first = 2")
    with conveyor.Worker(config=config) as worker:
        worker.add(module.Storm(n=1))
        worker.run()
    assert [m["kind"] for m in _messages(tmp_path / "messages.jsonl")] == ["failed"]


def test_a_failing_notifier_changes_nothing_and_is_logged_once(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """Every send raises (its file cannot be written): the run's result is the same as
    without notifiers, and the failure is one log line naming the notifier."""
    module = importlib.import_module(task_module(TASKS))
    bad = _config(
        tmp_path,
        f"""
[notifiers]
enabled = ["jsonl"]
flush_timeout = 5
[notifiers.jsonl]
path = "{tmp_path / "missing" / "m.jsonl"}"
""",
    )
    with structlog.testing.capture_logs() as logs, conveyor.Worker(config=bad) as worker:
        worker.add(module.Storm(n=3))
        with_notifier = worker.run()
        report = worker.report
    with conveyor.Worker(config=_config(tmp_path, "")) as plain:
        plain.add(module.Storm(n=3))
        assert plain.run() is with_notifier is False
        assert plain.report is not None and report is not None
        assert plain.report.exit_code == report.exit_code
    failures = [r for r in logs if r["event"] == "a notifier failed to send"]
    assert len(failures) == 1
    assert failures[0]["notifier"] == "jsonl"
    assert "No such file or directory" in failures[0]["error"]


class _Gate:
    """A notifier whose send() waits for the test (or forever)."""

    settings_schema: dict[str, Any] = {}

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.sent: list[Message] = []

    def send(self, message: Message) -> None:
        self.entered.set()
        if not self.release.wait(30):
            raise TimeoutError("never released")
        self.sent.append(message)


def _event(i: int) -> conveyor.events.TaskFailed:
    failed = sample_messages()[0].events[0]
    assert isinstance(failed, conveyor.events.TaskFailed)
    return conveyor.events.TaskFailed(
        task_id=f"T{i}", family="T", error="x", exception_type="E", duration=0.0,
        host=failed.host, worker_id=failed.worker_id,
    )  # fmt: skip


def test_a_hanging_notifier_costs_at_most_flush_timeout_at_exit() -> None:
    """A send that never returns: close() gives up after flush_timeout and logs what was not
    delivered."""
    gate = _Gate()
    dispatcher = Dispatcher([("gate", gate, {"timeout": 0.2, "max_retries": 0})])
    dispatcher.start()
    with structlog.testing.capture_logs() as logs:
        dispatcher.notify("failed", _event(1))
        dispatcher.notify("failed", _event(2))
        assert gate.entered.wait(10)
        started = time.monotonic()
        dispatcher.close(flush_timeout=0.5)
        closed_in = time.monotonic() - started
    gate.release.set()
    assert closed_in < 20  # the bound is flush_timeout; the send would never end
    assert dispatcher.delivered == 0
    assert [r["undelivered"] for r in logs if "undelivered" in r] == [1]  # T2, never tried


def test_a_full_queue_drops_the_oldest_and_says_so_once() -> None:
    """With the sender stuck, notifications beyond the queue's size push out the oldest; one
    log line counts them; the newest are the ones delivered."""
    gate = _Gate()
    dispatcher = Dispatcher(
        [("gate", gate, {"timeout": 30, "max_retries": 0})], aggregate_after=100, queue_size=3
    )
    dispatcher.start()
    with structlog.testing.capture_logs() as logs:
        dispatcher.notify("failed", _event(0))
        assert gate.entered.wait(10)  # the sender now holds T0 and is stuck in send()
        for i in range(1, 11):
            dispatcher.notify("failed", _event(i))
        gate.release.set()
        dispatcher.close(flush_timeout=10)
    delivered = [m.events[0].task_id for m in gate.sent]
    assert delivered == ["T0", "T8", "T9", "T10"]
    assert dispatcher.dropped == 7
    assert len([r for r in logs if r["event"].startswith("the notification queue is full")]) == 1


def test_notifications_are_never_sent_after_close() -> None:
    """A late event (after close) is ignored rather than starting a thread that outlives the
    worker."""
    gate = _Gate()
    gate.release.set()
    dispatcher = Dispatcher([("gate", gate, {})])
    dispatcher.close(flush_timeout=1)
    dispatcher.notify("failed", _event(1))
    assert gate.sent == []


def test_compose_redacts_and_truncates() -> None:
    """Secret-named parameter values, credentials in URLs and secret query values are hidden
    in the subject and text; a huge explanation is cut."""
    event = conveyor.events.TaskFailed(
        task_id="Load_x", family="Load",
        params=conveyor.events.Params(
            {"api_key": "k-123456", "source": "https://bob:pw-9876@db.example.com/x?token=t-555"}
        ),
        error="failed with k-123456 at https://bob:pw-9876@db.example.com " + "y" * 50_000,
        exception_type="RuntimeError", duration=1.0, host="h", worker_id="w",
    )  # fmt: skip
    message = compose("failed", event, command="conveyor run Load --api-key k-123456")
    for secret in ("k-123456", "pw-9876", "t-555"):
        assert secret not in message.subject
        assert secret not in message.text
    assert "api_key=***" in message.subject
    assert len(message.text) < 10_000
    assert "characters cut" in message.text


SECRETS_CONFIG = """
[scheduler]
url = "http://admin:s3cr3t-in-url@127.0.0.1:8082"

[notifiers]
enabled = ["jsonl"]
on = ["failed", "run_finished"]

[notifiers.jsonl]
path = "{path}"

[notifiers.slack]
webhook_url = "https://hooks.slack.com/services/T000/B000/WEBHOOKSECRETPATH"
"""


def test_secrets_never_reach_a_message_a_log_line_the_summary_or_conveyor_config(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """A `password` parameter given on the command line, credentials in the scheduler URL and
    a Slack webhook path: in no message, JSON log line, summary or `conveyor config` output."""
    name = task_module(TASKS)
    out = tmp_path / "messages.jsonl"
    config = _config(tmp_path, SECRETS_CONFIG.format(path=out))
    result = run_cli(
        "run", f"{name}.Boom", "--i", "1", "--password", "pw-on-the-command-line",
        "--config", str(config), "--log-format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    shown = run_cli("config", "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "hooks.slack.com/services/***" in shown.stdout
    messages = _messages(out)
    assert [m["kind"] for m in messages] == ["failed", "run_finished"]
    texts = [m["subject"] + m["text"] for m in messages]
    for secret in ("pw-on-the-command-line", "s3cr3t-in-url", "WEBHOOKSECRETPATH"):
        for where, text in [
            ("stdout", result.stdout), ("stderr", result.stderr), ("config", shown.stdout),
            *(("message", t) for t in texts),
        ]:  # fmt: skip
            assert secret not in text, f"{secret} in {where}"
    assert "password=***" in texts[0]


def _docs_example() -> type[Any]:
    text = (Path(__file__).resolve().parent.parent / "docs" / "notifiers.md").read_text()
    block = next(b for b in text.split("```python")[1:] if "(notifier-example)" in b)
    namespace: dict[str, Any] = {"__name__": "conveyor_docs_webhook"}
    exec(compile(block.split("```")[0], "docs/notifiers.md", "exec"), namespace)
    cls: type[Any] = namespace["WebhookNotifier"]
    return cls


def test_the_docs_example_notifier_passes_check_notifier() -> None:
    """The complete notifier of docs/notifiers.md, run as printed, against a local endpoint."""
    import http.server

    from conveyor.testing.processes import free_port

    received: list[dict[str, Any]] = []

    class Endpoint(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/topic"
        closed = f"http://127.0.0.1:{free_port()}/nothing-listens"
        sent = check_notifier(
            _docs_example(), {"url": url}, failing_settings={"url": closed}, timeout=10
        )
    finally:
        server.shutdown()
        server.server_close()
    assert [r["title"] for r in received] == [m.subject for m in sent]
    assert received[1]["tasks"] == [e.task_id for e in sent[1].events]


def test_conveyor_config_checks_the_table_of_an_enabled_notifier(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """`conveyor config` validates what a worker would: a typo in an enabled notifier's table
    is exit 2 naming it (a table of a notifier that is not enabled is left alone)."""
    typo = _config(tmp_path, '[notifiers]\nenabled = ["jsonl"]\n[notifiers.jsonl]\npaht = "x"\n')
    result = run_cli("config", "--config", str(typo), cwd=tmp_path)
    assert result.returncode == 2
    assert "notifiers.jsonl.paht" in result.stderr and "Traceback" not in result.stderr
    idle = _config(tmp_path, '[notifiers.jsonl]\npaht = "x"\n')
    assert run_cli("config", "--config", str(idle), cwd=tmp_path).returncode == 0


class _Timed:
    """A notifier that records when each send() starts and how many run at once."""

    settings_schema: dict[str, Any] = {}

    def __init__(self, duration: float = 0.0, retry_after: float | None = None) -> None:
        self.duration = duration
        self.retry_after = retry_after
        self.started: list[float] = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def send(self, message: Message) -> None:
        with self.lock:
            self.started.append(time.monotonic())
            self.running += 1
            self.most = max(self.most, self.running)
            first = len(self.started) == 1
        try:
            if first and self.retry_after is not None:
                raise RetryAfter(self.retry_after)
            time.sleep(self.duration)
        finally:
            with self.lock:
                self.running -= 1


def test_retry_after_waits_as_long_as_asked() -> None:
    """RetryAfter(0.6): the second try starts no sooner than 0.6 s after the first."""
    timed = _Timed(retry_after=0.6)
    dispatcher = Dispatcher([("timed", timed, {"timeout": 5, "max_retries": 1})])
    dispatcher.start()
    dispatcher.notify("failed", _event(1))
    dispatcher.close(flush_timeout=10)
    assert len(timed.started) == 2
    assert timed.started[1] - timed.started[0] >= 0.6
    assert dispatcher.delivered == 1


def test_an_absurd_retry_after_neither_kills_the_sender_nor_outlives_close() -> None:
    """RetryAfter(1e12) (a Retry-After header far in the future): waited for at most an hour,
    so close() ends at its deadline and says the message was not delivered."""
    timed = _Timed(retry_after=1e12)
    dispatcher = Dispatcher([("timed", timed, {"timeout": 5, "max_retries": 3})])
    dispatcher.start()
    with structlog.testing.capture_logs() as logs:
        dispatcher.notify("failed", _event(1))
        wait_for(lambda: timed.started, 10, "the first send")
        dispatcher.close(flush_timeout=0.5)
    assert dispatcher._thread is not None and not dispatcher._thread.is_alive()
    assert [r["undelivered"] for r in logs if "undelivered" in r] == [1]


def test_one_send_per_notifier_at_a_time_even_when_sends_are_abandoned() -> None:
    """A send() slower than its timeout is abandoned, but no other send() of that notifier
    starts until it has returned: never two at once, no pile of threads."""
    slow = _Timed(duration=0.4)
    dispatcher = Dispatcher([("slow", slow, {"timeout": 0.1, "max_retries": 5})])
    dispatcher.start()
    for i in range(5):
        dispatcher.notify("failed", _event(i))
    dispatcher.close(flush_timeout=3)
    assert slow.most == 1
    assert len(slow.started) >= 2


def test_nothing_is_sent_after_the_close_deadline() -> None:
    """flush_timeout = 0 with 20 notifications queued: close() starts no send() at all and
    counts the messages they make as undelivered."""
    timed = _Timed(duration=0.2)
    dispatcher = Dispatcher([("timed", timed, {"timeout": 5, "max_retries": 0})], queue_size=50)
    with structlog.testing.capture_logs() as logs:
        for i in range(20):
            dispatcher.notify("failed", _event(i))  # not started yet: all wait in the inbox
        dispatcher.close(flush_timeout=0)
    assert timed.started == []
    # 5 single messages and one aggregate of the other 15
    assert [r["undelivered"] for r in logs if "undelivered" in r] == [6]


STATUS_TASKS = """
import conveyor


class Reports(conveyor.Task):
    source = conveyor.Parameter(default="ftp://bob:Pw9876@files.example.com/in")

    def complete(self):
        return False

    def run(self):
        self.set_status_message("connecting to https://alice:St4tus@db.example.com/x")
        self.set_tracking_url("https://ui.example.com/job?token=Tr4ck&id=1")
        raise RuntimeError("no luck")
"""


def test_status_messages_tracking_urls_and_task_ids_hide_credentials(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """Credentials in a status message, a tracking URL's secret query value, and a URL
    parameter's password in the readable part of the task id: in no log line or message."""
    module = importlib.import_module(task_module(STATUS_TASKS))
    config = _jsonl(tmp_path)
    with structlog.testing.capture_logs() as logs, conveyor.Worker(config=config) as worker:
        task = module.Reports()
        worker.add(task)
        worker.run()
    assert "Pw9876" not in task.task_id
    messages = _messages(tmp_path / "messages.jsonl")
    assert len(messages) == 1
    shown = [str(r) for r in logs] + [m["subject"] + m["text"] for m in messages]
    assert any("connecting to https://***@db.example.com" in line for line in shown)
    for secret in ("St4tus", "Tr4ck", "Pw9876"):
        assert not [line for line in shown if secret in line], secret
