"""``conveyor invalidate`` and ``conveyor.invalidate`` (issue 26): outputs removed through
``remove()``, downstream within a root's graph, on local files and on S3 (moto on loopback);
the command always run as a real subprocess, its question asked on a real pseudo-terminal.
"""

from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor.control.invalidate import GraphError, Invalidation, NotInGraph
from conveyor.fstargets import FileSystemTarget
from s3_support import moto_s3

WriteModule = Callable[..., str]  # the task_module fixture (conftest.py)

# A chain Raw -> First -> Second -> Third -> Fourth -> Root, with Side needed by Third and
# Root: invalidating First downstream of Root removes First..Root (5 tasks), never Raw or Side.
# Each run() appends a line to runs/<Family>.log; Fourth's output is a directory.
CHAIN = """
import os

import conveyor


class Logged(conveyor.Task):
    base = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.base, "out", type(self).__name__ + ".txt"))

    def run(self):
        os.makedirs(os.path.join(self.base, "runs"), exist_ok=True)
        with open(os.path.join(self.base, "runs", type(self).__name__ + ".log"), "a") as log:
            log.write("ran\\n")
        self.make()

    def make(self):
        with self.output().open("w") as out:
            out.write(type(self).__name__)


class Raw(Logged):
    pass


class Side(Logged):
    pass


class First(Logged):
    def requires(self):
        return Raw(base=self.base)


class Second(Logged):
    def requires(self):
        return First(base=self.base)


class Third(Logged):
    def requires(self):
        return [Second(base=self.base), Side(base=self.base)]


class Fourth(Logged):
    def requires(self):
        return Third(base=self.base)

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.base, "out", "fourth-parts"))

    def make(self):
        with self.output().temporary_path() as tmp:
            os.makedirs(os.path.join(tmp, "sub"))
            for name in ("a.txt", "sub/b.txt"):
                with open(os.path.join(tmp, name), "w") as part:
                    part.write(name)


class Root(Logged):
    def requires(self):
        return {"fourth": Fourth(base=self.base), "side": Side(base=self.base)}


class Lonely(Logged):
    pass


class Broken(Logged):
    def requires(self):
        raise RuntimeError("the catalogue is down")
"""

INVALIDATED = ("First", "Second", "Third", "Fourth", "Root")
KEPT = ("Raw", "Side")


def _cli(
    tmp_path: Path,
    *args: str,
    stdin: int | None = subprocess.DEVNULL,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -m conveyor *args`` in tmp_path (on its PYTHONPATH); stdin is ``stdin``
    (default: /dev/null, not a terminal) or a pipe carrying ``input``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "conveyor", *args],
        cwd=tmp_path,
        env=env,
        stdin=stdin,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _spec(module: str, family: str, base: Path) -> str:
    """``--downstream-of``'s one argument: ``module.Family --base BASE``, quoted for shlex."""
    return shlex.join([f"{module}.{family}", "--base", str(base)])


def _runs(base: Path) -> dict[str, int]:
    """How many times each task of the chain ran (lines of its log)."""
    return {
        name: len((base / "runs" / f"{name}.log").read_text().splitlines())
        if (base / "runs" / f"{name}.log").exists()
        else 0
        for name in (*KEPT, *INVALIDATED)
    }


def _output(base: Path, name: str) -> Path:
    return base / "out" / ("fourth-parts" if name == "Fourth" else f"{name}.txt")


