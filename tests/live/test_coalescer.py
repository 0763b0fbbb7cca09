"""Bursts of hints about one session are coalesced: at most one message per MIN_INTERVAL, the
newest always wins, and an older one never goes out after a newer one. The coalescer runs on
a fake clock and a fake "run this later" here, so these tests step through an interval
instead of sleeping on the real one; what it sends goes through the real channel layer."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from channels.layers import get_channel_layer

from tasks.live import broadcast
from tests import listening

pytestmark = pytest.mark.usefixtures("fresh_channel_layers")
INTERVAL = broadcast.MIN_INTERVAL


class FakeTime:
    """A clock that moves only when told, and the callbacks scheduled on it, run (in the
    order they fall due) when it passes their time."""

    def __init__(self) -> None:
        self.now = 5_000.0
        self.scheduled: list[tuple[float, Callable[[], None]]] = []

    def clock(self) -> float:
        return self.now

    def later(self, wait: float, callback: Callable[[], None]) -> None:
        self.scheduled.append((self.now + wait, callback))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        # A nanosecond of slack: steps like 0.01 do not add up exactly in binary.
        due = sorted((e for e in self.scheduled if e[0] <= self.now + 1e-9), key=lambda e: e[0])
        self.scheduled = [e for e in self.scheduled if e[0] > self.now + 1e-9]
        for _, callback in due:
            callback()


class Listener:
    """A channel among the listeners on the real layer: what the coalescer sent for a group
    of its own.

    It receives on one event loop of its own: the Redis layer binds a channel's receive
    buffer to the loop of its first receive, and async_to_sync would start a new one per
    call."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.layer = get_channel_layer()
        self.group = f"coalescer-{uuid.uuid4().hex}"
        self.channel = self.loop.run_until_complete(listening.join(self.layer))

    def heard(self) -> list[tuple[int, int]]:
        """(session, revision) of every message sent so far for this listener's group, in the
        order the layer got them."""
        wired = listening.heard(self.layer, self.channel, [self.group], quiet=0.05)
        got = self.loop.run_until_complete(wired)
        assert all(each["groups"] == [self.group] for each in got)
        messages = [json.loads(each["text"]) for each in got]
        return [(message["session"], message["revision"]) for message in messages]

    def close(self) -> None:
        self.loop.run_until_complete(self.layer.group_discard(broadcast.LISTENERS, self.channel))
        self.loop.close()


def hint(session: int, revision: int) -> dict:
    return {"type": "card.changed", "session": session, "revision": revision, "updatedAt": "t"}


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def coalescer(fake: FakeTime) -> broadcast._Coalescer:
    return broadcast._Coalescer(clock=fake.clock, later=fake.later)


@pytest.fixture
def listener() -> Iterator[Listener]:
    heard = Listener()
    yield heard
    heard.close()


def test_a_burst_sends_the_first_hint_at_once_and_only_the_newest_after_the_interval(
    fake, coalescer, listener
):
    for revision in range(1, 6):
        coalescer.offer(1, [listener.group], hint(1, revision))
        fake.advance(INTERVAL / 10)
    assert listener.heard() == [(1, 1)], "the first hint of a burst must go out at once, alone"

    fake.advance(INTERVAL * 0.4)  # 0.9 of the interval since the first one went out
    assert listener.heard() == [], "a held hint went out before the interval was over"

    fake.advance(INTERVAL * 0.1)
    assert listener.heard() == [(1, 5)], "after the interval only the newest hint goes out"

    fake.advance(INTERVAL * 10)
    assert listener.heard() == [], "a hint was sent twice, or an older one after the newest"


def test_a_hint_after_a_quiet_interval_goes_out_at_once(fake, coalescer, listener):
    coalescer.offer(1, [listener.group], hint(1, 1))
    fake.advance(INTERVAL)
    coalescer.offer(1, [listener.group], hint(1, 2))
    assert listener.heard() == [(1, 1), (1, 2)], "a hint was held though the session was quiet"
    assert fake.scheduled == [], "nothing is held, so nothing should be waiting to be sent"


