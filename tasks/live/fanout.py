"""One channel-layer listener per process (per event loop) that hands each hint to the local
sockets of the groups it names.

With a channel per socket, every hint costs the channel layer one message per open socket
(a queue, a copy, a wake-up, a dispatch); a team screen on a wall, a few dozen tabs and a
burst of pushes made that the server's whole CPU. Here the layer carries one message per
hint per process (or per bundle of hints sent together: a batch's, broadcast.BUNDLE): every
listener is in one layer group (`broadcast.LISTENERS`), a hint names the groups it is for
(its session's team and the session), and the listener hands it to each of its sockets in
any of them, once. The groups themselves are only this process's
bookkeeping. Sending a hint to each of its groups through the layer instead cost two sends
and two receives per hint, and a session page's socket (in both) was handed it twice.
Sockets only listen, so nothing is lost by skipping their own channels.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterable

from channels.layers import get_channel_layer

from tasks.live import broadcast

log = logging.getLogger(__name__)

# A layer forgets a group membership after its group_expiry (settings: two minutes on Redis,
# so a process that died without leaving stops costing every hint a copy soon): a listener
# joins again well within that, quiet or not.
REJOIN_EVERY = 30.0  # seconds

# A socket's: the hints for it of one layer message, in order (a bundle's, or one).
Deliver = Callable[[list[dict]], Awaitable[None]]


# What a listener tells its sockets when it loses the channel layer and when it has it
# again: hints sent meanwhile never reached it, so its pages refetch (static/js/live.js).
LOST = {"text": '{"type":"lost"}'}
RESYNC = {"text": '{"type":"resync"}'}
# Seconds between attempts to join the layer again after losing it: the first at once-ish,
# then doubling, so a page is live again within about a second of the layer's return.
RETRY_FIRST, RETRY_MOST = 0.25, 1.0
# Seconds a cancelled receive has to end before it is cancelled again (see receive).
CANCEL_AGAIN_AFTER = 0.1


class Listener:
    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.members: dict[str, set[Deliver]] = {}
        self.tasks: list[asyncio.Task] = []  # held: the loop keeps only weak references
        self.ready = asyncio.Lock()
        # Not in the layer's group (yet, or any more): hints sent now do not reach it.
        self.lost = False

    async def join(self, deliver: Deliver, groups: Iterable[str]) -> None:
        async with self.ready:
            if self.channel is None:
                self.channel = await self.layer.new_channel("live.")
                try:
                    await self.layer.group_add(broadcast.LISTENERS, self.channel)
                except Exception as error:  # noqa: BLE001 - the layer is down: join when it is back
                    _stop_if_cancelled()
                    log.warning("live listener: cannot join the channel layer: %s", error)
                    self.lost = True
                loop = asyncio.get_running_loop()
                self.tasks = [loop.create_task(self._listen()), loop.create_task(self._rejoin())]
        for group in groups:
            self.members.setdefault(group, set()).add(deliver)

    def leave(self, deliver: Deliver, groups: Iterable[str]) -> None:
        for group in groups:
            members = self.members.get(group)
            if members is None:
                continue
            members.discard(deliver)
            if not members:
                del self.members[group]

    async def _listen(self) -> None:
        while True:
            if self.lost:
                await self._join_again()
            try:
                message = await receive(self.layer, self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a layer that went away must not end the loop
                _stop_if_cancelled()
                log.warning("live listener: lost the channel layer: %s", error)
                self.lost = True
                await self._tell_every_socket(LOST)
                continue
            # Each socket is handed, at once and in order, the hints of this message that
            # are for it: written together, a bundle's frames cost it one send. A socket
            # in both of a hint's groups (a session page: its team and its session) is
            # handed it once.
            handed: dict[Deliver, list[dict]] = {}
            for hint in broadcast.unbundle(message):
                sockets: set[Deliver] = set()
                for group in hint.get("groups", ()):
                    sockets.update(self.members.get(group, ()))
                for deliver in sockets:
                    handed.setdefault(deliver, []).append(hint)
            await _hand(handed)

    async def _join_again(self) -> None:
        """Until the layer has this listener in its group again (a restarted Redis forgot
        every membership), then every socket refetches what it missed meanwhile."""
        wait = RETRY_FIRST
        while True:
            try:
                await self.layer.group_add(broadcast.LISTENERS, self.channel)
                break
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - still away: try again shortly
                _stop_if_cancelled()
                await asyncio.sleep(wait)
                wait = min(wait * 2, RETRY_MOST)
        self.lost = False
        log.warning("live listener: joined the channel layer again; its pages refetch")
        await self._tell_every_socket(RESYNC)

    async def _tell_every_socket(self, message: dict) -> None:
        await _hand({deliver: [message] for deliver in set().union(*self.members.values())})

    async def _rejoin(self) -> None:
        while True:
            await asyncio.sleep(REJOIN_EVERY)
            if self.lost:  # _listen is at it
                continue
            try:
                await self.layer.group_add(broadcast.LISTENERS, self.channel)
            except Exception as error:  # noqa: BLE001 - tried again at the next turn
                _stop_if_cancelled()
                log.warning("live listener: joining again failed: %s", error)


# The fragments a page shows of any session, by the word its socket names in `show`
# (static/js/live.js: the parts of the page it keeps live), and those a session page shows of
# its own session besides. A monitoring screen needs no card, a session page no tiles.
SHOWN_BY = {"sidebar": ("sidebar",), "tiles": ("tile",)}
OWN = ("card", "summary")


def fragments_shown(show: str | None) -> tuple[str, ...] | None:
    """The fragments a socket asked for (`show=sidebar,tiles`), or None (every one) when it
    did not say, as pages from before this did not; words it does not know are ignored."""
    if show is None:
        return None
    return tuple(sorted({key for word in show.split(",") for key in SHOWN_BY.get(word, ())}))


def text_for(
    wired: dict, shown: tuple[str, ...] | None = None, own_session: int | None = None
) -> str:
    """A hint as one socket is sent it: a snapshot with only the fragments its page shows
    (`shown`, and its own session's card), joined from the parts encoded once per hint
    (broadcast.wire) and kept on the hint for the next socket that shows the same."""
    html = wired.get("html")
    if html is None:
        return wired["text"]
    keys = tuple(html) if shown is None else shown
    if own_session is not None and shown is not None and wired.get("session") == own_session:
        keys = (*keys, *OWN)
    texts = wired.setdefault("texts", {})
    text = texts.get(keys)
    if text is None:
        members = ",".join(f'"{key}":{html[key]}' for key in keys if key in html)
        text = texts[keys] = f'{wired["text"][:-1]},"html":{{{members}}}}}'
    return text


def newest_key(wired: dict) -> Hashable:
    """What a newer message replaces for a socket that is behind (server_socket.Outbox): a
    session's snapshot its next snapshot, a notice about it its next notice (each says all
    there is); a message about no session only a copy of itself."""
    session = wired.get("session")
    return wired["text"] if session is None else (wired.get("type"), session)


def frame_for(
    wired: dict, shown: tuple[str, ...] | None, own_session: int | None, server
) -> object:
    """The same text as a WebSocket frame, made once per hint for every socket sent it
    (autobahn's prepared message; `server`, the factory of daphne's sockets, makes it):
    framing it per socket was a fifth of the server's CPU under the live benchmark."""
    text = text_for(wired, shown, own_session)
    frames = wired.setdefault("frames", {})
    frame = frames.get(text)
    if frame is None:
        frame = frames[text] = server.prepareMessage(text.encode())
    return frame


