"""Two Daphne processes on the Redis channel layer, one test database: a push received by one
process reaches a browser's socket on the other, and only the sockets of people who may see
its session.

Runs when the settings use channels_redis (REDIS_URL set, as in CI's second pass); without
it every process has its own in-memory layer and nothing crosses between them, so the test
is skipped. The servers share the test run's REDIS_URL, like processes behind one load
balancer. The settings give channels_redis a fixed prefix, so a developer's own Onlooker on
the same Redis database could broadcast into the same group names: the assertions look only
for this test's session (its id and title), and other hints are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest
from django.conf import settings
from django.db import connections
from websockets.asyncio.client import ClientConnection, connect

from tasks.models import ProgressCard, Session
from tests.builders import status
from tests.conftest import make_agent
from tests.live_server import LiveServer, push_http, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_LAYER = "channels_redis.core.RedisChannelLayer"
DELIVERY_TIMEOUT = 5.0  # seconds; a cross-process hint normally takes a few milliseconds
SILENCE = 1.0  # seconds the outsider listens after the member has heard the hint


@pytest.fixture(autouse=True)
def redis_layer() -> None:
    if settings.CHANNEL_LAYERS["default"]["BACKEND"] != REDIS_LAYER:
        pytest.skip(
            "needs REDIS_URL: only the Redis channel layer carries hints between processes "
            "(e.g. REDIS_URL=redis://127.0.0.1:6379/0)"
        )


async def open_socket(server: LiveServer, cookie: dict, query: str = "") -> ClientConnection:
    """A browser's socket: the session cookie, and the Origin a page on that server sends."""
    return await connect(
        f"{server.ws_url}/ws/live/{query}",
        origin=server.url,
        additional_headers={"Cookie": f"{cookie['name']}={cookie['value']}"},
        open_timeout=DELIVERY_TIMEOUT,
    )


async def hints_about(
    ws: ClientConnection, session: Session, seconds: float, *, revision: int = 0
) -> list[dict]:
    """Every card.changed hint about `session` showing at least `revision`, heard within
    `seconds`, or until the first one; hints about other sessions (another Onlooker on this
    Redis) are skipped, and so are older ones: a hint of an earlier push may still be on its
    way when a socket opens, and browsers drop what is older than what they show."""
    found: list[dict] = []
    deadline = time.monotonic() + seconds
    while not found and (left := deadline - time.monotonic()) > 0:
        try:
            message = json.loads(await asyncio.wait_for(ws.recv(), timeout=left))
        except TimeoutError:
            break
        if (
            message.get("session") == session.pk
            and message.get("title") == str(session)
            and message.get("revision", 0) >= revision
        ):
            found.append(message)
    return found


def pushed_in_a_thread(*args):
    """push_http from a worker thread, which hands its database connection back (waiting
    for the push to be applied reads the database; left open, the connection outlives the
    test database)."""
    try:
        return push_http(*args)
    finally:
        connections.close_all()


def test_a_push_received_by_one_process_reaches_a_socket_on_the_other(alice, charlie, ops):
    registered = make_agent(signing=True, team=ops)
    with LiveServer() as receiver, LiveServer() as other:
        first = push_http(receiver, registered, status("WORKING", at=1, text="Cloning"))
        assert first.json()["outcome"] == "accepted", receiver.log()
        session = Session.objects.get()
        member, outsider = session_cookie(alice, other.url), session_cookie(charlie, other.url)

        async def scenario() -> tuple[list[dict], list[dict]]:
            # The member on the session page (team and session groups), the outsider asking
            # for the same session: the server must not let him join it.
            watching = await open_socket(other, member, f"?session={session.pk}")
            snooping = await open_socket(other, outsider, f"?session={session.pk}")
            try:
                answer = await asyncio.to_thread(
                    pushed_in_a_thread,
                    receiver,
                    registered,
                    status("WORKING", at=2, text="Running the tests"),
                )
                assert answer.json()["outcome"] == "accepted", receiver.log()
                heard = await hints_about(watching, session, DELIVERY_TIMEOUT, revision=2)
                overheard = await hints_about(snooping, session, SILENCE)
            finally:
                await watching.close()
                await snooping.close()
            return heard, overheard

        heard, overheard = asyncio.run(scenario())

        assert heard, f"no hint reached the other process\n{receiver.log()}\n{other.log()}"
        hint = heard[0]
        assert hint["revision"] == ProgressCard.objects.get(session=session).revision == 2
        assert hint["state"] == "TASK_STATE_WORKING"
        assert "Running the tests" in hint["html"]["card"]
        assert f'data-session="{session.pk}" data-revision="2"' in hint["html"]["card"]
        assert overheard == []


def test_a_bundle_of_hints_reaches_a_socket_as_one_message_each_in_order(alice, ops):
    """What a batch changed crosses the layer as one bundle; a socket it is for hears each
    of its hints as a message of its own, in the order they were sent (the server writes
    them to it together), and none meant for a group it is not in."""
    from channels.layers import get_channel_layer

    from tasks.live import broadcast

    registered = make_agent(signing=True, team=ops)
    with LiveServer() as server:
        first = push_http(server, registered, status("WORKING", at=1, text="Cloning"))
        assert first.json()["outcome"] == "accepted", server.log()
        session = Session.objects.get()
        cookie = session_cookie(alice, server.url)
        marker = f"bundle-{time.monotonic_ns()}"  # names this test's hints among any others

        def hint(n: int, group: str) -> dict:
            message = {"type": "card.changed", "session": -n, "revision": n, "title": marker}
            return broadcast.wire(message, [group])

        async def scenario() -> list[dict]:
            watching = await open_socket(server, cookie, f"?session={session.pk}")
            try:
                # The socket has joined once the server's first hint about the session (sent
                # as it connects or on the next push) can reach it: push once and wait for it.
                answer = await asyncio.to_thread(
                    pushed_in_a_thread, server, registered, status("WORKING", at=2, text="On")
                )
                assert answer.json()["outcome"] == "accepted", server.log()
                assert await hints_about(watching, session, DELIVERY_TIMEOUT, revision=2)
                team, own = broadcast.team_group(ops.pk), broadcast.session_group(session.pk)
                hints = [hint(1, team), hint(2, "team.nobody"), hint(3, own), hint(4, team)]
                layer = get_channel_layer()
                await layer.group_send(
                    broadcast.LISTENERS, {"type": broadcast.BUNDLE, "hints": hints}
                )
                heard: list[dict] = []
                deadline = time.monotonic() + DELIVERY_TIMEOUT
                while len(heard) < 3 and (left := deadline - time.monotonic()) > 0:
                    try:
                        message = json.loads(await asyncio.wait_for(watching.recv(), left))
                    except TimeoutError:
                        break
                    if message.get("title") == marker:
                        heard.append(message)
                with contextlib.suppress(TimeoutError):  # and nothing more of this test's
                    while True:
                        message = json.loads(await asyncio.wait_for(watching.recv(), SILENCE))
                        if message.get("title") == marker:
                            heard.append(message)
            finally:
                await watching.close()
            return heard

        heard = asyncio.run(scenario())
        assert [message["revision"] for message in heard] == [1, 3, 4], server.log()
