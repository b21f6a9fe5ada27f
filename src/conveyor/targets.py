"""Targets: what a task produces, and how the worker tells whether it exists.

:class:`LocalTarget` writes atomically. ``open("w")`` / ``open("wb")`` return an
:class:`AtomicWriter`: the bytes go to a hidden temporary file in the target's own directory
(so the final rename never crosses a filesystem), and that file is ``os.replace()``-d over the
path only when the ``with`` block ends without an exception (or ``close()`` is called). On an
exception -- or ``discard()`` -- the temporary file is removed and the path is left untouched, so
a half-written output never makes a task look complete.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import os
import secrets
import shutil
from types import TracebackType
from typing import IO, Any, AnyStr, Generic, Literal, overload

__all__ = ["AtomicWriter", "LocalTarget", "Target"]

_READ_MODES = ("r", "rb")
_WRITE_MODES = ("w", "wb")
_TMP_MARKER = ".conveyor-tmp-"


class Target(abc.ABC):
    """Something a task produces; the worker only needs to know whether it exists."""

    @abc.abstractmethod
    def exists(self) -> bool:
        """True if the target has been produced."""


class AtomicWriter(Generic[AnyStr]):
    """A write-only file that replaces ``path`` on ``close()`` and never leaves it half-written.

    Use it as a context manager: a clean exit commits, an exception discards. Calling
    :meth:`close` commits too; :meth:`discard` throws the written data away. Both are no-ops
    once the writer is closed.
    """

    def __init__(self, path: str, *, binary: bool = False, encoding: str | None = None) -> None:
        self.path = path
        directory, name = os.path.split(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, self.tmp_path = _create_temp(directory, f".{name}{_TMP_MARKER}")
        try:
            self._file: IO[Any] = os.fdopen(fd, "wb" if binary else "w", encoding=encoding)
        except BaseException:
            os.close(fd)
            os.remove(self.tmp_path)
            raise
        self.closed = False

    def write(self, data: AnyStr) -> int:
        """Write ``data`` to the temporary file; return the number of characters/bytes."""
        return self._file.write(data)

    def writelines(self, lines: list[AnyStr]) -> None:
        """Write each item of ``lines`` (no separators are added)."""
        self._file.writelines(lines)

    def flush(self) -> None:
        """Flush buffered data to the temporary file (the path is only replaced on close)."""
        self._file.flush()

    def close(self) -> None:
        """Commit: close the temporary file and rename it over the path."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
            os.replace(self.tmp_path, self.path)
        except BaseException:
            _remove_quietly(self.tmp_path)
            raise

    def discard(self) -> None:
        """Throw the written data away: close and remove the temporary file; keep the path."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
        finally:
            _remove_quietly(self.tmp_path)

    def __enter__(self) -> AtomicWriter[AnyStr]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()

    def __del__(self) -> None:
        # A writer dropped without close() is discarded: no temporary file is left behind.
        if not getattr(self, "closed", True):
            self.discard()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<AtomicWriter {self.path!r} ({state})>"


class LocalTarget(Target):
    """A file (or directory) on the local filesystem."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path: str = os.fspath(path)

    def exists(self) -> bool:
        """True if the path exists."""
        return os.path.exists(self.path)

    def remove(self) -> None:
        """Delete the file, or the directory tree; do nothing if the path does not exist."""
        if os.path.isdir(self.path) and not os.path.islink(self.path):
            shutil.rmtree(self.path)
        else:
            _remove_quietly(self.path)

    @overload
    def open(self, mode: Literal["r"] = ..., encoding: str | None = ...) -> IO[str]: ...
    @overload
    def open(self, mode: Literal["rb"], encoding: None = ...) -> IO[bytes]: ...
    @overload
    def open(self, mode: Literal["w"], encoding: str | None = ...) -> AtomicWriter[str]: ...
    @overload
    def open(self, mode: Literal["wb"], encoding: None = ...) -> AtomicWriter[bytes]: ...
    @overload
    def open(self, mode: str, encoding: str | None = ...) -> IO[Any] | AtomicWriter[Any]: ...

    def open(self, mode: str = "r", encoding: str | None = None) -> IO[Any] | AtomicWriter[Any]:
        """Open for reading (``r``, ``rb``) or for an atomic write (``w``, ``wb``).

        Writing creates the parent directories; see :class:`AtomicWriter`.
        """
        if mode not in _READ_MODES + _WRITE_MODES:
            allowed = ", ".join(map(repr, _READ_MODES + _WRITE_MODES))
            raise ValueError(
                f"LocalTarget.open: unsupported mode {mode!r}; expected one of {allowed}"
            )
        if "b" in mode and encoding is not None:
            raise ValueError(f"LocalTarget.open: binary mode {mode!r} takes no encoding")
        if mode in _WRITE_MODES:
            return AtomicWriter(self.path, binary=mode == "wb", encoding=encoding)
        return builtins.open(self.path, mode, encoding=encoding)

    def __fspath__(self) -> str:
        return self.path

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LocalTarget):
            return self.path == other.path
        return NotImplemented

    def __hash__(self) -> int:
        return hash((LocalTarget, self.path))

    def __repr__(self) -> str:
        return f"LocalTarget({self.path!r})"


def _create_temp(directory: str, prefix: str) -> tuple[int, str]:
    """Create a new, empty temporary file in ``directory``; return its descriptor and path.

    Like ``tempfile.mkstemp`` but created with mode 0o666 minus the umask (mkstemp uses 0o600),
    so the committed file gets the permissions a plain ``open(path, "w")`` would give it.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        path = os.path.join(directory, prefix + secrets.token_hex(8))
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue


def _remove_quietly(path: str) -> None:
    """Remove a file, ignoring a missing one."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
