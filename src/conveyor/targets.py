"""Targets: what a task produces, and how the worker tells whether it exists.

:class:`LocalTarget` writes atomically. ``open("w")`` / ``open("wb")`` return an
:class:`AtomicWriter`: the bytes go to a hidden temporary file in the target's own directory
(so the final rename never crosses a filesystem), and that file is ``os.replace()``-d over the
path only when the ``with`` block ends without an exception (or ``close()`` is called). On an
exception -- or ``discard()`` -- the temporary file is removed and the path is left untouched, so
a half-written output never makes a task look complete.

:meth:`LocalTarget.temporary_path` serves tools that write files themselves (a compiler, a
database dump, a subprocess): it yields a hidden temporary path in the same directory, renamed
over the path on a clean exit and removed on an exception, with the same guarantee.

:class:`StagedWriter` is what both :class:`AtomicWriter` and the writers of
:class:`conveyor.fstargets.FileSystemTarget` are: data goes to a staging file and reaches its
destination only on commit.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from types import TracebackType
from typing import IO, Any, AnyStr, Generic, Literal, overload

__all__ = ["AtomicWriter", "LocalTarget", "StagedWriter", "Target"]

_READ_MODES = ("r", "rb")
_WRITE_MODES = ("w", "wb")
_TMP_MARKER = ".conveyor-tmp-"


class Target(abc.ABC):
    """Something a task produces; the worker only needs to know whether it exists."""

    @abc.abstractmethod
    def exists(self) -> bool:
        """True if the target has been produced."""


class StagedWriter(abc.ABC, Generic[AnyStr]):
    """A write-only file whose data reaches its destination only when it is committed.

    Use it as a context manager: a clean exit commits, an exception discards. Calling
    :meth:`close` commits too; :meth:`discard` throws the written data away. Both are no-ops
    once the writer is closed. A writer garbage-collected without being closed is discarded.
    Subclasses give the staging file and say how to commit it (:meth:`_commit`) and how to
    remove it (:meth:`_cleanup`).
    """

    def __init__(self, file: IO[Any]) -> None:
        self._file = file
        self.closed = False

    @abc.abstractmethod
    def _commit(self) -> None:
        """Move the closed staging file to the destination (may raise: then it is cleaned up)."""

    @abc.abstractmethod
    def _cleanup(self) -> None:
        """Remove the staging file, ignoring one that is already gone."""

    def write(self, data: AnyStr) -> int:
        """Write ``data`` to the staging file; return the number of characters/bytes."""
        return self._file.write(data)

    def writelines(self, lines: list[AnyStr]) -> None:
        """Write each item of ``lines`` (no separators are added)."""
        self._file.writelines(lines)

    def flush(self) -> None:
        """Flush buffered data to the staging file (the destination only changes on close)."""
        self._file.flush()

    def close(self) -> None:
        """Commit: close the staging file and move it to the destination."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
            self._commit()
        except BaseException:
            self._cleanup()
            raise

    def discard(self) -> None:
        """Throw the written data away: close and remove the staging file; keep the path."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
        finally:
            self._cleanup()

    def __enter__(self) -> StagedWriter[AnyStr]:
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
        # A writer dropped without close() is discarded: no staging file is left behind.
        if not getattr(self, "closed", True):
            with contextlib.suppress(Exception):
                self.discard()


class AtomicWriter(StagedWriter[AnyStr]):
    """A write-only file that replaces ``path`` on ``close()`` and never leaves it half-written.

    The staging file is a hidden temporary file in the path's own directory, renamed over the
    path with ``os.replace()`` on commit.
    """

    def __init__(self, path: str, *, binary: bool = False, encoding: str | None = None) -> None:
        self.path = path
        directory, name = os.path.split(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, self.tmp_path = _create_temp(directory, f".{name}{_TMP_MARKER}")
        try:
            file: IO[Any] = os.fdopen(fd, "wb" if binary else "w", encoding=encoding)
        except BaseException:
            os.close(fd)
            os.remove(self.tmp_path)
            raise
        super().__init__(file)

    def _commit(self) -> None:
        os.replace(self.tmp_path, self.path)

    def _cleanup(self) -> None:
        _remove_quietly(self.tmp_path)

    def __enter__(self) -> AtomicWriter[AnyStr]:
        return self

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

    @contextlib.contextmanager
    def temporary_path(self) -> Iterator[str]:
        """Yield a temporary path beside the target for a tool that writes the file itself.

        The path is absolute, in the target's directory (created now), hidden and unique:
        ``.<name>.conveyor-tmp-<random><ext>``, keeping the target's extension for tools that
        pick a format by it (and a trailing separator if the target has one). Nothing exists
        there yet. On a clean exit whatever the tool made there -- a file or a directory -- is
        renamed over the target (a directory only when the target does not exist yet); if it
        made nothing, FileNotFoundError names the target. On an exception it is removed and
        the target is left untouched.
        """
        final = os.path.abspath(self.path)
        directory, name = os.path.split(final)
        os.makedirs(directory, exist_ok=True)
        tmp = _temp_name(directory, name)
        trailing = os.sep if self.path.endswith(("/", os.sep)) else ""
        try:
            yield tmp + trailing
        except BaseException:
            _remove_tree_quietly(tmp)
            raise
        _rename_into_place(tmp, final, self)

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


def _temp_name(directory: str, name: str) -> str:
    """A hidden, unused temporary path in ``directory`` for the file ``name``; nothing is made."""
    ext = os.path.splitext(name)[1]
    while True:
        path = os.path.join(directory, f".{name}{_TMP_MARKER}{secrets.token_hex(8)}{ext}")
        if not os.path.lexists(path):
            return path


def _rename_into_place(tmp: str, final: str, target: Target) -> None:
    """Commit what a tool wrote at ``tmp`` over ``final``; remove ``tmp`` if that fails."""
    if not os.path.lexists(tmp):
        raise FileNotFoundError(
            f"{target!r}.temporary_path(): nothing was written at {tmp!r}; expected the tool "
            "to create a file or directory there before the with block ended"
        )
    try:
        if os.path.isdir(tmp) and not os.path.islink(tmp) and os.path.lexists(final):
            raise FileExistsError(
                f"{target!r}.temporary_path(): the tool made a directory but {final!r} already "
                "exists; expected no output there (remove() it first)"
            )
        os.replace(tmp, final)
    except BaseException:
        _remove_tree_quietly(tmp)
        raise


def _remove_tree_quietly(path: str) -> None:
    """Remove a file or a directory tree, ignoring a missing one."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        _remove_quietly(path)
