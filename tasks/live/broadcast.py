"""The only place that talks to the channel layer: hints to browsers, sent after commit.
It only sends: what a hint carries is made and stored by fragments.py.

A broadcast is a hint, never the truth: browsers drop anything older than the revision they
show and refetch over HTTP on every (re)connect, so a message lost here (a channel layer that
is down, a full group, a coalesced burst) costs nothing but latency. That is why sending
failures are logged and swallowed: the push was committed and must still be acknowledged.

A message carries the session's fragments, rendered once when it changed (fragments.py) with
the same partials the pages use, so consumers only forward. Bursts are coalesced per session:
at most one message per `MIN_INTERVAL`, and the latest always wins.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)
# Seconds between two messages about one session (≤ 20 a second). Under load the applier's
# batches coalesce already (one hint per session per batch, about ten a second at 200 pushes
# a second): at 0.1 s this held 83% of those hints, 29 ms at the median and 102 ms at p99,
# for 13% fewer socket messages, and push → DOM p50 was 171–179 ms against 129–141.
MIN_INTERVAL = 0.05


# The one channel-layer group: every process's live listener (fanout.py) is in it, and a
# hint goes to it once, naming the groups below that it is for.
LISTENERS = "live"


def team_group(team_id: int | None) -> str:
    return f"team.{team_id}" if team_id is not None else "team.all"


def session_group(session_id: int) -> str:
    return f"session.{session_id}"


# Set in the applier's own process (pushes/process.py): its hints go to its server, which
# sends them as its own.
_relay: Callable[..., None] | None = None


def relay_to(relay: Callable[..., None] | None) -> None:
    """Hand every hint and notice to `relay(kind, session_id, team_id, message)` instead of
    sending it from this process (None: send again)."""
    global _relay
    _relay = relay


def hint(session_id: int, team_id: int | None, message: dict) -> None:
    """Tell the session's watchers (its team's screens and its own page) what it shows now;
    call after commit (fragments.changed does)."""
    if _relay is not None:
        _relay("hint", session_id, team_id, message)
        return
    coalescer.offer(session_id, [team_group(team_id), session_group(session_id)], message)


def notice(session_id: int, team_id: int | None, message: dict) -> None:
    """Tell the session's watchers that something shown beside its fragments changed, not
    the session itself (tasks/notify/seen.py: a team channel was told); call after commit.
    Coalesced on its own: it carries no snapshot, so it must never take the place of one
    waiting to be sent, nor one of those take its place."""
    if _relay is not None:
        _relay("notice", session_id, team_id, message)
        return
    notices.offer(session_id, [team_group(team_id), session_group(session_id)], message)


def wire(message: dict, groups: list[str]) -> dict:
    """What travels through the channel layer: the message encoded once, here, rather than
    once per socket by every consumer that forwards it, and the groups whose sockets it is
    for (each process's listener hands it to its own). A snapshot's fragments are encoded
    each on its own, as JSON strings: a page is sent only those it shows, joined to the
    rest without encoding anything again (fanout.text_for)."""
    body = {k: v for k, v in message.items() if k not in ("type", "html")}
    wired = {
        "type": message["type"],
        "groups": groups,
        "text": json.dumps(body, separators=(",", ":")),
    }
    if "session" in message:  # what a newer message about it replaces (fanout.newest_key)
        wired["session"] = message["session"]
    if "html" in message:
        wired["html"] = {key: json.dumps(html) for key, html in message["html"].items()}
    return wired


_server_loop: asyncio.AbstractEventLoop | None = None


def use_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The ASGI server's event loop (set by the socket consumer and the push receiver). A
    delayed message is sent from it: the in-memory layer's queues belong to that loop, and
    a send from any other loop would not wake the sockets waiting on them."""
    global _server_loop
    _server_loop = loop


def _running_server_loop() -> asyncio.AbstractEventLoop | None:
    loop = _server_loop
    return loop if loop is not None and loop.is_running() else None


class _Coalescer:
    """Per session: send now if the last message went out long enough ago, otherwise keep the
    newest message and send it when the interval is up.

    `clock` (seconds, never going back) and `later(wait, callback)` (call `callback` about
    `wait` seconds from now) default to the real ones; tests pass fakes so they can step
    through an interval without sleeping on a loaded machine's timers."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        later: Callable[[float, Callable[[], None]], object] | None = None,
    ) -> None:
        self.clock = clock
        self.later = later if later is not None else self._real_later
        self.lock = threading.Lock()
        self.last_sent: dict[int, float] = {}
        self.pending: dict[int, tuple[list[str], dict]] = {}

    def offer(self, session_id: int, groups: list[str], message: dict) -> None:
        with self.lock:
            now = self.clock()
            if len(self.last_sent) > 10_000:  # forget sessions that have been quiet
                horizon = now - MIN_INTERVAL
                self.last_sent = {k: t for k, t in self.last_sent.items() if t > horizon}
            last = self.last_sent.get(session_id)
            wait = 0.0 if last is None else last + MIN_INTERVAL - now
            if wait > 0:
                already_waiting = session_id in self.pending
                self.pending[session_id] = (groups, message)
                if not already_waiting:
                    self.later(wait, lambda: self._flush(session_id))
                return
            self.last_sent[session_id] = now
            # A late timer may still hold an older message for this session: this one is
            # newer, so that one must never go out after it.
            self.pending.pop(session_id, None)
        _send(groups, message)

    @staticmethod
    def _real_later(wait: float, callback: Callable[[], None]) -> None:
        loop = _running_server_loop()
        if loop is not None:
            loop.call_soon_threadsafe(loop.call_later, wait, callback)
            return
        # No server loop (a management command, a sync test): a timer thread will do.
        timer = threading.Timer(wait, callback)
        timer.daemon = True
        timer.start()

    def _flush(self, session_id: int) -> None:
        with self.lock:
            entry = self.pending.pop(session_id, None)
            if entry is None:  # cleared, or a newer message went out meanwhile
                return
            self.last_sent[session_id] = self.clock()
        # From the server's loop (sent at its next turn, with any others due then), a timer
        # thread, or a test's fake scheduler.
        _send(*entry)

    def clear(self) -> None:
        """Forget every session: pending messages are dropped (tests start from nothing)."""
        with self.lock:
            self.pending.clear()
            self.last_sent.clear()


coalescer = _Coalescer()
notices = _Coalescer()  # see `notice`


# Hints sent together, as one layer message: what a batch of pushes changed is a hint per
# session, all sent at once, and each layer message costs its sender a send and every
# process's listener a receive (round trips to Redis: about a tenth of the server's CPU under
# the live benchmark at 200 pushes a second, one message per session per batch).
BUNDLE = "live.bundle"

_outgoing: list[tuple[list[str], dict]] = []  # to send at the server loop's next turn
_outgoing_lock = threading.Lock()


def unbundle(received: dict) -> list[dict]:
    """The hints a layer message carries (fanout.py): a bundle's, in the order they were
    sent, or the message itself."""
    return received["hints"] if received.get("type") == BUNDLE else [received]


def _send(groups: list[str], message: dict) -> None:
    loop = _running_server_loop()
    if loop is not None:
        # Handed to the server's loop without waiting: the push's 200 does not wait for the
        # layer. The loop sends, at its next turn, every hint handed to it until then, in
        # the order the commits happened.
        with _outgoing_lock:
            _outgoing.append((groups, message))
            first = len(_outgoing) == 1
        if first:
            loop.call_soon_threadsafe(_send_outgoing)
        return
    try:
        async_to_sync(_send_async)(groups, message)
    except Exception as error:  # noqa: BLE001 - any layer failure must not fail the push
        log.warning("broadcast to %s failed: %s", groups, error)


def _send_outgoing() -> None:
    with _outgoing_lock:
        sending = _outgoing[:]
        _outgoing.clear()
    if sending:
        asyncio.get_running_loop().create_task(_send_together(sending))


async def _send_together(sending: list[tuple[list[str], dict]]) -> None:
    if len(sending) == 1:
        await _send_async(*sending[0])
        return
    layer = get_channel_layer()
    if layer is None:
        return
    hints = [wire(message, groups) for groups, message in sending]
    try:
        await layer.group_send(LISTENERS, {"type": BUNDLE, "hints": hints})
    except Exception as error:  # noqa: BLE001 - any layer failure must not fail the push
        log.warning("broadcast of %s hints failed: %s", len(hints), error)


async def _send_async(groups: list[str], message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(LISTENERS, wire(message, groups))
    except Exception as error:  # noqa: BLE001 - any layer failure must not fail the push
        log.warning("broadcast to %s failed: %s", groups, error)