@pytest.fixture
def chain(task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The chain's module, written into tmp_path; the test runs there (no worker.toml)."""
    monkeypatch.chdir(tmp_path)
    return task_module(CHAIN)


# --- the command on local files ---------------------------------------------------------------


@pytest.mark.timeout(120)
def test_downstream_chain_is_removed_and_exactly_it_runs_again(chain: str, tmp_path: Path) -> None:
    """invalidate --downstream-of removes the 5 outputs from First to Root (a directory among
    them), keeps Raw's and Side's, and the next run runs exactly those 5 again."""
    base = tmp_path / "data"
    first = _cli(tmp_path, "run", f"{chain}.Root", "--base", str(base))
    assert first.returncode == 0, first.stderr
    assert _runs(base) == dict.fromkeys((*KEPT, *INVALIDATED), 1)
    assert (_output(base, "Fourth") / "sub" / "b.txt").is_file()

    root = _spec(chain, "Root", base)
    done = _cli(
        tmp_path,
        "invalidate",
        f"{chain}.First",
        "--base",
        str(base),
        "--downstream-of",
        root,
        "--yes",
    )
    assert done.returncode == 0, done.stderr
    for name in INVALIDATED:
        assert not _output(base, name).exists(), name
    for name in KEPT:
        assert _output(base, name).read_text() == name
    listed = [
        line.split()[1] for line in done.stdout.splitlines() if line.strip().startswith("remove")
    ]
    assert listed == [str(_output(base, name)) for name in INVALIDATED]  # dependencies first
    assert "Removed 5 outputs of 5 tasks." in done.stdout

    again = _cli(tmp_path, "run", f"{chain}.Root", "--base", str(base))
    assert again.returncode == 0, again.stderr
    assert _runs(base) == {**dict.fromkeys(KEPT, 1), **dict.fromkeys(INVALIDATED, 2)}
    assert (_output(base, "Fourth") / "a.txt").read_text() == "a.txt"


@pytest.mark.timeout(120)
def test_without_a_terminal_nothing_is_removed_unless_yes(chain: str, tmp_path: Path) -> None:
    """With stdin not a terminal (a pipe saying "y" included) and no --yes: the list, one error
    line naming --yes, exit 2, nothing removed; --dry-run lists and removes nothing either."""
    base = tmp_path / "data"
    assert _cli(tmp_path, "run", f"{chain}.Second", "--base", str(base)).returncode == 0
    second = _spec(chain, "Second", base)
    piped = _cli(
        tmp_path,
        "invalidate",
        f"{chain}.First",
        "--base",
        str(base),
        "--downstream-of",
        second,
        stdin=None,
        input="y\n",
    )
    assert piped.returncode == 2
    [line] = piped.stderr.splitlines()
    assert line.startswith("conveyor: error: ") and "--yes" in line
    assert f"remove    {_output(base, 'First')}" in piped.stdout
    assert _output(base, "First").exists() and _output(base, "Second").exists()

    # (a bare Family for TASK and ROOT, both found through --module)
    second = shlex.join(["Second", "--base", str(base)])
    dry = _cli(
        tmp_path,
        "invalidate",
        "--dry-run",
        "--module",
        chain,
        "First",
        "--base",
        str(base),
        "--downstream-of",
        second,
    )
    assert dry.returncode == 0, dry.stderr
    assert f"remove    {_output(base, 'Second')}" in dry.stdout
    assert "Dry run: nothing removed (2 outputs of 2 tasks would be)." in dry.stdout
    assert _output(base, "First").exists() and _output(base, "Second").exists()


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_the_question_on_a_terminal(chain: str, tmp_path: Path) -> None:
    """On a terminal the command asks "Remove N outputs of M tasks? [y/N]": "n" keeps
    everything (exit 1), "y" removes."""
    base = tmp_path / "data"
    assert _cli(tmp_path, "run", f"{chain}.Second", "--base", str(base)).returncode == 0
    root = "--downstream-of=" + _spec(chain, "Second", base)
    for answer, code in (("n", 1), ("y", 0)):
        leader, follower = os.openpty()
        try:
            os.write(leader, f"{answer}\n".encode())  # held by the terminal until it is read
            done = _cli(
                tmp_path, "invalidate", f"{chain}.First", "--base", str(base), root, stdin=follower
            )
        finally:
            os.close(follower)
            os.close(leader)
        assert done.returncode == code, done.stderr
        assert "Remove 2 outputs of 2 tasks? [y/N]" in done.stderr
        gone = answer == "y"
        assert _output(base, "First").exists() is not gone
        assert _output(base, "Second").exists() is not gone
        assert _output(base, "Raw").exists()


@pytest.mark.timeout(120)
def test_task_not_in_roots_graph_and_broken_graphs(chain: str, tmp_path: Path) -> None:
    """TASK outside ROOT's graph: one error line naming both, exit 2; a requires() that raises
    in ROOT's graph: exit 3; nothing present: "Nothing to remove", exit 0."""
    base = tmp_path / "data"
    outside = _cli(
        tmp_path,
        "invalidate",
        f"{chain}.Lonely",
        "--base",
        str(base),
        "--downstream-of",
        _spec(chain, "Root", base),
        "--yes",
    )
    assert outside.returncode == 2
    [line] = outside.stderr.splitlines()
    assert line.startswith("conveyor: error: ") and "is not in the graph of" in line
    assert "Lonely" in line and "Root" in line

    broken = _cli(
        tmp_path,
        "invalidate",
        f"{chain}.Lonely",
        "--base",
        str(base),
        "--downstream-of",
        _spec(chain, "Broken", base),
        "--yes",
    )
    assert broken.returncode == 3
    [line] = broken.stderr.splitlines()
    assert "requires() of Broken" in line and "RuntimeError: the catalogue is down" in line

    nothing = _cli(
        tmp_path,
        "invalidate",
        f"{chain}.Root",
        "--base",
        str(base),
        "--downstream-of",
        _spec(chain, "Root", base),
    )
    assert nothing.returncode == 0, nothing.stderr
    assert "Nothing to remove" in nothing.stdout

    bad_root = _cli(
        tmp_path,
        "invalidate",
        f"{chain}.First",
        "--base",
        str(base),
        "--downstream-of",
        f"{chain}.Nope",
        "--yes",
    )
    assert bad_root.returncode == 2 and len(bad_root.stderr.splitlines()) == 1
    assert "Traceback" not in bad_root.stderr


STUBBORN = """
import os

import conveyor


class Marker(conveyor.Target):
    '''A target that can only be looked at: no remove().'''

    def __init__(self, path):
        self.path = path

    def exists(self):
        return os.path.exists(self.path)


class Locked(conveyor.LocalTarget):
    '''A target whose remove() fails.'''

    def remove(self):
        raise PermissionError(f"{self.path} is locked")


class Upstream(conveyor.Task):
    base = conveyor.Parameter()

    def output(self):
        return [
            Marker(os.path.join(self.base, "marker")),
            conveyor.LocalTarget(os.path.join(self.base, "plain.txt")),
            Locked(os.path.join(self.base, "locked.txt")),
        ]

    def run(self):
        for target in self.output():
            with open(target.path, "w") as out:
                out.write("x")


class Downstream(conveyor.Task):
    base = conveyor.Parameter()

    def requires(self):
        return Upstream(base=self.base)

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.base, "down.txt"))

    def run(self):
        with self.output().open("w") as out:
            out.write("y")
"""


@pytest.mark.timeout(120)
def test_outputs_that_cannot_be_removed_are_reported(
    task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target without remove() and one whose remove() raises are listed and reported with
    the reason, the others are still removed, and the exit code is 1."""
    monkeypatch.chdir(tmp_path)
    module = task_module(STUBBORN)
    base = tmp_path / "data"
    base.mkdir()
    assert _cli(tmp_path, "run", f"{module}.Downstream", "--base", str(base)).returncode == 0
    done = _cli(
        tmp_path,
        "invalidate",
        f"{module}.Upstream",
        "--base",
        str(base),
        "--yes",
        "--downstream-of",
        _spec(module, "Downstream", base),
    )
    assert done.returncode == 1, done.stderr
    assert not (base / "plain.txt").exists() and not (base / "down.txt").exists()
    assert (base / "marker").exists() and (base / "locked.txt").exists()
    assert f"CANNOT    {base / 'marker'}: it has no remove()" in done.stdout
    assert "Removed 2 outputs of 2 tasks." in done.stdout
    assert "Could not remove 2 outputs:" in done.stdout
    assert f"{base / 'locked.txt'} (" in done.stdout
    assert f"remove() raised PermissionError: {base / 'locked.txt'} is locked" in done.stdout


# --- conveyor.invalidate from Python ----------------------------------------------------------


def test_invalidate_from_python(chain: str, tmp_path: Path) -> None:
    """A dry run removes nothing and says what would go, in order; apply() removes it; without
    downstream_of only the task's own outputs go; NotInGraph names both tasks."""
    module = __import__(chain)
    base = str(tmp_path / "data")
    root = module.Root(base=base)
    assert conveyor.build(root, executor="inline").ok
    first = module.First(base=base)

    preview = conveyor.invalidate(first, downstream_of=root, dry_run=True)
    assert isinstance(preview, Invalidation) and preview.dry_run
    assert [t.family for t in preview.tasks] == list(INVALIDATED)
    assert preview.removed == tuple(str(_output(Path(base), n)) for n in INVALIDATED)
    assert all(_output(Path(base), n).exists() for n in INVALIDATED)
    assert preview.task_id == first.task_id and preview.root_id == root.task_id

    done = preview.apply()
    assert done.ok and not done.dry_run and done.removed == preview.removed
    assert not any(_output(Path(base), n).exists() for n in INVALIDATED)
    assert all(_output(Path(base), n).exists() for n in KEPT)
    assert done.to_json()["tasks"][0]["removed"] == [str(_output(Path(base), "First"))]
    with pytest.raises(ValueError, match="already applied"):
        done.apply()

    again = conveyor.invalidate(first, downstream_of=root)
    assert again.nothing_to_remove and again.ok
    assert again.tasks[0].absent == (str(_output(Path(base), "First")),)

    side = conveyor.invalidate(module.Side(base=base))
    assert [t.family for t in side.tasks] == ["Side"] and side.removed == (
        str(_output(Path(base), "Side")),
    )
    assert not _output(Path(base), "Side").exists() and _output(Path(base), "Raw").exists()

    with pytest.raises(NotInGraph, match="is not in the graph of") as caught:
        conveyor.invalidate(module.Lonely(base=base), downstream_of=root)
    assert caught.value.task_id.startswith("Lonely") and caught.value.root_id == root.task_id
    with pytest.raises(GraphError, match="the catalogue is down"):
        conveyor.invalidate(first, downstream_of=module.Broken(base=base))
    with pytest.raises(TypeError, match="is not a task"):
        conveyor.invalidate("First")


SECRETIVE = """
import os

import conveyor


class External(conveyor.ExternalTask):
    base = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.base, "raw.csv"))


class Upload(conveyor.Task):
    base = conveyor.Parameter()
    api_token = conveyor.Parameter()

    def requires(self):
        return External(base=self.base)

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.base, "sent-" + self.api_token))
"""


def test_external_data_is_kept_and_secrets_are_hidden(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Downstream of an external task, its data stays (listed as external) while what was made
    from it goes; secret-named parameter values never appear in the result."""
    module = __import__(task_module(SECRETIVE))
    secret = "tok-" + uuid.uuid4().hex
    for name in ("raw.csv", f"sent-{secret}"):
        (tmp_path / name).write_text("x")
    upload = module.Upload(base=str(tmp_path), api_token=secret)
    done = conveyor.invalidate(module.External(base=str(tmp_path)), downstream_of=upload)
    assert done.ok
    assert (tmp_path / "raw.csv").exists() and not (tmp_path / f"sent-{secret}").exists()
    assert done.tasks[0].external == (str(tmp_path / "raw.csv"),)
    assert done.removed == (str(tmp_path / "sent-***"),)
    assert secret not in repr(done) and secret not in str(done.to_json())


LUIGI_TASKS = """
import os

import luigi


class Extract(luigi.Task):
    base = luigi.Parameter()

    def output(self):
        return luigi.LocalTarget(os.path.join(self.base, "extract.txt"))

    def run(self):
        with self.output().open("w") as out:
            out.write("x")


class Parts(luigi.Task):
    base = luigi.Parameter()

    def requires(self):
        return Extract(base=self.base)

    def output(self):
        return luigi.LocalTarget(os.path.join(self.base, "parts"))

    def run(self):
        os.makedirs(os.path.join(self.output().path, "sub"))
"""


def test_luigi_tasks(task_module: WriteModule, tmp_path: Path) -> None:
    """luigi.Task objects are walked and their luigi targets removed (a directory too)."""
    pytest.importorskip("luigi")
    module = __import__(task_module(LUIGI_TASKS))
    base = str(tmp_path / "data")
    root = module.Parts(base=base)
    assert conveyor.build(root, executor="inline").ok
    done = conveyor.invalidate(module.Extract(base=base), downstream_of=root)
    assert done.ok and [t.family for t in done.tasks] == ["Extract", "Parts"]
    assert done.removed == (os.path.join(base, "extract.txt"), os.path.join(base, "parts"))
    assert os.listdir(base) == []
    assert conveyor.invalidate(module.Extract(base=base), downstream_of=root).nothing_to_remove


# --- the chain on S3 (moto on loopback) through FileSystemTarget ------------------------------

BUCKET = "conveyor-invalidate"
RUNS: list[str] = []  # what ran, in order (the inline executor runs in this process)


@dataclass(frozen=True)
class S3:
    """A running moto S3 server with one bucket: its endpoint and a boto3 client."""

    endpoint: str
    client: Any

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix``, relative to it (ground truth: not s3fs)."""
        reply = self.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")
        return sorted(item["Key"][len(prefix) + 1 :] for item in reply.get("Contents", []))


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    """A real S3-protocol server (moto) on a free loopback port, with the bucket made."""
    with moto_s3(BUCKET) as (endpoint, client):
        yield S3(endpoint, client)


class OnS3(conveyor.Task):
    """A task of the S3 chain: writes ``<prefix>/<Family>.txt``, records that it ran."""

    endpoint = conveyor.Parameter()
    prefix = conveyor.Parameter()

    def target(self, name: str) -> FileSystemTarget:
        options = {"endpoint_url": self.endpoint, "key": "testing", "secret": "testing"}
        return FileSystemTarget(f"s3://{BUCKET}/{self.prefix}/{name}", **options)

    def output(self) -> FileSystemTarget:
        return self.target(f"{type(self).__name__}.txt")

    def run(self) -> None:
        RUNS.append(type(self).__name__)
        with self.output().open("w") as out:
            out.write(type(self).__name__)

    def same(self, cls: type[OnS3]) -> OnS3:
        return cls(endpoint=self.endpoint, prefix=self.prefix)


class S3Raw(OnS3):
    pass


class S3Side(OnS3):
    pass


class S3First(OnS3):
    def requires(self) -> OnS3:
        return self.same(S3Raw)


class S3Second(OnS3):
    def requires(self) -> OnS3:
        return self.same(S3First)


class S3Third(OnS3):
    """Its output is a directory (a prefix with two objects)."""

    def requires(self) -> list[OnS3]:
        return [self.same(S3Second), self.same(S3Side)]

    def output(self) -> FileSystemTarget:
        return self.target("third-parts")

    def run(self) -> None:
        RUNS.append("S3Third")
        for name in ("a.txt", "sub/b.txt"):
            with self.target(f"third-parts/{name}").open("w") as out:
                out.write(name)


class S3Fourth(OnS3):
    def requires(self) -> OnS3:
        return self.same(S3Third)


class S3Root(OnS3):
    def requires(self) -> list[OnS3]:
        return [self.same(S3Fourth), self.same(S3Side)]


@pytest.mark.timeout(120)
def test_downstream_chain_on_s3(s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On S3: the 5 outputs from S3First to S3Root go (a directory among them), S3Raw's and
    S3Side's stay, and a second build runs exactly those 5 again."""
    monkeypatch.chdir(tmp_path)
    prefix = f"chain-{uuid.uuid4().hex}"
    root = S3Root(endpoint=s3.endpoint, prefix=prefix)
    RUNS.clear()
    assert conveyor.build(root, executor="inline").ok
    assert sorted(RUNS) == sorted(
        ["S3Raw", "S3Side", "S3First", "S3Second", "S3Third", "S3Fourth", "S3Root"]
    )
    assert "third-parts/sub/b.txt" in s3.keys(prefix)

    done = conveyor.invalidate(root.same(S3First), downstream_of=root)
    assert done.ok, done.unremovable
    assert [t.family for t in done.tasks] == [
        "S3First",
        "S3Second",
        "S3Third",
        "S3Fourth",
        "S3Root",
    ]
    assert done.removed[2] == f"s3://{BUCKET}/{prefix}/third-parts"
    assert s3.keys(prefix) == ["S3Raw.txt", "S3Side.txt"]

    RUNS.clear()
    assert conveyor.build(root, executor="inline").ok
    assert RUNS == ["S3First", "S3Second", "S3Third", "S3Fourth", "S3Root"]
    assert "third-parts/a.txt" in s3.keys(prefix)


HALF_GONE = """
import os

import conveyor


class Sticky(conveyor.Target):
    '''A target that can only be looked at: no remove().'''

    def __init__(self, path):
        self.path = path

    def exists(self):
        return os.path.exists(self.path)


class Up(conveyor.Task):
    base = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.base, "up.txt"))

    def run(self):
        with self.output().open("w") as out:
            out.write("u")


class Down(conveyor.Task):
    base = conveyor.Parameter()

    def requires(self):
        return Up(base=self.base)

    def output(self):
        return Sticky(os.path.join(self.base, "down.flag"))

    def run(self):
        with open(self.output().path, "w") as out:
            out.write("d")


class Flagged(conveyor.Task):
    '''No outputs: complete() looks at a flag file of its own.'''

    base = conveyor.Parameter()

    def requires(self):
        return Up(base=self.base)

    def complete(self):
        return os.path.exists(os.path.join(self.base, "flagged.flag"))

    def run(self):
        open(os.path.join(self.base, "flagged.flag"), "w").close()
"""


def test_a_dependent_that_keeps_its_output_keeps_what_it_needs(
    task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dependents go first; one whose output stays keeps the outputs of what it needs too
    (it would be complete over inputs that are gone, and the next run would not notice)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = task_module(HALF_GONE)
    tasks = importlib.import_module(module)
    base = tmp_path / "data"
    base.mkdir()
    assert conveyor.build(tasks.Down(base=str(base)), executor="inline").ok
    done = conveyor.invalidate(tasks.Up(base=str(base)), downstream_of=tasks.Down(base=str(base)))
    assert not done.ok and done.removed == ()
    assert (base / "up.txt").exists() and (base / "down.flag").exists()
    reasons = {u.path: u.reason for u in done.unremovable}
    assert reasons[str(base / "down.flag")] == "it has no remove()"
    assert reasons[str(base / "up.txt")].startswith("kept: the outputs of Down_")
    assert reasons[str(base / "up.txt")].endswith(", which needs it, stay")


def test_a_task_still_complete_without_its_outputs_is_reported(
    task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task whose complete() does not look at its outputs stays complete once they are
    removed: the next run would not run it, so it is reported, never silently kept."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = task_module(HALF_GONE)
    tasks = importlib.import_module(module)
    base = tmp_path / "data"
    base.mkdir()
    assert conveyor.build(tasks.Flagged(base=str(base)), executor="inline").ok
    done = conveyor.invalidate(
        tasks.Up(base=str(base)), downstream_of=tasks.Flagged(base=str(base))
    )
    assert not done.ok
    assert done.removed == (str(base / "up.txt"),)
    [stays] = done.unremovable
    assert stays.path == "(the task)" and stays.task_id.startswith("Flagged_")
    assert "complete() is still True" in stays.reason


SIBLINGS = """
import os

import conveyor

NEEDS = {"root": ["b", "a"], "a": ["t"], "b": ["t"], "t": []}


class Sticky(conveyor.Target):
    '''A target that can only be looked at: no remove().'''

    def __init__(self, path):
        self.path = path

    def exists(self):
        return os.path.exists(self.path)


class Made(conveyor.Task):
    base = conveyor.Parameter()
    name = conveyor.Parameter()

    def requires(self):
        return [Made(base=self.base, name=n) for n in NEEDS[self.name]]

    def output(self):
        path = os.path.join(self.base, self.name)
        return Sticky(path) if self.name == "a" else conveyor.LocalTarget(path)

    def run(self):
        with open(os.path.join(self.base, self.name), "w") as out:
            out.write(self.name)
"""


def test_only_what_a_kept_output_needs_is_kept_and_the_dry_run_says_so(
    task_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T <- A (no remove()), T <- B, Root <- [B, A]: T stays (A, which keeps its output,
    needs it), B and Root go; the dry run promises exactly what the removal does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    made = importlib.import_module(task_module(SIBLINGS)).Made
    base = tmp_path / "data"
    base.mkdir()
    t, a, b, root = (made(base=str(base), name=n) for n in ("t", "a", "b", "root"))
    assert conveyor.build(root, executor="inline").ok
    preview = conveyor.invalidate(t, downstream_of=root, dry_run=True)
    assert set(preview.removed) == {str(base / "b"), str(base / "root")}
    done = preview.apply()
    assert set(done.removed) == set(preview.removed) and not done.ok
    assert sorted(p.name for p in base.iterdir()) == ["a", "t"]
    reasons = {u.path: u.reason for u in done.unremovable}
    assert reasons[str(base / "a")] == "it has no remove()"
    assert reasons[str(base / "t")].startswith(f"kept: the outputs of {a.task_id}")
    assert b.task_id in {x.task_id for x in done.tasks}
