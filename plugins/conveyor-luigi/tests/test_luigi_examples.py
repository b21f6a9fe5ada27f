"""Luigi's own example pipelines, unmodified, run by ``conveyor run`` and by Luigi: same files.

Each example of Luigi's sdist (see :mod:`luigi_examples_fixture`) runs once under
``python -m luigi --local-scheduler`` and once per executor under ``conveyor run`` (inline and
subprocess; the quick examples also thread and fork) — real subprocesses in fresh directories
— and every output file must be byte for byte the same. conveyor must exit 0, log Luigi's own
task ids and families, and name the tasks in its summary by Luigi's repr.

- ``wordcount``: its inputs (``/var/tmp/text/<date>.txt``) are written by the test; its
  output is hard-coded under ``/var/tmp/text-count``.
- ``top_artists`` (``Top10Artists`` over ``AggregateArtists``, Spark off): its ``Streams``
  inputs are random, so Luigi's run makes them once and the same files are copied into each
  conveyor directory before conveyor runs the downstream tasks.
- ``dynamic_requirements``: ``Configuration`` seeds Python's ``random`` with the ``seed``
  parameter, so its output (and which ``Data`` tasks ``Dynamic`` yields) is fixed by the seed;
  every output is compared. Seed 31 yields the fewest ``Data`` tasks (7), each sleeping 1 s.
- ``foo``: a WrapperTask needing ten ``Bar`` tasks; ``Bar.output()`` sleeps 1 s per call.

The examples that hard-code ``/tmp`` or ``/var/tmp`` paths run while those paths are claimed
(:class:`luigi_examples_fixture.SharedPaths`); what a run writes there is moved into its own
directory before the next run.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from luigi_examples_fixture import (
    MISSING_DATA_LUIGI,
    LuigiExamples,
    SharedPaths,
    describe,
    files_under,
    log_records,
    luigi_examples_fixture,  # noqa: F401  (the session fixture luigi_examples)
    luigi_task_ids,
    run_conveyor,
    run_luigi,
)

pytestmark = pytest.mark.timeout(900)

# (executor, workers): the slow examples run under inline and subprocess, the quick ones
# under every executor of the core
EXECUTORS = [pytest.param("inline", 1, id="inline"), pytest.param("subprocess", 2, id="subprocess")]
ALL_EXECUTORS = [
    *EXECUTORS,
    pytest.param("thread", 2, id="thread"),
    pytest.param("fork", 2, id="fork"),
]

# dates nobody else uses, in case a path under /var/tmp is shared with other programs
INTERVAL = "2417-03-01-2417-03-04"  # Luigi's custom interval: 1, 2 and 3 March
DATES = ["2417-03-01", "2417-03-02", "2417-03-03"]
WORDCOUNT_INPUTS = [Path(f"/var/tmp/text/{d}.txt") for d in DATES]
WORDCOUNT_OUTPUT = Path(f"/var/tmp/text-count/{INTERVAL}")
WORDS = [
    "the quick brown fox jumps over the lazy dog\nthe dog sleeps\n",
    "a fox is quick\n\n  a dog is lazy  \nfox fox fox\n",
    "über naïve café the end\n",
]

TOP_INTERVAL = "2417-04-01-2417-04-03"  # 1 and 2 April

SEED = 31
DYNAMIC_PATHS = [
    Path(f"/tmp/Config_{SEED}.txt"),
    Path(f"/tmp/Dynamic_{SEED}.txt"),
    *(Path(f"/tmp/Data_{n}.txt") for n in range(300)),  # Configuration picks among 0..299
]

FOO_PATH = Path("/tmp/bar")


@dataclass(frozen=True)
class LuigiRun:
    """What ``python -m luigi`` made of one example: its process and its output files."""

    done: subprocess.CompletedProcess[str]
    outputs: dict[str, bytes]
    directory: Path


def assert_luigi_succeeded(done: subprocess.CompletedProcess[str]) -> None:
    """Luigi exited 0 (failures have non-zero codes here) and said all went well."""
    assert done.returncode == 0, describe(done)
    assert "This progress looks :)" in done.stdout + done.stderr, describe(done)


def assert_conveyor_ran(
    done: subprocess.CompletedProcess[str],
    ids: dict[str, dict[str, str]],
    ran: set[str],
    executor: str,
) -> list[dict[str, Any]]:
    """``conveyor run`` exited 0; each of Luigi's task ``ids`` is named by its log with Luigi's
    family, those in ``ran`` started under ``executor`` and succeeded (the others were found
    complete), and the summary counts them by family and names them as Luigi does (its repr;
    the summary shows labels, the log the ids). The log records."""
    assert done.returncode == 0, describe(done)
    records = log_records(done)
    named = {r["task_id"]: r.get("family") for r in records if r.get("task_id")}
    for task_id, luigi_task in ids.items():
        assert task_id in named, f"{task_id} not in conveyor's log\n{describe(done)}"
        assert named[task_id] == luigi_task["family"], describe(done)
    succeeded = {r["task_id"] for r in records if r["event"] == "task_succeeded"}
    assert succeeded == ran, describe(done)
    started = {r["task_id"]: r.get("executor") for r in records if r["event"] == "task_started"}
    assert started == dict.fromkeys(ran, executor), describe(done)
    summary = done.stdout
    assert f"Scheduled {len(ids)} task(s)" in summary, describe(done)
    assert f"* {len(ran)} ran successfully" in summary, describe(done)
    families: dict[str, list[str]] = {}
    for luigi_task in ids.values():
        families.setdefault(luigi_task["family"], []).append(luigi_task["repr"])
    for family, reprs in families.items():
        assert f" {len(reprs)} {family}: " in summary, f"{family} not counted\n{summary}"
        if len(reprs) <= 5:  # the summary names up to 5 tasks of a family: by Luigi's repr
            for text in reprs:
                label = text.removesuffix("()")  # a task without parameters: its family
                assert label in summary, f"{label} not in the summary\n{summary}"
    return records


# --- wordcount ------------------------------------------------------------------------------


def write_wordcount_inputs() -> None:
    """The three input files WordCount expects for INTERVAL."""
    for path, text in zip(WORDCOUNT_INPUTS, WORDS, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def luigi_wordcount(
    luigi_examples: LuigiExamples, tmp_path_factory: pytest.TempPathFactory
) -> LuigiRun:
    """Luigi's run of ``WordCount`` over three days of text written by the test."""
    directory = tmp_path_factory.mktemp("luigi-wordcount")
    with SharedPaths([*WORDCOUNT_INPUTS, WORDCOUNT_OUTPUT], luigi_examples.marker) as shared:
        write_wordcount_inputs()
        done = run_luigi(
            luigi_examples,
            directory / "cwd",
            "wordcount",
            ["WordCount", "--date-interval", INTERVAL],
        )
        moved = shared.collect(directory / "out", only=[WORDCOUNT_OUTPUT])
    assert_luigi_succeeded(done)
    assert moved == [WORDCOUNT_OUTPUT.name]
    return LuigiRun(done, files_under(directory / "out"), directory)


