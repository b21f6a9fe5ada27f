"""FileSystemTarget: a target on any fsspec filesystem, written atomically.

``FileSystemTarget(url, **storage_options)`` has the interface of
:class:`~conveyor.targets.LocalTarget` over ``fsspec.core.url_to_fs(url, **storage_options)``.
fsspec (the ``conveyor[fsspec]`` extra) is imported when the first such target is created, never
by ``import conveyor``; without it, :class:`MissingExtra` names the extra to install.

Theory of operation -- writes never leave a partial object at the final URL, and on an exception
nothing is committed. How depends on the kind of filesystem (:attr:`FileSystemTarget.strategy`):

``"local"``  (``file://``, plain paths)
    Delegated to :class:`~conveyor.targets.LocalTarget`: a hidden temporary file beside the
    target, ``os.replace()``-d over it on a clean exit.
``"upload"``  (object stores: ``s3://``, ``gs://``, ``az://`` ... -- see
:attr:`FileSystemTarget.OBJECT_STORE_PROTOCOLS`)
    Object stores have no rename (``mv`` is copy + delete), but a single upload is atomic: the
    object appears when the upload completes (a multipart upload is aborted on error). Data is
    staged in a local temporary file and sent with one ``fs.put_file()`` on a clean exit; on an
    exception only the local file is removed, so neither a partial object nor a temporary object
    is ever created in the bucket.
``"rename"``  (every other filesystem: ``memory://``, ``sftp://``, ``hdfs://``, ``ftp://`` ...)
    Data is staged in a local temporary file, uploaded to a hidden temporary name beside the
    target (``.<name>.conveyor-tmp-<random><ext>``) and ``fs.mv()``-d into place; on any error
    the remote temporary is removed. Unknown filesystems get this strategy because it is the
    safe one: even where ``mv`` is copy + delete, the final path only ever receives a copy of a
    finished file.

:meth:`FileSystemTarget.temporary_path` always yields a *local* path, because the tools it is
for (subprocesses, libraries writing files) can only write local files: beside the target for
``"local"``, else in a private local temporary directory, committed on a clean exit exactly as a
write is (a directory is accepted on ``"local"`` and ``"rename"`` filesystems, refused on object
stores where a set of objects cannot appear atomically).

``memory://`` is the in-memory target for tests. Its contents live in the process: a task run by
the ``fork`` or ``subprocess`` executor writes into its child's own copy, which the worker never
sees -- use it with the ``inline`` or ``thread`` executor.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, Any, AnyStr, ClassVar, Literal, overload

from .errors import ConveyorError
from .secrets import redact_text
from .targets import LocalTarget, StagedWriter, Target

__all__ = ["FileSystemTarget", "FileSystemWriter", "MissingExtra"]

Strategy = Literal["local", "upload", "rename"]

_READ_MODES = ("r", "rb")
_WRITE_MODES = ("w", "wb")
_TMP_MARKER = ".conveyor-tmp-"
_INSTALL_HINT = "pip install 'conveyor[fsspec]'"


class MissingExtra(ConveyorError, ImportError):
    """An optional dependency of a conveyor feature is not installed; ``extra`` names the extra
    of the ``conveyor`` distribution that installs it."""

    def __init__(self, message: str, *, extra: str, module: str) -> None:
        super().__init__(message, name=module)
        self.extra = extra


class FileSystemTarget(Target):
    """A file (or directory) at ``url`` on any fsspec filesystem, written atomically.

    ``storage_options`` go to the filesystem (``endpoint_url=``, ``key=``, ``secret=``,
    ``client_kwargs=`` for s3fs, ...); they may hold credentials and are never shown.
    ``.url`` is the URL given, ``.path`` the filesystem's path for it and ``.fs`` the fsspec
    filesystem. ``open("w")`` / ``open("wb")`` return a :class:`~conveyor.targets.StagedWriter`
    that commits on a clean exit and commits nothing on an exception (see the module docstring
    for how, per kind of filesystem). Text defaults to UTF-8.
    """

    #: fsspec protocols treated as object stores (no atomic rename): written by one upload.
    OBJECT_STORE_PROTOCOLS: ClassVar[frozenset[str]] = frozenset(
        {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "oss", "cos", "obs", "tos"}
    )

    def __init__(self, url: str | os.PathLike[str], **storage_options: Any) -> None:
        self.url: str = os.fspath(url)
        self._storage_options = storage_options
        self._fs, self.path = _url_to_fs(self.url, storage_options)
        self._pid = os.getpid()
        self.strategy: Strategy = self._strategy_of(self._fs)

    @property
    def fs(self) -> Any:
        """The fsspec filesystem; made anew in a forked child (fsspec's async ones are not
        fork-safe), so a target made before a fork still works after it."""
        if self._pid != os.getpid():
            self._fs, _ = _url_to_fs(self.url, self._storage_options)
            self._pid = os.getpid()
        return self._fs

    def exists(self) -> bool:
        """True if the path exists; cached listings are dropped first so the answer is fresh."""
        if self.strategy == "local":
            return os.path.exists(self.path)
        fs = self.fs
        fs.invalidate_cache(self.path)
        return bool(fs.exists(self.path))

    def remove(self) -> None:
        """Delete the file, or the directory tree; do nothing if the path does not exist."""
        if self.strategy == "local":
            LocalTarget(self.path).remove()
            return
        fs = self.fs
        fs.invalidate_cache(self.path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(self.path, recursive=True)
        fs.invalidate_cache(self.path)

    @overload
    def open(self, mode: Literal["r"] = ..., encoding: str | None = ...) -> IO[str]: ...
    @overload
    def open(self, mode: Literal["rb"], encoding: None = ...) -> IO[bytes]: ...
    @overload
    def open(self, mode: Literal["w"], encoding: str | None = ...) -> StagedWriter[str]: ...
    @overload
    def open(self, mode: Literal["wb"], encoding: None = ...) -> StagedWriter[bytes]: ...
    @overload
    def open(self, mode: str, encoding: str | None = ...) -> IO[Any] | StagedWriter[Any]: ...

    def open(self, mode: str = "r", encoding: str | None = None) -> IO[Any] | StagedWriter[Any]:
        """Open for reading (``r``, ``rb``) or for an atomic write (``w``, ``wb``).

        Text is UTF-8 unless ``encoding`` says otherwise. Writing creates parent directories
        where the filesystem has them.
        """
        if mode not in _READ_MODES + _WRITE_MODES:
            allowed = ", ".join(map(repr, _READ_MODES + _WRITE_MODES))
            raise ValueError(
                f"FileSystemTarget.open: unsupported mode {mode!r}; expected one of {allowed}"
            )
        if "b" in mode and encoding is not None:
            raise ValueError(f"FileSystemTarget.open: binary mode {mode!r} takes no encoding")
        text_encoding = None if "b" in mode else encoding or "utf-8"
        if self.strategy == "local":
            return LocalTarget(self.path).open(mode, encoding=text_encoding)
        if mode in _WRITE_MODES:
            return FileSystemWriter(self, encoding=text_encoding)
        if text_encoding is None:
            return self.fs.open(self.path, "rb")  # type: ignore[no-any-return]
        return self.fs.open(self.path, "r", encoding=text_encoding)  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def temporary_path(self) -> Iterator[str]:
        """Yield a local path for a tool that writes the file itself; commit it on a clean exit.

        On a ``"local"`` filesystem this is :meth:`LocalTarget.temporary_path` (a hidden path
        beside the target, renamed into place). Elsewhere it is a path named like the target in
        a private local temporary directory, uploaded on a clean exit as :meth:`open` would
        (a directory too, except on object stores: IsADirectoryError). If the tool made
        nothing, FileNotFoundError names the target; on an exception nothing is committed.
        The local directory is always removed.
        """
        if self.strategy == "local":
            with LocalTarget(self.path).temporary_path() as tmp:
                yield tmp
            return
        directory = tempfile.mkdtemp(prefix="conveyor-")
        try:
            local = os.path.join(directory, self._name() or "output")
            yield local
            if not os.path.lexists(local):
                raise FileNotFoundError(
                    f"{self!r}.temporary_path(): nothing was written at {local!r}; expected "
                    "the tool to create a file or directory there before the with block ended"
                )
            self._commit_local(local)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _commit_local(self, local: str) -> None:
        """Put the local file (or directory) ``local`` at the target, atomically as a write.

        Object stores get one upload (directories are refused: IsADirectoryError); other
        filesystems an upload to a hidden temporary name beside the target, then ``fs.mv``
        (a directory only when the target does not exist: FileExistsError). ``local`` itself
        is left in place.
        """
        if self.strategy == "local":
            raise ValueError(f"{self!r}._commit_local: the target is local; use os.replace")
        is_dir = os.path.isdir(local)
        fs = self.fs
        if self.strategy == "upload":
            if is_dir:
                raise IsADirectoryError(
                    f"{self!r}: the tool made a directory, which cannot appear atomically on an "
                    "object store; expected a single file (write an archive instead)"
                )
            fs.put_file(local, self.path)
        else:
            self._put_and_rename(fs, local, is_dir)
        fs.invalidate_cache(self.path)

    def _put_and_rename(self, fs: Any, local: str, is_dir: bool) -> None:
        """Upload ``local`` beside the target under a temporary name and move it into place."""
        parent = posixpath.dirname(self.path.rstrip("/"))
        if parent:
            fs.makedirs(parent, exist_ok=True)
        if is_dir and fs.exists(self.path):
            raise FileExistsError(
                f"{self!r}: the tool made a directory but the target already exists; expected "
                "no output there (remove() it first)"
            )
        tmp = posixpath.join(parent, _temp_basename(self._name()))
        try:
            if is_dir:
                fs.put(local.rstrip(os.sep) + os.sep, tmp, recursive=True)
            else:
                fs.put_file(local, tmp)
            fs.mv(tmp, self.path, recursive=is_dir)
        except BaseException:
            with contextlib.suppress(Exception):
                fs.rm(tmp, recursive=True)
            raise

    def _name(self) -> str:
        """The last component of the path."""
        return posixpath.basename(self.path.rstrip("/"))

    @classmethod
    def _strategy_of(cls, fs: Any) -> Strategy:
        """How writes to ``fs`` are made atomic (see the module docstring)."""
        from fsspec.implementations.local import LocalFileSystem

        if isinstance(fs, LocalFileSystem):
            return "local"
        while fs is not None:  # wrappers (dir::, caches) hold the real filesystem as .fs
            protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
            if cls.OBJECT_STORE_PROTOCOLS.intersection(protocols):
                return "upload"
            inner = getattr(fs, "fs", None)
            fs = inner if inner is not fs and hasattr(inner, "protocol") else None
        return "rename"

    def __getstate__(self) -> dict[str, Any]:
        # the filesystem (sessions, event loops) is not picklable: rebuilt from url and options
        state = dict(self.__dict__)
        state["_fs"] = None
        state["_pid"] = -1
        return state

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FileSystemTarget):
            return (self.url, self._storage_options) == (other.url, other._storage_options)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((FileSystemTarget, self.url))

    def __repr__(self) -> str:
        # storage options may hold credentials: never shown; userinfo in the URL is redacted
        return f"FileSystemTarget({redact_text(self.url)!r})"


class FileSystemWriter(StagedWriter[AnyStr]):
    """The writer of a non-local :class:`FileSystemTarget`: data is staged in a local temporary
    file (under ``tempfile.gettempdir()``; set ``TMPDIR`` to move it) and committed with
    the strategy of the target (one upload, or upload + rename) on close."""

    def __init__(self, target: FileSystemTarget, *, encoding: str | None = None) -> None:
        self.target = target
        # (the end of the name only: with the prefix, a long one would not fit a file name)
        fd, self.tmp_path = tempfile.mkstemp(prefix="conveyor-", suffix="-" + target._name()[-80:])
        try:
            raw: IO[Any] = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            os.remove(self.tmp_path)
            raise
        file = raw if encoding is None else io.TextIOWrapper(raw, encoding=encoding)
        super().__init__(file)

    def _commit(self) -> None:
        self.target._commit_local(self.tmp_path)
        self._cleanup()

    def _cleanup(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.tmp_path)

    def __enter__(self) -> FileSystemWriter[AnyStr]:
        return self

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<FileSystemWriter {self.target!r} ({state})>"


def _url_to_fs(url: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs``, importing fsspec now; MissingExtra if it is not installed."""
    try:
        import fsspec.core
    except ImportError as err:
        raise MissingExtra(
            f"FileSystemTarget({redact_text(url)!r}) needs fsspec, which is not installed; "
            f"expected the extra to be installed: {_INSTALL_HINT}",
            extra="fsspec",
            module="fsspec",
        ) from err
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    return fs, str(path)


def _temp_basename(name: str) -> str:
    """A hidden, unique temporary name for the file ``name``, keeping its extension."""
    ext = posixpath.splitext(name)[1]
    return f".{name[:80]}{_TMP_MARKER}{secrets.token_hex(8)}{ext[-20:]}"
