"""One channel-layer listener per process (per event loop) that hands each hint to the local
sockets of its group.

With a channel per socket, every hint costs the channel layer one message per open socket
(a queue, a copy, a wake-up, a dispatch); a team screen on a wall, a few dozen tabs and a
burst of pushes made that the server's whole CPU. Here the layer carries one message per
group per process, and the sockets of that group get it directly. Sockets only listen, so
nothing is lost by skipping their own channels.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

# channels' layers forget a group membership after a day (group_expiry); a listener that
# lives for weeks joins its groups again well before that.
REJOIN_EVERY = 3_600.0  # seconds

Deliver = Callable[[dict], Awaitable[None]]


class Listener:
    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.members: dict[str, set[Deliver]] = {}
        self.task: asyncio.Task | None = None
        self.ready = asyncio.Lock()

    async def join(self, deliver: Deliver, groups: Iterable[str]) -> None:
        async with self.ready:
            if self.channel is None:
                self.channel = await self.layer.new_channel("live.")
                self.task = asyncio.get_running_loop().create_task(self._listen())
            for group in groups:
                if group not in self.members:
                    self.members[group] = set()
                    await self.layer.group_add(group, self.channel)
                self.members[group].add(deliver)

    async def leave(self, deliver: Deliver, groups: Iterable[str]) -> None:
        async with self.ready:
            for group in groups:
                members = self.members.get(group)
                if members is None:
                    continue
                members.discard(deliver)
                if not members:
                    del self.members[group]
                    await self.layer.group_discard(group, self.channel)

    async def _listen(self) -> None:
        rejoin = asyncio.get_running_loop().time() + REJOIN_EVERY
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a layer hiccup must not end the loop
                log.warning("live listener: receive failed: %s", error)
                await asyncio.sleep(1.0)
                continue
            for deliver in list(self.members.get(message.get("group", ""), ())):
                try:
                    await deliver(message)
                except Exception:  # noqa: BLE001 - one broken socket must not starve the rest
                    log.exception("live listener: delivering to a socket failed")
            if asyncio.get_running_loop().time() > rejoin:
                rejoin += REJOIN_EVERY
                for group in list(self.members):
                    await self.layer.group_add(group, self.channel)


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
