"""Pinning the central scheduler's CA: ``[scheduler] ca_file``, ``client_cert`` and
``client_key`` for the ``http`` transport (issue 20, item 10).

Real TLS throughout: a throwaway CA (trustme) issues the proxy's certificate for
127.0.0.1/localhost and the workers' client certificates; :class:`TlsProxy`, a small
TLS-terminating proxy on loopback, stands in front of a real ``conveyor scheduler``
subprocess, as nginx would; the workers are real ``conveyor run`` processes. Nothing is
synchronised by sleeping: processes are waited for, the server is polled with deadlines.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from conveyor.cli import main
from conveyor.config import Config, load_config, to_toml
from conveyor.errors import ConfigError, ConveyorError, SchedulerUnavailable
from conveyor.testing.processes import SchedulerProcess, child_env, kill_marked, wait_for
from conveyor.transports.http import HttpTransport

MARKER = "SCHEDULER_TLS_MARKER"

TASKS = '''
import json
import os
import socket
import ssl

import conveyor


class Leaf(conveyor.Task):
    root = conveyor.Parameter()
    n = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, f"leaf-{self.n}"))

    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class Top(conveyor.Task):
    root = conveyor.Parameter()

    def requires(self):
        return [Leaf(root=self.root, n=n) for n in range(3)]

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "top"))

    def run(self):
        with self.output().open("w") as out:
            out.write("ok")


class TrustView(conveyor.Task):
    """Records what task code sees of TLS: the variables, the default store, and whether a
    default context trusts the TLS server on port ``probe`` of 127.0.0.1."""

    root = conveyor.Parameter()
    probe = conveyor.IntParameter()

    def output(self):
        return conveyor.LocalTarget(os.path.join(self.root, "trust.json"))

    def run(self):
        context = ssl.create_default_context()
        try:
            with socket.create_connection(("127.0.0.1", self.probe), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                    verdict = "trusted"
        except ssl.SSLCertVerificationError as exc:
            verdict = "untrusted: " + exc.verify_message
        view = {
            "pid": os.getpid(),
            "env": {k: os.environ.get(k) for k in ("SSL_CERT_FILE", "SSL_CERT_DIR")},
            "stats": context.cert_store_stats(),
            "verdict": verdict,
        }
        with self.output().open("w") as out:
            json.dump(view, out)
'''


# --- a TLS-terminating proxy ----------------------------------------------------------------------


class TlsProxy:
    """A TLS-terminating proxy on a free loopback port in front of a plain-HTTP server.

    Each connection is handled by its own thread: the TLS handshake with ``context`` (a
    server-side context; ``verify_mode = CERT_REQUIRED`` makes it ask for client
    certificates), then bytes pumped both ways to ``127.0.0.1:target_port``. Every handshake
    is counted in :attr:`handshakes`, and the reason of each failed one kept in
    :attr:`failures`.
    """

    def __init__(self, context: ssl.SSLContext, target_port: int) -> None:
        """Listen at once; :meth:`close` (or leaving the ``with`` block) stops."""
        self._context = context
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.handshakes = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="tls-proxy", daemon=True).start()

    def url(self, host: str = "127.0.0.1") -> str:
        """The proxy's ``https://`` URL, naming it by ``host``."""
        return f"https://{host}:{self.port}"

    def handshakes_after(self, least: int) -> int:
        """:attr:`handshakes` once at least ``least`` have ended (a client gives up on a
        certificate before the proxy's side of the handshake has failed)."""
        wait_for(lambda: self.handshakes >= least, 10, f"{least} handshake(s) at the proxy")
        return self.handshakes

    def close(self) -> None:
        """Stop accepting; the connection threads end within a fraction of a second."""
        self._closed.set()
        self._listener.close()

    def __enter__(self) -> TlsProxy:
        """The proxy itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the proxy."""
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10)
        with self._context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False) as tls:
            try:
                tls.do_handshake()
            except OSError as exc:  # ssl.SSLError included
                with self._lock:
                    self.handshakes += 1
                    self.failures.append(str(exc))
                _linger(tls)
                return
            with self._lock:
                self.handshakes += 1
            with socket.create_connection(self._target, timeout=10) as backend:
                self._pump(tls, backend)

    def _pump(self, tls: ssl.SSLSocket, backend: socket.socket) -> None:
        peers: dict[socket.socket, socket.socket] = {tls: backend, backend: tls}
        while not self._closed.is_set():
            ready = [tls] if tls.pending() else select.select(list(peers), [], [], 0.2)[0]
            for sock in ready:
                try:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
                except OSError:
                    return


