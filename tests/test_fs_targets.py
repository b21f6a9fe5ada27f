"""Tests for LocalTarget.temporary_path and conveyor.fstargets.FileSystemTarget.

FileSystemTarget runs against ``memory://``, ``file://`` and a real S3 endpoint on loopback
(moto's ThreadedMotoServer, reached through s3fs).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.errors import ConveyorError
from conveyor.fstargets import FileSystemTarget, MissingExtra
from conveyor.targets import LocalTarget
from s3_support import moto_s3

BUCKET = "conveyor-test"
SECRET = "sEcReT-do-not-show"


class Boom(Exception):
    """Raised inside a with block to simulate a failing task."""


# --- the S3 server ---------------------------------------------------------------------------


def s3_options(endpoint: str) -> dict[str, Any]:
    """The storage options of a FileSystemTarget on the S3 server at ``endpoint``."""
    return {
        "endpoint_url": endpoint,
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": "us-east-1"},
    }


@dataclass(frozen=True)
class S3:
    """A running moto S3 server with one bucket, and how to reach it."""

    endpoint: str
    client: Any  # a boto3 client: ground truth, independent of s3fs's caches

    @property
    def options(self) -> dict[str, Any]:
        """The storage options of a FileSystemTarget on this server."""
        return s3_options(self.endpoint)

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key in the bucket under ``prefix``."""
        reply = self.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        return sorted(item["Key"] for item in reply.get("Contents", []))

    def uploads(self) -> list[str]:
        """Keys of multipart uploads begun and neither completed nor aborted."""
        reply = self.client.list_multipart_uploads(Bucket=BUCKET)
        return [item["Key"] for item in reply.get("Uploads", [])]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    """A real S3-protocol server on a free loopback port, with the bucket created."""
    with moto_s3(BUCKET) as (endpoint, client):
        yield S3(endpoint, client)


# --- one factory of targets per kind of filesystem ---------------------------------------------


@dataclass
class Place:
    """Where a test's targets live: ``target(name)`` makes one, ``listing()`` shows all."""

    kind: str
    target: Callable[[str], FileSystemTarget]
    listing: Callable[[], list[str]]


@pytest.fixture
def staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Local staging files of FileSystemTarget go here, so tests can see that none is left."""
    directory = tmp_path / "staging"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def _memory_place() -> Iterator[Place]:
    root = f"/t-{uuid.uuid4().hex}"
    probe = FileSystemTarget(f"memory://{root}")
    yield Place(
        "memory",
        lambda name: FileSystemTarget(f"memory://{root}/{name}"),
        lambda: sorted(p[len(root) + 1 :] for p in probe.fs.find(root)),
    )
    probe.remove()


def _file_place(directory: Path) -> Iterator[Place]:
    directory.mkdir()

    def listing() -> list[str]:
        return sorted(
            str(Path(d, f).relative_to(directory)) for d, _, fs in os.walk(directory) for f in fs
        )

    yield Place("file", lambda name: FileSystemTarget(f"file://{directory}/{name}"), listing)


def _s3_place(server: S3) -> Iterator[Place]:
    prefix = f"t-{uuid.uuid4().hex}"
    yield Place(
        "s3",
        lambda name: FileSystemTarget(f"s3://{BUCKET}/{prefix}/{name}", **server.options),
        lambda: [key[len(prefix) + 1 :] for key in server.keys(prefix + "/")],
    )


@pytest.fixture(params=["memory", "file", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path, staging: Path) -> Iterator[Place]:
    """Each test using it runs once per kind of filesystem; no local staging file may remain."""
    if request.param == "memory":
        places = _memory_place()
    elif request.param == "file":
        places = _file_place(tmp_path / "files")
    else:
        places = _s3_place(request.getfixturevalue("s3"))
    yield from places
    assert os.listdir(staging) == []


def _no_temp(names: list[str]) -> bool:
    return not any(".conveyor-tmp-" in name for name in names)


# --- FileSystemTarget: reading, writing, atomicity --------------------------------------------


def test_strategy_follows_the_kind_of_filesystem(place: Place) -> None:
    """file:// is delegated to LocalTarget, S3 is an upload, memory:// a rename."""
    expected = {"file": "local", "s3": "upload", "memory": "rename"}[place.kind]
    assert place.target("x").strategy == expected


