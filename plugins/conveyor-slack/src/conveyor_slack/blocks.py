"""Block Kit for one conveyor notification: the JSON body the webhook is sent (pure, no I/O).

A :class:`~conveyor.notifiers.Message` becomes, in order:

- a ``header`` block: the subject, as plain text on one line, at most 150 characters;
- for an ``aggregate``, a section whose fields count the notifications of each kind;
- the text, preformatted (a code block, so a traceback keeps its indentation and its
  ``__init__`` is not read as formatting), in one section per 3000 characters — split at line
  ends where possible; past :data:`MAX_SECTIONS` the middle is left out and says so, since the
  end of a traceback is what explains it;
- a ``context`` block naming the worker and the host;

and the subject is the top-level ``text``, which Slack shows in notifications and wherever
blocks cannot be shown. Every mrkdwn string has ``&``, ``<`` and ``>`` escaped as Slack
requires (so task text can neither mention ``<!channel>`` nor forge a link), and no cut falls
inside an escape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from conveyor.events import Event
from conveyor.notifiers import KINDS, Message
from conveyor.protocol import NotifyKind

__all__ = [
    "HEADER_LIMIT",
    "MAX_SECTIONS",
    "SECTION_LIMIT",
    "build_payload",
    "escape",
    "kind_counts",
    "split_text",
]

HEADER_LIMIT = 150  # characters of a header block's plain_text (Slack's limit)
SECTION_LIMIT = 3000  # characters of a section block's text (Slack's limit)
FIELD_LIMIT = 2000  # characters of one section field (Slack's limit)
CONTEXT_LIMIT = 500  # characters of one context element (Slack allows 3000; a line is enough)
FALLBACK_LIMIT = 500  # characters of the top-level ``text`` (a one-line summary)
MAX_SECTIONS = 10  # text sections per message: about 30,000 characters (Slack allows 50 blocks)
MAX_FIELDS = 10  # fields of a section (Slack's limit)

_FENCE = "```"
_BROKEN_FENCE = "`\u200b`\u200b`"  # a fence inside the text would end the code block early
_LONGEST_ESCAPE = len("&amp;")
_ELLIPSIS = "\u2026"

_KIND_OF_HOOK = {
    "conveyor_task_failed": NotifyKind.FAILED,
    "conveyor_task_timed_out": NotifyKind.TIMED_OUT,
    "conveyor_task_process_died": NotifyKind.PROCESS_DIED,
    "conveyor_task_broken": NotifyKind.BROKEN,
    "conveyor_task_succeeded": NotifyKind.SUCCEEDED,
    "conveyor_worker_stopped": NotifyKind.RUN_FINISHED,
}


def escape(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped as Slack's mrkdwn requires."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _pieces(escaped: str, limit: int) -> Iterator[str]:
    """``escaped`` in pieces of at most ``limit`` characters, never cutting an escape."""
    while len(escaped) > limit:
        cut = limit
        amp = escaped.rfind("&", max(0, cut - _LONGEST_ESCAPE + 1), cut)
        if amp > 0 and escaped.find(";", amp) >= cut:
            cut = amp  # every "&" of escaped text starts an escape: cut before it
        yield escaped[:cut]
        escaped = escaped[cut:]
    yield escaped


def split_text(text: str, limit: int) -> list[str]:
    """``text`` escaped, in chunks of at most ``limit`` characters, cut at line ends where
    possible (a longer line is cut where it must); blank chunks are dropped."""
    chunks: list[str] = []
    current = ""
    for line in escape(text).splitlines(keepends=True):
        for piece in _pieces(line, limit):
            if len(current) + len(piece) > limit:
                chunks.append(current)
                current = ""
            current += piece
    chunks.append(current)
    return [chunk.rstrip() for chunk in chunks if chunk.strip()]


def _shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to at most ``limit`` characters (an ellipsis marks a cut)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + _ELLIPSIS


def _mrkdwn(text: str, limit: int) -> dict[str, str]:
    """A mrkdwn text object of ``text`` (escaped here), at most ``limit`` characters."""
    escaped = escape(" ".join(text.split()))
    if len(escaped) > limit:
        escaped = next(_pieces(escaped, limit - 1)) + _ELLIPSIS
    return {"type": "mrkdwn", "text": escaped}


def _header(subject: str) -> dict[str, Any]:
    text = _shorten(subject, HEADER_LIMIT) or "conveyor notification"
    return {"type": "header", "text": {"type": "plain_text", "text": text}}


def _text_sections(text: str) -> list[dict[str, Any]]:
    """The text as preformatted sections, at most :data:`MAX_SECTIONS` of them."""
    budget = SECTION_LIMIT - 2 * len(_FENCE)
    chunks = split_text(text.replace(_FENCE, _BROKEN_FENCE), budget)
    sections = [_section(f"{_FENCE}{chunk}{_FENCE}") for chunk in chunks]
    if len(sections) <= MAX_SECTIONS:
        return sections
    left_out = len(sections) - MAX_SECTIONS + 1
    note = _section(f"_{_ELLIPSIS} {left_out} more sections of text left out {_ELLIPSIS}_")
    return [*sections[: MAX_SECTIONS - 2], note, sections[-1]]


def _section(mrkdwn: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}


def kind_counts(events: Iterable[Event]) -> list[tuple[str, int]]:
    """How many of ``events`` are of each notification kind, in the order of ``KINDS``."""
    counts = Counter(str(_KIND_OF_HOOK.get(type(e).hook, type(e).__name__)) for e in events)
    order = {str(kind): i for i, kind in enumerate(KINDS)}
    return sorted(counts.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))


def _counts_section(message: Message) -> dict[str, Any]:
    counts = kind_counts(message.events)
    fields = [
        _mrkdwn(f"*{kind.replace('_', ' ').capitalize()}:* {n}", FIELD_LIMIT)
        for kind, n in counts[:MAX_FIELDS]
    ]
    total = f"*{len(message.events)} notifications*"
    section: dict[str, Any] = {"type": "section", "text": {"type": "mrkdwn", "text": total}}
    if fields:
        section["fields"] = fields
    return section


def _context(message: Message) -> dict[str, Any]:
    elements = [
        _mrkdwn(f"Worker: {message.worker_id or '-'}", CONTEXT_LIMIT),
        _mrkdwn(f"Host: {message.host or '-'}", CONTEXT_LIMIT),
        _mrkdwn(f"Kind: {message.kind}", CONTEXT_LIMIT),
    ]
    return {"type": "context", "elements": elements}


def build_payload(message: Message) -> dict[str, Any]:
    """The webhook body for ``message``: ``text`` (the fallback) and ``blocks``."""
    blocks = [_header(message.subject)]
    if message.kind == NotifyKind.AGGREGATE:
        blocks.append(_counts_section(message))
    blocks += _text_sections(message.text)
    blocks.append(_context(message))
    fallback = _mrkdwn(message.subject or "conveyor notification", FALLBACK_LIMIT)["text"]
    return {"text": fallback, "blocks": blocks}
