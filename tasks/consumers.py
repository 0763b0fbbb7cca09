"""The live socket: `/ws/live/`. Authenticated by the session cookie, origin checked (in
asgi.py, tasks/origins.py), it joins the groups the user may see (through the process's
listener, fanout.py) and forwards `card.changed` hints until its access ends (the process's
sweep, access.py, closes it). It reads nothing but the groups it may join, writes nothing
and renders nothing: fragments arrive rendered."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from tasks import access, broadcast, fanout

CLOSE_UNAUTHENTICATED = access.CLOSE_LOGGED_OUT


def groups_for(user, session_id: int | None) -> list[str]:
    """Everyone's group (agents without a team), the user's teams (every team for a
    superuser, who sees every agent), and the open session if the user may see it: the
    sweep's own rule, so a socket never joins what the sweep would take away."""
    (groups,) = access.allowed_groups({user.pk: user.is_superuser}, [(user.pk, session_id)])
    return sorted(groups)


class LiveConsumer(AsyncJsonWebsocketConsumer):
    # No channel of its own: hints come through the process's listener (fanout.py), so a
    # socket costs the channel layer nothing. An alias that names no layer says exactly that.
    channel_layer_alias = "none: sockets hear through tasks.fanout"

    async def connect(self) -> None:
        broadcast.use_loop(asyncio.get_running_loop())
        self.joined: list[str] = []
        self.watched: access.Watched | None = None
        self.revoked = False
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        session = query.get("session", [""])[0]
        # A page's session id, or none: not a number or past any id (a 64-bit column).
        valid = session.isascii() and session.isdigit() and len(session) <= 18
        session_id = int(session) if valid else None
        groups = await database_sync_to_async(groups_for)(user, session_id)
        await fanout.listener().join(self.deliver, groups)
        self.joined = groups
        self.watched = access.Watched(
            user_id=user.pk,
            session_key=self.scope["session"].session_key,
            page_session=session_id,
            groups=frozenset(groups),
            revoke=self.revoke,
        )
        access.sweep().watch(self.watched)
        await self.accept()

    async def revoke(self, code: int) -> None:
        """Access ended: not one more message, then close (the page knows what to do from
        the code: log in again, or reconnect to join what it may now see)."""
        self.revoked = True
        await self._leave()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def _leave(self) -> None:
        if self.watched is not None:
            access.sweep().forget(self.watched)
            self.watched = None
        if self.joined:
            joined, self.joined = self.joined, []
            fanout.listener().leave(self.deliver, joined)

    async def receive_json(self, content, **kwargs) -> None:
        """Browsers only listen, except for a ping: a page that hears no pong knows its
        socket is half-open and reconnects. Anything else is ignored."""
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        # Not JSON is not an error worth closing over: ignore it like any other chatter.
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except ValueError:
            return

    async def deliver(self, event: dict) -> None:
        """A hint from this process's listener, for one of the groups this socket joined."""
        if self.revoked:
            return
        await self.send(text_data=event["text"])  # encoded once, by broadcast.wire
