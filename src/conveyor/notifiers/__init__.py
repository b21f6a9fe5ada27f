"""Notifiers: what a notification is, and how a notifier asks to be retried (docs/notifiers.md).

A notifier is a backend of the ``conveyor.notifiers`` entry-point group: a class with a
``settings_schema`` (its ``[notifiers.<name>]`` table, validated like every backend's), built
once as ``cls(settings)``, whose ``send(message)`` delivers one :class:`Message` or raises.
Everything else — the queue, timeouts, retries, aggregation of bursts and redaction of
secrets — is the dispatcher's (:mod:`conveyor.notifiers.dispatch`), never the notifier's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from ..events import Event
from ..protocol import NotifyKind

if TYPE_CHECKING:
    from ..settings import Field

__all__ = ["KINDS", "Message", "Notifier", "RetryAfter"]

KINDS = tuple(NotifyKind)
"""Every ``Message.kind`` (:class:`~conveyor.protocol.NotifyKind`): the six of
``[notifiers] on``, and ``aggregate`` for a burst."""


@dataclass(frozen=True, slots=True)
class Message:
    """One notification, ready to deliver.

    ``subject`` and ``text`` are plain text, already redacted and truncated; ``events`` are
    the hook events it covers (one, or many for an ``aggregate``; they carry real values, as
    every hook event does); ``recipients`` are the covered tasks' ``owner_email`` addresses
    (a notifier adds its own configured ones).
    """

    kind: str
    subject: str
    text: str
    events: tuple[Event, ...]
    recipients: tuple[str, ...]
    worker_id: str
    host: str


class RetryAfter(Exception):
    """Raised by ``send`` to ask for another try after ``seconds`` (a rate limit)."""

    def __init__(self, seconds: float) -> None:
        """Retry no sooner than ``seconds`` from now."""
        seconds = float(seconds)
        if seconds != seconds:  # NaN: as soon as allowed
            seconds = 0.0
        self.seconds = min(max(0.0, seconds), 3600.0)  # the dispatcher waits at most an hour
        super().__init__(f"retry after {self.seconds:g} s")


@runtime_checkable
class Notifier(Protocol):
    """What the dispatcher needs of a notifier class's instances."""

    settings_schema: ClassVar[Mapping[str, Field]]

    def send(self, message: Message) -> None:
        """Deliver ``message``, or raise (RetryAfter to ask for a later retry)."""
