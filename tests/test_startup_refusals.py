"""Start-up refuses configuration that can never work — an ``email`` notifier with nobody to
mail, a ``[plugins] local`` entry that does not import — and the notifications lost during a
run are totalled once at exit; all through the real CLI (and ``build()``)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

import conveyor
from conveyor.task import task_defaults_in_use
from conveyor.testing.processes import free_port, json_lines

RunCli = Callable[..., subprocess.CompletedProcess[str]]
WriteModule = Callable[..., str]

TASKS = """
import conveyor


class Fine(conveyor.Task):
    def run(self):
        pass


class Fails(conveyor.Task):
    n = conveyor.IntParameter(default=0)

    def complete(self):
        return False

    def run(self):
        raise RuntimeError(f"failure {self.n}")


class Three(conveyor.WrapperTask):
    def requires(self):
        return [Fails(n=n) for n in range(3)]
"""


def _email_config(tmp_path: Path, email: str, notifiers: str = "") -> Path:
    """A worker.toml enabling the email notifier, SMTP at a port nobody listens on."""
    path = tmp_path / "worker.toml"
    path.write_text(
        f'[notifiers]\nenabled = ["email"]\n{notifiers}\n'
        f'[notifiers.email]\nsmtp_host = "127.0.0.1"\nsmtp_port = {free_port()}\n{email}\n',
        encoding="utf-8",
    )
    return path


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# --- an email notifier with no recipients ---------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "config"])
def test_email_without_recipients_is_refused_naming_the_way_out(
    command: str, tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """``recipients = []`` with the email notifier enabled stops ``conveyor run`` before any task
    runs and fails ``conveyor config``: exit 2, one line naming the key and allow_owner_only."""
    module = task_module(TASKS)
    _email_config(tmp_path, "recipients = []")
    args = ["run", f"{module}.Fine"] if command == "run" else ["config"]
    line = _one_error_line(run_cli(*args, cwd=tmp_path))
    assert "worker.toml: notifiers.email.recipients = []" in line, line
    assert "allow_owner_only = true" in line, line


def test_allow_owner_only_runs_and_skips_messages_without_an_owner(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """With ``allow_owner_only = true`` the configuration is accepted; a failure of a task with
    no owner_email is not mailed, and not retried as a failed send either."""
    module = task_module(TASKS)
    _email_config(tmp_path, "recipients = []\nallow_owner_only = true")
    shown = run_cli("config", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "allow_owner_only = true" in shown.stdout
    result = run_cli(
        "run", f"{module}.Fails", "--log-format", "json", "--log-level", "info", cwd=tmp_path
    )
    assert result.returncode == 1, result.stdout + result.stderr
    events = [r["event"] for r in json_lines(result.stderr)]
    assert events.count("email not sent: no owner_email to send it to") == 1, events
    assert "a notifier failed to send" not in events
    assert "notifications dropped during this run" not in events


# --- a notifier whose constructor raises ----------------------------------------------------------


def test_a_notifier_whose_constructor_raises_refuses_the_start(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """A notifier installed under ``conveyor.notifiers`` (a real distribution on the path)
    whose ``__init__`` raises ValueError stops ``conveyor run`` before any task runs: exit 2,
    one line naming the notifier, the error's type and its message (its URL setting hidden)."""
    module = task_module(TASKS)
    (tmp_path / "grumpy_notifier.py").write_text(
        "from conveyor.settings import Field\n\n\n"
        "class Grumpy:\n"
        '    settings_schema = {"url": Field("str", required=True)}\n\n'
        "    def __init__(self, settings):\n"
        "        raise ValueError(f\"cannot reach {settings['url']}\")\n\n"
        "    def send(self, message):\n"
        "        pass\n",
        encoding="utf-8",
    )
    info = tmp_path / "grumpy_notifier-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: grumpy-notifier\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[conveyor.notifiers]\ngrumpy = grumpy_notifier:Grumpy\n", encoding="utf-8"
    )
    (tmp_path / "worker.toml").write_text(
        '[notifiers]\nenabled = ["grumpy"]\n'
        '[notifiers.grumpy]\nurl = "https://hooks.example/s3cr3t-token"\n',
        encoding="utf-8",
    )
    result = run_cli("run", f"{module}.Fine", cwd=tmp_path)
    line = _one_error_line(result)
    assert "notifier 'grumpy'" in line and "ValueError: cannot reach" in line, line
    assert "s3cr3t-token" not in line, line
    assert result.stdout == ""


