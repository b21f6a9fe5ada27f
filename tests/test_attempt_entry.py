"""Attempts travel as data: AttemptSpec and AttemptMessage in the protocol's codec, ``python -m
conveyor.attempt`` as a real process, and the import-linter contract that keeps the first-party
plugins on public API (SPEC §10)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from conveyor import protocol as p
from conveyor.attempt import EXIT_CODES, EXIT_USAGE, message_line
from conveyor.testing import conformance_tasks as ct

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60.0  # seconds a whole `python -m conveyor.attempt` run may take on a loaded machine

MESSAGES: list[p.AttemptMessage] = [
    p.Stage(p.AttemptStage.LOADED),
    p.Note(p.NoteKind.STATUS_MESSAGE, "half way"),
    p.Note(p.NoteKind.PROGRESS, 50.0),
    p.Succeeded(1.5, found_complete=True),
    p.Failed(0.2, "boom", "ValueError", p.FailureCause.TASK_LOAD, ("A_1", "B_2")),
    p.TimedOut(3.0, 2.0, "timed out after 2 s", "interpreter start-up"),
    p.Died(0.1, "ended with signal 9", None, 9),
    p.NeedsDependencies(0.3, (p.DependencyRef("mod", "Fam", {"x": "1"}),)),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_attempt_message_round_trips_through_the_protocol_codec(
    message: p.AttemptMessage,
) -> None:
    """Each message kind survives encode -> JSON text -> decode unchanged, tagged by kind."""
    data = json.loads(message_line(message))
    assert data["message"] == p.attempt_message_kind(message)
    assert p.decode_attempt_message(data) == message


def test_an_attempt_spec_round_trips_and_defaults_every_field_but_the_task() -> None:
    """An AttemptSpec with every field set round-trips; the minimal one needs only the task."""
    spec = p.AttemptSpec(
        "mod", "Fam", "Fam_1", {"x": "1"}, attempt=3, timeout=2.5, check_complete=False,
        deps=(p.DependencyRef("mod", "Dep", {}),), task_defaults={"Fam": {"x": "2"}},
        task_default_sources={"Fam.x": "worker.toml"}, task_id_style="luigi", kill_grace=1.0,
        log_level="debug", log_format="console",
    )  # fmt: skip
    assert p.decode(p.AttemptSpec, json.loads(json.dumps(p.encode(spec)))) == spec
    minimal = p.decode(p.AttemptSpec, {"module": "m", "family": "F", "task_id": "F_1"})
    assert (minimal.timeout, minimal.check_complete, minimal.deps) == (0.0, True, None)


def test_an_outcome_kind_given_as_its_plain_value_is_sent_as_that_kind() -> None:
    """An executor's Outcome whose kind is the plain string of an AttemptOutcome (what a
    third-party executor may pass) goes on the wire as that kind, not as a failure."""
    from conveyor.executors.base import Outcome
    from conveyor.executors.channel import to_wire

    assert to_wire(Outcome("T_1", "succeeded", 1.0)) == p.Succeeded(1.0)  # type: ignore[arg-type]
    died = to_wire(Outcome("T_1", "process_died", 1.0, "gone", exitcode=3))  # type: ignore[arg-type]
    assert died == p.Died(1.0, "gone", 3, None)


def test_dynamic_dependencies_are_rebuilt_by_the_loader_named() -> None:
    """from_wire rebuilds a NeedsDependencies' tasks by the task loader it is given (the
    attempt's): conveyor's own by default, and one not installed is refused by name."""
    from conveyor.errors import BackendNotFound
    from conveyor.executors.channel import from_wire, task_ref

    wanted = ct.Writes(path="/nowhere/x")
    needs = p.NeedsDependencies(0.1, (task_ref(wanted),))
    [dep] = from_wire(needs, "T_1").new_deps  # type: ignore[union-attr]
    assert dep.task_id == wanted.task_id and type(dep) is ct.Writes
    with pytest.raises(BackendNotFound, match="'no-such-loader'"):
        from_wire(needs, "T_1", "no-such-loader")


def test_a_message_of_an_unknown_kind_or_shape_is_a_field_error() -> None:
    """decode_attempt_message names what is wrong; a newer runner's extra fields are ignored."""
    with pytest.raises(p.FieldError, match="expected one of"):
        p.decode_attempt_message({"message": "exploded"})
    with pytest.raises(p.FieldError, match="duration"):
        p.decode_attempt_message({"message": "succeeded", "duration": "soon"})
    newer = {"message": "succeeded", "duration": 1.0, "added_later": True}
    assert p.decode_attempt_message(newer) == p.Succeeded(1.0)


