"""The failure reason the web UI's task list and overview show: one line saying why a task
failed (:func:`conveyor.reasons.failure_reason`), served as ``reason`` by
``GET /ui/api/tasks``.

The function is tested on tracebacks Python itself formats; the route on a real
``conveyor scheduler`` subprocess whose tasks a real ``python -m conveyor run`` worker failed
in every way a task can (raised, raised with a status message set, chained, ``on_failure()``
returning a text or raising too, timed out, process died, disabled, broken ``requires()``).
Nothing is mocked; every process a test starts carries a marker and is killed afterwards.
"""

from __future__ import annotations

import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest

from conveyor.executors.channel import truncate
from conveyor.reasons import REASON_MAX, failure_reason
from conveyor.secrets import hide_secret_params
from conveyor.testing.processes import SchedulerProcess, child_env, kill_marked

MARKER_VARIABLE = "UIREASONTEST_MARKER"  # not CONVEYOR_*: those are configuration overrides
PASSWORD = "Reason-PW-5521x"
QUICK_WORKER = {
    "CONVEYOR_WORKER__WAIT_INTERVAL": "0.1",
    "CONVEYOR_WORKER__WAIT_JITTER": "0",
    "CONVEYOR_WORKER__PING_INTERVAL": "0.2",
}

TASKS = f"""
import os

import conveyor
from conveyor.testing.processes import wait_file


class _Base(conveyor.Task):
    root = conveyor.Parameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, type(self).__name__ + ".out"))


class Loader(_Base):
    def run(self):
        self.set_status_message("loading row 7 of 10")
        raise ValueError("bad row 7")


class Chained(_Base):
    def run(self):
        try:
            {{}}["row"]
        except KeyError as exc:
            raise LookupError("row 7 is missing\\nlooked in: a, b") from exc


class CallbackBreaks(_Base):
    def run(self):
        raise ValueError("bad row 8")

    def on_failure(self, exc):
        raise RuntimeError("the callback broke")


class Explained(_Base):
    def run(self):
        raise ValueError("not shown: on_failure() explains")

    def on_failure(self, exc):
        return "The share //files/x is offline.\\n  Ask ops to mount it."


class Secretive(_Base):
    password = conveyor.Parameter(default={PASSWORD!r})

    def run(self):
        raise PermissionError(f"login refused for {{self.password}}")


class Slow(_Base):
    worker_timeout = 1.0

    def run(self):
        wait_file(os.path.join(self.root, "never"), 60)


class Dies(_Base):
    def run(self):
        os._exit(4)


class Fragile(_Base):
    retry_count = 1

    def run(self):
        raise RuntimeError("fragile broke")


class BrokenRequires(_Base):
    def requires(self):
        raise OSError("cannot list the inputs")


class Fine(_Base):
    def run(self):
        self.set_status_message("all rows loaded")
        with self.output().open("w") as out:
            out.write("ok")


class Reasons(conveyor.WrapperTask):
    root = conveyor.Parameter()

    def requires(self):
        kinds = [
            Loader, Chained, CallbackBreaks, Explained, Secretive, Slow, Dies, Fragile,
            BrokenRequires, Fine,
        ]
        return [kind(root=self.root) for kind in kinds]
"""


# --- the one-line function, on what Python formats ------------------------------------------


def _formatted(fn: Callable[[], object]) -> str:
    """The traceback ``fn()`` raises, as the worker reports it."""
    try:
        fn()
    except BaseException:
        return traceback.format_exc()
    raise AssertionError("it did not raise")


def _raise(exc: BaseException) -> None:
    raise exc


def _chained() -> None:
    try:
        {}["row"]
    except KeyError:
        raise ValueError("bad row 7") from None


def _caused() -> None:
    try:
        {}["row"]
    except KeyError as exc:
        raise ValueError("bad row 7") from exc


def _during_handling() -> None:
    try:
        {}["row"]
    except KeyError:
        raise ValueError("bad row 7")  # noqa: B904 (the implicit chain is what is tested)


