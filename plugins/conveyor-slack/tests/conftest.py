"""Fixtures: real loopback servers standing in for Slack's incoming webhook.

``webhook`` records every POST and answers with programmed replies; ``silent_endpoint``
accepts connections and never answers; ``refused_url`` points at a port where nothing listens.
Every webhook URL carries :data:`SECRET_PATH`, which must never leak into errors or logs.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from slack_webhook_fake import SECRET_MARKER, SECRET_PATH, FakeWebhook


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Talk to the loopback servers directly, whatever proxy the environment names."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def webhook() -> Iterator[FakeWebhook]:
    """A running fake webhook that answers 200 "ok" unless told otherwise."""
    hook = FakeWebhook()
    hook.start()
    yield hook
    hook.stop()


@pytest.fixture
def failing_webhook() -> Iterator[FakeWebhook]:
    """A second fake webhook that answers every request with 500."""
    hook = FakeWebhook()
    hook.always(500, "internal_error")
    hook.start()
    yield hook
    hook.stop()


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A webhook URL whose port has a bound socket that does not listen: connections are
    refused, and no other test can take the port meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{sock.getsockname()[1]}{SECRET_PATH}"
    sock.close()


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A webhook URL whose server accepts connections (the kernel's backlog does) and never
    answers."""
    sock = socket.create_server(("127.0.0.1", 0), backlog=16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}{SECRET_PATH}"
    sock.close()


@pytest.fixture
def secret_parts() -> tuple[str, ...]:
    """The parts of every test webhook's path that must never be shown."""
    return tuple(part for part in SECRET_PATH.split("/") if SECRET_MARKER in part)
