"""The ``email`` notifier (SPEC §4.3) against real SMTP servers: aiosmtpd on loopback (plain,
login, STARTTLS and implicit TLS with a private CA from trustme), a blackhole that never
answers, and a port nobody listens on; through in-process workers and the real CLI."""

from __future__ import annotations

import contextlib
import email
import email.policy
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

import conveyor
from conveyor.notifiers.smtp import EmailNotifier
from conveyor.testing import timeless
from conveyor.testing.notifiers import check_notifier
from conveyor.testing.processes import free_port, json_lines

RunCli = Callable[..., subprocess.CompletedProcess[str]]
WriteModule = Callable[..., str]

OPS = "ops@example.com"
OWNER = "owner@example.com"
SENDER = "conveyor@example.com"
TASK_SECRET = "s3cr3t-Warehouse-pa55"
SMTP_USER = "mailer"
SMTP_PASSWORD = "Zq8-smtp-never-logged"

TASKS = """
import conveyor


class Leaky(conveyor.Task):
    owner_email = "owner@example.com"
    day = conveyor.Parameter()
    password = conveyor.Parameter(default="s3cr3t-Warehouse-pa55")

    def run(self):
        raise RuntimeError(f"the warehouse refused {self.password} for day {self.day}")


class Fails(conveyor.Task):
    owner_email = "owner@example.com"
    n = conveyor.Parameter(default="0")

    def run(self):
        raise RuntimeError(f"failure number {self.n}")


class Four(conveyor.WrapperTask):
    def requires(self):
        return [Fails(n=str(i)) for i in range(4)]
"""


# --- SMTP servers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mail:
    """One envelope an SMTP server accepted."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    content: bytes
    tls: bool

    def parsed(self) -> EmailMessage:
        raw = self.content.replace(b"\r\n", b"\n")  # as received: SMTP's line endings
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        return message

    def body(self) -> str:
        part = self.parsed().get_body(("plain",))
        assert part is not None
        return str(part.get_content())


class Recorder:
    """An aiosmtpd handler keeping every envelope, and an authenticator keeping every login."""

    def __init__(self, accept_login: tuple[str, str] | None = None) -> None:
        self.mails: list[Mail] = []
        self.logins: list[tuple[str, str, str, bool]] = []  # mechanism, login, password, ok
        self.accept_login = accept_login

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.mails.append(
            Mail(
                envelope.mail_from,
                tuple(envelope.rcpt_tos),
                bytes(envelope.content),
                server.transport.get_extra_info("ssl_object") is not None,
            )
        )
        return "250 OK"

    def authenticator(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        login, password = auth_data.login.decode(), auth_data.password.decode()
        ok = (login, password) == self.accept_login
        self.logins.append((mechanism, login, password, ok))
        return AuthResult(success=ok, handled=False)


@contextlib.contextmanager
def smtp_server(recorder: Recorder, **kwargs: Any) -> Iterator[int]:
    """An aiosmtpd Controller on 127.0.0.1 at a free port (yielded) for the block."""
    port = free_port()
    controller = Controller(recorder, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


@contextlib.contextmanager
def blackhole() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never sends a byte."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, name="smtp-blackhole", daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


@dataclass(frozen=True)
class Tls:
    """A private CA, its PEM file, and a server context for a cert covering 127.0.0.1."""

    ca_file: Path
    server_context: ssl.SSLContext


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    ca_file = tmp_path / "private-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return Tls(ca_file, context)


# --- configuration and runs ---------------------------------------------------------------------


def _toml(value: Any) -> str:
    # JSON strings, numbers and lists of them are valid TOML values
    return json.dumps(value)


def write_config(tmp_path: Path, table: dict[str, Any], **notifiers: Any) -> Path:
    """A worker.toml enabling the email notifier with ``table``."""
    lines = ["[notifiers]", 'enabled = ["email"]']
    lines += [f"{key} = {_toml(value)}" for key, value in notifiers.items()]
    lines += ["", "[notifiers.email]"]
    lines += [f"{key} = {_toml(value)}" for key, value in table.items()]
    path = tmp_path / "worker.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def email_settings(port: int, **more: Any) -> dict[str, Any]:
    return {
        "smtp_host": "127.0.0.1",
        "smtp_port": port,
        "sender": SENDER,
        "recipients": [OPS],
        **more,
    }


def failure_lines(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == "a notifier failed to send"]


def run_fails(
    run_cli: RunCli, tmp_path: Path, module: str, config: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "run",
        f"{module}.Fails",
        "--config",
        str(config),
        "--log-format",
        "json",
        *extra,
        cwd=tmp_path,
    )


# --- tests --------------------------------------------------------------------------------------


def test_a_failed_task_sends_one_complete_redacted_email(
    tmp_path: Path, task_module: WriteModule
) -> None:
    """A failing task run by an in-process worker produces exactly one email, delivered by the
    time the worker is closed: addressed to the configured recipients plus the task's
    owner_email, its subject naming the family and "failed", its body the task id, the
    parameters (``password`` as ``***``), host, worker id, outcome and the exception message;
    the secret parameter's value appears nowhere in the raw email."""
    module = __import__(task_module(TASKS))
    recorder = Recorder()
    with smtp_server(recorder) as port:
        config = write_config(tmp_path, email_settings(port))
        task = module.Leaky(day="2026-01-02")
        with conveyor.Worker(config=str(config)) as worker:
            assert worker.add(task)
            assert worker.run() is False
        assert worker.report is not None and worker.report.exit_code == 1
        assert len(recorder.mails) == 1, recorder.mails
    mail = recorder.mails[0]
    assert mail.mail_from == SENDER
    assert mail.rcpt_tos == (OPS, OWNER)
    parsed = mail.parsed()
    subject = str(parsed["Subject"])
    assert subject == (
        f"[conveyor] Leaky(day=2026-01-02, password=***) failed on {socket.gethostname()}"
    )
    assert parsed["From"] == SENDER
    assert parsed["To"] == f"{OPS}, {OWNER}"
    assert parsed["X-Conveyor-Kind"] == "failed"
    body = mail.body()
    assert f"Task id:    {task.task_id}\n" in body
    assert "Outcome:    failed (RuntimeError)\n" in body
    assert "Parameters: day=2026-01-02, password=***\n" in body
    assert f"Host:       {socket.gethostname()}\n" in body
    assert f"Worker:     {worker.id}\n" in body
    assert "RuntimeError: the warehouse refused *** for day 2026-01-02" in body
    assert TASK_SECRET not in mail.content.decode("ascii", "replace")
    assert TASK_SECRET not in body
    assert TASK_SECRET not in subject