@pytest.mark.parametrize(("executor", "workers"), ALL_EXECUTORS)
def test_wordcount(
    luigi_examples: LuigiExamples,
    luigi_wordcount: LuigiRun,
    tmp_path: Path,
    executor: str,
    workers: int,
) -> None:
    """Luigi's wordcount example under conveyor counts the words into the same bytes."""
    words = ["WordCount", "--date-interval", INTERVAL]
    ids = luigi_task_ids(luigi_examples, tmp_path / "ids", "wordcount", [words])
    with SharedPaths([*WORDCOUNT_INPUTS, WORDCOUNT_OUTPUT], luigi_examples.marker) as shared:
        write_wordcount_inputs()
        done = run_conveyor(luigi_examples, tmp_path / "cwd", "wordcount", words, executor, workers)
        shared.collect(tmp_path / "out", only=[WORDCOUNT_OUTPUT])
    ran = {i for i, t in ids.items() if t["family"] == "WordCount"}
    assert len(ids) == 4 and len(ran) == 1  # three InputText, found complete
    assert_conveyor_ran(done, ids, ran, executor)
    assert "* 3 were already complete" in done.stdout, describe(done)
    assert files_under(tmp_path / "out") == luigi_wordcount.outputs
    counts = luigi_wordcount.outputs[WORDCOUNT_OUTPUT.name].decode().splitlines()
    assert "fox\t5" in counts and "the\t4" in counts  # the comparison compared something


