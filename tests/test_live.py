"""The live socket through the real ASGI application: who may connect, who hears what, and
what a message carries. Pushes go through the real receiver; the hints are real broadcasts."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from dashboard.asgi import application
from tasks import broadcast
from tasks.models import Card, Session
from tests.builders import approval, status
from tests.conftest import make_agent, push

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_channel_layers"),
]
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def cookie_for(user: User) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def socket(*headers, path: str = "/ws/live/") -> WebsocketCommunicator:
    host = (b"host", b"127.0.0.1:8000")
    return WebsocketCommunicator(application, path, headers=[host, *headers])


def run(scenario):
    return async_to_sync(scenario)()


def test_anonymous_socket_is_refused():
    async def scenario():
        connected, code = await socket(ORIGIN).connect()
        return connected, code

    assert run(scenario) == (False, 4401)


def test_socket_from_a_foreign_origin_is_refused(alice):
    async def scenario():
        cookie = await sync_to_async(cookie_for)(alice)
        connected, _ = await socket((b"origin", b"https://evil.example"), cookie).connect()
        return connected

    assert run(scenario) is False


def test_team_member_hears_a_push_with_fragments_and_revision(alice, ops):
    registered = make_agent(team=ops)

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(alice))
        connected, _ = await communicator.connect()
        assert connected
        await sync_to_async(push)(
            Client(), registered, status("WORKING", at=1, text="Reading logs")
        )
        message = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return message

    message = run(scenario)
    session = Session.objects.get()
    assert message["session"] == session.pk
    assert message["revision"] == Card.objects.get().revision == 1
    assert (message["state"], message["needsHuman"]) == ("TASK_STATE_WORKING", False)
    assert set(message["html"]) == {"card", "summary", "sidebar", "tile"}
    assert (message["title"], message["stateLabel"], message["hasCard"]) == (
        session.context_id,
        "Working",
        True,
    )
    assert f'data-session="{session.pk}" data-revision="1"' in message["html"]["card"]
    assert "Reading logs" in message["html"]["card"]
    assert f'data-sidebar-session="{session.pk}"' in message["html"]["sidebar"]


def test_user_outside_the_team_hears_nothing_of_its_sessions(charlie, ops):
    registered = make_agent(team=ops)
    open_agent = make_agent(name="Open")

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(charlie))
        assert (await communicator.connect())[0]
        await sync_to_async(push)(Client(), registered, status("WORKING", at=1, context="secret"))
        secret_heard = not await communicator.receive_nothing(timeout=0.5)
        await sync_to_async(push)(Client(), open_agent, status("WORKING", at=1, context="open"))
        message = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return secret_heard, message

    secret_heard, message = run(scenario)
    assert not secret_heard
    assert message["session"] == Session.objects.get(context_id="open").pk


def test_socket_for_a_session_the_user_may_not_see_joins_no_session_group(charlie, ops):
    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1))
    session = Session.objects.get()

    async def scenario():
        cookie = await sync_to_async(cookie_for)(charlie)
        communicator = socket(ORIGIN, cookie, path=f"/ws/live/?session={session.pk}")
        assert (await communicator.connect())[0]
        await sync_to_async(push)(Client(), registered, status("COMPLETED", at=2))
        heard = not await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return heard

    assert run(scenario) is False


def test_a_burst_is_coalesced_and_the_latest_revision_wins(alice, ops):
    registered = make_agent(team=ops)

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(alice))
        assert (await communicator.connect())[0]
        started = time.monotonic()
        for second in range(1, 13):
            body = status("WORKING", at=second, text=f"step {second}")
            await sync_to_async(push)(Client(), registered, body)
        burst = time.monotonic() - started
        received = [await communicator.receive_json_from(timeout=5)]
        while not await communicator.receive_nothing(timeout=0.4):
            received.append(await communicator.receive_json_from(timeout=5))
        await communicator.disconnect()
        return received, burst

    received, burst = run(scenario)
    revisions = [message["revision"] for message in received]
    # Hints are sent concurrently and may overtake each other (browsers keep the newest
    # revision they have seen); what matters is that the latest one is never lost.
    assert max(revisions) == Card.objects.get().revision == 12
    # At most one message per interval while the burst lasted, plus the flush of the latest
    # afterwards. (A timer that fired late once let an older pending message go out after a
    # newer one: 4 messages for a 0.13 s burst in CI.) Uncoalesced, this burst would be 12.
    assert len(received) <= burst / broadcast.MIN_INTERVAL + 2
    assert len(received) < 12 or burst >= 12 * broadcast.MIN_INTERVAL


def test_session_card_endpoint_returns_what_the_socket_sends(client, alice, ops):
    registered = make_agent(team=ops)
    push(client, registered, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship it?")))
    session = Session.objects.get()
    assert client.get(f"/sessions/{session.pk}/card/").status_code == 401
    client.force_login(alice)
    data = client.get(f"/sessions/{session.pk}/card/").json()
    assert (data["session"], data["revision"], data["needsHuman"]) == (session.pk, 1, True)
    assert "Ship it?" in data["html"]["card"]
    client.force_login(User.objects.create_user("mallory"))
    assert client.get(f"/sessions/{session.pk}/card/").status_code == 404


def test_socket_answers_a_ping_and_ignores_other_chatter(alice):
    """Pages ping to find half-open sockets; anything else a browser sends changes nothing."""

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(alice))
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data="not json")
        await communicator.send_to(bytes_data=b"\x00")
        await communicator.send_json_to({"type": "card.changed", "session": 1})
        await communicator.send_json_to({"type": "ping"})
        answer = await communicator.receive_json_from(timeout=2)
        nothing_else = await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()
        return answer, nothing_else

    assert run(scenario) == ({"type": "pong"}, True)


def test_a_session_page_hears_each_change_once_though_it_joins_two_groups(alice, ops):
    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1, text="Start"))
    session = Session.objects.get()

    async def scenario():
        cookie = await sync_to_async(cookie_for)(alice)
        communicator = socket(ORIGIN, cookie, path=f"/ws/live/?session={session.pk}")
        assert (await communicator.connect())[0]
        await sync_to_async(push)(Client(), registered, status("WORKING", at=2, text="Next"))
        first = await communicator.receive_json_from(timeout=5)
        repeat = await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return first, repeat

    first, nothing_more = run(scenario)
    assert first["revision"] == 2 and nothing_more


def test_a_late_timer_never_sends_an_older_message_after_a_newer_one():
    """The interval has passed but the timer holding the pending message has not fired yet:
    the newer message goes out, and the timer then finds nothing to send."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("team.all", channel)

    def hint(revision: int) -> dict:
        return {"type": "card.changed", "session": 1, "revision": revision, "updatedAt": "t"}

    coalescer = broadcast._Coalescer()
    coalescer.offer(1, ["team.all"], hint(1))  # sent at once
    coalescer.offer(1, ["team.all"], hint(2))  # pending; its timer fires in ~0.1 s
    coalescer.last_sent[1] -= broadcast.MIN_INTERVAL  # the interval is over, the timer late
    coalescer.offer(1, ["team.all"], hint(3))  # sent at once
    time.sleep(broadcast.MIN_INTERVAL * 2)  # the late timer fires

    async def drain() -> list[int]:
        revisions = []
        while True:
            try:
                wired = await asyncio.wait_for(layer.receive(channel), timeout=0.2)
            except TimeoutError:
                return revisions
            revisions.append(json.loads(wired["text"])["revision"])

    assert async_to_sync(drain)() == [1, 3]