def test_the_flush_of_a_burst_starts_the_next_interval(fake, coalescer, listener):
    coalescer.offer(1, [listener.group], hint(1, 1))
    coalescer.offer(1, [listener.group], hint(1, 2))
    fake.advance(INTERVAL)  # revision 2 goes out now
    coalescer.offer(1, [listener.group], hint(1, 3))
    assert listener.heard() == [(1, 1), (1, 2)], "two hints went out within one interval"
    fake.advance(INTERVAL)
    assert listener.heard() == [(1, 3)], "the hint held after a flush was lost"


def test_sessions_are_coalesced_apart(fake, coalescer, listener):
    coalescer.offer(1, [listener.group], hint(1, 1))
    coalescer.offer(2, [listener.group], hint(2, 1))
    coalescer.offer(1, [listener.group], hint(1, 2))
    assert listener.heard() == [(1, 1), (2, 1)], "one session's burst held back another's hint"
    fake.advance(INTERVAL)
    assert listener.heard() == [(1, 2)]


def test_a_late_timer_never_sends_an_older_hint_after_a_newer_one(fake, coalescer, listener):
    """The interval has passed but the scheduled flush of the held hint has not run yet (a
    busy loop, a slow timer thread): the newer hint goes out, and the late flush finds
    nothing to send."""
    coalescer.offer(1, [listener.group], hint(1, 1))
    coalescer.offer(1, [listener.group], hint(1, 2))  # held; its flush is scheduled
    (due, late_flush), *_ = fake.scheduled
    fake.scheduled.clear()  # the flush is late: the clock passes its time without it
    fake.now = due
    coalescer.offer(1, [listener.group], hint(1, 3))
    late_flush()
    assert listener.heard() == [(1, 1), (1, 3)], "an older hint went out after a newer one"


def test_cleared_hints_are_never_sent(fake, coalescer, listener):
    coalescer.offer(1, [listener.group], hint(1, 1))
    coalescer.offer(1, [listener.group], hint(1, 2))
    coalescer.clear()
    fake.advance(INTERVAL)
    assert listener.heard() == [(1, 1)], "a hint held before clear() was sent after it"


def test_hints_handed_to_the_server_loop_in_one_turn_go_through_the_layer_as_one_message(
    fake, coalescer
):
    """What a batch of pushes changed (a hint per session, handed over as it commits) costs
    the layer one send, and each process's listener one receive, in the order given. The
    layer is heard from the server's loop (the in-memory layer's queues belong to one)."""
    server = asyncio.new_event_loop()
    serving = threading.Thread(target=server.run_forever, daemon=True)
    serving.start()

    def on_server(work):
        return asyncio.run_coroutine_threadsafe(work, server).result(10)

    layer = get_channel_layer()
    group = f"bundle-{uuid.uuid4().hex}"
    before = broadcast._server_loop
    turn_ends = threading.Event()
    try:
        channel = on_server(listening.join(layer))
        broadcast.use_loop(server)
        server.call_soon_threadsafe(turn_ends.wait, 5)  # the loop is busy meanwhile
        for session in (1, 2, 3):
            coalescer.offer(session, [group], hint(session, 1))
        turn_ends.set()
        received = on_server(asyncio.wait_for(layer.receive(channel), 5))
        after = on_server(listening.heard(layer, channel, [group], quiet=0.05))
        on_server(layer.group_discard(broadcast.LISTENERS, channel))
    finally:
        broadcast.use_loop(before)
        server.call_soon_threadsafe(server.stop)
        serving.join(5)
        server.close()  # here, not when collected during a later test's running loop
    assert received["type"] == broadcast.BUNDLE
    hints = broadcast.unbundle(received)
    assert [json.loads(one["text"])["session"] for one in hints] == [1, 2, 3]
    assert all(one["groups"] == [group] for one in hints)
    assert after == [], "a hint was sent again on its own"