def _linger(tls: ssl.SSLSocket) -> None:
    """After a failed handshake (OpenSSL has sent its alert): half-close, and read what the
    client still sends until it closes, so that closing with unread bytes does not reset the
    connection before the client has read the alert."""
    with contextlib.suppress(OSError):
        tls.shutdown(socket.SHUT_WR)  # (the TLS layer is dropped: plain reads from here)
        while tls.recv(65536):
            pass


# --- certificates, servers, workers ---------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A throwaway CA and what it issued, written into one directory."""

    ca: trustme.CA
    ca_file: Path
    server: trustme.LeafCert
    client_cert: Path
    client_key: Path
    client_pem: Path  # certificate and key in one file
    directory: Path

    def server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        """A server-side context presenting the proxy's certificate (for 127.0.0.1 and
        localhost); with ``require_client_cert``, it asks for a certificate of this CA."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server.configure_cert(context)
        if require_client_cert:
            self.ca.configure_trust(context)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    directory = tmp_path / "pki"
    directory.mkdir()
    ca = trustme.CA()
    client = ca.issue_cert("worker@conveyor.test")
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    client_cert = directory / "client.crt"
    client.cert_chain_pems[0].write_to_path(str(client_cert))
    client_key = directory / "client.key"
    client.private_key_pem.write_to_path(str(client_key))
    client_pem = directory / "client.pem"
    client.private_key_and_cert_chain_pem.write_to_path(str(client_pem))
    server = ca.issue_cert("127.0.0.1", "localhost")
    return Pki(ca, ca_file, server, client_cert, client_key, client_pem, directory)


@pytest.fixture
def marker() -> Iterator[str]:
    """A per-test marker; every process carrying it is killed afterwards."""
    value = uuid.uuid4().hex
    yield value
    kill_marked(MARKER, value)


@pytest.fixture
def server(tmp_path: Path, marker: str) -> Iterator[SchedulerProcess]:
    """A started ``conveyor scheduler`` on plain HTTP (loopback, no token)."""
    directory = tmp_path / "server"
    directory.mkdir()
    config = directory / "server.toml"
    config.write_text("[scheduler]\nretry_delay = 3600\n", encoding="utf-8")
    proc = SchedulerProcess(directory, config, child_env(directory, MARKER, marker))
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The workers' directory: the task module ``tlsdemo`` and, per test, worker.toml."""
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / "tlsdemo.py").write_text(TASKS, encoding="utf-8")
    return directory


