"""Composing notification messages: subjects and texts, redacted and truncated (docs/notifiers.md).

Pure functions of hook events: :func:`compose` makes the message of one notification,
:func:`aggregate` the one message of a held burst. Secret-named parameter values, credentials
and secret query values in URLs, and the values of secret options on the command line are
hidden in every subject and text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import events as ev
from ..protocol import NotifyKind
from ..secrets import REDACTED, hide_secret_params, is_secret_name
from . import Message

__all__ = ["Held", "aggregate", "compose", "label"]

MAX_EXPLANATION = 8000  # characters of a failure explanation kept in a message
MAX_SUBJECT = 200
MAX_LISTED = 200  # tasks listed one per line in an aggregate (the rest by id only)
MAX_HELD_EVENTS = 10_000  # events an aggregate keeps (the ids of the rest are still listed)

_DESCRIBED = {
    str(kind): str(kind).replace("_", " ")
    for kind in NotifyKind
    if kind not in (NotifyKind.RUN_FINISHED, NotifyKind.AGGREGATE)
}


@dataclass(frozen=True, slots=True)
class Held:
    """What an aggregate keeps of one held notification: small, whatever the explanation."""

    kind: str
    task_id: str
    line: str
    """``Family(p=v) failed on host``, redacted."""
    recipients: tuple[str, ...]
    event: ev.Event | None
    worker_id: str
    host: str

    @classmethod
    def of(cls, message: Message, keep_event: bool) -> Held:
        """The held form of ``message`` (its event kept only if ``keep_event``)."""
        event = message.events[0]
        return cls(
            message.kind,
            event.task_id,
            message.subject.split("] ", 1)[-1],
            message.recipients,
            event if keep_event else None,
            message.worker_id,
            message.host,
        )


def label(event: ev.Event) -> str:
    """``Family(p=v, ...)`` with secret-named values hidden (one line)."""
    shown = ", ".join(
        f"{name}={REDACTED if is_secret_name(name) else value}"
        for name, value in event.params.items()
    )
    return _one_line(f"{event.family}({shown})" if shown else event.family)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _outcome(kind: str, event: ev.Event) -> str:
    if isinstance(event, ev.TaskTimedOut):
        return f"timed out after {event.timeout:g} s (its process tree was killed)"
    if isinstance(event, ev.ProcessDied):
        signum, code = event.signal, event.exitcode
        how = f"signal {signum}" if signum is not None else f"exit code {code}"
        return f"process died ({how}) without reporting a result"
    if isinstance(event, ev.TaskBroken):
        return f"broken (while calling {event.phase}())"
    if isinstance(event, ev.TaskFailed):
        return f"failed ({event.exception_type})" if event.exception_type else "failed"
    return _DESCRIBED.get(kind, kind)


def compose(kind: str, event: ev.Event, command: str = "") -> Message:
    """The message for one notification: subject and text redacted, explanation truncated."""
    params = event.params
    if isinstance(event, ev.WorkerStopped):
        verdict = "succeeded" if event.ok else "did not succeed"
        subject = f"[conveyor] run {verdict} on {event.host}"
        lines = [f"The run of worker {event.worker_id} on {event.host} {verdict}.", ""]
        lines += [f"Command: {command}", "", event.summary]
    else:
        what = label(event)
        subject = f"[conveyor] {what} {_DESCRIBED.get(kind, kind)} on {event.host}"
        lines = [
            f"{what} {_DESCRIBED.get(kind, kind)}.",
            "",
            f"Task id:    {event.task_id}",
            f"Outcome:    {_outcome(kind, event)}",
            f"Parameters: {', '.join(f'{k}={v}' for k, v in params.items()) or '(none)'}",
            f"Host:       {event.host}",
            f"Worker:     {event.worker_id}",
            f"Command:    {command}",
        ]
        explanation = getattr(event, "error", "")
        if isinstance(event, ev.TaskSucceeded):
            lines.append(f"Duration:   {event.duration:.3f} s")
        if explanation:
            if len(explanation) > MAX_EXPLANATION:
                cut = len(explanation) - MAX_EXPLANATION
                explanation = f"[... {cut} characters cut ...]\n{explanation[-MAX_EXPLANATION:]}"
            lines += ["", "Explanation:", explanation]
    text = _hide("\n".join(lines), params)
    return Message(
        kind=kind,
        subject=_hide(_one_line(subject), params)[:MAX_SUBJECT],
        text=text,
        events=(event,),
        recipients=tuple(event.owner_email),
        worker_id=event.worker_id,
        host=event.host,
    )


def _hide(text: str, params: Mapping[str, str]) -> str:
    hidden = hide_secret_params(text, params)
    # the Parameters line shows values by name: hide the secret ones there too
    for name, value in params.items():
        if is_secret_name(name):
            hidden = hidden.replace(f"{name}={value}", f"{name}={REDACTED}")
    return hidden


def aggregate(held: Sequence[Held]) -> Message:
    """One ``aggregate`` message covering ``held``: counts per kind, one line per task (the
    first MAX_LISTED), the ids of the rest."""
    counts = Counter(h.kind for h in held)
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.most_common())
    first = held[0]
    lines = [f"{len(held)} notifications from worker {first.worker_id}: {summary}", ""]
    lines += [f"- {h.kind}: {h.task_id} {h.line}" for h in held[:MAX_LISTED]]
    if len(held) > MAX_LISTED:
        rest = held[MAX_LISTED:]
        lines.append(f"... and {len(rest)} more: " + " ".join(h.task_id for h in rest))
    return Message(
        kind=NotifyKind.AGGREGATE,
        subject=f"[conveyor] {len(held)} notifications on {first.host}: {summary}"[:MAX_SUBJECT],
        text="\n".join(lines),
        events=tuple(h.event for h in held if h.event is not None),
        recipients=tuple(dict.fromkeys(r for h in held for r in h.recipients)),
        worker_id=first.worker_id,
        host=first.host,
    )
