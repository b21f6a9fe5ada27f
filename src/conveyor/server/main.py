"""``conveyor scheduler``: build the service from the configuration and serve it on uvicorn."""

from __future__ import annotations

import ipaddress
import sys
from typing import Any

from ..backends import load_backend
from ..config import Config
from ..errors import ConfigError
from ..scheduler import Scheduler
from ..scheduler.persist import from_row

__all__ = ["build_service", "check_bind", "serve"]


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
    store_cls = load_backend("conveyor.state_stores", server.state_store)
    schema = getattr(store_cls, "settings_schema", {})
    settings = config.backend_settings("state_stores", server.state_store, schema)
    store = store_cls(server.state_path, settings)
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
    service = build_service(config)
    app = create_app(service, server.token, server.max_request_bytes)
    print(
        f"conveyor scheduler on http://{server.host}:{server.port} "
        f"(state: {server.state_store} {server.state_path})",
        file=sys.stderr,
        flush=True,
    )
    try:
        uvicorn.run(app, host=server.host, port=server.port, log_level="warning", access_log=False)
    finally:
        service.store.close()
    return 0
