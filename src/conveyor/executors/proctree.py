"""Signalling whole process trees: the process group plus a psutil snapshot of descendants."""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

__all__ = ["descendants", "signal_tree"]


def descendants(pid: int) -> list[psutil.Process]:
    """The live descendants of ``pid`` (empty if it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def signal_tree(
    pid: int, sig: signal.Signals, known: list[psutil.Process] | None = None, scan: bool = True
) -> None:
    """Send ``sig`` to the process group led by ``pid`` and to every descendant found.

    Descendants are taken from a snapshot made before signalling (``known``, plus a fresh one
    unless ``scan`` is False — a scan reads every process of the machine), so processes that
    left the group (``setsid``) are reached as long as they were seen.
    """
    snapshot = [*(known or []), *(descendants(pid) if scan else [])]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
    for proc in snapshot:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