def test_wordcount_missing_input_is_missing_data(
    luigi_examples: LuigiExamples, tmp_path: Path
) -> None:
    """Without its input files, wordcount stops with missing external data under conveyor
    (exit 4, Luigi's InputText ids named) as under Luigi, and writes nothing."""
    words = ["WordCount", "--date-interval", INTERVAL]
    ids = luigi_task_ids(luigi_examples, tmp_path / "ids", "wordcount", [words])
    with SharedPaths([*WORDCOUNT_INPUTS, WORDCOUNT_OUTPUT], luigi_examples.marker):
        luigi_done = run_luigi(luigi_examples, tmp_path / "luigi", "wordcount", words)
        done = run_conveyor(luigi_examples, tmp_path / "cwd", "wordcount", words, "inline")
        assert not WORDCOUNT_OUTPUT.exists()
    assert luigi_done.returncode == MISSING_DATA_LUIGI, describe(luigi_done)
    assert done.returncode == 4, describe(done)  # conveyor's exit code for missing external data
    missing = [i for i, t in ids.items() if t["family"] == "InputText"]
    assert len(missing) == 3
    logged = {r.get("task_id") for r in log_records(done)}
    assert set(missing) <= logged, describe(done)


# --- top_artists ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def luigi_top_artists(
    luigi_examples: LuigiExamples, tmp_path_factory: pytest.TempPathFactory
) -> LuigiRun:
    """Luigi's run of ``Top10Artists`` (local files, no Spark), random Streams included."""
    directory = tmp_path_factory.mktemp("luigi-top-artists")
    done = run_luigi(
        luigi_examples, directory, "top_artists", ["Top10Artists", "--date-interval", TOP_INTERVAL]
    )
    assert_luigi_succeeded(done)
    return LuigiRun(done, files_under(directory / "data"), directory)


@pytest.mark.parametrize(("executor", "workers"), ALL_EXECUTORS)
def test_top_artists(
    luigi_examples: LuigiExamples,
    luigi_top_artists: LuigiRun,
    tmp_path: Path,
    executor: str,
    workers: int,
) -> None:
    """From the same (random) streams Luigi made, conveyor aggregates and ranks the artists
    into the same bytes, and does not make the streams again."""
    streams = sorted((luigi_top_artists.directory / "data").glob("streams_*"))
    assert [p.name for p in streams] == [
        "streams_2417_04_01_faked.tsv",
        "streams_2417_04_02_faked.tsv",
    ]
    cwd = tmp_path / "cwd"
    (cwd / "data").mkdir(parents=True)
    for path in streams:
        shutil.copyfile(path, cwd / "data" / path.name)
    words = ["Top10Artists", "--date-interval", TOP_INTERVAL]
    ids = luigi_task_ids(luigi_examples, tmp_path / "ids", "top_artists", [words])
    done = run_conveyor(luigi_examples, cwd, "top_artists", words, executor, workers)
    ran = {i for i, t in ids.items() if t["family"] != "Streams"}
    assert len(ids) == 4 and len(ran) == 2
    assert_conveyor_ran(done, ids, ran, executor)
    assert "* 2 were already complete" in done.stdout, describe(done)
    assert files_under(cwd / "data") == luigi_top_artists.outputs
    top = luigi_top_artists.outputs[f"top_artists_{TOP_INTERVAL}.tsv"].decode().splitlines()
    assert len(top) == 10 and top[0].startswith("2417-04-01\t2417-04-03\t")


# --- dynamic_requirements -------------------------------------------------------------------


def dynamic_command_lines(outputs: dict[str, bytes]) -> list[list[str]]:
    """Luigi command lines of every task the Dynamic example ran: the root, its Configuration
    and the Data tasks the configuration names (it yields them from run())."""
    numbers = outputs[f"Config_{SEED}.txt"].decode().split(",")
    return [
        ["Dynamic", "--seed", str(SEED)],
        ["Configuration", "--seed", str(SEED)],
        *(["Data", "--magic-number", n] for n in numbers),
    ]