def _with_note() -> None:
    exc = ValueError("bad row 7:\n  column a is empty\n  column b is empty")
    exc.add_note("while loading sales.csv")
    raise exc


def _syntax() -> None:
    compile("load(", "job.py", "exec")


def _group() -> None:
    raise ExceptionGroup("2 rows failed", [ValueError("row 7"), TypeError("row 8")])


@pytest.mark.parametrize(
    ("explanation", "reason"),
    [
        (lambda: _formatted(lambda: _raise(ValueError("bad row 7"))), "ValueError: bad row 7"),
        (lambda: _formatted(_chained), "ValueError: bad row 7"),
        (lambda: _formatted(_caused), "ValueError: bad row 7"),
        (lambda: _formatted(_during_handling), "ValueError: bad row 7"),
        (
            lambda: _formatted(_with_note),
            "ValueError: bad row 7: column a is empty column b is empty while loading sales.csv",
        ),
        (lambda: _formatted(_syntax), "SyntaxError: '(' was never closed"),
        (lambda: _formatted(_group), "ExceptionGroup: 2 rows failed (2 sub-exceptions)"),
        (lambda: _formatted(lambda: _raise(KeyError("row"))), "KeyError: 'row'"),
        (lambda: _formatted(lambda: _raise(SystemExit(3))), "SystemExit: 3"),
        (lambda: _formatted(lambda: _raise(RuntimeError())), "RuntimeError"),
        (
            lambda: _formatted(_caused) + "\non_failure() raised too:\n" + _formatted(_syntax),
            "ValueError: bad row 7 (on_failure() raised too)",
        ),
        (
            lambda: "Load(day=2026-11-30).requires() raised:\n" + _formatted(_caused),
            "requires() raised ValueError: bad row 7",
        ),
        (
            lambda: (
                "Load(day=2026-11-30): unfulfilled dependencies at run time: "
                "Extract(day=2026-11-30), Extract(day=2026-12-01)"
            ),
            "unfulfilled dependencies at run time: Extract(day=2026-11-30), "
            "Extract(day=2026-12-01)",
        ),
        (
            lambda: "timed out after 2.5 s; its process tree was killed",
            "timed out after 2.5 s; its process tree was killed",
        ),
        (
            lambda: "the task's process ended with signal 9 without reporting a result",
            "the task's process ended with signal 9 without reporting a result",
        ),
        (lambda: "worker w-1 stopped responding", "worker w-1 stopped responding"),
        (
            lambda: "\n  The share //files/x is offline.\n\n  Ask ops to mount it.\n",
            "The share //files/x is offline. Ask ops to mount it.",
        ),
        (lambda: "", ""),
        (lambda: " \n\t\n", ""),
    ],
    ids=[
        "raised",
        "chain-from-none",
        "chain-cause",
        "chain-context",
        "multi-line-message-and-note",
        "syntax-error",
        "exception-group",
        "key-error",
        "system-exit",
        "no-message",
        "on-failure-raised-too",
        "requires-raised",
        "unfulfilled-dependencies",
        "timeout",
        "process-died",
        "worker-lost",
        "custom-text",
        "empty",
        "blank",
    ],
)
def test_failure_reason_of_each_kind_of_explanation(
    explanation: Callable[[], str], reason: str
) -> None:
    """Each kind of explanation a task can have gives the one line that says why it failed."""
    assert failure_reason(explanation()) == reason


def test_a_long_reason_is_cut_with_an_ellipsis() -> None:
    """A reason longer than the limit keeps its start and ends in … at exactly the limit."""
    message = "bad rows: " + ", ".join(str(n) for n in range(1000))
    reason = failure_reason(_formatted(lambda: _raise(ValueError(message))))
    assert len(reason) == REASON_MAX
    assert reason.startswith("ValueError: bad rows: 0, 1, 2, 3")
    assert reason.endswith("…")
    short = failure_reason("x" * 50, limit=20)
    assert short == "x" * 19 + "…"
    callback = _formatted(lambda: _raise(ValueError(message))) + "\non_failure() raised too:\n"
    cut = failure_reason(callback, limit=60)
    assert cut == "ValueError: bad rows: 0, 1, 2, 3,… (on_failure() raised too)", cut


