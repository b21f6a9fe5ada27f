"""One server per state file: an ``flock`` on ``<state_path>.lock``, which names its holder.

The lock is taken before the state is opened, after checking that the state's directory and
files can be written (a read-only mount, or permissions), so that a server that cannot write
its state, or that would share it with another, stops at start-up with one line. The lock
file exists while a store holds it: :meth:`StateLock.release` removes it, still locked, and a
locker checks that the file it locked is still the one at the path (else it locks again), so
the removal never lets two holders in. A lock file left by ``kill -9`` is not locked, and is
taken over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

from ..errors import ConfigError

__all__ = ["StateLock"]


class StateLock:
    """The lock of the state at ``path``, held from construction until :meth:`release`."""

    def __init__(self, path: str, holder: str) -> None:
        """Check that the state can be written and lock it for this process; ``holder``
        (the server's address) is written into the lock file for a second server's error.
        ConfigError (nothing held) naming the holder, or what cannot be written."""
        absolute = os.path.abspath(path)
        self.path = absolute + ".lock"
        _check_writable(absolute)
        self._fd = _lock(path, self.path)
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, json.dumps({"pid": os.getpid(), "holder": holder}).encode(), 0)
        except OSError as exc:
            self.release()
            raise ConfigError(
                f"cannot write the state's lock file {self.path!r}: {exc.strerror}"
            ) from None

    def release(self) -> None:
        """Remove the lock file (still holding its lock), then release the lock; again is
        a no-op."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = -1


def _check_writable(absolute: str) -> None:
    """ConfigError naming the first of the state's directory, file, -wal and -shm that exists
    and cannot be written (``access`` reports a read-only mount even to root)."""
    directory = os.path.dirname(absolute)
    for where in (directory, absolute, absolute + "-wal", absolute + "-shm"):
        if os.path.exists(where) and not os.access(where, os.W_OK):
            what = "directory" if where == directory else "file"
            raise ConfigError(
                f"cannot write the state {what} {where!r}: {_why_unwritable(where)}; the "
                "scheduler must be able to write its state database, its -wal and -shm files "
                f"and {os.path.basename(absolute) + '.lock'!r} there"
            )


def _lock(path: str, lock_path: str) -> int:
    """The descriptor of ``lock_path``, locked; ConfigError naming the holder if another
    process holds it."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"cannot use {path!r} as the scheduler's state database: cannot create its "
                f"lock file {lock_path!r}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"the state database {path!r} is in use by another scheduler ({held}); two "
                "schedulers on one state would hand out the same task twice: stop that one, "
                "or give this one another [server] state_path"
            ) from None
        try:
            if os.fstat(fd).st_ino == os.stat(lock_path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # removed by its holder as it released it: lock the file there now


def _holder(fd: int) -> str:
    """What the lock file behind ``fd`` says about its holder, for a message."""
    try:
        said = json.loads(os.pread(fd, 4096, 0))
        pid, holder = int(said["pid"]), str(said.get("holder") or "")
    except (OSError, ValueError, KeyError, TypeError):
        return "its lock file names no holder"
    return f"pid {pid}, {holder}" if holder else f"pid {pid}"


def _why_unwritable(where: str) -> str:
    """Why ``where`` cannot be written: a read-only file system, or its permissions."""
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return "the file system is mounted read-only"
    except OSError:
        pass
    return "permission denied"
