"""Hearing the channel layer as a process's live listener does, in tests.

Every listener is in one layer group (`broadcast.LISTENERS`), so a test's channel there hears
every hint sent through its layer, its own and those of anything else still running in the
same process (a test's server thread, a background sender). A test listens for its groups
and for a bounded time: "until the layer goes quiet" alone never ends while something else
keeps hinting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from tasks.live import broadcast, fanout


async def join(layer) -> str:
    """A new channel among the listeners."""
    channel = await layer.new_channel()
    await layer.group_add(broadcast.LISTENERS, channel)
    return channel


async def heard(
    layer, channel: str, groups: Iterable[str], *, quiet: float = 0.4, within: float = 5.0
) -> list[dict]:
    """The hints for any of `groups` that reach `channel` until none has come for `quiet`
    seconds, or `within` seconds have passed, whichever is first."""
    wanted = set(groups)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    got = []
    quiet_until = loop.time() + quiet
    receiving = None
    try:
        while (left := min(deadline, quiet_until) - loop.time()) > 0:
            # Waited for, not cancelled at each timeout: see `_stop`.
            receiving = receiving or asyncio.ensure_future(layer.receive(channel))
            done, _ = await asyncio.wait({receiving}, timeout=left)
            if not done:
                break
            received, receiving = receiving.result(), None
            for wired in broadcast.unbundle(received):
                if wanted.intersection(wired["groups"]):
                    got.append(wired)
                    quiet_until = loop.time() + quiet
    finally:
        await _stop(receiving)
    return got


async def first(layer, channel: str, groups: Iterable[str], *, within: float = 5.0) -> dict:
    """The first hint for any of `groups` to reach `channel`; fails after `within` seconds."""
    wanted = set(groups)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    receiving = None
    try:
        while (left := deadline - loop.time()) > 0:
            receiving = asyncio.ensure_future(layer.receive(channel))
            done, _ = await asyncio.wait({receiving}, timeout=left)
            if not done:
                break
            received, receiving = receiving.result(), None
            for wired in broadcast.unbundle(received):
                if wanted.intersection(wired["groups"]):
                    return wired
    finally:
        await _stop(receiving)
    raise TimeoutError(f"no hint for {sorted(wanted)} within {within} s")


async def _stop(receiving: asyncio.Future | None) -> None:
    """End a receive no longer wanted, as the process's listener does: the Redis layer's can
    lose a cancellation, or come out of one as redis-py's TimeoutError (tasks/live/fanout.py
    says why)."""
    if receiving is not None:
        await fanout.end(receiving)
