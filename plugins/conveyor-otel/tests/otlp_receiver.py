"""A real OTLP/HTTP trace receiver on 127.0.0.1 (for the tests), and the span tree it saw.

``OtlpReceiver`` accepts ``POST /v1/traces`` (protobuf, gzip or deflate or plain), decodes
``ExportTraceServiceRequest`` with opentelemetry-proto and answers an empty
``ExportTraceServiceResponse``. ``SilentReceiver`` accepts connections and never answers.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

STATUS_UNSET = Status.STATUS_CODE_UNSET
STATUS_OK = Status.STATUS_CODE_OK
STATUS_ERROR = Status.STATUS_CODE_ERROR


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One received span, decoded."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    service: str


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def decode_spans(body: bytes) -> list[SpanRecord]:
    """The spans of one ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    SpanRecord(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        status_code=span.status.code,
                        status_message=span.status.message,
                        service=str(resource.get("service.name", "")),
                    )
                )
    return spans


class OtlpReceiver:
    """An OTLP/HTTP collector on loopback that keeps every span it is sent."""

    def __init__(self) -> None:
        """Bind a free port and start serving."""
        self.spans: list[SpanRecord] = []
        self.requests = 0
        self.bad: list[str] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def got(self, body: bytes) -> None:
        """Record the spans of one request body."""
        spans = decode_spans(body)
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)

    def snapshot(self) -> list[SpanRecord]:
        """The spans received so far."""
        with self._lock:
            return list(self.spans)

    def named(self, prefix: str) -> list[SpanRecord]:
        """The spans received so far whose name starts with ``prefix``."""
        return [span for span in self.snapshot() if span.name.startswith(prefix)]

    def wait_spans(self, count: int, prefix: str = "", timeout: float = 30) -> list[SpanRecord]:
        """Wait (bounded) until ``count`` spans named ``prefix``… arrived; all spans then."""
        deadline = time.monotonic() + timeout
        while len(self.named(prefix)) < count:
            if time.monotonic() > deadline:
                names = sorted(span.name for span in self.snapshot())
                raise AssertionError(f"{count} spans {prefix!r}… not received; got {names}")
            time.sleep(0.05)
        return self.snapshot()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def _handler_for(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path != "/v1/traces":
                receiver.bad.append(self.path)
                self._answer(404, b"")
                return
            receiver.got(body)
            self._answer(200, ExportTraceServiceResponse().SerializeToString())

        def _answer(self, code: int, payload: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class SilentReceiver:
    """A listening socket that accepts connections and never answers (a hung collector)."""

    def __init__(self) -> None:
        """Listen on a free loopback port; connections queue up in the backlog."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        """Stop listening."""
        self.sock.close()


def children(spans: list[SpanRecord], parent: SpanRecord) -> Iterator[SpanRecord]:
    """The spans whose parent is ``parent``."""
    return (span for span in spans if span.parent_id == parent.span_id)
