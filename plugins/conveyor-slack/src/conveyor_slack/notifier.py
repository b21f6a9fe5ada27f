"""The Slack notifier: one Block Kit message per notification, through an incoming webhook.

Theory of operation. The worker builds :class:`SlackNotifier` once from its validated
``[notifiers.slack]`` table and calls :meth:`SlackNotifier.send` from the dispatcher's sender
thread. ``send`` makes one POST through slack_sdk's :class:`~slack_sdk.webhook.WebhookClient`
with ``timeout`` on the connection and on every read, and turns the answer into the notifier
protocol (docs/notifiers.md): 2xx returns; 429 raises :class:`~conveyor.notifiers.RetryAfter` with
the ``Retry-After`` delay; anything else, and any failure to get an answer, raises
:class:`SlackWebhookError`. It never retries or sleeps itself: retries, backoff and the overall
time limit are the dispatcher's (which reads ``timeout`` and ``max_retries`` from the table).

The webhook URL is a credential — whoever has it can post to the channel — so its path never
appears in an error message, a log line or a repr: only ``scheme://host`` is ever shown.
slack_sdk gets a logger that never logs (its debug lines carry the URL) and no retry handlers,
and a failure of the library is re-raised as a :class:`SlackWebhookError` built from the kind
of failure alone, outside the ``except`` block, so the library's exception (whose text may
carry the URL) is not even kept as its ``__context__``.
"""

from __future__ import annotations

import email.utils
import http.client
import logging
import math
import ssl
import time
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.error import URLError
from urllib.parse import urlsplit

from conveyor.notifiers import Message, RetryAfter
from conveyor.settings import Field, validate_backend_settings
from slack_sdk.webhook import WebhookClient, WebhookResponse

from .blocks import build_payload

__all__ = ["DEFAULT_RETRY_AFTER", "SlackNotifier", "SlackWebhookError", "retry_after_seconds"]

DEFAULT_RETRY_AFTER = 1.0  # seconds, when a 429 has no usable Retry-After header
MAX_BODY_SHOWN = 200  # characters of Slack's answer quoted in an error

# slack_sdk logs the full URL at DEBUG level (and decides by this logger's own level), and
# failures at ERROR: this logger drops everything, whatever the application's logging set-up.
_SDK_LOG = logging.getLogger("conveyor_slack.slack_sdk")
_SDK_LOG.setLevel(logging.CRITICAL + 1)
_SDK_LOG.propagate = False


class SlackWebhookError(Exception):
    """A message was not delivered to the Slack webhook.

    ``origin`` is the webhook's ``scheme://host[:port]`` (never its path, which is secret);
    ``status`` the HTTP status Slack answered, or None when no answer came.
    """

    def __init__(self, message: str, *, origin: str, status: int | None = None) -> None:
        """A delivery failure at ``origin``; ``message`` must not contain the URL's path."""
        super().__init__(message)
        self.origin = origin
        self.status = status


def _is_http_url(value: str) -> bool:
    """True for an absolute ``http://`` or ``https://`` URL with a host (and a valid port)."""
    if any(c.isspace() for c in value):
        return False
    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what may be shown of a secret URL."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}"


def _secret_parts(url: str) -> tuple[str, ...]:
    """What to hide of ``url`` in text it did not write (an answer quoting it): the URL, its
    path (with and without the leading slash) and every path segment of 6 characters or more,
    longest first."""
    path = urlsplit(url)._replace(scheme="", netloc="").geturl()
    segments = [s for s in path.replace("?", "/").replace("&", "/").split("/") if len(s) >= 6]
    parts = {url, path, path.lstrip("/"), *segments} - {"", "/"}
    return tuple(sorted(parts, key=len, reverse=True))


def retry_after_seconds(value: object, now: float | None = None) -> float:
    """The delay a ``Retry-After`` header value asks for, in seconds.

    Accepts a number of seconds or an HTTP date; :data:`DEFAULT_RETRY_AFTER` when the header
    is missing (None), negative or does not parse.
    """
    text = str(value).strip() if value is not None else ""
    try:
        seconds = float(text)
    except ValueError:
        seconds = _seconds_until(text, time.time() if now is None else now)
    if not math.isfinite(seconds) or seconds < 0:
        return DEFAULT_RETRY_AFTER
    return seconds