def test_plain_path_is_local(tmp_path: Path) -> None:
    """A URL without a protocol is a local path."""
    target = FileSystemTarget(str(tmp_path / "plain.txt"))
    assert target.strategy == "local"
    assert target.path == str(tmp_path / "plain.txt")


def test_text_round_trip(place: Place) -> None:
    """Text written with 'w' reads back with 'r' (UTF-8 by default); exists() follows."""
    target = place.target("dir/out.txt")
    assert target.exists() is False
    with target.open("w") as out:
        out.write("héllo\n")
        out.writelines(["a\n", "b\n"])
    assert target.exists() is True
    with target.open("r") as f:
        assert f.read() == "héllo\na\nb\n"
    assert place.listing() == ["dir/out.txt"]


def test_bytes_round_trip(place: Place) -> None:
    """Bytes written with 'wb' read back unchanged with 'rb'."""
    target = place.target("blob.bin")
    data = bytes(range(256)) * 10 + b"\r\n\n"
    with target.open("wb") as out:
        assert out.write(data) == len(data)
    with target.open("rb") as f:
        assert f.read() == data


def test_explicit_encoding(place: Place) -> None:
    """An encoding given to open() is used for writing and reading."""
    target = place.target("latin.txt")
    with target.open("w", encoding="latin-1") as out:
        out.write("ñ")
    with target.open("rb") as f:
        assert f.read() == "ñ".encode("latin-1")
    with target.open("r", encoding="latin-1") as f:
        assert f.read() == "ñ"


def test_nothing_is_visible_before_close(place: Place) -> None:
    """While the with block runs, the target does not exist and nothing is at its URL."""
    target = place.target("slow.txt")
    with target.open("w") as out:
        out.write("half")
        out.flush()
        assert not target.exists()
        assert "slow.txt" not in place.listing()
    assert target.exists()


def test_exception_inside_open_w_leaves_no_object(place: Place) -> None:
    """An exception in ``with target.open("w")`` commits nothing and leaves no temporary."""
    target = place.target("failed.txt")
    with pytest.raises(Boom), target.open("w") as out:
        out.write("partial")
        raise Boom
    assert not target.exists()
    assert place.listing() == []


def test_exception_keeps_the_previous_content(place: Place) -> None:
    """A failed rewrite leaves the object as it was."""
    target = place.target("kept.txt")
    with target.open("w") as out:
        out.write("old")
    with pytest.raises(Boom), target.open("wb") as out:
        out.write(b"new")
        raise Boom
    with target.open("r") as f:
        assert f.read() == "old"
    assert place.listing() == ["kept.txt"]


def test_rewrite_replaces(place: Place) -> None:
    """A second successful write replaces the first."""
    target = place.target("twice.txt")
    for text in ("one", "two"):
        with target.open("w") as out:
            out.write(text)
    with target.open("r") as f:
        assert f.read() == "two"
    assert place.listing() == ["twice.txt"]


def test_close_commits_and_discard_throws_away(place: Place) -> None:
    """Outside a with block, close() commits and discard() commits nothing."""
    kept, dropped = place.target("kept.txt"), place.target("dropped.txt")
    writer = kept.open("w")
    writer.write("k")
    writer.close()
    writer.close()  # a no-op once closed
    other = dropped.open("w")
    other.write("d")
    other.discard()
    other.close()  # a no-op once discarded
    assert kept.exists() and not dropped.exists()
    assert place.listing() == ["kept.txt"]


def test_remove(place: Place) -> None:
    """remove() deletes the object; removing a missing one does nothing."""
    target = place.target("gone.txt")
    with target.open("w") as out:
        out.write("x")
    target.remove()
    assert not target.exists()
    target.remove()
    assert place.listing() == []


def test_remove_a_directory(place: Place) -> None:
    """remove() deletes a directory (a prefix on S3) with everything in it."""
    for name in ("tree/a.txt", "tree/sub/b.txt"):
        with place.target(name).open("w") as out:
            out.write(name)
    tree = place.target("tree")
    assert tree.exists()
    tree.remove()
    assert not tree.exists()
    assert place.listing() == []


def test_bad_modes_are_refused(place: Place) -> None:
    """Only r, rb, w and wb are accepted; binary modes take no encoding."""
    target = place.target("x")
    with pytest.raises(ValueError, match="unsupported mode 'a'; expected one of 'r', 'rb'"):
        target.open("a")
    with pytest.raises(ValueError, match="binary mode 'wb' takes no encoding"):
        target.open("wb", encoding="utf-8")


# --- FileSystemTarget.temporary_path -------------------------------------------------------------