@pytest.fixture(scope="module")
def luigi_dynamic(
    luigi_examples: LuigiExamples, tmp_path_factory: pytest.TempPathFactory
) -> LuigiRun:
    """Luigi's run of ``Dynamic`` (dynamic dependencies, DynamicRequirements) for SEED."""
    directory = tmp_path_factory.mktemp("luigi-dynamic")
    with SharedPaths(DYNAMIC_PATHS, luigi_examples.marker) as shared:
        done = run_luigi(
            luigi_examples,
            directory / "cwd",
            "dynamic_requirements",
            ["Dynamic", "--seed", str(SEED)],
        )
        shared.collect(directory / "out")
    assert_luigi_succeeded(done)
    return LuigiRun(done, files_under(directory / "out"), directory)


@pytest.mark.parametrize(("executor", "workers"), EXECUTORS)
def test_dynamic_requirements(
    luigi_examples: LuigiExamples,
    luigi_dynamic: LuigiRun,
    tmp_path: Path,
    executor: str,
    workers: int,
) -> None:
    """Dynamic dependencies yielded from run() — tasks, then luigi.DynamicRequirements with a
    custom completeness check — give conveyor the same files as Luigi."""
    lines = dynamic_command_lines(luigi_dynamic.outputs)
    assert len(lines) == 2 + 7  # SEED's configuration names 7 Data tasks
    ids = luigi_task_ids(luigi_examples, tmp_path / "ids", "dynamic_requirements", lines)
    with SharedPaths(DYNAMIC_PATHS, luigi_examples.marker) as shared:
        done = run_conveyor(
            luigi_examples,
            tmp_path / "cwd",
            "dynamic_requirements",
            ["Dynamic", "--seed", str(SEED)],
            executor,
            workers,
        )
        shared.collect(tmp_path / "out")
    assert_conveyor_ran(done, ids, set(ids), executor)
    assert files_under(tmp_path / "out") == luigi_dynamic.outputs
    assert luigi_dynamic.outputs[f"Dynamic_{SEED}.txt"] == b"Tada!"


# --- foo (a WrapperTask) --------------------------------------------------------------------


@pytest.fixture(scope="module")
def luigi_foo(luigi_examples: LuigiExamples, tmp_path_factory: pytest.TempPathFactory) -> LuigiRun:
    """Luigi's run of the ``examples.Foo`` WrapperTask (two workers, as its docstring says)."""
    directory = tmp_path_factory.mktemp("luigi-foo")
    with SharedPaths([FOO_PATH], luigi_examples.marker) as shared:
        done = run_luigi(luigi_examples, directory / "cwd", "foo", ["examples.Foo"], workers=2)
        shared.collect(directory / "out")
    assert_luigi_succeeded(done)
    return LuigiRun(done, files_under(directory / "out"), directory)


# (its Bar.output() sleeps a second, and conveyor asks for outputs more often than Luigi
# does: one executor, with workers to overlap the sleeps, keeps this test to about 30 s)
@pytest.mark.parametrize(("executor", "workers"), [pytest.param("subprocess", 4, id="subprocess")])
def test_foo_wrapper_task(
    luigi_examples: LuigiExamples,
    luigi_foo: LuigiRun,
    tmp_path: Path,
    executor: str,
    workers: int,
) -> None:
    """A namespaced WrapperTask (``examples.Foo``) and its ten Bars: the same files, the
    wrapper's own run() called, Luigi's ids and families in conveyor's log and summary."""
    ids = luigi_task_ids(luigi_examples, tmp_path / "ids", "foo", [["examples.Foo"]])
    with SharedPaths([FOO_PATH], luigi_examples.marker) as shared:
        done = run_conveyor(
            luigi_examples, tmp_path / "cwd", "foo", ["examples.Foo"], executor, workers
        )
        shared.collect(tmp_path / "out")
    assert len(ids) == 11
    assert_conveyor_ran(done, ids, set(ids), executor)
    assert files_under(tmp_path / "out") == luigi_foo.outputs
    assert sorted(luigi_foo.outputs) == [f"bar/{n}" for n in sorted(map(str, range(10)))]
    assert "Running Foo" in luigi_foo.done.stdout
    assert "Running Foo" in done.stdout + done.stderr, describe(done)
