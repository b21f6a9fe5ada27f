"""Luigi's own example pipelines, as Luigi publishes them, and the means to run them twice.

Luigi's ``examples/`` directory is not in its wheel, only in its source distribution on PyPI.
The session fixture ``luigi_examples`` (:func:`luigi_examples_fixture`) downloads the sdist of
the installed Luigi version with pip (or takes the file named by ``CONVEYOR_LUIGI_SDIST``, for
machines without network) and extracts only ``examples/*.py`` into a session directory, byte
for byte: nothing of Luigi's code is kept in this repository, and the tests run the files
exactly as downloaded.

Each example is run by ``python -m luigi --local-scheduler`` and by ``conveyor run`` (real
subprocesses, each in a fresh directory with the extracted ``examples`` package on
``PYTHONPATH``). Some examples hard-code absolute paths outside their working directory
(``/tmp/bar``, ``/tmp/Data_<n>.txt``, ``/var/tmp/text-count/...``); :class:`SharedPaths`
claims such paths under an exclusive lock, refuses to run if one already exists (it never
overwrites what someone else made), moves what a run wrote into that run's own directory and
removes whatever is left at the end.

Every process started here carries a session marker variable; whatever still carries it at the
end of the session is killed, so a test that times out leaves no orphan behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from conveyor.testing.processes import child_env, json_lines, kill_marked

SDIST_VARIABLE = "CONVEYOR_LUIGI_SDIST"
LUIGI_VERSION = version("luigi")  # the installed Luigi, whose examples are fetched
MARKER_VARIABLE = "CONVEYOR_LUIGI_EXAMPLES_TEST"
# generous: each Python start can take 2 s on a slow CI machine, and the examples sleep
RUN_TIMEOUT = 400.0
# the shared paths' lock: a directory in the temporary directory, flocked (never a file that
# another user's session could own)
LOCK_DIRECTORY = "conveyor-luigi-examples"

MISSING_DATA_LUIGI = 22
# Luigi's exit code is 0 even when a task failed unless these are set: make failures visible.
LUIGI_RETCODES = (
    "--retcode-already-running",
    "21",
    "--retcode-missing-data",
    str(MISSING_DATA_LUIGI),
    "--retcode-not-run",
    "23",
    "--retcode-task-failed",
    "24",
    "--retcode-scheduling-error",
    "25",
    "--retcode-unhandled-exception",
    "26",
)

# Run in a fresh interpreter with the examples on PYTHONPATH: the Luigi task ids (and reprs)
# of the tasks each given Luigi command line names, and of everything they require statically.
_TASK_IDS_SCRIPT = """
import json, sys
import luigi.task
from luigi.cmdline_parser import CmdlineParser

found = {}
for words in json.loads(sys.argv[1]):
    with CmdlineParser.global_instance(words) as parser:
        todo = [parser.get_task_obj()]
    while todo:
        task = todo.pop()
        if task.task_id not in found:
            found[task.task_id] = {"family": task.task_family, "repr": repr(task)}
            todo.extend(luigi.task.flatten(task.requires()))