def test_temporary_path_commits_a_file(place: Place) -> None:
    """A file a tool writes at the temporary path appears at the target on a clean exit."""
    target = place.target("report.csv")
    with target.temporary_path() as tmp:
        assert os.path.isabs(tmp) and tmp.endswith(".csv")
        assert not os.path.exists(tmp)
        Path(tmp).write_text("a,b\n", encoding="utf-8")
        assert not target.exists()
    assert not os.path.exists(tmp)
    with target.open("r") as f:
        assert f.read() == "a,b\n"
    assert place.listing() == ["report.csv"]


def test_temporary_path_discards_on_exception(place: Place) -> None:
    """On an exception the tool's file is removed and nothing reaches the target."""
    target = place.target("report.csv")
    with pytest.raises(Boom), target.temporary_path() as tmp:
        Path(tmp).write_text("half", encoding="utf-8")
        raise Boom
    assert not os.path.exists(tmp)
    assert not target.exists()
    assert place.listing() == []


def test_temporary_path_with_nothing_written_names_the_target(place: Place) -> None:
    """A clean exit without a file at the temporary path is an error naming the target."""
    target = place.target("never.txt")
    with (
        pytest.raises(FileNotFoundError, match=r"never\.txt.*nothing was written"),
        target.temporary_path(),
    ):
        pass
    assert not target.exists()


def test_temporary_path_directory(place: Place) -> None:
    """A directory made at the temporary path is committed whole, except on object stores."""
    target = place.target("tree")
    if place.kind == "s3":
        with pytest.raises(IsADirectoryError, match="object store"), target.temporary_path() as t:
            os.mkdir(t)
            Path(t, "a.txt").write_text("a", encoding="utf-8")
        assert place.listing() == []
        return
    with target.temporary_path() as tmp:
        os.makedirs(os.path.join(tmp, "sub"))
        Path(tmp, "a.txt").write_text("a", encoding="utf-8")
        Path(tmp, "sub", "b.txt").write_text("b", encoding="utf-8")
    assert place.listing() == ["tree/a.txt", "tree/sub/b.txt"]
    with place.target("tree/sub/b.txt").open("r") as f:
        assert f.read() == "b"


# --- S3 specifics -------------------------------------------------------------------------


def test_s3_failed_write_leaves_no_stray_object(s3: S3, staging: Path) -> None:
    """After a failed write the bucket holds no object and no open upload for the key."""
    prefix = f"stray-{uuid.uuid4().hex}"
    target = FileSystemTarget(f"s3://{BUCKET}/{prefix}/out.bin", **s3.options)
    with pytest.raises(Boom), target.open("wb") as out:
        out.write(b"x" * 1_000_000)
        raise Boom
    assert s3.keys(prefix) == []
    assert not [key for key in s3.uploads() if key.startswith(prefix)]
    assert os.listdir(staging) == []


def test_s3_write_is_one_object_at_the_final_key(s3: S3) -> None:
    """A write creates exactly the final key, with a content type from its extension."""
    prefix = f"one-{uuid.uuid4().hex}"
    target = FileSystemTarget(f"s3://{BUCKET}/{prefix}/data.json", **s3.options)
    with target.open("w") as out:
        out.write('{"a": 1}')
    assert s3.keys(prefix) == [f"{prefix}/data.json"]
    head = s3.client.head_object(Bucket=BUCKET, Key=f"{prefix}/data.json")
    assert head["ContentType"] == "application/json"


def test_s3_exists_is_not_fooled_by_a_cached_listing(s3: S3) -> None:
    """An object written by someone else after a listing was cached is seen by exists()."""
    prefix = f"cache-{uuid.uuid4().hex}"
    target = FileSystemTarget(f"s3://{BUCKET}/{prefix}/late.txt", **s3.options)
    with FileSystemTarget(f"s3://{BUCKET}/{prefix}/early.txt", **s3.options).open("w") as out:
        out.write("e")
    assert target.fs.ls(f"{BUCKET}/{prefix}", detail=False)  # caches the listing
    s3.client.put_object(Bucket=BUCKET, Key=f"{prefix}/late.txt", Body=b"l")
    assert target.exists()


# --- identity, repr, pickling, the missing extra -----------------------------------------------


