"""The live socket through the real ASGI application: who may connect, who hears what, and
what a message carries. Pushes go through the real receiver; the hints are real broadcasts."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from autobahn.twisted.websocket import WebSocketServerFactory
from channels.layers import InMemoryChannelLayer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from dashboard.asgi import application
from tasks.live import broadcast, fanout
from tasks.models import ProgressCard, Session
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
    assert message["revision"] == ProgressCard.objects.get().revision == 1
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


def heard_fragments(user, path: str, pushes) -> dict[str, set[str]]:
    """The fragment names of what a socket at `path` heard of each session pushed to, by
    context id: the last message about each, once every one has been heard of."""

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(user), path=path)
        assert (await communicator.connect())[0]
        for registered, body in pushes:
            await sync_to_async(push)(Client(), registered, body)
        wanted = {body["statusUpdate"]["contextId"] for _, body in pushes}
        heard: dict[int, set[str]] = {}
        ids = await sync_to_async(
            lambda: dict(
                Session.objects.filter(context_id__in=wanted).values_list("pk", "context_id")
            )
        )()
        while set(heard) != set(ids):
            message = await communicator.receive_json_from(timeout=5)
            heard[message["session"]] = set(message["html"])
        await communicator.disconnect()
        return {ids[pk]: fragments for pk, fragments in heard.items()}

    return run(scenario)


def test_a_monitoring_screen_is_sent_its_rows_and_tiles_and_no_card(alice, ops):
    registered = make_agent(team=ops)
    pushes = [(registered, status("WORKING", at=1, context="c"))]
    heard = heard_fragments(alice, "/ws/live/?show=sidebar,tiles", pushes)
    assert heard == {"c": {"sidebar", "tile"}}


def test_a_session_page_is_sent_its_own_card_and_only_the_rows_of_other_sessions(alice, ops):
    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1, task="t1", context="own"))
    own = Session.objects.get(context_id="own")
    pushes = [
        (registered, status("WORKING", at=2, task="t1", context="own", text="Step two")),
        (registered, status("WORKING", at=1, task="t2", context="other")),
    ]
    heard = heard_fragments(alice, f"/ws/live/?session={own.pk}&show=sidebar", pushes)
    assert heard == {"own": {"card", "summary", "sidebar"}, "other": {"sidebar"}}


def test_a_page_that_says_nothing_of_what_it_shows_is_sent_every_fragment(alice, ops):
    registered = make_agent(team=ops)
    odd = heard_fragments(
        alice, "/ws/live/?show=cards,<b>", [(registered, status("WORKING", at=1, context="c"))]
    )
    unsaid = heard_fragments(
        alice, "/ws/live/", [(registered, status("WORKING", at=2, context="c"))]
    )
    assert odd == {"c": set()}
    assert unsaid == {"c": {"card", "summary", "sidebar", "tile"}}


def test_a_query_that_is_not_utf8_is_a_page_that_shows_nothing_it_names(alice, ops):
    registered = make_agent(team=ops)

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(alice))
        communicator.scope["query_string"] = b"show=\xff\xfe&session=\xed\xa0\x80"
        connected = (await communicator.connect())[0]
        await sync_to_async(push)(Client(), registered, status("WORKING", at=1))
        message = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return connected, message

    connected, message = run(scenario)
    assert connected
    assert message["html"] == {}


def test_pages_of_one_kind_share_one_encoding_of_a_hint():
    wired = broadcast.wire(
        {"type": "card.changed", "session": 7, "html": {"card": "<article>", "tile": "<li>"}},
        ["team.all", "session.7"],
    )
    screen = fanout.text_for(wired, ("tile",))
    assert fanout.text_for(wired, ("tile",)) is screen
    assert json.loads(screen) == {"session": 7, "html": {"tile": "<li>"}}
    assert json.loads(fanout.text_for(wired, (), own_session=7)) == {
        "session": 7,
        "html": {"card": "<article>"},
    }


def test_pages_of_one_kind_share_one_frame_of_a_hint():
    server = WebSocketServerFactory()  # what daphne's sockets are made by
    wired = broadcast.wire(
        {"type": "card.changed", "session": 7, "html": {"sidebar": "<a>", "tile": "<li>"}},
        ["team.all"],
    )
    frame = fanout.frame_for(wired, ("tile",), None, server)
    assert fanout.frame_for(wired, ("tile",), None, server) is frame
    assert fanout.frame_for(wired, ("sidebar",), None, server) is not frame
    text = fanout.text_for(wired, ("tile",)).encode()
    # One whole text frame (FIN, opcode 1), unmasked as a server's, carrying the text.
    assert frame.payloadHybi == bytes([0x81, len(text)]) + text


def test_what_a_newer_message_replaces_for_a_page_that_is_behind():
    def wired(message: dict) -> dict:
        return broadcast.wire(message, ["team.all", "session.7"])

    snapshot = wired({"type": "card.changed", "session": 7, "revision": 1, "html": {"card": ""}})
    newer = wired({"type": "card.changed", "session": 7, "revision": 2, "html": {"card": ""}})
    notice = wired({"type": "notifications.changed", "session": 7, "notified": 1})
    later_notice = wired({"type": "notifications.changed", "session": 7, "notified": 2})
    other = wired({"type": "card.changed", "session": 8, "revision": 1, "html": {"card": ""}})
    key = fanout.newest_key
    assert key(snapshot) == key(newer)
    assert key(notice) == key(later_notice)
    # A notice never takes a snapshot's place, nor one session's another's.
    assert len({key(snapshot), key(notice), key(other)}) == 3
    assert key(fanout.LOST) != key(fanout.RESYNC)


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


def test_a_burst_of_pushes_reaches_the_socket_as_the_first_and_the_latest(alice, ops, monkeypatch):
    """Twelve pushes inside one interval: the socket hears the first at once and the latest
    when the interval is over, nothing between. The coalescer runs on a fake clock, so a slow
    machine cannot stretch the burst over several intervals (tests/live/test_coalescer.py has the
    rules in detail)."""
    registered = make_agent(team=ops)
    now = [1_000.0]
    scheduled = []
    monkeypatch.setattr(
        broadcast,
        "coalescer",
        broadcast._Coalescer(clock=lambda: now[0], later=lambda _, flush: scheduled.append(flush)),
    )

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(alice))
        assert (await communicator.connect())[0]
        for second in range(1, 13):
            body = status("WORKING", at=second, text=f"step {second}")
            await sync_to_async(push)(Client(), registered, body)
        during = [await communicator.receive_json_from(timeout=5)]
        while not await communicator.receive_nothing(timeout=0.2):
            during.append(await communicator.receive_json_from(timeout=5))
        now[0] += broadcast.MIN_INTERVAL
        for flush in scheduled:
            flush()
        after = [await communicator.receive_json_from(timeout=5)]
        while not await communicator.receive_nothing(timeout=0.2):
            after.append(await communicator.receive_json_from(timeout=5))
        await communicator.disconnect()
        return during, after

    during, after = run(scenario)
    assert [m["revision"] for m in during] == [1], "a burst must send its first hint alone"
    assert len(scheduled) == 1, "one flush is enough for a whole burst"
    assert [m["revision"] for m in after] == [12], "the interval's end must send the latest only"
    assert ProgressCard.objects.get().revision == 12


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


def test_a_hint_reaches_each_socket_in_any_group_it_names_once_and_no_other(alice, charlie, ops):
    """A hint goes through the layer once, naming its groups (its session's team, the
    session): a socket in either hears it once, a socket in neither nothing. A page on the
    session hears it even when the team named is not one it joined (say its agent moved to a
    team made after the page connected)."""
    from channels.layers import get_channel_layer

    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1, text="Start"))
    session = Session.objects.get()
    notice = {"type": "notifications.changed", "session": session.pk, "notified": "10:00"}
    change = {"type": "card.changed", "session": session.pk, "revision": 9, "updatedAt": "x"}

    async def heard_by(communicator):
        heard = []
        while not await communicator.receive_nothing(timeout=0.3):
            heard.append(await communicator.receive_json_from(timeout=5))
        await communicator.disconnect()
        return heard

    async def scenario():
        alices = await sync_to_async(cookie_for)(alice)
        page = socket(ORIGIN, alices, path=f"/ws/live/?session={session.pk}")
        overview = socket(ORIGIN, alices)
        outsider = socket(ORIGIN, await sync_to_async(cookie_for)(charlie))
        for communicator in (page, overview, outsider):
            assert (await communicator.connect())[0]
        layer = get_channel_layer()
        here = [broadcast.team_group(ops.pk), broadcast.session_group(session.pk)]
        moved = [broadcast.team_group(ops.pk + 1000), broadcast.session_group(session.pk)]
        await layer.group_send(broadcast.LISTENERS, broadcast.wire(notice, here))
        await layer.group_send(broadcast.LISTENERS, broadcast.wire(change, moved))
        return [await heard_by(c) for c in (page, overview, outsider)]

    page, overview, outsider = run(scenario)
    assert [m.get("notified", m.get("revision")) for m in page] == ["10:00", 9]
    assert [m.get("notified", m.get("revision")) for m in overview] == ["10:00"]
    assert outsider == []


def test_a_socket_still_hears_after_a_spell_quieter_than_the_layers_group_expiry(
    alice, ops, monkeypatch
):
    """The layer forgets a group membership not renewed within its group_expiry: a process's
    listener renews it on a timer, not only when it hears something, or a quiet spell would
    leave every socket of the process deaf for good."""
    import time

    import time_machine
    from channels.layers import get_channel_layer

    from tasks.live import fanout

    monkeypatch.setattr(fanout, "REJOIN_EVERY", 0.05)
    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1, text="Start"))
    session = Session.objects.get()
    change = {"type": "card.changed", "session": session.pk, "revision": 9, "updatedAt": "x"}
    expiry = get_channel_layer().group_expiry

    async def scenario():
        import asyncio

        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(alice))
        assert (await communicator.connect())[0]
        with time_machine.travel(time.time() + expiry + 60, tick=True):
            await asyncio.sleep(0.3)  # nothing said meanwhile; the listener's timer runs
            groups = [broadcast.team_group(ops.pk)]
            await get_channel_layer().group_send(
                broadcast.LISTENERS, broadcast.wire(change, groups)
            )
            heard = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return heard

    assert run(scenario)["revision"] == 9


class CancelComesOutAsATimeout(InMemoryChannelLayer):
    """A layer whose receive, when cancelled, raises an error of its own instead, as the
    Redis layer's does at times under load (redis-py's "Timeout reading from …")."""

    async def receive(self, channel: str) -> dict:
        try:
            return await super().receive(channel)
        except asyncio.CancelledError:
            raise TimeoutError("Timeout reading from 127.0.0.1:6379") from None


class LosesACancellation(InMemoryChannelLayer):
    """A layer whose receive, cancelled once, waits on, as the Redis layer's can on Python
    3.11: redis-py's asyncio.wait_for returns a reply that came in the same turn as the
    cancel, and channels_redis goes back to Redis for the next message."""

    async def receive(self, channel: str) -> dict:
        try:
            return await super().receive(channel)
        except asyncio.CancelledError:
            return await super().receive(channel)


@pytest.mark.parametrize("layer", [CancelComesOutAsATimeout, LosesACancellation])
def test_a_process_listener_ends_with_its_event_loop_whatever_its_layer_does_when_cancelled(
    alice, settings, layer
):
    """An event loop ends by cancelling its tasks and waiting for them: a listener that took
    its cancellation for a hiccup in the layer and listened on, or whose receive lost the
    cancellation, kept the loop from ending (a test hung for good; a server would not stop)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.{layer.__name__}"}}

    async def scenario():
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(alice))
        assert (await communicator.connect())[0]
        await asyncio.sleep(0.05)  # the listener is receiving
        await communicator.disconnect()

    outcome: list = []

    def run_loop() -> None:
        try:
            asyncio.run(scenario())
            outcome.append("ended")
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            outcome.append(error)

    thread = threading.Thread(target=run_loop, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, "the event loop did not end: its listener outlived the cancellation"
    assert outcome == ["ended"], f"the scenario failed before the loop could end: {outcome[0]!r}"
