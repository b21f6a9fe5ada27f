"""Signalling whole process trees: the process group plus a psutil snapshot of descendants,
and finding the processes an attempt left behind by the marker in their environment."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Container

import psutil

__all__ = ["MARK_VARIABLE", "descendants", "marked_leftovers", "signal_tree"]

MARK_VARIABLE = "CONVEYOR_ATTEMPT_MARK"
"""Set to ``<executor token>-<serial>`` in every attempt's environment; the processes it starts
inherit it, so those that escape the attempt's process group and session are still found."""


def descendants(pid: int) -> list[psutil.Process]:
    """The live descendants of ``pid`` (empty if it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def signal_tree(
    pid: int,
    sig: signal.Signals,
    known: list[psutil.Process] | None = None,
    scan: bool = True,
    group: bool = True,
) -> None:
    """Send ``sig`` to the process group led by ``pid`` and to every descendant found.

    Descendants are taken from a snapshot made before signalling (``known``, plus a fresh one
    unless ``scan`` is False — a scan reads every process of the machine), so processes that
    left the group (``setsid``) are reached as long as they were seen. Without ``group``, only
    those descendants are signalled (``pid`` is not this process's child, so only its parent
    can tell whether the pid still names it).
    """
    snapshot = [*(known or []), *(descendants(pid) if scan else [])]
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    for proc in snapshot:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def marked_leftovers(token: str, live: Container[str]) -> list[tuple[int, str]]:
    """``(pid, mark)`` of every process whose environment carries a mark of ``token`` that is
    not in ``live`` (its attempt has ended). Reads ``/proc`` (Linux; elsewhere: none found).

    Only what a process was started with is visible there: a helper that the task ``exec``s
    (``subprocess``, ``setsid``, a shell) carries the mark; a bare ``fork()`` of the attempt's
    Python process without ``exec`` does not.
    """
    prefix = f"{MARK_VARIABLE}={token}-".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    me = os.getpid()
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as env:
                data = env.read()
        except OSError:  # gone, or not ours
            continue
        start = data.find(prefix)
        if start < 0 or (start and data[start - 1] != 0):
            continue
        end = data.find(b"\0", start)
        mark = data[start + len(MARK_VARIABLE) + 1 : end if end >= 0 else None].decode()
        if mark not in live:
            found.append((int(entry), mark))
    return found