def _env(*extra: Path) -> dict[str, str]:
    path = [str(e) for e in extra] + [e for e in sys.path if e]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _run(
    stdin: bytes, *extra: Path, signal_when: Callable[[], bool] | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """Run ``python -m conveyor.attempt``; its exit code, message lines and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.attempt"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(*extra),
    )
    if signal_when is None:
        out, err = proc.communicate(stdin, timeout=WAIT)
    else:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        proc.stdin = None  # (communicate() must not flush it again)
        _wait_until(signal_when)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT)
    lines = [json.loads(line) for line in out.splitlines()]
    return proc.returncode, lines, err.decode()


def _wait_until(condition: Callable[[], bool]) -> None:
    import time  # (a poll of a file another process writes: not a sleep as synchronisation)

    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the attempt did not get going"
        time.sleep(0.02)


def _spec(task: Any, **fields: Any) -> bytes:
    spec = p.AttemptSpec(task.task_module, task.task_family, task.task_id, task.to_str_params(),
                         kill_grace=1.0, **fields)  # fmt: skip
    return json.dumps(p.encode(spec)).encode()


def test_a_conformance_task_succeeds_with_its_notes_and_exit_code_0(tmp_path: Path) -> None:
    """Notes arrive as lines while it runs, then one ``succeeded``; the output exists."""
    task = ct.Writes(path=str(tmp_path / "out.txt"))
    code, lines, _ = _run(_spec(task))
    assert code == EXIT_CODES[p.AttemptMessageKind.SUCCEEDED] == 0
    assert [(m["message"], m.get("value")) for m in lines] == [
        ("note", "writing"),
        ("note", 50.0),
        ("note", "http://example.invalid/t"),
        ("succeeded", None),
    ]
    assert task.complete()


def test_a_failing_task_is_failed_with_cause_error_and_exit_code_1(tmp_path: Path) -> None:
    """The exception's text and class travel in ``failed``; its cause is ``error``."""
    code, lines, _ = _run(_spec(ct.Raises(path=str(tmp_path / "never.txt"))))
    end = p.decode_attempt_message(lines[-1])
    assert code == 1
    assert isinstance(end, p.Failed) and end.cause is p.FailureCause.ERROR
    assert end.exception_type == "ValueError" and "conformance failure" in end.error


def test_an_unloadable_task_is_failed_with_cause_task_load(tmp_path: Path) -> None:
    """A module that does not exist there is a ``task_load`` failure, not a crash."""
    spec = {"module": "no_such_module_here", "family": "Nope", "task_id": "Nope_1"}
    code, lines, err = _run(json.dumps(spec).encode())
    end = p.decode_attempt_message(lines[-1])
    assert code == 1 and isinstance(end, p.Failed), err
    assert end.cause is p.FailureCause.TASK_LOAD and "no_such_module_here" in end.error


def test_a_yielding_task_needs_dependencies_with_exit_code_5(tmp_path: Path) -> None:
    """The dynamic dependency comes back as module, family and string parameters."""
    code, lines, _ = _run(_spec(ct.YieldsDependency(path=str(tmp_path / "parent.txt"))))
    end = p.decode_attempt_message(lines[-1])
    assert code == 5 and isinstance(end, p.NeedsDependencies)
    dep = ct.Writes(path=str(tmp_path / "parent.txt.dep"))
    assert end.new_deps == (p.DependencyRef(dep.task_module, dep.task_family, dep.to_str_params()),)


TREE_TASK = """
    import subprocess, time
    from conveyor import Parameter, Task

    class StartsATree(Task):
        '''Starts a grandchild that ignores SIGTERM, writes its pid, then sleeps.'''
        path = Parameter()

        def run(self):
            subprocess.Popen(["sh", "-c", 'trap "" TERM; echo $$ > "$0.tmp"; '
                              'mv "$0.tmp" "$0"; exec sleep 120', self.path])
            time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_timeout_kills_the_whole_tree_and_exits_3(tmp_path: Path) -> None:
    """A grandchild that ignores SIGTERM is killed too; the end is ``timed_out``."""
    (tmp_path / "tree_tasks.py").write_text(textwrap.dedent(TREE_TASK), encoding="utf-8")
    pid_file = tmp_path / "grandchild.pid"
    spec = {"module": "tree_tasks", "family": "StartsATree", "params": {"path": str(pid_file)},
            "timeout": 3.0, "kill_grace": 0.5}  # fmt: skip
    spec["task_id"] = _task_id_of(tmp_path, spec)
    code, lines, err = _run(json.dumps(spec).encode(), tmp_path)
    end = p.decode_attempt_message(lines[-1])
    assert code == 3 and isinstance(end, p.TimedOut), (lines, err)
    assert end.timeout == 3.0 and "process tree was killed" in end.error
    assert pid_file.exists(), "the grandchild never started"
    assert _gone(int(pid_file.read_text())), "the grandchild outlived the attempt"


def _task_id_of(where: Path, spec: dict[str, Any]) -> str:
    code = (
        "import importlib, sys; m = importlib.import_module(sys.argv[1]); "
        "print(getattr(m, sys.argv[2])(**dict(a.split('=', 1) for a in sys.argv[3:])).task_id)"
    )
    args = [f"{k}={v}" for k, v in spec["params"].items()]
    out = subprocess.run(
        [sys.executable, "-c", code, spec["module"], spec["family"], *args],
        env=_env(where), capture_output=True, check=True, timeout=WAIT,
    )  # fmt: skip
    return out.stdout.decode().strip()


def test_sigterm_interrupts_the_attempt_as_failed_with_cause_interrupted(tmp_path: Path) -> None:
    """A runner told to stop stops its attempt's tree and reports it interrupted."""
    (tmp_path / "tree_tasks.py").write_text(textwrap.dedent(TREE_TASK), encoding="utf-8")
    pid_file = tmp_path / "grandchild.pid"
    spec = {"module": "tree_tasks", "family": "StartsATree", "params": {"path": str(pid_file)},
            "kill_grace": 0.5}  # fmt: skip
    spec["task_id"] = _task_id_of(tmp_path, spec)
    code, lines, err = _run(json.dumps(spec).encode(), tmp_path, signal_when=pid_file.exists)
    end = p.decode_attempt_message(lines[-1])
    assert code == 1 and isinstance(end, p.Failed), (lines, err)
    assert end.cause is p.FailureCause.INTERRUPTED and "SIGTERM" in end.error
    assert _gone(int(pid_file.read_text()))


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        (b"", "not JSON"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"module": "m", "family": "F"}', "spec.task_id: missing required field"),
        (b'{"module": "m", "family": "F", "task_id": "F_1", "timeout": "soon"}', "spec.timeout"),
    ],
)
def test_bad_stdin_is_one_clear_line_and_exit_code_2(stdin: bytes, says: str) -> None:
    """Nothing runs; stderr says what is wrong in one line, without a traceback."""
    code, lines, err = _run(stdin)
    assert code == EXIT_USAGE == 2 and lines == []
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# --- the plugins' import-linter contract --------------------------------------------------------


