"""``conveyor scheduler``: build the service from the configuration and serve it on uvicorn."""

from __future__ import annotations

import errno
import ipaddress
import socket
import sys
from typing import Any

from ..backends import build_backend
from ..config import Config
from ..errors import ConfigError
from ..scheduler import Scheduler
from ..scheduler.persist import from_row
from .stores import StoreContext

__all__ = ["bind_listener", "build_service", "check_bind", "serve"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str) -> None:
    """Refuse to listen beyond loopback without a token (ConfigError → exit 2)."""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"refusing to listen on {host!r} without a token: a non-loopback address needs "
            "[server] token or token_file (or bind 127.0.0.1)"
        )


def build_service(config: Config) -> Any:
    """The scheduler policy restored from the configured state store, ready to serve."""
    from .app import SchedulerService

    server = config.server
    store = build_backend(
        "conveyor.state_stores",
        server.state_store,
        config,
        lambda settings: StoreContext(server.state_path, settings),
    )
    rows, workers = store.load()
    core = Scheduler(config)
    core.restore([from_row(row) for row in rows], workers)
    return SchedulerService(core, store)


def serve(config: Config) -> int:
    """Serve until stopped; returns the exit code."""
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise ConfigError(
            f"the central scheduler needs the 'server' extra ({exc}); "
            "install it with: pip install 'conveyor[server]'"
        ) from None
    server = config.server
    check_bind(server.host, server.token)
    # bind before the state store is opened: a server that cannot listen creates nothing
    listener = bind_listener(server.host, server.port)
    try:
        service = build_service(config)
        try:
            app = create_app(service, server.token, server.max_request_bytes)
            port = listener.getsockname()[1]
            print(
                f"conveyor scheduler on http://{_url_host(server.host)}:{port} "
                f"(state: {server.state_store} {server.state_path})",
                file=sys.stderr,
                flush=True,
            )
            settings = uvicorn.Config(app, log_level="warning", access_log=False)
            uvicorn.Server(settings).run(sockets=[listener])
        finally:
            service.store.close()
    finally:
        listener.close()
    return 0


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; ConfigError (exit 2) naming the address if the
    port is taken or the address cannot be used."""
    where = f"{_url_host(host)}:{port}"
    sock: socket.socket | None = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
        # proto must be IPPROTO_TCP (socket.create_server leaves it 0): asyncio sets TCP_NODELAY
        # on accepted connections only then, and without it every keep-alive request waits
        # ~40 ms for a delayed ACK
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # as socket.create_server: "::" is not also IPv4's
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(2048)
        return sock
    except OSError as exc:
        if sock is not None:
            sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason = "the address is already in use (is another scheduler running there?)"
        raise ConfigError(f"cannot listen on {where}: {reason}") from None


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
