"""Recognising and hiding secrets: in parameter and setting names, URLs and free text.

A name is secret when it contains password, secret, token or key. Values of such names, the
``user:pass@`` part of URLs, secret-named URL query values and the path of Slack webhook URLs
are replaced by ``***`` wherever conveyor shows them to people (``conveyor config``, task
labels, and — later — notifier messages).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "REDACTED",
    "SECRET_WORDS",
    "hide_secret_params",
    "hide_url_path",
    "is_secret_name",
    "is_secret_setting",
    "redact",
    "redact_argv",
    "redact_dsn",
    "redact_text",
    "redact_words",
]

REDACTED = "***"
SECRET_WORDS = ("password", "secret", "token", "key")


def is_secret_name(name: str) -> bool:
    """True if a parameter or setting name marks a secret (password, secret, token, key)."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def is_secret_setting(key: str) -> bool:
    """Like :func:`is_secret_name`, except ``*_file`` / ``*_path`` keys, which hold paths."""
    return not key.lower().endswith(("_file", "_path")) and is_secret_name(key)


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")  # up to the last @
_SECRET_QUERY = re.compile(r"(?i)([?&;#][^=&#\s]*(?:password|secret|token|key)[^=&#\s]*=)[^&#\s]*")
_SECRET_OPTION = re.compile(r"(?i)(--[\w-]*(?:password|secret|token|key)[\w-]*=)\S+")
# a DSN (libpq's forms): the userinfo of a URL up to its last @ (libpq takes ?, # and more in
# a password), secret-named query values up to & and keywords ending in password, quoted
# ('a b', with \' inside) or not (p\ q: a backslash escapes the next character)
_DSN_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)\S*@")
_DSN_QUERY = re.compile(r"(?i)([?&][^=&\s]*(?:password|secret|token|key)[^=&\s]*=)[^&\s]*")
_CONNINFO_PASSWORD = re.compile(
    r"(?i)((?<![^\s'\\])\w*password\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:[^\s\\]|\\.?)+|(?=\s|$))"
)
_SLACK_HOOK = re.compile(r"(?i)(https?://hooks\.slack\.com/services/)[^\s\"'<>]+")


def redact_text(text: str) -> str:
    """``text`` with credentials in URLs, secret query values and Slack webhook paths hidden."""
    text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    text = _SECRET_QUERY.sub(rf"\1{REDACTED}", text)
    text = _SECRET_OPTION.sub(rf"\1{REDACTED}", text)
    return _SLACK_HOOK.sub(rf"\1{REDACTED}", text)


def redact(key: str, value: Any) -> Any:
    """``value`` (of setting ``key``; mappings and lists walked) with its secrets hidden."""
    if isinstance(value, Mapping):
        return {k: redact(k, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(key, v) for v in value]
    if is_secret_setting(key) and not isinstance(value, bool) and value not in ("", None):
        return REDACTED
    if isinstance(value, str) and "webhook" in key.lower():
        return hide_url_path(value)
    if isinstance(value, str) and key.lower().endswith("dsn"):  # libpq's password=... too
        value = redact_dsn(value)
    return redact_text(value) if isinstance(value, str) else value


def redact_dsn(dsn: str) -> str:
    """A PostgreSQL connection string (URL or ``key=value`` pairs, as libpq reads them) with
    every password hidden: a URL's whole userinfo, secret-named query values, and the
    values of keywords ending in ``password`` (``password``, ``sslpassword``), quoted or
    with backslash escapes."""
    text = _DSN_USERINFO.sub(rf"\1{REDACTED}@", dsn)
    text = _DSN_QUERY.sub(rf"\1{REDACTED}", text)
    text = _CONNINFO_PASSWORD.sub(rf"\1{REDACTED}", text)
    return redact_text(text)


def redact_argv(argv: Sequence[str]) -> str:
    """A command line as one shell-quoted string, with the values of secret-named options
    (``--password X``, ``--api-key=X``) and credentials in URLs hidden."""
    return redact_text(shlex.join(redact_words(argv)))


def redact_words(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of secret-named options (``--password X``, ``--api-key=X``)
    replaced by :data:`REDACTED`, word for word."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag.startswith("--") and is_secret_name(flag[2:].replace("-", "_")):
            if eq:
                arg = f"{flag}={REDACTED}"
            else:
                hide_next = True
        shown.append(arg)
    return shown


def hide_url_path(url: str) -> str:
    """``scheme://host/***``: a URL whose path is its secret (a webhook's), shown safely."""
    shown = redact_text(url)
    if shown != url:  # a Slack webhook: hooks.slack.com/services/***
        return shown
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return REDACTED if url else url
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}/{REDACTED}"


def hide_secret_params(text: str, params: Mapping[str, str]) -> str:
    """``text`` redacted (:func:`redact_text`) and without the values of secret-named params."""
    text = redact_text(text)
    for name, value in params.items():
        if value and is_secret_name(name):
            text = text.replace(value, REDACTED)
    return text