async def receive(layer, channel: str) -> dict:
    """The layer's next message on the channel, from a receive that a cancellation surely
    ends. channels_redis on Python 3.11 can lose a cancellation (redis-py sends under
    asyncio.wait_for, which returns a result that came in the same turn as the cancel) and
    then waits on Redis again, five seconds at a time, for ever: a listener awaiting it never
    ended, nor did its event loop's shutdown, which waits for every task (a test hung 300 s,
    and a server would not stop). Cancelled, this cancels the receive until it has ended."""
    receiving = asyncio.ensure_future(layer.receive(channel))
    try:
        await asyncio.wait({receiving})
    except asyncio.CancelledError:
        await end(receiving)
        raise
    return receiving.result()


async def end(receiving: asyncio.Future) -> None:
    """Cancel a receive until it has ended (see receive: once may not do), whatever it
    raises; cancelled meanwhile, the caller is ending anyway, so this finishes first."""
    while not receiving.done():
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({receiving}, timeout=CANCEL_AGAIN_AFTER)
    if not receiving.cancelled():
        receiving.exception()  # retrieved: asyncio would log it as never retrieved


async def _hand(handed: dict[Deliver, list[dict]]) -> None:
    for deliver, hints in handed.items():
        try:
            await deliver(hints)
        except Exception:  # noqa: BLE001 - one broken socket must not starve the rest
            log.exception("live listener: delivering to a socket failed")


def _stop_if_cancelled() -> None:
    """End a listener's task that was asked to stop, whatever its layer raised instead.

    redis-py reads under `asyncio.timeout`, which on Python 3.11 can turn the cancellation
    into a TimeoutError, and redis-py that into its own ("Timeout reading from …"; seen
    under load). A listener that took that for a hiccup and listened on outlived its event
    loop's shutdown, which waits for every task it cancelled: a test's loop never ended, and
    a server would not stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Listener] = (
    weakref.WeakKeyDictionary()
)


def listener() -> Listener:
    """This event loop's listener (tests run several loops in one process)."""
    loop = asyncio.get_running_loop()
    found = _listeners.get(loop)
    if found is None or found.layer is not get_channel_layer():
        found = _listeners[loop] = Listener()
    return found
