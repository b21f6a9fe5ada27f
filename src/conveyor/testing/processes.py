"""Helpers for tests that start real processes and servers (used by conveyor's own tests).

Poll instead of sleeping, pick free loopback ports, and leave no process behind: mark every
process a test starts with an environment variable and kill what carries it at teardown.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import psutil

__all__ = ["free_port", "kill_marked", "kill_tree", "marked", "wait_for"]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` (loopback) that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants, and wait for them to go."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


def marked(variable: str, value: str) -> list[psutil.Process]:
    """Live processes (not this one) whose environment has ``variable=value``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(variable) == value and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def kill_marked(variable: str, value: str) -> None:
    """SIGKILL every live process carrying ``variable=value`` (orphans included)."""
    found = marked(variable, value)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(found, timeout=10)