def test_repr_hides_storage_options_and_url_credentials() -> None:
    """Neither storage option values nor the URL's user:password are shown."""
    target = FileSystemTarget("memory://user:hunter2@host/x.txt", token=SECRET, key=SECRET)
    shown = repr(target) + str(target) + repr(target.open("w"))
    assert SECRET not in shown and "hunter2" not in shown
    assert "FileSystemTarget('memory://***@host/x.txt')" in shown


def test_repr_hides_s3_credentials(s3: S3) -> None:
    """An S3 target shows its URL, never its key or secret."""
    options = {**s3.options, "key": "AKIA" + SECRET, "secret": SECRET}
    target = FileSystemTarget(f"s3://{BUCKET}/r.txt", **options)
    assert repr(target) == f"FileSystemTarget('s3://{BUCKET}/r.txt')"
    assert SECRET not in repr(target) + str(target)


def test_equality_and_hash() -> None:
    """Targets are equal when URL and storage options are; usable in sets."""
    a = FileSystemTarget("memory://eq/a", anon=True)
    assert a == FileSystemTarget("memory://eq/a", anon=True)
    assert a != FileSystemTarget("memory://eq/a")
    assert a != FileSystemTarget("memory://eq/b", anon=True)
    assert len({a, FileSystemTarget("memory://eq/a", anon=True)}) == 1


def test_pickle_round_trip() -> None:
    """A pickled target comes back equal, with a working filesystem."""
    target = FileSystemTarget(f"memory://pickle-{uuid.uuid4().hex}/p.txt")
    with target.open("w") as out:
        out.write("p")
    copy = pickle.loads(pickle.dumps(target))
    assert copy == target
    assert copy.exists()
    target.remove()


def test_missing_fsspec_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without fsspec, creating a target raises MissingExtra naming conveyor[fsspec]."""
    monkeypatch.setitem(sys.modules, "fsspec", None)
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    with pytest.raises(MissingExtra) as info:
        FileSystemTarget("memory://x/y", key=SECRET)
    err = info.value
    assert isinstance(err, ConveyorError) and isinstance(err, ImportError)
    assert "pip install 'conveyor[fsspec]'" in str(err)
    assert err.extra == "fsspec" and err.name == "fsspec"
    assert SECRET not in str(err)


def test_import_conveyor_does_not_import_fsspec() -> None:
    """fsspec is imported only when a FileSystemTarget is created."""
    code = (
        "import sys, conveyor, conveyor.fstargets, conveyor.targets\n"
        "conveyor.LocalTarget, conveyor.build\n"
        "assert 'fsspec' not in sys.modules, 'fsspec imported early'\n"
        "conveyor.fstargets.FileSystemTarget('memory://x')\n"
        "assert 'fsspec' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


# --- a pipeline whose outputs live in S3 ----------------------------------------------------

RUNS: list[str] = []  # meaningful under the inline executor only


def _s3_target(endpoint: str, prefix: str, name: str) -> FileSystemTarget:
    # from parameters only: a fork server or a subprocess child does not share test globals
    return FileSystemTarget(f"s3://{BUCKET}/{prefix}/{name}", **s3_options(endpoint))


class FsExtract(conveyor.Task):
    """Writes the raw data."""

    endpoint = conveyor.Parameter()
    prefix = conveyor.Parameter()

    def output(self) -> FileSystemTarget:
        return _s3_target(self.endpoint, self.prefix, "raw.txt")

    def run(self) -> None:
        RUNS.append("extract")
        with self.output().open("w") as out:
            out.write("a\nb\nc\n")


class FsTransform(conveyor.Task):
    """Upper-cases the raw data."""

    endpoint = conveyor.Parameter()
    prefix = conveyor.Parameter()

    def requires(self) -> FsExtract:
        return FsExtract(endpoint=self.endpoint, prefix=self.prefix)

    def output(self) -> FileSystemTarget:
        return _s3_target(self.endpoint, self.prefix, "upper.txt")

    def run(self) -> None:
        RUNS.append("transform")
        with self.input().open("r") as src, self.output().open("w") as out:
            out.write(src.read().upper())


class FsReport(conveyor.Task):
    """Counts the lines, written by a 'tool' through temporary_path()."""

    endpoint = conveyor.Parameter()
    prefix = conveyor.Parameter()

    def requires(self) -> dict[str, conveyor.Task]:
        params = {"endpoint": self.endpoint, "prefix": self.prefix}
        return {"raw": FsExtract(**params), "upper": FsTransform(**params)}

    def output(self) -> FileSystemTarget:
        return _s3_target(self.endpoint, self.prefix, "report.txt")

    def run(self) -> None:
        RUNS.append("report")
        with self.input()["upper"].open("r") as src:
            lines = src.read().splitlines()
        with self.output().temporary_path() as tmp:
            Path(tmp).write_text(f"{len(lines)} {lines[0]}\n", encoding="utf-8")


@pytest.fixture
def s3_pipeline(s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh prefix for the pipeline's outputs; run in tmp_path (no ./worker.toml)."""
    monkeypatch.chdir(tmp_path)
    RUNS.clear()
    yield f"pipe-{uuid.uuid4().hex}"
    RUNS.clear()