def login_server(recorder: Recorder, tls: Tls) -> contextlib.AbstractContextManager[int]:
    """An SMTP server requiring STARTTLS and then a login, checked by ``recorder``."""
    return smtp_server(
        recorder,
        authenticator=recorder.authenticator,
        auth_required=True,
        tls_context=tls.server_context,
        require_starttls=True,
    )


def login_settings(port: int, tls: Tls, **extra: Any) -> dict[str, Any]:
    """Email settings that log in as SMTP_USER over STARTTLS, trusting the test CA."""
    return email_settings(
        port,
        security="starttls",
        ca_file=str(tls.ca_file),
        username=SMTP_USER,
        password=SMTP_PASSWORD,
        **extra,
    )


def test_login_is_accepted_and_the_password_is_never_shown(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli, tls: Tls
) -> None:
    """With username/password the CLI worker logs in (the server requires it, so the email
    arriving proves the login); the SMTP password appears in none of its output, even at
    debug level, nor in ``conveyor config``, which shows it as ``***``."""
    module = task_module(TASKS)
    recorder = Recorder(accept_login=(SMTP_USER, SMTP_PASSWORD))
    with login_server(recorder, tls) as port:
        config = write_config(
            tmp_path,
            login_settings(port, tls),
        )
        result = run_fails(run_cli, tmp_path, module, config, "--log-level", "debug")
        shown = run_cli("config", "--config", str(config), cwd=tmp_path, timeout=30)
    assert result.returncode == 1, result.stderr
    assert [(login, password, ok) for _, login, password, ok in recorder.logins] == [
        (SMTP_USER, SMTP_PASSWORD, True)
    ]
    assert len(recorder.mails) == 1
    assert recorder.mails[0].rcpt_tos == (OPS, OWNER)
    assert json_lines(result.stderr), result.stderr  # the logs were there to be checked
    assert SMTP_PASSWORD not in result.stdout + result.stderr
    assert shown.returncode == 0, shown.stderr
    assert 'password = "***"' in shown.stdout.splitlines()
    assert f'username = "{SMTP_USER}"' in shown.stdout.splitlines()
    assert SMTP_PASSWORD not in shown.stdout + shown.stderr


