"""One person cannot hold more than ONLOOKER_LIVE_SOCKETS_PER_PERSON live sockets open in one
server process (default 200): the next is accepted and closed at once with 4429, which the
page reads as "too many, try again slowly"; other people are not affected, and a socket that
closes gives its place back."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from django.conf import settings
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tasks.live.consumers import CLOSE_TOO_MANY
from tests.live_server import LiveServer, session_cookie

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


async def open_socket(server: LiveServer, cookie: dict) -> ClientConnection:
    return await connect(
        f"{server.ws_url}/ws/live/",
        origin=server.url,
        additional_headers={"Cookie": f"{cookie['name']}={cookie['value']}"},
        open_timeout=20,
    )


async def closed_with(ws: ClientConnection) -> int | None:
    """The code the server closed the socket with, or None if it stays open for a moment."""
    try:
        await asyncio.wait_for(ws.recv(), timeout=0.5)
    except ConnectionClosed:
        return ws.close_code
    except TimeoutError:
        return None
    return None


def test_a_person_past_the_cap_is_refused_with_4429_and_a_closed_socket_frees_a_place(
    alice, charlie
):
    cap = settings.ONLOOKER_LIVE_SOCKETS_PER_PERSON

    async def scenario(server: LiveServer, mine: dict, theirs: dict) -> None:
        held = await asyncio.gather(*(open_socket(server, mine) for _ in range(cap)))
        try:
            assert [await closed_with(ws) for ws in held[-3:]] == [None, None, None]
            one_more = await open_socket(server, mine)
            assert await closed_with(one_more) == CLOSE_TOO_MANY
            other = await open_socket(server, theirs)
            assert await closed_with(other) is None, "another person was refused"
            await other.close()

            await held.pop().close()
            await asyncio.sleep(0.2)  # the server hears the close
            again = await open_socket(server, mine)
            assert await closed_with(again) is None, "a closed socket kept its place"
            held.append(again)
        finally:
            for ws in held:
                with contextlib.suppress(Exception):
                    await ws.close()

    with LiveServer() as server:
        cookies = session_cookie(alice, server.url), session_cookie(charlie, server.url)
        asyncio.run(scenario(server, *cookies))
