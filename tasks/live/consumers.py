"""The live socket: `/ws/live/`. Authenticated by the session cookie, origin checked (in
asgi.py, tasks/live/origins.py), it joins the groups the user may see (through the process's
listener, fanout.py) and forwards `card.changed` hints until its access ends (the process's
sweep, access.py, closes it). It reads nothing but the groups it may join, writes nothing
and renders nothing: fragments arrive rendered."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from tasks.live import access, broadcast, fanout, server_socket

CLOSE_UNAUTHENTICATED = access.CLOSE_LOGGED_OUT
# One person has this process's settings.ONLOOKER_LIVE_SOCKETS_PER_PERSON open already: a
# page told so retries slowly (static/js/live.js), as HTTP's 429 asks.
CLOSE_TOO_MANY = 4429


class _PerPerson:
    """How many live sockets this process holds for each person. A socket takes its place
    before its handshake does any work, so a burst of handshakes cannot pass the cap
    together, and gives it back however it ends."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}

    def take(self, user_id: int) -> bool:
        held = self.open.get(user_id, 0)
        if held >= settings.ONLOOKER_LIVE_SOCKETS_PER_PERSON:
            return False
        self.open[user_id] = held + 1
        return True

    def give_back(self, user_id: int) -> None:
        held = self.open.get(user_id, 0) - 1
        if held > 0:
            self.open[user_id] = held
        else:
            self.open.pop(user_id, None)


# One event loop serves every socket of a server process: no lock needed.
per_person = _PerPerson()


def groups_for(user, session_id: int | None) -> list[str]:
    """Everyone's group (agents without a team), the user's teams (every team for a
    superuser, who sees every agent), and the open session if the user may see it: the
    sweep's own rule, so a socket never joins what the sweep would take away."""
    (groups,) = access.allowed_groups({user.pk: user.is_superuser}, [(user.pk, session_id)])
    return sorted(groups)


SERVER_SEND = "onlooker.server_send"
SERVER_SOCKET = "onlooker.server_socket"


class ServerSend:
    """ASGI middleware, outermost on the live socket: keeps the server's own `send` in the
    scope, and daphne's socket behind it (server_socket.py), so a hint's frame goes straight
    to it. Every middleware between wraps `send` (channels' sessions check the session on
    each message, the outage watch looks for the accept), and none has anything to do with
    a frame: under 50 pushes/s to 100 sockets those wrappers took a quarter of the server's
    CPU (a py-spy profile of the live benchmark)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        socket = server_socket.of(send)
        return await self.app({**scope, SERVER_SEND: send, SERVER_SOCKET: socket}, receive, send)


class LiveConsumer(AsyncJsonWebsocketConsumer):
    # No channel of its own: hints come through the process's listener (fanout.py), so a
    # socket costs the channel layer nothing. An alias that names no layer says exactly that.
    channel_layer_alias = "none: sockets hear through tasks.live.fanout"

    async def connect(self) -> None:
        broadcast.use_loop(asyncio.get_running_loop())
        self.joined: list[str] = []
        self.watched: access.Watched | None = None
        self.shown: tuple[str, ...] | None = None
        self.page_session: int | None = None
        self.send_frame = self.scope.get(SERVER_SEND, self.base_send)
        socket = self.scope.get(SERVER_SOCKET)
        self.outbox = server_socket.Outbox(socket) if socket is not None else None
        self.revoked = False
        self.holder: int | None = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not per_person.take(user.pk):
            # Accepted to be closed with a code the page reads: a refused handshake has none.
            await self.accept()
            await self.close(code=CLOSE_TOO_MANY)
            return
        self.holder = user.pk
        try:
            await self._join(user)
        except BaseException:
            self._give_back()
            raise

    async def _join(self, user) -> None:
        # Bytes that are not UTF-8 (a hand-made client; browsers percent-encode) read as
        # Latin-1: never an error, and no word this reads is made of them.
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        session = query.get("session", [""])[0]
        # A page's session id, or none: not a number or past any id (a 64-bit column).
        valid = session.isascii() and session.isdigit() and len(session) <= 18
        session_id = int(session) if valid else None
        # The fragments the page keeps live: only those are sent to it.
        self.shown = fanout.fragments_shown(query.get("show", [None])[0])
        self.page_session = session_id
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
        if fanout.listener().lost:  # until the layer is back this page hears nothing
            await self.send(text_data=fanout.LOST["text"])

    def _give_back(self) -> None:
        if self.holder is not None:
            per_person.give_back(self.holder)
            self.holder = None

    async def revoke(self, code: int) -> None:
        """Access ended: not one more message, then close (the page knows what to do from
        the code: log in again, or reconnect to join what it may now see)."""
        self.revoked = True
        await self._leave()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        self._give_back()
        await self._leave()

    async def _leave(self) -> None:
        if self.outbox is not None:
            self.outbox.close()
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

    async def deliver(self, events: list[dict]) -> None:
        """Hints from this process's listener, for the groups this socket joined: each a
        message of its own, in order."""
        if self.revoked:
            return
        # Encoded once per hint (broadcast.wire), joined and framed once per kind of page
        # (fanout), and written to the server's socket directly (ServerSend, server_socket),
        # all of them in one send: per socket, what is left is that send.
        outbox = self.outbox
        if outbox is not None and server_socket.is_open(outbox.socket):
            factory = outbox.socket.factory
            outbox.send_all(
                [
                    (
                        fanout.newest_key(event),
                        fanout.frame_for(event, self.shown, self.page_session, factory),
                    )
                    for event in events
                ]
            )
            return
        for event in events:
            text = fanout.text_for(event, self.shown, self.page_session)
            await self.send_frame({"type": "websocket.send", "text": text})