def test_a_refused_login_is_logged_without_the_password(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli, tls: Tls
) -> None:
    """A server that refuses the login gets no email; the worker logs the notifier failure
    (naming ``email`` and the SMTP error) once, without the password, and still exits 1."""
    module = task_module(TASKS)
    recorder = Recorder(accept_login=(SMTP_USER, "another password"))
    with login_server(recorder, tls) as port:
        config = write_config(
            tmp_path,
            login_settings(port, tls, max_retries=0),
        )
        result = run_fails(run_cli, tmp_path, module, config, "--log-level", "debug")
    assert result.returncode == 1, result.stderr
    assert recorder.mails == []
    assert recorder.logins and all(not ok for *_, ok in recorder.logins)
    failures = failure_lines(json_lines(result.stderr))
    assert len(failures) == 1, result.stderr
    assert failures[0]["notifier"] == "email"
    assert "535" in failures[0]["error"]  # the server's "authentication failed"
    assert SMTP_PASSWORD not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("security", "server_tls"),
    [("starttls", "tls_context"), ("ssl", "ssl_context")],
    ids=["starttls", "ssl"],
)
def test_tls_with_the_private_ca_delivers(
    tmp_path: Path, task_module: WriteModule, tls: Tls, security: str, server_tls: str
) -> None:
    """``ca_file`` naming the private CA: the email arrives over TLS, with STARTTLS (the
    server refuses MAIL before it) or with TLS from the first byte (``ssl``)."""
    module = __import__(task_module(TASKS))
    recorder = Recorder()
    extra: dict[str, Any] = {server_tls: tls.server_context}
    if security == "starttls":
        extra["require_starttls"] = True
    with smtp_server(recorder, **extra) as port:
        config = write_config(
            tmp_path, email_settings(port, security=security, ca_file=str(tls.ca_file))
        )
        with conveyor.Worker(config=str(config)) as worker:
            worker.add(module.Fails())
            assert worker.run() is False
    assert len(recorder.mails) == 1
    assert recorder.mails[0].tls is True
    assert recorder.mails[0].rcpt_tos == (OPS, OWNER)
    assert str(recorder.mails[0].parsed()["Subject"]).startswith("[conveyor] Fails(n=0) failed")


def test_starttls_without_the_ca_is_not_delivered_and_only_logged(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli, tls: Tls
) -> None:
    """Without ``ca_file`` (system CAs only) the private CA's certificate is not trusted: no
    email, one log line "a notifier failed to send" naming ``email`` and the verification
    failure, and the CLI exits 1 exactly as it does with no notifier at all."""
    module = task_module(TASKS)
    baseline = run_cli("run", f"{module}.Fails", "--log-format", "json", cwd=tmp_path)
    recorder = Recorder()
    with smtp_server(recorder, tls_context=tls.server_context, require_starttls=True) as port:
        config = write_config(tmp_path, email_settings(port, security="starttls", max_retries=0))
        result = run_fails(run_cli, tmp_path, module, config)
    assert baseline.returncode == 1, baseline.stderr
    assert result.returncode == 1, result.stderr
    assert recorder.mails == []
    failures = failure_lines(json_lines(result.stderr))
    assert len(failures) == 1, result.stderr
    assert failures[0]["notifier"] == "email"
    assert "CERTIFICATE_VERIFY_FAILED" in failures[0]["error"]