def test_pipeline_in_s3_runs_then_is_complete(s3: S3, s3_pipeline: str) -> None:
    """build() runs the three tasks into S3; a rerun finds them complete and runs nothing."""
    prefix = s3_pipeline
    root = FsReport(endpoint=s3.endpoint, prefix=prefix)
    first = conveyor.build(root)
    assert first.ok, first.summary
    assert RUNS == ["extract", "transform", "report"]
    assert set(first.states.values()) == {"DONE"} and len(first.states) == 3
    assert s3.keys(prefix) == [f"{prefix}/{n}" for n in ("raw.txt", "report.txt", "upper.txt")]
    with root.output().open("r") as f:
        assert f.read() == "3 A\n"

    RUNS.clear()
    again = conveyor.build(root)
    assert again.ok and again.exit_code == 0
    assert RUNS == []
    assert again.states == {root.task_id: "DONE"}
    assert "already complete" in again.summary


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_pipeline_in_s3_under_the_fork_executor(s3: S3, s3_pipeline: str) -> None:
    """Tasks run in forked children write to S3, and the worker sees their outputs."""
    prefix = s3_pipeline
    root = FsReport(endpoint=s3.endpoint, prefix=prefix)
    first = conveyor.build(root, executor="fork", workers=2)
    assert first.ok, first.summary
    assert s3.keys(prefix) == [f"{prefix}/{n}" for n in ("raw.txt", "report.txt", "upper.txt")]
    with root.output().open("r") as f:
        assert f.read() == "3 A\n"
    again = conveyor.build(root, executor="fork", workers=2)
    assert again.ok and "already complete" in again.summary
    assert again.states == {root.task_id: "DONE"}


def _write_in_child(target: FileSystemTarget) -> None:
    with target.open("w") as out:
        out.write(f"child {os.getpid()}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_s3_target_made_before_a_fork_works_in_the_child(s3: S3) -> None:
    """A target whose (async, not fork-safe) filesystem was used in the parent writes from a
    forked child: the child makes its own filesystem."""
    import multiprocessing

    target = FileSystemTarget(f"s3://{BUCKET}/fork-{uuid.uuid4().hex}/f.txt", **s3.options)
    assert not target.exists()  # the parent's filesystem is now in use
    child = multiprocessing.get_context("fork").Process(target=_write_in_child, args=(target,))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    with target.open("r") as f:
        assert f.read() == f"child {child.pid}"


class FsMemLeaf(conveyor.Task):
    """Writes one line to memory://."""

    prefix = conveyor.Parameter()

    def output(self) -> FileSystemTarget:
        return FileSystemTarget(f"memory://{self.prefix}/leaf.txt")

    def run(self) -> None:
        with self.output().open("w") as out:
            out.write("leaf")


class FsMemTop(conveyor.Task):
    """Copies the leaf's line."""

    prefix = conveyor.Parameter()

    def requires(self) -> FsMemLeaf:
        return FsMemLeaf(prefix=self.prefix)

    def output(self) -> FileSystemTarget:
        return FileSystemTarget(f"memory://{self.prefix}/top.txt")

    def run(self) -> None:
        with self.input().open("r") as src, self.output().open("w") as out:
            out.write(src.read() + "+top")


def test_pipeline_on_memory_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """memory:// targets work as task outputs under the default (inline) executor."""
    monkeypatch.chdir(tmp_path)
    prefix = f"mem-{uuid.uuid4().hex}"
    result = conveyor.build(FsMemTop(prefix=prefix))
    assert result.ok, result.summary
    with FsMemTop(prefix=prefix).output().open("r") as f:
        assert f.read() == "leaf+top"
    assert conveyor.build(FsMemTop(prefix=prefix)).states == {
        FsMemTop(prefix=prefix).task_id: "DONE"
    }
    FileSystemTarget(f"memory://{prefix}").remove()


# --- LocalTarget.temporary_path -------------------------------------------------------------


def _leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if ".conveyor-tmp-" in name]


