"""Signalling whole process trees: the process group plus a psutil snapshot of descendants,
measuring a tree's resident memory, and finding the processes an attempt left behind by the
marker in their environment."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Container, Iterable

import psutil

__all__ = [
    "MARK_VARIABLE",
    "ProcessTable",
    "TreeMemory",
    "descendants",
    "marked_leftovers",
    "signal_each",
    "signal_tree",
]

MARK_VARIABLE = "CONVEYOR_ATTEMPT_MARK"
"""Set to ``<executor token>-<serial>`` in every attempt's environment; the processes it starts
inherit it, so those that escape the attempt's process group and session are still found."""


def descendants(pid: int) -> list[psutil.Process]:
    """The live descendants of ``pid`` (empty if it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat(pid: int | str) -> tuple[int, int, int] | None:
    """``(parent pid, start time in clock ticks after boot, resident bytes)`` of process
    ``pid``, read from ``/proc/<pid>/stat``; None if it is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # (after the command, which may hold anything)
    try:
        return int(fields[1]), int(fields[19]), int(fields[21]) * _PAGE
    except (IndexError, ValueError):
        return None


class ProcessTable:
    """One look at every process of the machine (``/proc``): parent, start time, RSS.

    Made once per round of samples, however many trees are measured in it: one read of one
    small file per process (about 2 ms with 100 processes, on a busy 2-core machine).
    """

    def __init__(self, stats: dict[int, tuple[int, int, int]]) -> None:
        """Index ``stats`` (pid → what :func:`_stat` gives) by parent."""
        self.stats = stats
        self.children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in stats.items():
            self.children.setdefault(ppid, []).append(pid)

    @classmethod
    def read(cls) -> ProcessTable | None:
        """The processes now; None where ``/proc`` cannot be read (not Linux)."""
        try:
            entries = os.listdir("/proc")
        except OSError:
            return None
        stats = {}
        for entry in entries:
            if entry.isdigit() and (stat := _stat(entry)) is not None:
                stats[int(entry)] = stat
        return cls(stats)


class TreeMemory:
    """The resident memory of one process tree — a process and its descendants — sampled
    again and again (:meth:`sample`).

    Descendants found by earlier samples are remembered: one that has left the tree since (its
    parent exited, so it was re-parented) still counts while it runs, and is among
    :meth:`processes`. Processes are known by pid *and* start time, so a recycled pid is never
    counted nor signalled. A process that ends between being listed and being read (or cannot
    be read) counts nothing.

    What is counted is RSS: every page a process has resident, those it shares with others
    included (a forked child's pages shared with its parent, shared libraries), so a tree of
    processes sharing pages counts them once per process.
    """

    def __init__(self, pid: int) -> None:
        """Watch the tree of ``pid`` (which must be running; psutil.Error if it is not)."""
        self.pid = pid
        stat = _stat(pid)
        self._proc = psutil.Process(pid)  # (where /proc is missing; its start time too)
        self._start = stat[1] if stat is not None else self._proc.create_time()
        self._seen: dict[int, float] = {}  # descendant pid -> start (ticks, or psutil's time)
        self._procs: dict[int, psutil.Process] = {}  # (without /proc)

    def sample(self, table: ProcessTable | None) -> int | None:
        """The RSS (bytes) of the tree now, from ``table`` (or psutil without one); None once
        the root process is gone (or its pid names another process)."""
        if table is None:
            return self._sample_psutil()
        stats = table.stats
        root = stats.get(self.pid)
        if root is None or root[1] != self._start:
            return None
        total = root[2]
        current = set()
        stack = [self.pid]
        while stack:
            parent = stack.pop()
            born = stats[parent][1]
            for pid in table.children.get(parent, ()):
                # a child older than its parent is a recycled pid seen mid-scan: not of the tree
                if pid not in current and stats[pid][1] >= born:
                    current.add(pid)
                    stack.append(pid)
                    self._seen[pid] = stats[pid][1]
        for pid, start in list(self._seen.items()):
            stat = stats.get(pid)
            if stat is None or stat[1] != start:
                del self._seen[pid]  # ended
            else:
                total += stat[2]
        return total

    def _sample_psutil(self) -> int | None:
        try:
            found = self._proc.children(recursive=True)  # (raises if gone or its pid reused)
            total: int = self._proc.memory_info().rss
        except psutil.Error:
            return None
        current = {proc.pid for proc in found}
        self._procs.update((proc.pid, proc) for proc in found)
        for pid, proc in list(self._procs.items()):
            try:
                # one seen only before must still be the same process (psutil compares its
                # start time), or a recycled pid's memory would count
                if pid in current or proc.is_running():
                    total += proc.memory_info().rss
                    continue
            except psutil.Error:  # NoSuchProcess, ZombieProcess, AccessDenied
                pass
            del self._procs[pid]
        return total

    def processes(self) -> list[psutil.Process]:
        """The descendants the samples found that still run (the very processes: a pid
        recycled since is left out), to signal with the tree."""
        if not self._seen:
            return [p for p in self._procs.values() if _same(p)]
        found = []
        for pid, start in self._seen.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                stat = _stat(pid)
                if stat is not None and stat[1] == start:  # (after: the object is that one)
                    found.append(proc)
        return found


def _same(proc: psutil.Process) -> bool:
    try:
        return proc.is_running()
    except psutil.Error:
        return False


def signal_tree(
    pid: int,
    sig: signal.Signals,
    known: list[psutil.Process] | None = None,
    scan: bool = True,
    group: bool = True,
) -> None:
    """Send ``sig`` to the process group led by ``pid`` and to every descendant found, once
    to each process (unless one leaves the group while it is being signalled).

    Descendants are taken from a snapshot made before signalling (``known``, plus a fresh one
    unless ``scan`` is False — a scan reads every process of the machine), so processes that
    left the group (``setsid``) are reached as long as they were seen. Those still in the
    group, ``pid`` included, are not signalled again: a second SIGTERM would run a task's own
    handler a second time, perhaps inside the first. Without ``group``, only the descendants
    are signalled (``pid`` is not this process's child, so only its parent can tell whether
    the pid still names it).
    """
    snapshot = [*(known or []), *(descendants(pid) if scan else [])]
    grouped = False  # (whether the group's members were signalled)
    if group:
        try:
            os.killpg(pid, sig)
            grouped = True
        except (ProcessLookupError, PermissionError):
            pass
        if not (grouped and _in_group(pid, pid)):  # (it left its group: reach it alone)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    signal_each(snapshot, sig, pid if grouped else None)


def signal_each(
    processes: Iterable[psutil.Process], sig: signal.Signals, group: int | None = None
) -> None:
    """Send ``sig`` to each of ``processes`` once (one listed twice is signalled once; psutil
    refuses a pid that names another process now), leaving out those in process group
    ``group``, which the caller signalled as a group."""
    seen: set[int] = set()
    for proc in processes:
        if proc.pid in seen:
            continue
        seen.add(proc.pid)
        if group is not None and _in_group(proc.pid, group):
            continue
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def _in_group(pid: int, group: int) -> bool:
    """Whether process ``pid`` is in process group ``group``: True if it is gone (nothing left
    to signal), False if that cannot be told (a second signal is better than none)."""
    try:
        return os.getpgid(pid) == group
    except ProcessLookupError:
        return True
    except PermissionError:
        return False


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