print(json.dumps(found))
"""


@dataclass(frozen=True)
class LuigiExamples:
    """Luigi's ``examples`` package as extracted from its sdist, and the session's marker."""

    root: Path
    """The directory holding the ``examples`` package: what goes on ``PYTHONPATH``."""
    sdist: Path
    """The source distribution the files came from."""
    marker: str
    """The value of :data:`MARKER_VARIABLE` every process started for these tests carries."""

    def env(self) -> dict[str, str]:
        """The environment of a child process: no ``CONVEYOR_*``/``LUIGI_CONFIG_PATH``
        variables, the examples first on ``PYTHONPATH``, the session marker set."""
        env = child_env(self.root, MARKER_VARIABLE, self.marker)
        env.pop("LUIGI_CONFIG_PATH", None)
        return env

    def source(self, module: str) -> bytes:
        """The bytes of ``examples/<module>.py`` as extracted."""
        return (self.root / "examples" / f"{module}.py").read_bytes()


def fetch_sdist(directory: Path) -> Path:
    """The sdist of the installed Luigi: ``$CONVEYOR_LUIGI_SDIST`` when set, else downloaded
    into ``directory`` by pip. When that is impossible the tests are skipped, saying why, or
    fail when the variable ``CI`` is set (a CI machine must have the sdist)."""
    local = os.environ.get(SDIST_VARIABLE)
    if local:
        if not Path(local).is_file():
            pytest.fail(f"{SDIST_VARIABLE}={local} is not a file", pytrace=False)
        return Path(local)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"luigi=={LUIGI_VERSION}",
        "--no-binary",
        ":all:",
        "--no-deps",
        "-d",
        str(directory),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    found = sorted(directory.glob("luigi-*.tar.gz"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        why = (
            f"cannot download luigi {LUIGI_VERSION}'s sdist from the package index ({last}); "
            f"set {SDIST_VARIABLE} to a local luigi-{LUIGI_VERSION}.tar.gz"
        )
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return found[0]


def extract_examples(sdist: Path, target: Path) -> Path:
    """Write the ``examples/*.py`` files of ``sdist`` unchanged into ``target/examples`` (only
    their base names are used, so no member can land outside ``target``); ``target``."""
    package = target / "examples"
    package.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) == 3 and parts[1] == "examples" and parts[2].endswith(".py"):
                stream = archive.extractfile(member)
                if member.isfile() and stream is not None:
                    (package / parts[2]).write_bytes(stream.read())
    if not (package / "__init__.py").is_file():
        pytest.fail(f"{sdist.name} has no examples/__init__.py", pytrace=False)
    return target


@pytest.fixture(scope="session", name="luigi_examples")
def luigi_examples_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LuigiExamples]:
    """Luigi's examples of the installed Luigi version, extracted once per session."""
    sdist = fetch_sdist(tmp_path_factory.mktemp("luigi-sdist"))
    if f"luigi-{LUIGI_VERSION}.tar.gz" != sdist.name:
        pytest.fail(f"{sdist} is not luigi {LUIGI_VERSION}'s sdist", pytrace=False)
    root = extract_examples(sdist, tmp_path_factory.mktemp("luigi-examples"))
    examples = LuigiExamples(root=root, sdist=sdist, marker=uuid.uuid4().hex)
    try:
        yield examples
    finally:
        kill_marked(MARKER_VARIABLE, examples.marker)


def _run(
    examples: LuigiExamples, cwd: Path, command: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``cwd`` (created if needed) with the examples' environment, in a
    session of its own: its whole process group is killed when it ends or times out (``luigi
    --workers 2`` forks workers that would outlive their parent); TimeoutExpired then."""
    cwd.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        list(command),
        cwd=cwd,
        env=examples.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.communicate()
            raise
        finally:
            kill_group(proc.pid)  # whatever the command left running in its group
    return subprocess.CompletedProcess(list(command), proc.returncode, out, err)


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (nothing to do when it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_luigi(
    examples: LuigiExamples, cwd: Path, module: str, words: Sequence[str], workers: int = 1
) -> subprocess.CompletedProcess[str]:
    """``python -m luigi --module examples.<module> <words> --local-scheduler`` in ``cwd``,
    with non-zero exit codes for failures and missing data, and without Luigi's pid lock
    (``/tmp/luigi/<md5>.pid`` would make the same command line, run at the same time by
    another test session, exit "already running")."""
    command = [
        sys.executable,
        "-m",
        "luigi",
        "--module",
        f"examples.{module}",
        *words,
        "--local-scheduler",
        "--workers",
        str(workers),
        "--no-lock",
        *LUIGI_RETCODES,
    ]
    return _run(examples, cwd, command)


def run_conveyor(
    examples: LuigiExamples,
    cwd: Path,
    module: str,
    words: Sequence[str],
    executor: str,
    workers: int = 1,
) -> subprocess.CompletedProcess[str]:
    """``conveyor run --module examples.<module> <words>`` in ``cwd`` with the in-process
    scheduler, ``executor`` and ``workers``, logging JSON at info level to stderr."""
    command = [
        sys.executable,
        "-m",
        "conveyor",
        "run",
        "--module",
        f"examples.{module}",
        *words,
        "--local-scheduler",
        "--executor",
        executor,
        "--workers",
        str(workers),
        "--log-format",
        "json",
        "--log-level",
        "info",
    ]
    return _run(examples, cwd, command)


def luigi_task_ids(
    examples: LuigiExamples, cwd: Path, module: str, command_lines: Sequence[Sequence[str]]
) -> dict[str, dict[str, str]]:
    """Luigi's own task id → {family, repr} of each task the Luigi ``command_lines`` (task
    family and flags, as after ``--module``) name, and of all they require statically, as
    Luigi computes them in a fresh interpreter."""
    lines = [["--module", f"examples.{module}", *words] for words in command_lines]
    done = _run(examples, cwd, [sys.executable, "-c", _TASK_IDS_SCRIPT, json.dumps(lines)])
    assert done.returncode == 0, done.stderr
    found: dict[str, dict[str, str]] = json.loads(done.stdout)
    return found


def log_records(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The JSON log records a ``conveyor run`` wrote to stderr."""
    return json_lines(done.stderr)


def files_under(directory: Path) -> dict[str, bytes]:
    """Relative path → bytes of every file under ``directory``."""
    return {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def describe(done: subprocess.CompletedProcess[str]) -> str:
    """A process's exit code, stdout and the end of its stderr, for assertion messages."""
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-4000:]}"


class SharedPaths:
    """Absolute paths an example writes outside its working directory, held for one test.

    Entering takes an exclusive lock, so that two sessions on one machine, of any users, never
    use the paths at once: ``flock`` of the directory :data:`LOCK_DIRECTORY` in the temporary
    directory, made by the first session that needs it and opened read-only (no file is ever
    written, so none is left behind or owned by another user). It fails if any path already
    exists. :meth:`collect` moves what a run made into that run's directory. Leaving kills
    every process of ``marker`` (:attr:`LuigiExamples.marker`) still alive, so that none
    writes there once the lock is released, then removes whatever is still there, and the
    parent directories that entering found missing, if empty.
    """

    def __init__(self, paths: Sequence[Path], marker: str | None = None) -> None:
        self.paths = [Path(p) for p in paths]
        self.marker = marker
        self._lock = Path(tempfile.gettempdir()) / LOCK_DIRECTORY
        self._missing_parents: list[Path] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> SharedPaths:
        try:
            self._lock.mkdir()
            os.chmod(self._lock, 0o1777)  # (whatever the umask: other users lock it too)
        except FileExistsError:
            pass  # another session's, or another user's: it is only opened to read
        fd = os.open(self._lock, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self._stack.callback(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor is closed
        existing = [str(p) for p in self.paths if p.exists()]
        if existing:
            self._stack.close()
            pytest.fail(
                f"{existing[0]} already exists ({len(existing)} path(s) in all): a Luigi "
                "example writes there; remove what is left of an earlier run",
                pytrace=False,
            )
        parents = {p.parent for p in self.paths}
        self._missing_parents = sorted((p for p in parents if not p.exists()), reverse=True)
        return self

    def collect(self, into: Path, only: Sequence[Path] | None = None) -> list[str]:
        """Move every claimed path (or every one of ``only``) that exists into ``into``, kept
        under its base name; the base names moved, sorted."""
        into.mkdir(parents=True, exist_ok=True)
        moved = []
        for path in self.paths if only is None else [Path(p) for p in only]:
            if path.exists():
                shutil.move(str(path), str(into / path.name))
                moved.append(path.name)
        return sorted(moved)

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.marker is not None:
                kill_marked(MARKER_VARIABLE, self.marker)
            for path in self.paths:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            self._remove_leftover_temporaries()
            for parent in self._missing_parents:
                with contextlib.suppress(OSError):
                    parent.rmdir()  # only when empty
        finally:
            self._stack.close()

    def _remove_leftover_temporaries(self) -> None:
        """Remove the temporary files Luigi's atomic writes leave beside a claimed path when a
        run fails (``<path>-luigi-tmp-<n>``)."""
        names = {p.name for p in self.paths}
        for parent in {p.parent for p in self.paths}:
            with contextlib.suppress(OSError):
                for entry in os.scandir(parent):
                    stem = entry.name.split("-luigi-tmp-", 1)[0]
                    if stem != entry.name and stem in names and entry.is_file():
                        os.unlink(entry.path)
