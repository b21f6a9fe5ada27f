"""SlackNotifier against a real HTTP server on loopback standing in for Slack's webhook."""

from __future__ import annotations

import email.utils
import html
import logging
import time
import traceback
from typing import Any
from urllib.parse import urlsplit

import pytest
from conveyor.events import Params, TaskFailed
from conveyor.notifiers import Message, RetryAfter
from conveyor.notifiers.dispatch import Dispatcher
from conveyor.testing.notifiers import check_notifier, sample_messages

from conveyor_slack import SlackNotifier, SlackWebhookError
from conveyor_slack.blocks import HEADER_LIMIT, MAX_SECTIONS, SECTION_LIMIT
from slack_webhook_fake import FakeWebhook

pytestmark = pytest.mark.timeout(30)

FENCE = "```"


def make_message(
    subject: str = "[conveyor] Report(day=1) failed on host-a",
    text: str = "Report(day=1) failed.\n\nRuntimeError: the disk is full\n",
    kind: str = "failed",
) -> Message:
    """A one-event message as the dispatcher makes them."""
    event = TaskFailed(
        task_id="Report_1_abc",
        family="Report",
        params=Params({"day": "1"}),
        error="RuntimeError: the disk is full",
        exception_type="RuntimeError",
        duration=0.5,
        worker_id="worker-7",
        host="host-a",
    )
    return Message(kind, subject, text, (event,), (), "worker-7", "host-a")


def sent_blocks(hook: FakeWebhook, index: int = -1) -> list[dict[str, Any]]:
    """The blocks of a request the fake webhook received."""
    blocks: list[dict[str, Any]] = hook.received[index].body["blocks"]
    return blocks


def text_sections(blocks: list[dict[str, Any]]) -> list[str]:
    """The mrkdwn of the preformatted text sections, fences removed."""
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b]
    return [t[len(FENCE) : -len(FENCE)] for t in texts if t.startswith(FENCE)]


def exception_texts(exc: BaseException) -> list[str]:
    """str and repr of ``exc`` and of every exception chained to it, and its traceback."""
    texts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), repr(current.args)]
        todo += [current.__cause__, current.__context__]
    return texts


def assert_hidden(texts: list[str], secret_parts: tuple[str, ...]) -> None:
    """No part of the secret path is in any of ``texts``."""
    for text in texts:
        for part in secret_parts:
            assert part not in text, f"the webhook path leaked into: {text!r}"


def send_failure(notifier: SlackNotifier, message: Message | None = None) -> BaseException:
    """What ``notifier.send`` raised (it must raise)."""
    with pytest.raises(Exception) as info:
        notifier.send(message or make_message())
    return info.value


# --- what Slack receives ---------------------------------------------------------------------


def test_a_message_arrives_as_block_kit(webhook: FakeWebhook) -> None:
    """A message is posted to the webhook's path as header, text section and context."""
    notifier = SlackNotifier({"webhook_url": webhook.url})
    notifier.send(make_message())
    (request,) = webhook.received
    assert request.path == urlsplit(webhook.url).path
    assert request.headers["Content-Type"].startswith("application/json")
    blocks = request.body["blocks"]
    assert [b["type"] for b in blocks] == ["header", "section", "context"]
    assert blocks[0]["text"] == {
        "type": "plain_text",
        "text": "[conveyor] Report(day=1) failed on host-a",
    }
    assert blocks[1]["text"]["type"] == "mrkdwn"
    assert text_sections(blocks) == ["Report(day=1) failed.\n\nRuntimeError: the disk is full"]
    context = " ".join(e["text"] for e in blocks[2]["elements"])
    assert "Worker: worker-7" in context
    assert "Host: host-a" in context
    assert request.body["text"] == "[conveyor] Report(day=1) failed on host-a"


def test_markup_in_the_text_is_escaped(webhook: FakeWebhook) -> None:
    """``<script>``, ``&`` and ``<!channel>`` reach Slack escaped in every mrkdwn string."""
    subject = "[conveyor] <script>alert(1)</script> & <!channel> failed"
    text = "Boom: <script>alert('x')</script> & <https://evil.example|click> <!here>\n"
    SlackNotifier({"webhook_url": webhook.url}).send(make_message(subject, text))
    body = webhook.received[0].body
    (section,) = text_sections(body["blocks"])
    assert section == (
        "Boom: &lt;script&gt;alert('x')&lt;/script&gt; &amp; "
        "&lt;https://evil.example|click&gt; &lt;!here&gt;"
    )
    assert body["text"] == (
        "[conveyor] &lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;!channel&gt; failed"
    )
    assert body["blocks"][0]["text"]["text"] == subject  # plain_text is never parsed
    mrkdwn = [section, body["text"], *(e["text"] for e in body["blocks"][-1]["elements"])]
    for value in mrkdwn:
        assert "<" not in value and ">" not in value
        assert html.unescape(value).count("&") == value.count("&amp;")