def _plugin_contract() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    linter = config["tool"]["importlinter"]
    assert {"conveyor_dask", "conveyor_slack"} <= set(linter["root_packages"])
    (contract,) = [c for c in linter["contracts"] if "conveyor_dask" in c.get("source_modules", ())]
    return dict(contract)


def _lint(config: Path, *extra: Path) -> subprocess.CompletedProcess[bytes]:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), str(config), "--no-cache"],
        capture_output=True, env=_env(*extra), timeout=300, cwd=config.parent,
    )  # fmt: skip


def test_the_plugin_contract_forbids_internals_and_catches_a_plugin_importing_one(
    tmp_path: Path,
) -> None:
    """The contract names the internal modules; a plugin importing channel breaks it."""
    contract = _plugin_contract()
    assert contract["type"] == "forbidden"
    internals = ("channel", "child", "subproc", "supervisor", "zygote", "forking", "runner")
    for internal in [f"conveyor.executors.{name}" for name in internals]:
        assert internal in contract["forbidden_modules"]
    assert {"conveyor.worker", "conveyor.server", "conveyor.scheduler"} <= set(
        contract["forbidden_modules"]
    )
    bad = tmp_path / "naughty_plugin"
    bad.mkdir()
    (bad / "__init__.py").write_text("from conveyor.executors.channel import encode\n")
    contract["source_modules"] = ["naughty_plugin"]
    lines = [
        "[importlinter]",
        "root_packages =\n    conveyor\n    naughty_plugin",
        "[importlinter:contract:plugins]",
        f"name = {contract['name']}",
        "type = forbidden",
        "source_modules =\n    naughty_plugin",
        "forbidden_modules =\n" + "\n".join(f"    {m}" for m in contract["forbidden_modules"]),
        "allow_indirect_imports = True",
    ]
    config = tmp_path / "naughty.ini"
    config.write_text("\n".join(lines) + "\n")
    result = _lint(config, tmp_path)
    assert result.returncode != 0, result.stdout.decode()
    assert b"naughty_plugin -> conveyor.executors.channel" in result.stdout


