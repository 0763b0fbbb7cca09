"""Only pages Onlooker served may open the live socket: the Origin must be exactly the
public URL's scheme, host and port, or those of the connection itself (a host ALLOWED_HOSTS
allows). A page on another port or scheme of the same host carries the user's cookie too."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from dashboard.asgi import application

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_channel_layers"),
]
SERVED_AT = "http://127.0.0.1:8000"


@pytest.fixture
def public_url(settings):
    settings.ONLOOKER_PUBLIC_URL = "https://onlooker.example.com"
    settings.ALLOWED_HOSTS = ["onlooker.example.com", "127.0.0.1", "localhost"]
    return settings.ONLOOKER_PUBLIC_URL


@pytest.fixture
def cookie(alice) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(alice)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def handshake(*headers: tuple[bytes, bytes]) -> tuple[bool, int | None]:
    """Whether the socket was accepted, and the close code if not (the origin check refuses
    before authentication, with no code; an unauthenticated socket gets 4401)."""

    async def scenario():
        communicator = WebsocketCommunicator(application, "/ws/live/", headers=list(headers))
        connected, code = await communicator.connect(timeout=3)
        if connected:
            await communicator.disconnect()
        return connected, code if not connected else None

    return async_to_sync(scenario)()


@pytest.mark.usefixtures("public_url")
@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),  # the connection's own origin
        ("localhost:8000", "http://LOCALHOST:8000"),  # hosts are case-insensitive
        ("127.0.0.1", "http://127.0.0.1:80"),  # default port, written or not
        ("proxy.internal:8000", "https://onlooker.example.com"),  # the public URL, via a proxy
        ("proxy.internal:8000", "https://onlooker.example.com:443"),
    ],
)
def test_a_page_onlooker_served_may_open_the_socket(cookie, host, origin):
    assert handshake((b"host", host.encode()), (b"origin", origin.encode()), cookie) == (
        True,
        None,
    )


@pytest.mark.usefixtures("public_url")
@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:9999"),  # another port of the same host
        ("127.0.0.1:8000", "https://127.0.0.1:8000"),  # another scheme
        ("127.0.0.1:8000", "http://evil.example:8000"),  # another host
        ("127.0.0.1:8000", "http://onlooker.example.com"),  # the public host on http
        ("127.0.0.1:8000", "https://onlooker.example.com:8443"),  # … on another port
        # DNS rebinding: evil.example resolves to this server, and its page's origin matches
        # the Host it connects with, but Onlooker is not served at that host.
        ("evil.example:8000", "http://evil.example:8000"),
        ("127.0.0.1:8000", "null"),  # sandboxed frames, file:// pages
        ("127.0.0.1:8000", None),  # no Origin: browsers always send one
        ("127.0.0.1:8000", "http://127.0.0.1:8000/"),  # not an origin: a path
        ("127.0.0.1:8000", "http://user@127.0.0.1:8000"),
        ("127.0.0.1:8000", "ws://127.0.0.1:8000"),
        ("127.0.0.1:8000", "http://127.0.0.1:99999"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000, http://127.0.0.1:8000"),
        ("127.0.0.1:8000", "127.0.0.1:8000"),
        ("127.0.0.1:8000", ""),
        ("127.0.0.1:8000", "http://[::1"),
    ],
)
def test_a_handshake_from_any_other_origin_is_refused_before_authentication(cookie, host, origin):
    headers = [(b"host", host.encode()), cookie]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    assert handshake(*headers) == (False, 1000)


def test_two_origin_headers_are_refused(cookie):
    served = (b"origin", SERVED_AT.encode())
    assert handshake((b"host", b"127.0.0.1:8000"), served, served, cookie) == (False, 1000)


def test_a_refused_handshake_opens_nothing_on_the_channel_layer(cookie, settings):
    """channels' WebsocketDenier is a consumer with a channel of its own: every refused page
    kept a receive waiting on the layer (on Redis, a blocking pop) until it went."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"https://evil.example"), cookie]

    async def scenario():
        communicator = WebsocketCommunicator(application, "/ws/live/", headers=headers)
        connected, _ = await communicator.connect(timeout=3)
        await asyncio.sleep(0.05)  # a consumer's receive would be waiting by now
        waiting = list(get_channel_layer().channels)
        await communicator.disconnect()
        return connected, waiting

    assert async_to_sync(scenario)() == (False, [])