# --- a [plugins] local entry that does not import --------------------------------------------


def test_a_local_plugin_that_fails_to_import_is_fatal(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """``conveyor run`` with a ``[plugins] local`` entry whose import raises exits 2 before any
    task runs, with one line naming the entry and the error, no traceback."""
    module = task_module(TASKS)
    plugin = task_module("raise ImportError('needs the warehouse client')\n")
    (tmp_path / "worker.toml").write_text(f'[plugins]\nlocal = ["{plugin}"]\n', encoding="utf-8")
    result = run_cli("run", f"{module}.Fine", cwd=tmp_path)
    line = _one_error_line(result)
    assert f"[plugins] local entry {plugin!r} failed to load" in line, line
    assert "ImportError: needs the warehouse client" in line, line
    assert result.stdout == ""


def test_build_raises_plugin_error_for_a_missing_local_module() -> None:
    """``build()`` with a ``[plugins] local`` module that does not exist raises PluginError
    naming the entry."""
    config = conveyor.Config().with_section("plugins", local=["no_such_plugin_module"])
    with pytest.raises(conveyor.PluginError, match="'no_such_plugin_module' failed to load"):
        conveyor.build(conveyor.Task(), config=config)


def _children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("refused", ["plugin", "notifier"])
def test_a_refused_worker_leaves_no_process_wide_state_nor_child_process(
    refused: str, tmp_path: Path, task_module: WriteModule
) -> None:
    """``build()`` refused at start-up — a ``[plugins] local`` entry that does not import, or
    the email notifier with nobody to mail (refused after the fork server started) — with
    ``task_id_style = "luigi"``: the task defaults in use are what they were before, and no
    child process of this one is left behind."""
    if refused == "plugin":
        plugin = task_module("raise ImportError('needs the warehouse client')\n")
        extra, error = f'[plugins]\nlocal = ["{plugin}"]\n', conveyor.PluginError
    else:
        extra = (
            f'[notifiers]\nenabled = ["email"]\n[notifiers.email]\nsmtp_host = "127.0.0.1"\n'
            f"smtp_port = {free_port()}\nrecipients = []\n"
        )
        error = conveyor.ConfigError
    path = tmp_path / "worker.toml"
    path.write_text(
        f'[worker]\ntask_id_style = "luigi"\nexecutor = "fork"\n{extra}', encoding="utf-8"
    )
    before, children = task_defaults_in_use(), _children()
    task = conveyor.Task()
    with pytest.raises(error):
        conveyor.build(task, config=str(path))
    assert task_defaults_in_use() == before
    left = _children() - children
    assert not left, f"child processes left: {sorted(left)}"


# --- dropped notifications ---------------------------------------------------------------------


def test_the_notifications_dropped_in_a_run_are_totalled_once_at_exit(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """Three failures mailed to an SMTP port that refuses, with no retries: each is dropped,
    and one warning at exit gives the total, by cause."""
    module = task_module(TASKS)
    _email_config(
        tmp_path,
        'recipients = ["ops@example.com"]\nmax_retries = 0',
        notifiers="flush_timeout = 60",
    )
    result = run_cli("run", f"{module}.Three", "--log-format", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    totals = [
        r for r in json_lines(result.stderr) if r["event"].startswith("notifications dropped")
    ]
    assert len(totals) == 1, result.stderr
    assert totals[0]["total"] == 3 and totals[0]["after_retries"] == 3, totals
    assert totals[0]["queue_full"] == 0 and totals[0]["past_flush_timeout"] == 0, totals
