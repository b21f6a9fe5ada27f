"""Tests for conveyor.targets: LocalTarget and its atomic writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conveyor.targets import LocalTarget, Target


class Boom(Exception):
    """Raised inside a with block to simulate a failing task."""


def _leftovers(directory: Path) -> list[str]:
    """Names of conveyor temporary files left in ``directory``."""
    return [name for name in os.listdir(directory) if ".conveyor-tmp-" in name]


def test_target_is_abstract() -> None:
    """Target cannot be instantiated without an exists() implementation."""
    with pytest.raises(TypeError):
        Target()  # type: ignore[abstract]


def test_exists_reflects_the_filesystem(tmp_path: Path) -> None:
    """exists() is False before the file is written and True after."""
    target = LocalTarget(tmp_path / "out.txt")
    assert target.exists() is False
    (tmp_path / "out.txt").write_text("x")
    assert target.exists() is True


def test_text_write_commits_on_clean_exit(tmp_path: Path) -> None:
    """A text write appears at the path, complete, once the with block ends."""
    target = LocalTarget(tmp_path / "out.txt")
    with target.open("w", encoding="utf-8") as f:
        f.write("héllo\n")
        f.writelines(["a\n", "b\n"])
        assert not target.exists()
        assert len(_leftovers(tmp_path)) == 1
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "héllo\na\nb\n"
    assert _leftovers(tmp_path) == []


def test_binary_write_and_read(tmp_path: Path) -> None:
    """Bytes written with 'wb' read back unchanged with 'rb'."""
    target = LocalTarget(tmp_path / "blob.bin")
    data = bytes(range(256)) + b"\r\n\n"
    with target.open("wb") as f:
        assert f.write(data) == len(data)
    with target.open("rb") as f:
        assert f.read() == data


def test_text_read(tmp_path: Path) -> None:
    """'r' opens the file for reading text with the given encoding."""
    (tmp_path / "in.txt").write_bytes("ünï\n".encode())
    with LocalTarget(tmp_path / "in.txt").open("r", encoding="utf-8") as f:
        assert f.read() == "ünï\n"


def test_exception_leaves_no_file_and_no_temp(tmp_path: Path) -> None:
    """An exception inside the with block removes the temporary file and never creates the path."""
    target = LocalTarget(tmp_path / "out.txt")
    with pytest.raises(Boom), target.open("w") as f:
        f.write("partial")
        raise Boom
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def test_exception_leaves_existing_file_untouched(tmp_path: Path) -> None:
    """A failed rewrite keeps the previous content of the path."""
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(Boom), LocalTarget(path).open("w") as f:
        f.write("new")
        raise Boom
    assert path.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_successful_rewrite_replaces_content(tmp_path: Path) -> None:
    """A clean rewrite replaces the previous content entirely."""
    path = tmp_path / "out.txt"
    path.write_text("old and longer")
    with LocalTarget(path).open("w") as f:
        f.write("new")
    assert path.read_text() == "new"


def test_parent_directories_are_created(tmp_path: Path) -> None:
    """Writing creates missing parent directories and puts the temp file next to the path."""
    target = LocalTarget(tmp_path / "a" / "b" / "out.txt")
    with target.open("w") as f:
        assert os.path.dirname(f.tmp_path) == str(tmp_path / "a" / "b")
        assert os.path.basename(f.tmp_path).startswith(".out.txt.conveyor-tmp-")
        f.write("x")
    assert (tmp_path / "a" / "b" / "out.txt").read_text() == "x"


def test_explicit_close_commits(tmp_path: Path) -> None:
    """close() without a with block commits, and a second close() is harmless."""
    target = LocalTarget(tmp_path / "out.txt")
    f = target.open("w")
    f.write("done")
    f.close()
    f.close()
    assert f.closed
    assert (tmp_path / "out.txt").read_text() == "done"


def test_discard_drops_the_data(tmp_path: Path) -> None:
    """discard() removes the temporary file; a later close() does not commit."""
    target = LocalTarget(tmp_path / "out.txt")
    f = target.open("wb")
    f.write(b"x")
    f.discard()
    f.close()
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def test_committed_file_gets_umask_permissions(tmp_path: Path) -> None:
    """The committed file has the permissions a plain open() would give, not mkstemp's 0600."""
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    target = LocalTarget(tmp_path / "atomic.txt")
    with target.open("w") as f:
        f.write("x")
    assert stat.S_IMODE(os.stat(target.path).st_mode) == stat.S_IMODE(plain.stat().st_mode)


@pytest.mark.parametrize("mode", ["a", "r+", "x", "w+", "rt", ""])
def test_invalid_mode_is_rejected(tmp_path: Path, mode: str) -> None:
    """open() with an unsupported mode raises ValueError naming it and the allowed modes."""
    target = LocalTarget(tmp_path / "out.txt")
    with pytest.raises(ValueError) as info:
        target.open(mode)
    message = str(info.value)
    assert repr(mode) in message
    assert "'r', 'rb', 'w', 'wb'" in message
    assert os.listdir(tmp_path) == []


def test_binary_mode_refuses_an_encoding(tmp_path: Path) -> None:
    """open('wb', encoding=...) is an error and creates no temporary file."""
    with pytest.raises(ValueError, match="takes no encoding"):
        LocalTarget(tmp_path / "out.bin").open("wb", encoding="utf-8")
    assert os.listdir(tmp_path) == []


def test_remove_deletes_file_and_ignores_missing(tmp_path: Path) -> None:
    """remove() deletes the file, and calling it again when it is gone is not an error."""
    path = tmp_path / "out.txt"
    path.write_text("x")
    target = LocalTarget(path)
    target.remove()
    assert not path.exists()
    target.remove()
    assert not target.exists()


def test_remove_deletes_a_directory_tree(tmp_path: Path) -> None:
    """remove() deletes a directory target with its content."""
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "f").write_text("x")
    LocalTarget(tmp_path / "d").remove()
    assert not (tmp_path / "d").exists()


def test_equality_hash_repr_and_fspath() -> None:
    """LocalTargets with the same path are equal and hash equal; repr and fspath show the path."""
    one, two = LocalTarget("data/x.csv"), LocalTarget(Path("data/x.csv"))
    assert one == two
    assert hash(one) == hash(two)
    assert one != LocalTarget("data/y.csv")
    assert one.path == "data/x.csv"
    assert os.fspath(one) == "data/x.csv"
    assert repr(one) == "LocalTarget('data/x.csv')"


def test_dropped_writer_is_discarded(tmp_path: Path) -> None:
    """A writer garbage-collected without close() leaves neither the path nor a temp file."""
    target = LocalTarget(tmp_path / "out.txt")
    f = target.open("w")
    f.write("x")
    del f
    assert os.listdir(tmp_path) == []