def test_local_temporary_path_is_hidden_beside_the_target(tmp_path: Path) -> None:
    """The temporary path is absolute, hidden, in the target's directory, keeps the extension,
    does not exist yet, and is renamed over the target on a clean exit."""
    target = LocalTarget(tmp_path / "out" / "data.parquet")
    with target.temporary_path() as tmp:
        assert os.path.isabs(tmp)
        assert os.path.dirname(tmp) == str(tmp_path / "out")  # created on entry
        assert os.path.basename(tmp).startswith(".data.parquet.conveyor-tmp-")
        assert tmp.endswith(".parquet")
        assert not os.path.exists(tmp)
        Path(tmp).write_bytes(b"PAR1")
        assert not target.exists()
    assert Path(target.path).read_bytes() == b"PAR1"
    assert _leftovers(tmp_path / "out") == []


def test_local_temporary_path_written_by_a_subprocess(tmp_path: Path) -> None:
    """A real external tool writing the temporary path produces the target."""
    target = LocalTarget(tmp_path / "tool.txt")
    with target.temporary_path() as tmp:
        code = "import sys; open(sys.argv[1], 'w').write('from tool')"
        subprocess.run([sys.executable, "-c", code, tmp], check=True, timeout=30)
    assert Path(target.path).read_text() == "from tool"


def test_local_temporary_path_exception_keeps_the_target(tmp_path: Path) -> None:
    """On an exception the temporary file is removed and an existing target is unchanged."""
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(Boom), LocalTarget(path).temporary_path() as tmp:
        Path(tmp).write_text("new")
        raise Boom
    assert path.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_local_temporary_path_replaces_a_file(tmp_path: Path) -> None:
    """A clean exit replaces an existing file, like open('w')."""
    path = tmp_path / "out.txt"
    path.write_text("old")
    with LocalTarget(path).temporary_path() as tmp:
        Path(tmp).write_text("new")
    assert path.read_text() == "new"


def test_local_temporary_path_nothing_written(tmp_path: Path) -> None:
    """A clean exit without a file at the temporary path raises FileNotFoundError naming it."""
    target = LocalTarget(tmp_path / "missing.txt")
    with (
        pytest.raises(FileNotFoundError, match=r"LocalTarget\('.*missing\.txt'\)"),
        target.temporary_path(),
    ):
        pass
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def test_local_temporary_path_directory(tmp_path: Path) -> None:
    """A directory target keeps its trailing separator; the tool's directory is renamed."""
    target = LocalTarget(str(tmp_path / "tree") + os.sep)
    with target.temporary_path() as tmp:
        assert tmp.endswith(os.sep)
        os.makedirs(os.path.join(tmp, "sub"))
        Path(tmp, "sub", "f.txt").write_text("f")
    assert (tmp_path / "tree" / "sub" / "f.txt").read_text() == "f"
    assert _leftovers(tmp_path) == []


def test_local_temporary_path_directory_over_existing(tmp_path: Path) -> None:
    """A directory is not merged into an existing target: FileExistsError, temp removed."""
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "old.txt").write_text("old")
    with (
        pytest.raises(FileExistsError, match="already exists"),
        LocalTarget(tmp_path / "tree").temporary_path() as tmp,
    ):
        os.mkdir(tmp)
        Path(tmp, "new.txt").write_text("new")
    assert os.listdir(tmp_path / "tree") == ["old.txt"]
    assert _leftovers(tmp_path) == []


def test_local_temporary_path_exception_removes_a_directory(tmp_path: Path) -> None:
    """On an exception a directory the tool made is removed whole."""
    target = LocalTarget(tmp_path / "tree")
    with pytest.raises(Boom), target.temporary_path() as tmp:
        os.makedirs(os.path.join(tmp, "sub"))
        Path(tmp, "sub", "f.txt").write_text("f")
        raise Boom
    assert os.listdir(tmp_path) == []


def test_local_temporary_paths_are_unique(tmp_path: Path) -> None:
    """Nested temporary_path() calls on one target yield different paths; both commit."""
    target = LocalTarget(tmp_path / "x.txt")
    with target.temporary_path() as outer:
        with target.temporary_path() as inner:
            assert inner != outer
            Path(inner).write_text("inner")
        Path(outer).write_text("outer")
    assert Path(target.path).read_text() == "outer"