@pytest.mark.timeout(90)
def test_a_blackhole_server_does_not_block_the_run(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """Sending never blocks the worker's loop: with an SMTP server that accepts and never
    answers, 4 failing tasks, ``timeout = 5`` and ``flush_timeout = 1``, the CLI run exits 1
    with the same summary as with no notifier, its 4 failures come one right after another,
    and it takes far less than the 4 x 5 s longer than without a notifier that sending inline
    would (compared with that run, not with a fixed time: start-up depends on the load)."""
    module = task_module(TASKS)
    started = time.monotonic()
    baseline = run_cli("run", f"{module}.Four", "--log-format", "json", cwd=tmp_path)
    baseline_took = time.monotonic() - started
    with blackhole() as port:
        config = write_config(tmp_path, email_settings(port, timeout=5), flush_timeout=1)
        started = time.monotonic()
        result = run_cli(
            "run",
            f"{module}.Four",
            "--config",
            str(config),
            "--log-format",
            "json",
            cwd=tmp_path,
        )
        elapsed = time.monotonic() - started
    assert baseline.returncode == 1, baseline.stderr
    assert result.returncode == 1, result.stderr
    assert elapsed < baseline_took + 10, f"took {elapsed:.1f} s, {baseline_took:.1f} s alone"
    assert timeless(result.stdout) == timeless(baseline.stdout)  # the same execution summary
    failed_at = [
        datetime.fromisoformat(r["timestamp"]).timestamp()
        for r in json_lines(result.stderr)
        if r["event"] == "task_failed"
    ]
    assert len(failed_at) == 4, result.stderr
    # the loop went on to the next task without waiting for a send (each would take 5 s)
    assert max(failed_at) - min(failed_at) < 10, failed_at


@pytest.mark.timeout(90)
def test_notifications_lost_to_a_blackhole_are_reported_at_exit(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """When the blackhole keeps the first send in flight past ``flush_timeout``, the worker
    still says at exit that the 4 notifications were not delivered (SPEC: a notifier that
    fails is logged) instead of exiting without a word about them."""
    module = task_module(TASKS)
    with blackhole() as port:
        config = write_config(tmp_path, email_settings(port, timeout=5), flush_timeout=1)
        result = run_cli(
            "run",
            f"{module}.Four",
            "--config",
            str(config),
            "--log-format",
            "json",
            cwd=tmp_path,
        )
    assert result.returncode == 1, result.stderr
    leftovers = [r for r in json_lines(result.stderr) if "undelivered" in r]
    assert [r["undelivered"] for r in leftovers] == [4], result.stderr


@pytest.mark.timeout(90)
def test_a_refused_connection_is_logged_once_and_does_not_block(
    tmp_path: Path, task_module: WriteModule, run_cli: RunCli
) -> None:
    """With nothing listening on the SMTP port, 4 failing tasks still exit 1 quickly (not much
    later than without a notifier); the failure is logged once for the notifier (not once per
    message) and the 4 undelivered messages are reported at exit."""
    module = task_module(TASKS)
    config = write_config(tmp_path, email_settings(free_port(), timeout=5), flush_timeout=1)
    started = time.monotonic()
    run_cli("run", f"{module}.Four", "--log-format", "json", cwd=tmp_path)
    baseline_took = time.monotonic() - started
    started = time.monotonic()
    result = run_cli(
        "run", f"{module}.Four", "--config", str(config), "--log-format", "json", cwd=tmp_path
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < baseline_took + 10, f"took {elapsed:.1f} s, {baseline_took:.1f} s alone"
    records = json_lines(result.stderr)
    failures = failure_lines(records)
    assert len(failures) == 1, result.stderr
    assert failures[0]["notifier"] == "email"
    assert failures[0]["error"].startswith("NotifierError: cannot reach 127.0.0.1:")
    leftovers = [r for r in records if r["event"].startswith("notifications not delivered")]
    assert [r["undelivered"] for r in leftovers] == [4], result.stderr


def test_the_email_notifier_passes_check_notifier() -> None:
    """``check_notifier`` passes against aiosmtpd (and a refused port as the failing endpoint),
    and the server received both sample messages as emails with their subjects, addressed to
    the configured recipient plus the sample's owner."""
    recorder = Recorder()
    with smtp_server(recorder) as port:
        messages = check_notifier(
            EmailNotifier,
            email_settings(port, timeout=5),
            failing_settings=email_settings(free_port(), timeout=5),
            timeout=20,
        )
    assert [m.kind for m in messages] == ["failed", "aggregate"]
    assert [str(m.parsed()["Subject"]) for m in recorder.mails] == [m.subject for m in messages]
    assert [m.rcpt_tos for m in recorder.mails] == [(OPS, OWNER), (OPS, OWNER)]
    assert [m.parsed()["X-Conveyor-Kind"] for m in recorder.mails] == ["failed", "aggregate"]
    assert recorder.mails[1].body().rstrip("\n") == messages[1].text.rstrip("\n")


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"security": "tls"}, "security"),
        ({"username": "conveyor", "password": "pw"}, "security"),
        ({"smtp_port": 0}, "smtp_port"),
        ({"recipients": [OPS, "ops.example.com"]}, "recipients"),
        ({"security": "starttls", "ca_file": "/nonexistent/ca.pem"}, "ca_file"),
        ({"recipients": [OPS, "ops@example.com\rBcc: someone@example.net"]}, "recipients"),
    ],
    ids=[
        "security-choice",
        "login-in-clear",
        "port-zero",
        "recipient-without-at",
        "missing-ca-file",
        "recipient-with-cr",
    ],
)
def test_bad_email_settings_exit_2_naming_the_key(
    settings: dict[str, Any],
    key: str,
    tmp_path: Path,
    task_module: WriteModule,
    run_cli: RunCli,
) -> None:
    """A bad ``[notifiers.email]`` value stops ``conveyor run`` before any task runs: exit 2
    and one stderr line naming ``notifiers.email.<key>``, no traceback."""
    module = task_module(TASKS)
    config = write_config(tmp_path, {**email_settings(25), **settings})
    result = run_fails(run_cli, tmp_path, module, config)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("conveyor: error: ")
    assert f"notifiers.email.{key}" in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_plugins_lists_the_email_notifier(tmp_path: Path, run_cli: RunCli) -> None:
    """``conveyor plugins`` lists ``email`` in group ``conveyor.notifiers``, from conveyor,
    with status ok."""
    result = run_cli("plugins", cwd=tmp_path, timeout=30)
    rows = [line.split() for line in result.stdout.splitlines()[1:] if line.strip()]
    email_rows = [r for r in rows if r[:2] == ["conveyor.notifiers", "email"]]
    assert len(email_rows) == 1, result.stdout
    assert email_rows[0][2] == "conveyor"
    assert email_rows[0][-1] == "ok"