def test_an_aggregate_shows_the_count_of_each_kind(webhook: FakeWebhook) -> None:
    """An aggregate carries a section whose fields count each kind, then its text."""
    aggregate = sample_messages()[1]
    SlackNotifier({"webhook_url": webhook.url}).send(aggregate)
    blocks = sent_blocks(webhook)
    assert [b["type"] for b in blocks] == ["header", "section", "section", "context"]
    counts = blocks[1]
    assert counts["text"]["text"] == "*3 notifications*"
    assert [f["text"] for f in counts["fields"]] == [
        "*Failed:* 1",
        "*Timed out:* 1",
        "*Process died:* 1",
    ]
    assert "- process_died: CheckLoad(date=2026-12-02)" in text_sections(blocks)[0]


def test_long_text_is_split_at_line_ends_within_slack_limits(webhook: FakeWebhook) -> None:
    """Text longer than a section goes into several, each within 3000 characters, cut at line
    ends, together holding all of it."""
    lines = [f"line {i:04d} <tag> & more text to fill the line up" for i in range(200)]
    SlackNotifier({"webhook_url": webhook.url}).send(make_message(text="\n".join(lines)))
    blocks = sent_blocks(webhook)
    sections = [b for b in blocks if b["type"] == "section"]
    assert len(sections) > 2
    assert all(len(b["text"]["text"]) <= SECTION_LIMIT for b in sections)
    chunks = text_sections(blocks)
    assert all(chunk.startswith("line ") for chunk in chunks)
    assert html.unescape("\n".join(chunks)) == "\n".join(lines)


def test_a_long_line_is_cut_without_breaking_an_escape(webhook: FakeWebhook) -> None:
    """A single line of ``&`` far longer than a section is cut between escapes only."""
    SlackNotifier({"webhook_url": webhook.url}).send(make_message(text="&" * 5000))
    chunks = text_sections(sent_blocks(webhook))
    assert len(chunks) == 9
    assert all(chunk == "&amp;" * (len(chunk) // 5) for chunk in chunks)
    assert sum(chunk.count("&amp;") for chunk in chunks) == 5000


def test_text_beyond_the_section_limit_keeps_its_start_and_end(webhook: FakeWebhook) -> None:
    """Past MAX_SECTIONS sections the middle is left out, saying so; the end is kept."""
    lines = [f"frame {i:05d} " + "x" * 80 for i in range(2000)] + ["RuntimeError: the end"]
    SlackNotifier({"webhook_url": webhook.url}).send(make_message(text="\n".join(lines)))
    blocks = sent_blocks(webhook)
    sections = [b for b in blocks if b["type"] == "section"]
    assert len(sections) == MAX_SECTIONS
    assert len(blocks) <= 50
    assert "more sections of text left out" in sections[-2]["text"]["text"]
    assert text_sections(blocks)[0].startswith("frame 00000")
    assert text_sections(blocks)[-1].endswith("RuntimeError: the end")


def test_a_long_subject_is_cut_to_the_header_limit(webhook: FakeWebhook) -> None:
    """The header holds at most 150 characters on one line, ending in an ellipsis."""
    subject = "[conveyor] " + "VeryLongFamilyName(x=1)\n" * 30
    SlackNotifier({"webhook_url": webhook.url}).send(make_message(subject=subject))
    header = sent_blocks(webhook)[0]["text"]["text"]
    assert len(header) <= HEADER_LIMIT
    assert "\n" not in header
    assert header.endswith("\u2026")


def test_empty_text_sends_no_text_section(webhook: FakeWebhook) -> None:
    """A message without text is a header and a context block (no empty section)."""
    SlackNotifier({"webhook_url": webhook.url}).send(make_message(text="  \n"))
    assert [b["type"] for b in sent_blocks(webhook)] == ["header", "context"]


def test_a_fence_in_the_text_does_not_end_the_code_block(webhook: FakeWebhook) -> None:
    """Triple backticks inside the text are broken up so the section stays one code block."""
    SlackNotifier({"webhook_url": webhook.url}).send(make_message(text="a ``` b"))
    (chunk,) = text_sections(sent_blocks(webhook))
    assert FENCE not in chunk
    assert chunk.replace("\u200b", "") == "a ``` b"


# --- Slack's answers -------------------------------------------------------------------------


def test_a_2xx_answer_is_a_delivery(webhook: FakeWebhook) -> None:
    """Any 2xx answer returns, whatever its body."""
    webhook.reply(204)
    webhook.reply(200, "ok")
    notifier = SlackNotifier({"webhook_url": webhook.url})
    notifier.send(make_message())
    notifier.send(make_message())
    assert len(webhook.received) == 2


def test_429_asks_for_a_retry_after_the_header_seconds(webhook: FakeWebhook) -> None:
    """429 with ``Retry-After: 7`` raises RetryAfter(7)."""
    webhook.reply(429, "rate_limited", {"Retry-After": "7"})
    exc = send_failure(SlackNotifier({"webhook_url": webhook.url}))
    assert isinstance(exc, RetryAfter)
    assert exc.seconds == 7.0


@pytest.mark.parametrize("headers", [{}, {"Retry-After": "soon"}, {"Retry-After": "-3"}])
def test_429_without_a_usable_retry_after_waits_one_second(
    webhook: FakeWebhook, headers: dict[str, str]
) -> None:
    """A 429 whose Retry-After is missing or does not parse asks for 1 s."""
    webhook.reply(429, "rate_limited", headers)
    exc = send_failure(SlackNotifier({"webhook_url": webhook.url}))
    assert isinstance(exc, RetryAfter)
    assert exc.seconds == 1.0


def test_429_with_an_http_date_waits_until_then(webhook: FakeWebhook) -> None:
    """A Retry-After given as an HTTP date asks for the seconds until that date."""
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    webhook.reply(429, "rate_limited", {"Retry-After": when})
    exc = send_failure(SlackNotifier({"webhook_url": webhook.url}))
    assert isinstance(exc, RetryAfter)
    assert 25.0 <= exc.seconds <= 31.0


def test_500_raises_for_the_dispatcher_to_retry(webhook: FakeWebhook) -> None:
    """5xx raises SlackWebhookError with the status, after exactly one request."""
    webhook.reply(500, "internal_error")
    exc = send_failure(SlackNotifier({"webhook_url": webhook.url}))
    assert isinstance(exc, SlackWebhookError)
    assert exc.status == 500
    assert "HTTP 500" in str(exc)
    assert "internal_error" in str(exc)
    assert len(webhook.received) == 1  # retrying is the dispatcher's, not slack_sdk's


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, "invalid_payload"),
        (403, "invalid_token"),
        (404, "no_service"),
        (410, "channel_is_archived"),
    ],
)
def test_a_4xx_says_the_webhook_refused_the_message(
    webhook: FakeWebhook, status: int, body: str
) -> None:
    """Other 4xx raise SlackWebhookError naming the refusal, the status and Slack's text."""
    webhook.reply(status, body)
    exc = send_failure(SlackNotifier({"webhook_url": webhook.url}))
    assert isinstance(exc, SlackWebhookError)
    assert exc.status == status
    assert f"refused the message: HTTP {status}: {body}" in str(exc)
    assert exc.origin in str(exc)