def write_worker_toml(workdir: Path, url: str, **tls: str) -> None:
    """worker.toml for the http transport at ``url`` with the TLS keys ``tls`` (paths)."""
    lines = ["[scheduler]", 'transport = "http"', f"url = {json.dumps(url)}"]
    lines += ["rpc_retries = 5", "rpc_retry_wait = 0.05", "rpc_retry_max_wait = 0.1"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in tls.items()]
    (workdir / "worker.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def conveyor_run(workdir: Path, marker: str, *args: str) -> tuple[subprocess.Popen[str], str, str]:
    """Run ``conveyor run *args`` in ``workdir`` (its worker.toml is discovered) to the end:
    the process, its stdout and its stderr."""
    env = child_env(
        workdir,
        MARKER,
        marker,
        CONVEYOR_WORKER__WAIT_INTERVAL="0.1",
        CONVEYOR_WORKER__WAIT_JITTER="0",
        CONVEYOR_WORKER__PING_INTERVAL="0.2",
        CONVEYOR_LOGGING__FORMAT="json",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "run", *args],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    return proc, out, err


def statuses(server: SchedulerProcess) -> dict[str, str]:
    """Family and parameters -> status of every task the server knows (asked over plain HTTP)."""
    tasks = server.request("GET", "/api/v1/tasks").json()["tasks"]
    return {t["task_id"]: t["status"] for t in tasks}


def error_line(err: str) -> str:
    """The ``conveyor: error:`` line of a run's stderr (exactly one), after checking that
    nothing on stderr is a traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("conveyor: error:")]
    assert len(lines) == 1, err
    return lines[0]


# --- with a real scheduler behind a TLS proxy -----------------------------------------------------


@pytest.mark.timeout(90)
def test_a_worker_with_the_pinned_ca_builds_a_graph_over_https(
    server: SchedulerProcess, pki: Pki, workdir: Path, marker: str
) -> None:
    """With ``ca_file`` naming the private CA (a relative path, taken from the working
    directory), ``conveyor run`` with two workers registers and runs a four-task graph through
    the https:// URL of the proxy (a host name checked against the certificate); every
    connection went through TLS and every task is DONE on the server."""
    root = workdir / "out"
    root.mkdir()
    with TlsProxy(pki.server_context(), server.port) as proxy:
        ca_file = os.path.relpath(pki.ca_file, workdir)
        write_worker_toml(workdir, proxy.url("localhost"), ca_file=ca_file)
        proc, out, err = conveyor_run(
            workdir, marker, "--workers", "2", "tlsdemo.Top", "--root", str(root)
        )
        assert proc.returncode == 0, out + err
        assert proxy.handshakes >= 1
        assert proxy.failures == []
    assert sorted(p.name for p in root.iterdir()) == ["leaf-0", "leaf-1", "leaf-2", "top"]
    found = statuses(server)
    assert len(found) == 4
    assert set(found.values()) == {"DONE"}


@pytest.mark.timeout(90)
def test_without_ca_file_the_run_stops_with_a_certificate_error(
    server: SchedulerProcess, pki: Pki, workdir: Path, marker: str
) -> None:
    """Without ``ca_file`` the system's CAs do not trust the proxy: ``conveyor run`` exits 2
    with one error line naming the URL, the verification failure and ``ca_file``, no
    traceback, after one handshake (a certificate error is not retried, although
    ``rpc_retries = 5``); the server never heard of the task."""
    with TlsProxy(pki.server_context(), server.port) as proxy:
        write_worker_toml(workdir, proxy.url())
        proc, out, err = conveyor_run(workdir, marker, "tlsdemo.Top", "--root", str(workdir))
        assert proc.returncode == 2, out + err
        line = error_line(err)
        assert line.startswith(
            f"conveyor: error: TLS with the scheduler at {proxy.url()} failed: its "
            "certificate did not verify: "
        )
        assert "set [scheduler] ca_file to the CA that signed it" in line
        assert proxy.handshakes_after(1) == 1
    assert statuses(server) == {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("key_apart", [True, False], ids=["key-file", "one-pem"])
def test_mutual_tls_works_with_a_client_certificate(
    server: SchedulerProcess, pki: Pki, workdir: Path, marker: str, key_apart: bool
) -> None:
    """Behind a proxy that requires client certificates of the CA, ``client_cert`` with
    ``client_key`` (or one PEM holding both, as ``client_cert`` alone) lets the run build
    its graph over https; no handshake failed."""
    root = workdir / "out"
    root.mkdir()
    if key_apart:
        tls = {"client_cert": str(pki.client_cert), "client_key": str(pki.client_key)}
    else:
        tls = {"client_cert": str(pki.client_pem)}
    with TlsProxy(pki.server_context(require_client_cert=True), server.port) as proxy:
        write_worker_toml(workdir, proxy.url(), ca_file=str(pki.ca_file), **tls)
        proc, out, err = conveyor_run(workdir, marker, "tlsdemo.Top", "--root", str(root))
        assert proc.returncode == 0, out + err
        assert proxy.failures == []
    assert set(statuses(server).values()) == {"DONE"}


@pytest.mark.timeout(90)
def test_mutual_tls_without_a_client_certificate_fails_clearly(
    server: SchedulerProcess, pki: Pki, workdir: Path, marker: str
) -> None:
    """Behind a proxy that requires a client certificate, a worker without ``client_cert``
    exits 2 with one line saying the server asks for a client certificate and naming
    ``client_cert``, no traceback, without retrying."""
    with TlsProxy(pki.server_context(require_client_cert=True), server.port) as proxy:
        write_worker_toml(workdir, proxy.url(), ca_file=str(pki.ca_file))
        proc, out, err = conveyor_run(workdir, marker, "tlsdemo.Top", "--root", str(workdir))
        assert proc.returncode == 2, out + err
        line = error_line(err)
        assert line.startswith(f"conveyor: error: TLS with the scheduler at {proxy.url()} failed:")
        assert "client certificate: set [scheduler] client_cert" in line
        assert proxy.handshakes_after(1) == 1
    assert statuses(server) == {}


@pytest.mark.timeout(90)
def test_task_code_keeps_the_default_trust_store(
    server: SchedulerProcess, pki: Pki, workdir: Path, marker: str
) -> None:
    """The pinning does not leak to task code: a task run inline (in the very process whose
    transport trusts the private CA) sees SSL_CERT_FILE / SSL_CERT_DIR as the test's own
    environment has them, the same default store as a process without conveyor, and a default
    context that does not trust the proxy the worker itself talks to."""
    with TlsProxy(pki.server_context(), server.port) as proxy:
        write_worker_toml(workdir, proxy.url(), ca_file=str(pki.ca_file))
        probe = str(proxy.port)
        args = ["tlsdemo.TrustView", "--root", str(workdir), "--probe", probe]
        proc, out, err = conveyor_run(workdir, marker, "--workers", "1", *args)
        assert proc.returncode == 0, out + err
    view: dict[str, Any] = json.loads((workdir / "trust.json").read_text(encoding="utf-8"))
    assert view["pid"] == proc.pid  # inline: the worker's own process
    assert view["env"] == {k: os.environ.get(k) for k in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    assert str(pki.ca_file) not in view["env"].values()
    assert view["stats"] == ssl.create_default_context().cert_store_stats()
    assert view["verdict"].startswith("untrusted: ")


# --- the transport on its own, against the proxy ------------------------------------------------


def transport(url: str, **scheduler: Any) -> HttpTransport:
    """An http transport for ``url`` with more ``[scheduler]`` keys, quick to give up."""
    config = Config().with_section(
        "scheduler",
        transport="http",
        url=url,
        rpc_retries=5,
        rpc_retry_wait=0.01,
        rpc_retry_max_wait=0.01,
        **scheduler,
    )
    return HttpTransport(config)


def refusal(http: HttpTransport) -> str:
    """The message of the ConveyorError that asking for the task list raises at once (not
    SchedulerUnavailable, which comes when every retry has failed)."""
    with pytest.raises(ConveyorError) as info:
        http.task_list()
    assert not isinstance(info.value, SchedulerUnavailable), info.value
    return str(info.value)


def test_a_certificate_for_another_host_name_is_refused(server: SchedulerProcess, pki: Pki) -> None:
    """Hostname checking stays on with a pinned CA: a certificate of the right CA issued for
    another name is refused at once, naming the mismatch and the url key, not retried."""
    other = pki.ca.issue_cert("scheduler.example")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    other.configure_cert(context)
    with TlsProxy(context, server.port) as proxy:
        message = refusal(transport(proxy.url(), ca_file=str(pki.ca_file)))
        assert proxy.handshakes_after(1) == 1
    assert message.startswith(f"TLS with the scheduler at {proxy.url()} failed: its certificate")
    assert "mismatch" in message
    assert "expected a host in [scheduler] url that the certificate is issued for" in message


def test_a_ca_file_of_another_ca_replaces_the_system_store(
    server: SchedulerProcess, pki: Pki
) -> None:
    """``ca_file`` replaces the trust store of the transport: with another CA pinned, the
    proxy's certificate is refused, naming the ca_file, and the call is not retried."""
    other_ca = pki.directory / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    with TlsProxy(pki.server_context(), server.port) as proxy:
        message = refusal(transport(proxy.url(), ca_file=str(other_ca)))
        assert proxy.handshakes_after(1) == 1
    assert f"[scheduler] ca_file = {str(other_ca)!r} does not hold the CA that signed it" in (
        message
    )


def test_a_client_certificate_the_proxy_does_not_trust_is_refused(
    server: SchedulerProcess, pki: Pki
) -> None:
    """A client certificate of a CA the proxy does not trust: the refusal names client_cert
    and is not retried."""
    stranger = trustme.CA().issue_cert("intruder@conveyor.test")
    pem = pki.directory / "stranger.pem"
    stranger.private_key_and_cert_chain_pem.write_to_path(str(pem))
    with TlsProxy(pki.server_context(require_client_cert=True), server.port) as proxy:
        http = transport(proxy.url(), ca_file=str(pki.ca_file), client_cert=str(pem))
        message = refusal(http)
        assert proxy.handshakes_after(1) == 1
    assert "the server refused the handshake" in message
    assert f"it does not accept the client certificate [scheduler] client_cert = {str(pem)!r}" in (
        message
    )


def test_an_https_url_to_the_plain_http_server_is_refused_at_once(
    server: SchedulerProcess,
) -> None:
    """An https:// URL pointing at the server's plain-HTTP port fails at once with "does not
    speak TLS" (a ConveyorError, not SchedulerUnavailable after every retry)."""
    message = refusal(transport(f"https://127.0.0.1:{server.port}"))
    assert "the server does not speak TLS" in message
    assert "if it serves plain HTTP, expected an http:// URL" in message


# --- configuration ------------------------------------------------------------------------------


def test_tls_files_are_resolved_from_the_working_directory(pki: Pki) -> None:
    """Relative TLS paths are taken from the directory the configuration is loaded in and
    kept absolute; a variable sets them like any key; ``conveyor config`` shows the paths
    of ca_file and client_cert and hides client_key's value like every key-named one."""
    (pki.directory / "worker.toml").write_text(
        '[scheduler]\nca_file = "ca.pem"\nclient_cert = "client.crt"\n', encoding="utf-8"
    )
    env = {"CONVEYOR_SCHEDULER__CLIENT_KEY": "client.key"}
    config = load_config(env=env, cwd=pki.directory)
    assert config.scheduler.ca_file == str(pki.ca_file)
    assert config.scheduler.client_cert == str(pki.client_cert)
    assert config.scheduler.client_key == str(pki.client_key)
    assert config.with_overrides(workers=2).scheduler.ca_file == str(pki.ca_file)
    shown = to_toml(config)
    assert f"ca_file = {json.dumps(str(pki.ca_file))}" in shown
    assert 'client_key = "***"' in shown
    assert Config().scheduler.ca_file == ""


@pytest.mark.parametrize("key", ["ca_file", "client_cert", "client_key"])
def test_a_missing_tls_file_is_a_config_error_naming_key_and_path(
    tmp_path: Path, key: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TLS file that cannot be read stops ``conveyor config`` with exit 2 and one line
    naming the file, the key and the path (a relative one taken from the current directory)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "present.pem").write_text("x", encoding="utf-8")
    keys = {key: "absent.pem"}
    if key == "client_key":
        keys["client_cert"] = "present.pem"
    table = "".join(f'{k} = "{v}"\n' for k, v in keys.items())
    config = tmp_path / "worker.toml"
    config.write_text("[scheduler]\n" + table, encoding="utf-8")
    assert main(["config", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"conveyor: error: {config}: scheduler.{key}: cannot read "
        f"{str(tmp_path / 'absent.pem')!r}: No such file or directory\n"
    )


def test_client_key_without_client_cert_is_a_config_error(pki: Pki) -> None:
    """``client_key`` alone is refused, naming both keys."""
    with pytest.raises(ConfigError) as info:
        Config().with_section("scheduler", client_key=str(pki.client_key))
    assert str(info.value) == (
        "overrides: scheduler.client_key is set without scheduler.client_cert; expected "
        "client_cert too (the certificate the key belongs to)"
    )
    assert info.value.key == "scheduler.client_key"


def test_a_pasted_private_key_is_refused_without_being_echoed(pki: Pki) -> None:
    """PEM text given instead of a path is refused with a message that does not contain it."""
    pem = pki.client_key.read_text(encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        Config().with_section("scheduler", client_cert=str(pki.client_cert), client_key=pem)
    assert "scheduler.client_key holds PEM text; expected the path of a PEM file" in str(info.value)
    assert "BEGIN" not in str(info.value)


def test_tls_keys_with_an_http_url_are_a_config_error(pki: Pki) -> None:
    """A TLS key with a plain http:// URL is a ConfigError when the transport is built,
    rather than a pinning that is silently not used."""
    with pytest.raises(ConfigError) as info:
        transport("http://127.0.0.1:8082", ca_file=str(pki.ca_file))
    assert str(info.value) == (
        "scheduler.ca_file set, but scheduler.url = 'http://127.0.0.1:8082' is plain http, "
        "where they would not be used; expected an https:// URL (or remove them)"
    )


def test_unusable_tls_files_are_config_errors_that_never_quote_the_key(pki: Pki) -> None:
    """A ca_file without certificates, a key of another certificate and an encrypted key
    (never prompted for) are ConfigErrors naming the key; no message holds key material."""
    garbage = pki.directory / "garbage.pem"
    garbage.write_text("not a certificate\n", encoding="utf-8")
    other_key = pki.directory / "other.key"
    trustme.CA().issue_cert("x").private_key_pem.write_to_path(str(other_key))
    encrypted = pki.directory / "encrypted.key"
    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    url = "https://127.0.0.1:1"
    cases = [
        ({"ca_file": str(garbage)}, "scheduler.ca_file: no CA certificate could be loaded"),
        (
            {"client_cert": str(pki.client_cert), "client_key": str(other_key)},
            "the key does not belong to the certificate",
        ),
        (
            {"client_cert": str(pki.client_cert), "client_key": str(encrypted)},
            f"scheduler.client_key: the private key in {str(encrypted)!r} is encrypted",
        ),
    ]
    secrets = [pki.client_key.read_text(), other_key.read_text(), encrypted.read_text()]
    for keys, expected in cases:
        with pytest.raises(ConfigError) as info:
            transport(url, **keys)
        assert expected in str(info.value)
        assert not any(line in str(info.value) for s in secrets for line in s.splitlines()[1:-1])