def _seconds_until(http_date: str, now: float) -> float:
    """Seconds from ``now`` to ``http_date`` (at least 0), or NaN if it is not a date."""
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return math.nan
    return max(0.0, when.timestamp() - now) if when.tzinfo is not None else math.nan


def _header(headers: Mapping[str, Any], name: str) -> Any:
    """The value of header ``name`` (matched case-insensitively), or None."""
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


class SlackNotifier:
    """Posts each notification to a Slack incoming webhook as a Block Kit message."""

    settings_schema: ClassVar[Mapping[str, Field]] = {
        "webhook_url": Field(
            "str",
            required=True,
            check=_is_http_url,
            expect="an http:// or https:// URL (the incoming webhook's, from Slack)",
            doc="The incoming webhook's URL; its path is a secret and is never shown.",
        ),
        "timeout": Field(
            "seconds",
            10.0,
            gt=0,
            doc="Seconds to wait for the connection and for each read of Slack's answer.",
        ),
        "max_retries": Field(
            "int",
            3,
            ge=0,
            doc="Retries of a failed send (by the dispatcher; 429 waits for its Retry-After).",
        ),
    }

    def __init__(self, settings: Mapping[str, Any]) -> None:
        """Build from the ``[notifiers.slack]`` table (validated again here; ConfigError)."""
        table = validate_backend_settings("notifiers", "slack", settings, self.settings_schema)
        self._url: str = table["webhook_url"]
        self.origin = _origin(self._url)
        self._secrets = _secret_parts(self._url)
        self.timeout = float(table["timeout"])
        self.max_retries = int(table["max_retries"])
        self._client = WebhookClient(
            self._url,
            # urllib takes float seconds; slack_sdk's annotation says int
            timeout=self.timeout,  # type: ignore[arg-type]
            logger=_SDK_LOG,
            retry_handlers=[],  # retrying is the dispatcher's
        )

    def __repr__(self) -> str:
        """The notifier with its webhook's origin only (the path is secret)."""
        return f"SlackNotifier(webhook_url='{self.origin}/***', timeout={self.timeout:g})"

    def send(self, message: Message) -> None:
        """Post ``message``; raise RetryAfter on 429, SlackWebhookError on any other failure."""
        response, failure = self._post(build_payload(message))
        if response is None:
            # Raised outside the except block: the library's exception is not our context.
            raise SlackWebhookError(failure, origin=self.origin) from None
        self._check(response)

    def _post(self, body: dict[str, Any]) -> tuple[WebhookResponse | None, str]:
        """Slack's answer, or None and what went wrong (in words that hold no URL)."""
        try:
            return self._client.send_dict(body), ""
        except Exception as exc:
            reason = _reason(exc, self.timeout)
        return None, f"could not deliver to the Slack webhook at {self.origin}: {reason}"

    def _check(self, response: WebhookResponse) -> None:
        """Return for a 2xx answer; raise what the protocol asks for any other."""
        status = response.status_code
        if 200 <= status < 300:
            return
        if status == 429:
            raise RetryAfter(retry_after_seconds(_header(response.headers, "retry-after")))
        said = self._quote(response.body)
        if status >= 500:
            text = f"the Slack webhook at {self.origin} failed with HTTP {status}{said}"
        else:
            text = f"the Slack webhook at {self.origin} refused the message: HTTP {status}{said}"
        raise SlackWebhookError(text, origin=self.origin, status=status)

    def _quote(self, body: object) -> str:
        """``: <Slack's answer>`` on one line, shortened, without the URL; "" if empty."""
        text = " ".join(str(body or "").split())
        for secret in self._secrets:
            text = text.replace(secret, "***")
        if len(text) > MAX_BODY_SHOWN:
            text = text[: MAX_BODY_SHOWN - 1] + "\u2026"
        return f": {text}" if text else ""


def _reason(exc: BaseException, timeout: float) -> str:
    """What kind of failure ``exc`` is, from its type and OS error text only (never its
    message, which may quote the URL)."""
    if isinstance(exc, URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without answering"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error ({exc.reason or type(exc).__name__})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({type(exc).__name__})"
    return type(exc).__name__