def test_lint_imports_passes_on_the_installed_plugins() -> None:
    """Every contract of pyproject.toml holds, the plugins' included (CI runs the same)."""
    result = _lint(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout.decode()[-3000:]
    assert b"First-party plugins use conveyor's public API only" in result.stdout


def test_no_plugin_imports_an_underscored_name_or_module_from_conveyor() -> None:
    """What import-linter cannot see: ``from conveyor.x import _private`` in plugin code."""
    offences = []
    for source in sorted((ROOT / "plugins").glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("conveyor"):
                parts = [*node.module.split("."), *(a.name for a in node.names)]  # type: ignore[union-attr]
                if any(part.startswith("_") for part in parts):
                    offences.append(f"{source.relative_to(ROOT)}:{node.lineno}")
    assert not offences, offences


# --- failure kinds as data ------------------------------------------------------------------------

UNLOADABLE = """
    from conveyor import Parameter, Task

    class GoneSoon(Task):
        '''Its module is deleted before the fork server could import it.'''
        x = Parameter()
"""


def test_a_task_the_fresh_fork_server_cannot_load_is_a_load_error_with_the_hint(
    tmp_path: Path, task_module: Callable[[str], str]
) -> None:
    """The fork executor learns from a typed flag, not an exception's name, that the task could
    not be loaded there, and explains the fresh-interpreter case."""
    import importlib
    import queue

    from conveyor.executors.base import AttemptRequest, ExecutorContext, Outcome
    from conveyor.executors.forking import ForkExecutor

    task = importlib.import_module(task_module(UNLOADABLE)).GoneSoon(x="1")
    (tmp_path / f"{task.task_module}.py").unlink()  # the server imports it only now
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)  # the worker "has threads"
    helper.start()
    try:
        executor = ForkExecutor(ExecutorContext(kill_grace=1.0))
    finally:
        stop.set()
        helper.join()
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    try:
        executor.start(AttemptRequest(task, task.task_id, 1), inbox.put)
        outcome = inbox.get(timeout=WAIT)
    finally:
        executor.close()
    assert isinstance(outcome, Outcome) and outcome.load_error, outcome
    assert "define it in an importable module" in outcome.error
    wire = p.decode_attempt_message(json.loads(message_line(_to_wire(outcome))))
    assert isinstance(wire, p.Failed) and wire.cause is p.FailureCause.TASK_LOAD


def _to_wire(outcome: Any) -> p.AttemptMessage:
    from conveyor.executors.channel import to_wire

    message = to_wire(outcome)
    assert not isinstance(message, p.Stage)
    return message
