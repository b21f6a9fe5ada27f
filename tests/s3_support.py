"""A real S3-protocol server for tests: moto's ThreadedMotoServer on a free loopback port."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.testing.processes import free_port


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[tuple[str, Any]]:
    """A moto S3 server with ``bucket`` made: its endpoint and a boto3 client (the ground
    truth, apart from s3fs's caches). The AWS variables point at test credentials (and at no
    file of this machine's) while it runs."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }.items():
            mp.setenv(name, value)
        mp.delenv("AWS_PROFILE", raising=False)
        mp.delenv("AWS_SESSION_TOKEN", raising=False)
        import boto3  # type: ignore[import-untyped]
        import s3fs

        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            endpoint = f"http://127.0.0.1:{port}"
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            client.create_bucket(Bucket=bucket)
            yield endpoint, client
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            server.stop()
