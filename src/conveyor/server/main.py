"""``conveyor scheduler``: build the service from the configuration and serve it on uvicorn.

Start-up refuses, with one ``conveyor: error:`` line and exit code 2, whatever it cannot serve
safely: a non-loopback address without a token, a malformed ``[server] allowed_hosts`` entry, a
port it cannot bind (checked before the state store is opened, so nothing is created), a state
file that is not a conveyor state database, and unusable rows in one. Those rows are moved
aside instead, and the server starts, only with ``[server] on_corrupt_state = "quarantine"``
(``conveyor scheduler --recover``).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import socket
import sys
from collections.abc import Iterator
from typing import Any

import structlog

from ..backends import build_backend
from ..config import Config, ServerSettings
from ..errors import ConfigError
from ..scheduler import Scheduler
from ..scheduler.persist import RowError, from_row
from ..scheduler.policy import TaskRecord
from .hosts import OwnAddress, is_loopback, url_host
from .stores import CanLead, CanQuarantine, CorruptState, StateStore, StoreContext, Workers

__all__ = [
    "bind_listener",
    "build_service",
    "check_bind",
    "collector_paused",
    "load_state",
    "records_of",
    "serve",
]

log = structlog.get_logger("conveyor.server")

_RECOVER_HINT = (
    "nothing was changed; to move unusable rows aside and start without them, run "
    '`conveyor scheduler --recover` or set [server] on_corrupt_state = "quarantine"'
)


def check_bind(host: str, token: str) -> None:
    """Refuse to listen beyond loopback without a token (ConfigError → exit 2)."""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"refusing to listen on {host!r} without a token: a non-loopback address needs "
            "[server] token or token_file (or bind 127.0.0.1)"
        )


def build_service(config: Config, holder: str = "") -> Any:
    """The scheduler policy restored from the configured state store, ready to serve;
    ``holder`` names this server to a second one started on the same state.

    A store several servers share (:class:`~.stores.CanLead`) is only checked here (unusable
    rows stop the start, as with any store): the server starts as a standby and its
    :class:`~.leadership.Campaign` (started with the app) loads the state once it takes the
    lease.
    """
    from .app import STANDBY, SchedulerService
    from .hooks import load_server_hooks
    from .leadership import Campaign

    server = config.server
    hooks = load_server_hooks(config.plugins)  # (before the store: a bad plugin opens nothing)
    store = build_backend(
        "conveyor.state_stores",
        server.state_store,
        config,
        lambda settings: StoreContext(server.state_path, settings, server.public_url or holder),
    )
    where = f"{server.state_store} {server.state_path}"
    shared = isinstance(store, CanLead)
    try:
        core = Scheduler(config)
        with collector_paused():
            loaded = load_state(store, server)  # (shared: checked now, loaded again leading)
            if not shared:
                core.restore(*loaded)
            del loaded
    except BaseException:
        store.close()
        raise
    service = SchedulerService(core, store, server.state_store if shared else where, hooks)
    service.public_url = server.public_url or holder
    if shared:
        service.role = STANDBY
        core.frozen = True
        store.fence(0)  # (nothing is saved before it leads)
        service.campaign = Campaign(
            service, store, lease=server.leader_lease, load=lambda: load_state(store, server)
        )
    else:
        service.leader = service.public_url
    try:  # (once the state is loaded: ready to serve)
        hooks.configure(config)  # a plugin refusing its settings stops the start, exit 2
    except BaseException:
        store.close()
        raise
    return service


def load_state(store: StateStore, server: ServerSettings) -> tuple[list[TaskRecord], Workers]:
    """The store's records and workers, each row checked by
    :func:`~conveyor.scheduler.persist.from_row`, with the cyclic garbage collector paused
    (:func:`collector_paused`).

    A store with a ``load_records()`` method (the built-in ones) makes the records itself,
    each row parsed and checked once; any other store's rows are made records here, each
    checked again.

    Unusable rows stop the start (ConfigError, nothing changed) unless ``on_corrupt_state`` is
    ``"quarantine"``: then the store moves them aside, the server says how many on stderr and
    in a warning, and the rest is loaded.
    """
    with collector_paused():
        try:
            return records_of(store, server.state_store)
        except CorruptState as exc:
            if server.on_corrupt_state != "quarantine":
                raise ConfigError(f"{exc}; {_RECOVER_HINT}", source=exc.location) from None
            if not isinstance(store, CanQuarantine):
                message = f"{exc}; the {server.state_store!r} state store cannot quarantine rows"
                raise ConfigError(message, source=exc.location) from None
            _announce(exc, store.quarantine(exc.bad))
        return records_of(store, server.state_store)


def records_of(store: StateStore, store_name: str) -> tuple[list[TaskRecord], Workers]:
    """``store.load_records()`` if the store has it, else ``store.load()``'s rows as records
    (each row let go once it is one; a row that is not one is a ConfigError naming the store
    ``store_name``). CorruptState as the store raises it."""
    load_records = getattr(store, "load_records", None)
    if callable(load_records):
        records, workers = load_records()
        return list(records), list(workers)
    rows, workers = store.load()
    rows.reverse()
    made = []
    while rows:
        made.append(_record(rows.pop(), store_name))
    return made, workers


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: a load makes millions of objects and no garbage
    cycles, and the collector would walk them all again and again. On the way out, one
    collection, then everything alive is moved out of the collector's reach for good
    (``gc.freeze()``: the loaded state lives as long as the server; reference counting still
    frees what is let go) and collection resumes. Inside another, or with the collector off,
    it does nothing."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


def _record(row: Any, store_name: str) -> TaskRecord:
    """A loaded row as a record; a row the store should have reported is refused."""
    try:
        return from_row(row)
    except RowError as exc:
        task_id = row.get("task_id") if isinstance(row, dict) else None
        raise ConfigError(
            f"the {store_name!r} state store returned an unusable task row (task_id "
            f"{task_id!r}): {exc}; refusing to serve it (a store reports such rows by raising "
            "CorruptState from load())"
        ) from None


def _announce(exc: CorruptState, where: str) -> None:
    """One line on stderr and a warning: how many rows went where, and the first reason."""
    first, count = exc.bad[0], len(exc.bad)
    rows = "1 unusable row" if count == 1 else f"{count} unusable rows"
    print(
        f"conveyor scheduler: moved {rows} into {where} (first: "
        f"{first.where}: {first.reason}); starting without them",
        file=sys.stderr,
        flush=True,
    )
    log.warning(
        "unusable state rows quarantined",
        count=count,
        state=exc.location,
        quarantine=where,
        first=first.where,
        reason=first.reason,
    )


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
    address = OwnAddress.of(server.host, server.port, server.allowed_hosts)
    # bind before the state store is opened: a server that cannot listen creates nothing
    listener = bind_listener(server.host, server.port)
    try:
        url = f"http://{url_host(server.host)}:{listener.getsockname()[1]}"
        service = build_service(config, holder=url)
        try:
            app = create_app(
                service,
                token=server.token,
                max_request_bytes=server.max_request_bytes,
                address=address,
                flush_timeout=config.notifiers.flush_timeout,
                luigi_rpc=server.luigi_rpc,
            )
            shared = "; leads while it holds the lease" if service.campaign else ""
            print(
                f"conveyor scheduler on {url} (state: {service.where}{shared})",
                file=sys.stderr,
                flush=True,
            )
            # (no "server: uvicorn" header: it names the software to anyone who asks, and
            # each line of an answer's head is work for the worker that parses it)
            settings = uvicorn.Config(
                app, log_level="warning", access_log=False, server_header=False
            )
            uvicorn.Server(settings).run(sockets=[listener])
        finally:  # (after a clean stop the lifespan did this already)
            service.close(config.notifiers.flush_timeout)
    finally:
        listener.close()
    return 0


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; ConfigError (exit 2) naming the address if the
    port is taken or the address cannot be used."""
    where = f"{url_host(host)}:{port}"
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