def test_the_last_traceback_of_a_truncated_explanation_still_gives_its_exception() -> None:
    """A 64 KB explanation cut in the middle by the worker (head and tail kept) gives the
    exception line of its tail."""
    frames = "".join(
        f'  File "step{n}.py", line {n}, in step{n}\n    step{n + 1}()\n' for n in range(3000)
    )
    explanation = truncate(f"Traceback (most recent call last):\n{frames}ValueError: bad row 7\n")
    assert "[... truncated" in explanation
    assert failure_reason(explanation) == "ValueError: bad row 7"


def test_secrets_are_hidden_before_the_reason_is_cut() -> None:
    """Secret-named parameters' values (a multi-line one too) and URL credentials never show,
    not even in part where the reason is cut."""
    params = {"password": PASSWORD, "root": "/data"}
    raised = _formatted(lambda: _raise(PermissionError(f"login {PASSWORD} https://u:pw@db/x")))
    assert failure_reason(raised, params) == "PermissionError: login *** https://***@db/x"
    for cut in range(len("ValueError: "), len("ValueError: ") + len(PASSWORD) + 2):
        reason = failure_reason(f"ValueError: {PASSWORD} /data", params, limit=cut)
        assert PASSWORD[:3] not in reason, (cut, reason)
    key = "-----BEGIN KEY-----\nQmFkIHJvdyA3\n-----END KEY-----"
    reason = failure_reason("ValueError: cannot use " + key, {"ssh_key": key})
    assert "QmFkIHJvdyA3" not in reason and reason == "ValueError: cannot use ***", reason


@pytest.mark.parametrize("secret", ["pw42x", "pw 42 x"], ids=["one-word", "with-spaces"])
def test_reading_only_part_of_the_explanation_gives_what_hiding_all_of_it_gives(
    secret: str,
) -> None:
    """Whatever the text, and wherever a secret or URL credentials fall around the part of it
    that is read, the reason is the one of the whole explanation with its secrets hidden."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    params = {"db_password": secret, "day": "2026"}
    words = st.sampled_from(["a", "row", "7:", secret, "https://u:p@h/x", "…", "x"])
    gaps = st.sampled_from([" ", "", "\n", "  ", "\t"])
    header = 'Traceback (most recent call last):\n  File "job.py", line 7, in run\n    load()\n'

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(
        st.lists(st.tuples(words, gaps), max_size=150),
        st.integers(min_value=1, max_value=40),
        st.booleans(),
    )
    def check(parts: list[tuple[str, str]], limit: int, traced: bool) -> None:
        text = (header if traced else "") + "ValueError: " + "".join(w + g for w, g in parts)
        reason = failure_reason(text, params, limit)
        assert reason == failure_reason(hide_secret_params(text, params), limit=limit)
        assert "pw4" not in reason and "pw 4" not in reason and "u:p@" not in reason

    check()


# --- the route, on what real workers left ---------------------------------------------------


@dataclass
class Failed:
    """A scheduler after a real worker ran ``Reasons``: its tasks by family."""

    server: SchedulerProcess
    ids: dict[str, str]


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Failed]:
    """A scheduler (failed tasks stay FAILED for an hour) where a real worker ran
    ``Reasons``: every task failed its own way but ``Fine``, which is DONE."""
    directory = tmp_path_factory.mktemp("ui-reasons")
    marker = uuid.uuid4().hex
    config = directory / "server.toml"
    config.write_text("[scheduler]\nretry_delay = 3600\nworker_disconnect_delay = 600\n")
    server = SchedulerProcess(directory, config, child_env(directory, MARKER_VARIABLE, marker))
    (directory / "ui_reason_tasks.py").write_text(TASKS, encoding="utf-8")
    root = directory / "out"
    root.mkdir()
    try:
        server.start()
        ran = subprocess.run(
            [
                *(sys.executable, "-m", "conveyor", "run", "ui_reason_tasks.Reasons"),
                *("--root", str(root), "--scheduler-url", server.url),
                *("--workers", "2"),  # in processes: Dies ends its own, not the worker's
            ],
            cwd=directory,
            env=child_env(directory, MARKER_VARIABLE, marker, **QUICK_WORKER),
            capture_output=True,
            text=True,
            timeout=50,
            check=False,
        )
        assert ran.returncode == 3, ran.stdout + ran.stderr  # (3: a broken requires())
        tasks = _json(server, "/api/v1/tasks")["tasks"]
        yield Failed(server, {t["family"]: t["task_id"] for t in tasks})
    finally:
        server.kill()
        kill_marked(MARKER_VARIABLE, marker)


def _json(server: SchedulerProcess, path: str) -> Any:
    reply = server.request("GET", path)
    assert reply.status == 200, (path, reply)
    return reply.json()


def _listed(server: SchedulerProcess, **filters: str) -> dict[str, dict[str, Any]]:
    """The rows of the UI's task list (one page of the largest size) by family."""
    answer = _json(server, "/ui/api/tasks?" + urlencode({**filters, "limit": "500"}))
    assert answer["next"] is None
    return {row["family"]: row for row in answer["tasks"]}


