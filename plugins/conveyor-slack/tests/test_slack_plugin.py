"""The slack plugin as installed: its settings table, its entry point, and the pure helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conveyor.backends import load_backend
from conveyor.errors import ConfigError
from conveyor.settings import validate_backend_settings

from conveyor_slack import SlackNotifier
from conveyor_slack.blocks import escape, split_text
from conveyor_slack.notifier import DEFAULT_RETRY_AFTER, retry_after_seconds

pytestmark = pytest.mark.timeout(60)

GOOD_URL = "https://hooks.slack.com/services/T0SECRET1/B0SECRET2/xoxSECRETxTOKEN3"


def validate(table: dict[str, Any]) -> dict[str, Any]:
    """``table`` validated as ``[notifiers.slack]``, the way the worker does."""
    return validate_backend_settings("notifiers", "slack", table, SlackNotifier.settings_schema)


# --- settings --------------------------------------------------------------------------------


def test_defaults() -> None:
    """Only webhook_url is needed; timeout is 10 s and max_retries 3."""
    assert validate({"webhook_url": GOOD_URL}) == {
        "webhook_url": GOOD_URL,
        "timeout": 10.0,
        "max_retries": 3,
    }


def test_a_missing_webhook_url_is_a_config_error_naming_the_key() -> None:
    """No webhook_url: ConfigError naming ``notifiers.slack.webhook_url``."""
    with pytest.raises(ConfigError) as info:
        validate({})
    assert info.value.key == "notifiers.slack.webhook_url"
    assert "notifiers.slack.webhook_url" in str(info.value)
    assert "http:// or https:// URL" in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.slack.com/services/T/B/X",
        "hooks.slack.com/services/T/B/X",
        "https://",
        "https:///services/T/B/X",
        "https://hooks.slack.com:99999/services/T/B/X",
        "https://hooks.slack.com/services/T B/X",
        "",
    ],
)
def test_a_webhook_url_that_is_not_http_is_a_config_error(url: str) -> None:
    """A URL that is not an absolute http(s) URL with a host: ConfigError naming the key."""
    with pytest.raises(ConfigError) as info:
        validate({"webhook_url": url})
    assert info.value.key == "notifiers.slack.webhook_url"
    assert "expected an http:// or https:// URL" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("timeout", 0),
        ("timeout", -1.0),
        ("timeout", "10"),
        ("max_retries", -1),
        ("max_retries", 1.5),
    ],
)
def test_a_bad_timeout_or_retry_count_is_a_config_error(key: str, value: Any) -> None:
    """timeout must be > 0 seconds and max_retries an integer >= 0."""
    with pytest.raises(ConfigError) as info:
        validate({"webhook_url": GOOD_URL, key: value})
    assert info.value.key == f"notifiers.slack.{key}"


def test_an_unknown_key_is_a_config_error() -> None:
    """A misspelt key is refused with a suggestion."""
    with pytest.raises(ConfigError) as info:
        validate({"webhook_url": GOOD_URL, "timout": 5})
    assert info.value.key == "notifiers.slack.timout"
    assert "did you mean 'timeout'?" in str(info.value)


def test_building_from_a_bad_table_is_a_config_error() -> None:
    """SlackNotifier validates its table itself too, for callers that build it directly."""
    with pytest.raises(ConfigError):
        SlackNotifier({"webhook_url": "mailto:ops@example.com"})


def test_a_rejected_webhook_url_is_not_shown_in_the_error() -> None:
    """A webhook URL mistyped without its scheme is still a secret in the ConfigError."""
    with pytest.raises(ConfigError) as info:
        validate({"webhook_url": "hooks.slack.com/services/T0SECRET1/B0SECRET2/xoxSECRET3"})
    assert "SECRET" not in str(info.value)


# --- discovery -------------------------------------------------------------------------------


def test_the_entry_point_names_the_notifier() -> None:
    """``load_backend("conveyor.notifiers", "slack")`` finds the installed class."""
    assert load_backend("conveyor.notifiers", "slack") is SlackNotifier


def test_conveyor_plugins_lists_it(tmp_path: Path) -> None:
    """``conveyor plugins --json`` (a real subprocess) lists slack, from this distribution,
    loading."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    done = subprocess.run(
        [sys.executable, "-m", "conveyor", "plugins", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    entries = [
        e
        for e in json.loads(done.stdout)
        if e["group"] == "conveyor.notifiers" and e["name"] == "slack"
    ]
    assert len(entries) == 1
    (entry,) = entries
    assert entry["distribution"] == "conveyor-slack"
    assert entry["version"] == "0.1.0"
    assert entry["loads"] is True
    assert entry["error"] == ""


# --- the pure helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        (None, DEFAULT_RETRY_AFTER),
        ("", DEFAULT_RETRY_AFTER),
        ("later", DEFAULT_RETRY_AFTER),
        ("-1", DEFAULT_RETRY_AFTER),
        ("nan", DEFAULT_RETRY_AFTER),
        ("inf", DEFAULT_RETRY_AFTER),
        ("Thu, 01 Jan 1970 00:01:40 GMT", 40.0),
        ("Thu, 01 Jan 1970 00:00:30 GMT", 0.0),
    ],
)
def test_retry_after_values(value: str | None, seconds: float) -> None:
    """Seconds or an HTTP date (relative to now = 60 s past the epoch); else 1 s."""
    assert retry_after_seconds(value, now=60.0) == seconds


def test_escape_leaves_nothing_slack_would_parse() -> None:
    """&, < and > become entities, & first; everything else is kept."""
    assert escape("a & <b> é *c*") == "a &amp; &lt;b&gt; é *c*"


def test_split_text_keeps_every_escape_whole() -> None:
    """Pieces are within the limit, no cut falls inside an entity, and nothing is lost."""
    text = "x<y & z>\n" * 300 + "&<>" * 400
    chunks = split_text(text, 97)
    assert all(0 < len(chunk) <= 97 for chunk in chunks)
    joined = "".join(chunks)
    assert joined.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "").count("&") == 0
    assert joined.replace("\n", "") == escape(text).replace("\n", "")
