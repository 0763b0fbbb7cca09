"""One channel-layer listener per process (per event loop) that hands each hint to the local
sockets of the groups it names.

With a channel per socket, every hint costs the channel layer one message per open socket
(a queue, a copy, a wake-up, a dispatch); a team screen on a wall, a few dozen tabs and a
burst of pushes made that the server's whole CPU. Here the layer carries one message per
hint per process: every listener is in one layer group (`broadcast.LISTENERS`), a hint
names the groups it is for (its session's team and the session), and the listener hands it
to each of its sockets in any of them, once. The groups themselves are only this process's
bookkeeping. Sending a hint to each of its groups through the layer instead cost two sends
and two receives per hint, and a session page's socket (in both) was handed it twice.
Sockets only listen, so nothing is lost by skipping their own channels.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable

from channels.layers import get_channel_layer

from tasks import broadcast

log = logging.getLogger(__name__)

# A layer forgets a group membership after its group_expiry (settings: two minutes on Redis,
# so a process that died without leaving stops costing every hint a copy soon): a listener
# joins again well within that, quiet or not.
REJOIN_EVERY = 30.0  # seconds

Deliver = Callable[[dict], Awaitable[None]]


class Listener:
    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.members: dict[str, set[Deliver]] = {}
        self.tasks: list[asyncio.Task] = []  # held: the loop keeps only weak references
        self.ready = asyncio.Lock()

    async def join(self, deliver: Deliver, groups: Iterable[str]) -> None:
        async with self.ready:
            if self.channel is None:
                channel = await self.layer.new_channel("live.")
                await self.layer.group_add(broadcast.LISTENERS, channel)
                self.channel = channel
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
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a layer hiccup must not end the loop
                _stop_if_cancelled()
                log.warning("live listener: receive failed: %s", error)
                await asyncio.sleep(1.0)
                continue
            # A socket in both of a hint's groups (a session page: its team and its session)
            # is handed it once.
            sockets: set[Deliver] = set()
            for group in message.get("groups", ()):
                sockets.update(self.members.get(group, ()))
            for deliver in sockets:
                try:
                    await deliver(message)
                except Exception:  # noqa: BLE001 - one broken socket must not starve the rest
                    log.exception("live listener: delivering to a socket failed")

    async def _rejoin(self) -> None:
        while True:
            await asyncio.sleep(REJOIN_EVERY)
            try:
                await self.layer.group_add(broadcast.LISTENERS, self.channel)
            except Exception as error:  # noqa: BLE001 - tried again at the next turn
                _stop_if_cancelled()
                log.warning("live listener: joining again failed: %s", error)


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
