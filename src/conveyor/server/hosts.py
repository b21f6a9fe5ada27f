"""Which ``Host`` and ``Origin`` headers are this server's own (DNS rebinding and CSRF).

Theory of operation
-------------------
A web page on another site can make a browser send requests to a server on loopback. Two
headers tell such requests apart, and neither can be forged by the page:

* ``Host``. With DNS rebinding, ``evil.example`` is made to resolve to 127.0.0.1, and the
  browser sends the page's requests to this server with ``Host: evil.example:8082``. The server
  answers only Host names that are its own: the address it is bound to; for a loopback address
  also ``127.0.0.1``, ``localhost`` and ``[::1]``; for a wildcard address (``0.0.0.0``, ``::``)
  those and any IP address (a rebound name is never an IP address); and the
  ``[server] allowed_hosts`` entries (``name``, or ``name:port`` for that port only). The port
  of an own name is not checked: what rebinding controls is the name, and a forwarded port (an
  SSH tunnel, a container's published port, a test's proxy) still reaches this server.
* ``Origin``. A form or ``fetch()`` from another site to ``http://127.0.0.1:8082`` has the right
  Host, but its ``Origin`` names the page's site. A request that carries an Origin must come
  from the server's own: ``http://<own name>:<port>``, ``http://<the request's Host>`` (the page
  came through the same forwarded address), or ``http(s)://<allowed host>``. Here the port
  counts: another port on localhost is another site.

This module is pure: it parses header values and says what is wrong; :mod:`.guard` answers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ConfigError

__all__ = ["OwnAddress", "is_loopback", "url_host"]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as written in a URL or a Host header: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True, slots=True)
class OwnAddress:
    """The names and port under which this server may be addressed; see the module docstring."""

    port: int
    names: tuple[str, ...]
    """Own host names, lower-case, IPv6 without brackets; the bound address first."""
    any_ip: bool
    """Bound to a wildcard address: every IP address is one of its own."""
    allowed: tuple[tuple[str, int | None], ...] = ()
    """``[server] allowed_hosts`` as (name, port); no port matches any port."""

    @classmethod
    def of(cls, host: str, port: int, allowed_hosts: Iterable[str] = ()) -> OwnAddress:
        """The server bound to ``host:port``; ConfigError naming a malformed allowed_hosts entry."""
        bound = host.strip("[]").lower()
        wildcard = _is_ip(bound) and ipaddress.ip_address(bound).is_unspecified
        names = [] if wildcard else [bound]  # a wildcard's own IP is covered by any_ip
        if wildcard or is_loopback(bound):
            names += [n for n in _LOOPBACK_NAMES if n != bound]
        allowed = tuple(_allowed_entry(entry) for entry in allowed_hosts)
        return cls(port, tuple(names), wildcard, allowed)

    def host_error(self, value: str | None) -> str:
        """Empty if ``value`` (a Host header) names this server; else what is wrong."""
        parsed = None if value is None else _authority(value)
        if parsed is not None and self._is_own_host(*parsed):
            return ""
        what = "there is no Host header" if value is None else f"Host {value!r} is not this server"
        return f"{what}; expected {self._hosts()}"

    def origin_error(self, value: str, host: str | None) -> str:
        """Empty if ``value`` (an Origin header) is this server's own, ``host`` being the
        request's (already accepted) Host header; else what is wrong."""
        parsed = _origin(value)
        if parsed is not None and self._is_own_origin(*parsed, host):
            return ""
        return (
            f"Origin {value!r} is not this server's own, and requests from other sites' pages "
            f"are refused; expected no Origin or {self._origins(host)}"
        )

    def _is_own_host(self, host: str, port: int | None) -> bool:
        return self._allowed(host, port) or self._is_own_name(host)

    def _is_own_origin(self, scheme: str, host: str, port: int, request_host: str | None) -> bool:
        if self._allowed(host, port):  # http or https: a proxy may terminate TLS
            return True
        if scheme != "http":
            return False
        if self._is_own_name(host) and port == self.port:
            return True
        sent_to = None if request_host is None else _authority(request_host)
        return sent_to is not None and (sent_to[0], sent_to[1] or 80) == (host, port)

    def _is_own_name(self, host: str) -> bool:
        return host in self.names or (self.any_ip and _is_ip(host))

    def _allowed(self, host: str, port: int | None) -> bool:
        return any(host == name and p in (None, port) for name, p in self.allowed)

    def _hosts(self) -> str:
        own = [url_host(n) for n in self.names] + (["any IP address"] if self.any_ip else [])
        return _choices(own, " with any port", [_entry_text(e) for e in self.allowed])

    def _origins(self, request_host: str | None) -> str:
        own = [f"http://{url_host(n)}:{self.port}" for n in self.names]
        if request_host and f"http://{request_host}" not in own:
            own.insert(0, f"http://{request_host}")  # the page came through the same address
        if self.any_ip:
            own.append(f"http://<any IP address>:{self.port}")
        return _choices(own, "", [f"http(s)://{_entry_text(e)}" for e in self.allowed])


def _choices(own: list[str], note: str, allowed: list[str]) -> str:
    """``a, b or c<note>``, then the allowed_hosts entries or a hint about them."""
    listed = ", ".join(own[:-1]) + " or " + own[-1] if len(own) > 1 else own[0]
    if allowed:
        return f"{listed}{note}, or one of [server] allowed_hosts: " + ", ".join(allowed)
    return f"{listed}{note} (add more names with [server] allowed_hosts)"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _authority(text: str) -> tuple[str, int | None] | None:
    """(host, port) of ``host[:port]``, lower-case, IPv6 without brackets; None if not one."""
    if not text or any(c in text for c in "/\\@?# \t"):
        return None
    try:
        parts = urlsplit("//" + text)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    return (host, port) if host else None


def _origin(text: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an Origin (``http://host[:port]``); None if it is not one."""
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    extra = parts.path or parts.query or parts.fragment or "@" in text
    if scheme not in _DEFAULT_PORTS or not host or extra:
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def _allowed_entry(text: str) -> tuple[str, int | None]:
    """One ``[server] allowed_hosts`` entry as (name, port); ConfigError if malformed."""
    if _is_ip(text.strip("[]")):
        return text.strip("[]").lower(), None
    parsed = _authority(text)
    if parsed is None:
        raise ConfigError(
            f"server.allowed_hosts contains {text!r}, which is not a host; expected a host name "
            'or IP address, optionally with :port (like "conveyor.example.com" or '
            '"10.0.0.5:8082"), without a scheme or path',
            key="server.allowed_hosts",
        )
    return parsed


def _entry_text(entry: tuple[str, int | None]) -> str:
    name, port = entry
    return url_host(name) + ("" if port is None else f":{port}")