def test_a_long_answer_is_shortened_in_the_error(webhook: FakeWebhook) -> None:
    """Slack's (or a proxy's) long error page is quoted on one line, shortened."""
    webhook.reply(400, "<html>\n" + "error page " * 1000 + "</html>")
    exc = send_failure(SlackNotifier({"webhook_url": webhook.url}))
    assert "\n" not in str(exc)
    assert len(str(exc)) < 400


def test_connection_refused_raises_quickly(refused_url: str) -> None:
    """Nothing listening: SlackWebhookError at once, not after the timeout."""
    notifier = SlackNotifier({"webhook_url": refused_url, "timeout": 120.0})
    started = time.monotonic()
    exc = send_failure(notifier)
    assert time.monotonic() - started < 30  # (generous for a loaded machine; far below 120 s)
    assert isinstance(exc, SlackWebhookError)
    assert exc.status is None
    assert "Connection refused" in str(exc)


def test_a_server_that_never_answers_raises_within_the_timeout(silent_url: str) -> None:
    """A server that accepts and never answers: SlackWebhookError after about ``timeout``."""
    notifier = SlackNotifier({"webhook_url": silent_url, "timeout": 0.5})
    started = time.monotonic()
    exc = send_failure(notifier)
    elapsed = time.monotonic() - started
    assert 0.4 <= elapsed < 30  # without its timeout it would wait for ever
    assert isinstance(exc, SlackWebhookError)
    assert "no answer within 0.5 s" in str(exc)