def test_a_failed_tasks_row_gives_its_exception_not_its_status_message(failed: Failed) -> None:
    """A task that set a status message and then raised ValueError('bad row 7') is listed with
    the reason 'ValueError: bad row 7'; its status message is still served beside it."""
    row = _listed(failed.server)["Loader"]
    assert row["status"] == "FAILED"
    assert row["reason"] == "ValueError: bad row 7"
    assert row["status_message"] == "loading row 7 of 10"


def test_every_way_of_failing_has_its_one_line_reason(failed: Failed) -> None:
    """Chained, on_failure() texts and failures, timeouts, process deaths, DISABLED and
    UNKNOWN tasks each have their one line; DONE and PENDING tasks have none."""
    rows = _listed(failed.server)
    states = {family: row["status"] for family, row in rows.items()}
    assert states == {
        "Loader": "FAILED",
        "Chained": "FAILED",
        "CallbackBreaks": "FAILED",
        "Explained": "FAILED",
        "Secretive": "FAILED",
        "Slow": "FAILED",
        "Dies": "FAILED",
        "Fragile": "DISABLED",
        "BrokenRequires": "UNKNOWN",
        "Fine": "DONE",
        "Reasons": "PENDING",
    }
    reasons = {family: row["reason"] for family, row in rows.items()}
    assert reasons["Chained"] == "LookupError: row 7 is missing looked in: a, b"
    assert reasons["CallbackBreaks"] == "ValueError: bad row 8 (on_failure() raised too)"
    assert reasons["Explained"] == "The share //files/x is offline. Ask ops to mount it."
    assert reasons["Secretive"] == "PermissionError: login refused for ***"
    assert reasons["Slow"].startswith("timed out after 1 s"), reasons["Slow"]
    assert "exit code 4" in reasons["Dies"], reasons["Dies"]
    assert reasons["Fragile"] == "RuntimeError: fragile broke"
    assert reasons["BrokenRequires"] == "requires() raised OSError: cannot list the inputs"
    assert reasons["Fine"] == reasons["Reasons"] == ""
    assert all("\n" not in r and len(r) <= REASON_MAX for r in reasons.values()), reasons
    assert PASSWORD not in str(rows)


def test_the_overviews_failed_list_carries_the_reason(failed: Failed) -> None:
    """The overview's query (the ten latest FAILED tasks) answers each with its reason; the
    detail still has the whole explanation."""
    rows = _listed(failed.server, state="FAILED")
    assert rows["Loader"]["reason"] == "ValueError: bad row 7"
    assert rows.keys() == {
        "Loader",
        "Chained",
        "CallbackBreaks",
        "Explained",
        "Secretive",
        "Slow",
        "Dies",
    }
    detail = _json(failed.server, "/ui/api/task?id=" + failed.ids["Loader"])["task"]
    assert detail["explanation"].startswith("Traceback (most recent call last):")
    assert detail["explanation"].rstrip().endswith("ValueError: bad row 7")
