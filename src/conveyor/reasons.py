"""A task's failure in one line: what the execution summary, ``conveyor tasks``, the log's
``error`` field and the web UI's task list and overview show for it.

A failure explanation is what ``on_failure()`` returned, else the traceback of what ``run()``
raised (chained, an exception group, or followed by ``on_failure() raised too:`` and that
traceback), else a text of conveyor's own: ``timed out after 5 s; …``, ``the task's process
ended with signal 9 …``, ``worker w stopped responding``, ``Load(…): unfulfilled dependencies at
run time: …``. :func:`failure_reason` takes the part that says why — for a traceback the final
exception, ``ValueError: bad row 7`` — folds it onto one line and cuts it with ``…``.

Theory of operation
-------------------
The reason is computed for every FAILED, DISABLED or UNKNOWN row of a page of the task list,
and an explanation may be a 64 KB traceback, so nothing here walks a whole explanation in
Python: the last traceback header is found with ``str.rfind`` and the exception line with one
regular expression search. Secrets are hidden (:func:`~conveyor.secrets.hide_secret_params`)
before anything is cut, so a cut never shows part of a secret, and only in the part the reason
is read from, a few times as long as the reason may be (hiding costs about 0.3 µs a
character). That gives what hiding them in the whole explanation would: what is hidden — the
patterns of :func:`~conveyor.secrets.redact_text`, secret values — never spans whitespace, and
the part read starts where a word starts and ends before the word the bound falls in. A
secret value with whitespace in it, or a part read that folds shorter than the reason may be,
is decided on the whole explanation with its secrets hidden (slower, and rare).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .secrets import hide_secret_params, is_secret_name

__all__ = ["REASON_MAX", "failure_reason"]

REASON_MAX = 160
"""The longest reason :func:`failure_reason` returns by default; a longer one ends in ``…``."""

_READ_FACTOR = 4  # a reason is read from 4x as many characters as it may show
_HEADER = "Traceback (most recent call last):"
_GROUP_PREFIX = "  + Exception Group "  # before _HEADER: an exception group's traceback
_ON_FAILURE = "\non_failure() raised too:\n"  # (conveyor.executors.attempt)
_ON_FAILURE_NOTE = " (on_failure() raised too)"
_REQUIRES = ".requires() raised:"  # the first line of a requires() traceback (worker.walk)
# conveyor.executors.channel.truncate() keeps a long text's head and tail around this line
_TRUNCATED_AT = "\n[... truncated "
_TRUNCATED = re.compile(r"\n\[\.\.\. truncated \d+ characters \.\.\.\]\n")
# a line that starts with a word (searched from the newline before: a literal first character
# is what makes a search of a long traceback fast)
_EXCEPTION_LINE = re.compile(r"\n(?=\S)")
_GROUP_EXCEPTION_LINE = re.compile(r"\n  \| (?=\S)")
_TEXT = re.compile(r"\S")
_SPACE = re.compile(r"\s")
# conveyor's own explanations that start with the task's repr, which the UI shows already
_AFTER_TASK = (
    ": unfulfilled dependencies at run time: ",
    ": run() returned but the task is not complete",
    ": run() yielded ",
)
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class _Span:
    """Where in an explanation its reason is read, and what goes before and after it."""

    start: int
    end: int
    before: str = ""
    after: str = ""


def failure_reason(
    explanation: str, params: Mapping[str, str] = _NO_PARAMS, limit: int = REASON_MAX
) -> str:
    """Why a task failed, in one line of at most ``limit`` characters ("" for no explanation).

    For a traceback that is its final exception, ``ExcType: message``: the last traceback of
    a chain, the group's line of an exception group, a message of several lines joined by
    spaces, and ``(on_failure() raised too)`` after the exception of ``run()`` when the
    callback failed as well; a ``requires()`` traceback gets ``requires() raised `` before it.
    Any other text (``on_failure()``'s, a timeout, a process that died) is itself on one line,
    without the task's repr that conveyor puts before some of its own. Whitespace runs become
    one space; a longer reason is cut, ending in ``…``. The values of ``params`` with secret
    names, credentials in URLs and other secrets are hidden (``***``) before the cut.
    """
    secrets = (v for k, v in params.items() if v and is_secret_name(k))
    if not any(_SPACE.search(v) for v in secrets):  # (else one could cross where it reads)
        span = _locate(explanation)
        source = explanation[span.start : span.end]
        bound = _READ_FACTOR * limit
        if len(source) <= bound:
            return _cut(_fold(span.before + hide_secret_params(source, params)), span, limit)
        # without the word the bound fell in: a secret there would be seen only in part
        part = source[: max(source.rfind(" ", 0, bound), source.rfind("\n", 0, bound), 0)]
        shown = _fold(span.before + hide_secret_params(part, params))
        if len(shown) > limit:  # (else what the bound left out might have been shown)
            return _cut(shown, span, limit)
    hidden = hide_secret_params(explanation, params)
    span = _locate(hidden)
    return _cut(_fold(span.before + hidden[span.start : span.end]), span, limit)


def _fold(text: str) -> str:
    """``text`` on one line: every run of whitespace (line breaks too) one space."""
    return " ".join(text.split())


def _cut(shown: str, span: _Span, limit: int) -> str:
    """``shown`` and ``span.after``, at most ``limit`` long: ``shown`` cut, ending in ``…``."""
    room = max(limit - len(span.after), 1)
    if len(shown) > room:
        shown = shown[: room - 1].rstrip() + "…"
    return shown + span.after if shown else ""


def _locate(text: str) -> _Span:
    """Where the reason of ``text`` is: the final exception of its last traceback (before an
    ``on_failure() raised too``), else the text itself."""
    end = len(text)
    after = ""
    on_failure = text.find(_ON_FAILURE)
    if on_failure >= 0:
        end, after = on_failure, _ON_FAILURE_NOTE
    header = _last_header(text, end)
    if header is None:
        return _plain(text, end, after)
    at, group = header
    body = text.find("\n", at, end) + 1
    if body == 0:
        return _plain(text, end, after)
    marker = _TRUNCATED.match(text, max(text.rfind(_TRUNCATED_AT, body - 1, end), 0))
    if marker is not None:  # only the tail after it is the last traceback's; its first line
        body = text.find("\n", marker.end(), end) + 1 or end  # is a part of one
    before = "requires() raised " if text.endswith(_REQUIRES, 0, text.find("\n")) else ""
    if group:
        found = _GROUP_EXCEPTION_LINE.search(text, body - 1, end)
        if found is not None:
            line_end = text.find("\n", found.end(), end)
            return _Span(found.end(), end if line_end < 0 else line_end, before, after)
    else:
        found = _EXCEPTION_LINE.search(text, body - 1, end)
        if found is not None:
            return _Span(found.end(), end, before, after)
    return _plain(text, end, after)


def _last_header(text: str, end: int) -> tuple[int, bool] | None:
    """Where the last traceback before ``end`` starts that is not nested in an exception
    group's, and whether it is a group's."""
    pos = end
    while (at := text.rfind(_HEADER, 0, pos)) >= 0:
        line = text.rfind("\n", 0, at) + 1
        prefix = text[line:at]
        if prefix in ("", _GROUP_PREFIX):
            return line, bool(prefix)
        pos = at
    return None


def _plain(text: str, end: int, after: str) -> _Span:
    """A text that is no traceback: all of it, from its first word, but for the task's repr
    before one of conveyor's own explanations."""
    found = _TEXT.search(text, 0, end)
    start = end if found is None else found.start()
    line_end = text.find("\n", start, end)
    line_end = end if line_end < 0 else line_end
    for phrase in _AFTER_TASK:
        at = text.find(phrase, start, line_end)
        if at >= 0:
            return _Span(at + 2, end, "", after)
    return _Span(start, end, "", after)