# --- the URL is a secret ---------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["refused", "silent", "500", "404", "429", "echo"])
def test_the_webhook_path_never_shows_in_an_exception(
    answer: str,
    webhook: FakeWebhook,
    refused_url: str,
    silent_url: str,
    secret_parts: tuple[str, ...],
) -> None:
    """Whatever goes wrong, no exception (nor any chained to it, nor its traceback) shows the
    webhook's path; the origin alone identifies it."""
    url = {"refused": refused_url, "silent": silent_url}.get(answer, webhook.url)
    if answer == "echo":
        webhook.reply(404, f"no webhook at {webhook.url} (path {url.split('/', 3)[3]})")
    elif answer in ("500", "404", "429"):
        webhook.reply(int(answer), "nope", {"Retry-After": "2"})
    notifier = SlackNotifier({"webhook_url": url, "timeout": 0.5})
    exc = send_failure(notifier)
    assert_hidden(exception_texts(exc), secret_parts)
    if isinstance(exc, SlackWebhookError):
        assert exc.__cause__ is None and exc.__context__ is None


def test_the_repr_hides_the_path(webhook: FakeWebhook, secret_parts: tuple[str, ...]) -> None:
    """repr() and str() of the notifier show the webhook's origin only."""
    notifier = SlackNotifier({"webhook_url": webhook.url})
    assert_hidden([repr(notifier), str(notifier)], secret_parts)
    assert repr(notifier) == f"SlackNotifier(webhook_url='{notifier.origin}/***', timeout=10)"
    assert notifier.origin == webhook.url.split("/services/")[0]


def test_credentials_in_the_url_are_not_the_origin(secret_parts: tuple[str, ...]) -> None:
    """A ``user:password@`` part is no more shown than the path."""
    notifier = SlackNotifier({"webhook_url": "https://user:SECRETpw@example.com:8443/x/SECRET"})
    assert notifier.origin == "https://example.com:8443"
    assert "SECRET" not in repr(notifier)


def test_nothing_logged_shows_the_path(
    webhook: FakeWebhook,
    refused_url: str,
    secret_parts: tuple[str, ...],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With every logger at DEBUG, sending (delivered, refused, unreachable) logs no path."""
    caplog.set_level(logging.DEBUG)
    logging.getLogger("slack_sdk").setLevel(logging.DEBUG)
    try:
        SlackNotifier({"webhook_url": webhook.url}).send(make_message())
        webhook.reply(404, "no_service")
        send_failure(SlackNotifier({"webhook_url": webhook.url}))
        send_failure(SlackNotifier({"webhook_url": refused_url}))
    finally:
        logging.getLogger("slack_sdk").setLevel(logging.NOTSET)
    assert_hidden([caplog.text, *(r.getMessage() for r in caplog.records)], secret_parts)


# --- the protocol --------------------------------------------------------------------------------


def test_check_notifier_passes_with_a_refused_endpoint(
    webhook: FakeWebhook, refused_url: str
) -> None:
    """The conformance check passes; the webhook got the single and the aggregate message."""
    messages = check_notifier(
        SlackNotifier,
        {"webhook_url": webhook.url, "timeout": 5.0},
        failing_settings={"webhook_url": refused_url, "timeout": 5.0},
        timeout=10.0,
    )
    assert [r.body["blocks"][0]["text"]["text"] for r in webhook.received] == [
        m.subject for m in messages
    ]


def test_check_notifier_passes_with_a_500_endpoint(
    webhook: FakeWebhook, failing_webhook: FakeWebhook
) -> None:
    """The conformance check passes when the failing endpoint answers 500."""
    check_notifier(
        SlackNotifier,
        {"webhook_url": webhook.url},
        failing_settings={"webhook_url": failing_webhook.url},
        timeout=10.0,
    )
    assert len(webhook.received) == 2
    assert len(failing_webhook.received) == 1


def test_check_notifier_passes_with_a_silent_endpoint(
    webhook: FakeWebhook, silent_url: str
) -> None:
    """The conformance check passes when the failing endpoint never answers."""
    check_notifier(
        SlackNotifier,
        {"webhook_url": webhook.url},
        failing_settings={"webhook_url": silent_url, "timeout": 0.5},
        timeout=10.0,
    )


def test_the_dispatcher_honours_retry_after(webhook: FakeWebhook) -> None:
    """Through the worker's real dispatcher, a 429 is retried after its Retry-After and the
    message then delivered."""
    webhook.reply(429, "rate_limited", {"Retry-After": "0"})
    table = {"webhook_url": webhook.url, "timeout": 5.0, "max_retries": 2}
    notifier = SlackNotifier(table)
    dispatcher = Dispatcher([("slack", notifier, table)], aggregate_after=5)
    dispatcher.notify("failed", make_message().events[0])
    dispatcher.close(flush_timeout=10.0)
    assert len(webhook.received) == 2
    assert dispatcher.delivered == 1
    header = webhook.received[1].body["blocks"][0]["text"]["text"]
    assert header.startswith("[conveyor] Report(day=1) failed")
