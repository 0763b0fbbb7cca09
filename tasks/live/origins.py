"""Which pages may open the live socket: only the exact origins Onlooker is served at.

A browser sends the session cookie with a websocket handshake from any page, so the Origin
header is all that stops another site (or another port of the same host: channels'
`AllowedHostsOriginValidator` compares hosts only) from reading live card HTML as the
user. Accepted: the scheme, host and port of `ONLOOKER_PUBLIC_URL`, and the origin the
connection itself was made to (its Host header, only when ALLOWED_HOSTS allows that host),
default ports normalised. No Origin, `null`, or anything that is not exactly
`scheme://host[:port]` is refused: browsers always send one for a websocket.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import NamedTuple

from django.conf import settings
from django.http.request import validate_host

log = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443}
# The page's scheme for the socket's: a ws:// socket is opened by an http:// page.
PAGE_SCHEMES = {"ws": "http", "wss": "https"}
# A host as an Origin or Host header serialises it: a name or IPv4 address, or an IPv6
# address in brackets, then an optional port. The same shape Django accepts in Host.
_HOST = re.compile(r"([a-z0-9.-]+|\[[a-f0-9]*:[a-f0-9.:]+\])(?::([0-9]{1,5}))?", re.IGNORECASE)
_ORIGIN = re.compile(r"(https?)://(.+)", re.IGNORECASE)


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


def _host_and_port(value: str) -> tuple[str, int | None] | None:
    match = _HOST.fullmatch(value)
    if match is None:
        return None
    port = int(match[2]) if match[2] is not None else None
    if port is not None and not 0 < port < 65536:
        return None
    # "example.com." names the same host as "example.com", as Django's own Host check says.
    host = match[1].lower().removesuffix(".")
    return (host, port) if host else None


def parse_origin(value: str) -> Origin | None:
    """`scheme://host[:port]` and nothing else (no path, user or query), or None."""
    match = _ORIGIN.fullmatch(value)
    if match is None:
        return None
    scheme = match[1].lower()
    found = _host_and_port(match[2])
    if found is None:
        return None
    host, port = found
    return Origin(scheme, host, DEFAULT_PORTS[scheme] if port is None else port)


@functools.lru_cache(maxsize=4)
def public_origin(public_url: str) -> Origin | None:
    scheme, _, rest = public_url.partition("://")
    return parse_origin(f"{scheme}://{rest.split('/', 1)[0]}")


def _allowed_hosts() -> list[str]:
    # Django's own fallback when ALLOWED_HOSTS is empty in DEBUG (HttpRequest.get_host).
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return settings.ALLOWED_HOSTS


def connection_origin(scope: dict) -> Origin | None:
    """The origin of a page served where this socket was opened, if ALLOWED_HOSTS allows its
    Host. Daphne leaves the scheme out of a websocket scope: ASGI's default is ws."""
    hosts = _header_values(scope, b"host")
    scheme = PAGE_SCHEMES.get(scope.get("scheme", "ws"))
    if len(hosts) != 1 or scheme is None:
        return None
    found = _host_and_port(hosts[0])
    if found is None or not validate_host(found[0], _allowed_hosts()):
        return None
    host, port = found
    return Origin(scheme, host, DEFAULT_PORTS[scheme] if port is None else port)


def allowed(scope: dict) -> bool:
    """Whether the handshake comes from a page Onlooker served."""
    origins = _header_values(scope, b"origin")
    if len(origins) != 1:
        return False
    origin = parse_origin(origins[0])
    if origin is None:
        return False
    return origin in (public_origin(settings.ONLOOKER_PUBLIC_URL), connection_origin(scope))


def _header_values(scope: dict, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope.get("headers", []) if key == name]


class ExactOriginValidator:
    """ASGI middleware for websockets: refuses the handshake (HTTP 403) unless `allowed`."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send) -> None:
        if allowed(scope):
            return await self.application(scope, receive, send)
        # Worth a line: a proxy that rewrites Host, or a wrong ONLOOKER_PUBLIC_URL, shows here.
        log.warning(
            "live socket refused: Origin %r is not %s",
            [value[:100] for value in _header_values(scope, b"origin")[:2]],
            settings.ONLOOKER_PUBLIC_URL,
        )
        await refuse(receive, send)


async def refuse(receive, send) -> None:
    """Refuse the handshake (a close before accepting is HTTP 403), then wait for the
    connection to end. Not channels' WebsocketDenier: as a consumer it opens a channel on the
    channel layer, so every refused page kept a Redis receive waiting until it went, and that
    receive, once cancelled, could wait on Redis for ever (tasks/live/fanout.py)."""
    while True:
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close"})
        elif message["type"] == "websocket.disconnect":
            return
