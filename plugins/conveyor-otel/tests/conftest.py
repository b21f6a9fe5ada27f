"""Fixtures: a real OTLP/HTTP receiver on loopback, and a silent one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otlp_receiver import OtlpReceiver, SilentReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """A running receiver that keeps every span it is sent."""
    server = OtlpReceiver()
    yield server
    server.close()


@pytest.fixture
def silent() -> Iterator[SilentReceiver]:
    """A collector that accepts connections and never answers."""
    server = SilentReceiver()
    yield server
    server.close()
