"""A misbehaving TCP proxy for network-fault tests: put it between a worker and a scheduler.

``FaultyProxy(port)`` listens on a free loopback port and forwards every connection to
``127.0.0.1:port``. Its behaviour can be changed while connections are open:

* :meth:`FaultyProxy.blackhole` — bytes in both directions vanish (nothing is answered, nothing
  is refused: the client waits for its timeout), on open connections and new ones alike, until
  :meth:`FaultyProxy.restore`, which also closes the connections that were black-holed;
* :meth:`FaultyProxy.drop_answer` — the next request whose bytes contain a marker (e.g.
  ``b"/api/v1/task_failed"``) reaches the server, but its answer is swallowed and the client's
  connection closed: the call was applied and the caller does not know;
* :meth:`FaultyProxy.delay` — every chunk waits that many seconds first.

``requests(marker)`` counts what went through. Use it as a context manager::

    with FaultyProxy(server_port) as proxy:
        worker_config = config.with_overrides(scheduler_url=proxy.url)
        ...
        proxy.blackhole()
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from types import TracebackType

__all__ = ["FaultyProxy"]


class FaultyProxy:
    """A TCP proxy on loopback whose faults are switched on and off by the test."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        """Listen on a free loopback port; forward to ``target_host:target_port``."""
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._blackholed = False
        self._generation = 0  # bumped by restore(): connections black-holed before are closed
        self._drop_marker: bytes | None = None
        self._delay = 0.0
        self._seen: list[bytes] = []
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        thread = threading.Thread(target=self._accept, name="faulty-proxy", daemon=True)
        thread.start()
        self._threads.append(thread)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` of the proxy."""
        return f"http://127.0.0.1:{self.port}"

    # --- faults -----------------------------------------------------------------------------

    def blackhole(self) -> None:
        """From now on, bytes in both directions vanish."""
        with self._lock:
            self._blackholed = True

    def restore(self) -> None:
        """Forward again; connections that were black-holed are closed (their peers retry)."""
        with self._lock:
            self._blackholed = False
            self._generation += 1

    def drop_answer(self, marker: bytes) -> None:
        """Swallow the answer to the next request containing ``marker`` (it is still sent on)."""
        with self._lock:
            self._drop_marker = marker

    def delay(self, seconds: float) -> None:
        """Hold every chunk ``seconds`` before passing it on (0: no delay)."""
        with self._lock:
            self._delay = seconds

    def requests(self, marker: bytes) -> int:
        """How many chunks from clients contained ``marker`` (about one per HTTP request)."""
        with self._lock:
            return sum(1 for chunk in self._seen if marker in chunk)

    # --- plumbing ---------------------------------------------------------------------------

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._pump, args=(client,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _pump(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets.update((client, upstream))
            generation = self._generation
        swallow = False
        holed = False
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        try:
            while not self._stopped.is_set():
                with self._lock:
                    holed = holed or self._blackholed
                    if holed and not self._blackholed and self._generation != generation:
                        return  # black-holed before restore(): its state is lost
                for key, _ in selector.select(timeout=0.1):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    chunk = source.recv(65536)
                    if not chunk:
                        return
                    with self._lock:
                        if self._blackholed:
                            holed = True
                            continue  # vanishes
                        delay = self._delay
                        if source is client:
                            self._seen.append(chunk)
                            marker = self._drop_marker
                            if marker is not None and marker in chunk:
                                self._drop_marker = None
                                swallow = True
                    if delay:
                        time.sleep(delay)
                    if source is upstream and swallow:
                        return  # the server answered; the client never hears it
                    key.data.sendall(chunk)
        except OSError:
            return
        finally:
            selector.close()
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._sockets.difference_update((client, upstream))

    def close(self) -> None:
        """Stop accepting, close every connection and wait for the threads."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> FaultyProxy:
        """The running proxy."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close it."""
        self.close()
