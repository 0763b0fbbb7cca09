"""daphne's own socket behind a live page, to which a hint's frame is written directly.

The same hint goes to every socket of a kind of page, so it is framed once (fanout.frame_for:
autobahn's prepared message). What is left per socket is writing those bytes, and Twisted
makes that costly: it buffers every write until the event loop reports the socket writable,
which is a registration with epoll, a callback, the send, and a deregistration for each
message (under the live benchmark, more of daphne's CPU than anything else on its thread).
Here a frame is sent at once when nothing waits to go out before it, as asyncio's own
transports do, and only what the kernel did not take is left to Twisted, which then keeps
the order of everything after it. The frames of a bundle (a batch's hints, one per session)
go out to a socket in one send. Anything unusual (TLS, compression, a closing socket,
data already waiting) takes autobahn's own way.

A socket whose reader falls behind (a phone on a poor network, a tab its browser throttles)
is not sent every hint it missed: once more than BEHIND_BYTES wait for it in the server, its
Outbox keeps only the newest frame per session (a hint carries its session's whole state, so
an older one says nothing the newer does not) and sends them as the reader catches up. What
waits for one socket is bounded by that and one frame per session it hears of.

Under another server, or a test's communicator, there is no such socket: the consumer sends
the ASGI way.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Hashable
from typing import Any

BEHIND_BYTES = 64 * 1024  # waiting in the server for one socket: past this it is behind
CATCH_UP_EVERY = 0.05  # seconds between two looks at a socket that is behind


def of(send: Callable) -> Any | None:
    """daphne's socket behind its `send`, a partial of its server's `handle_reply` with the
    socket; None for any other `send`."""
    socket = send.args[0] if isinstance(send, functools.partial) and send.args else None
    return socket if hasattr(socket, "sendPreparedMessage") else None


def is_open(socket: Any) -> bool:
    """Accepted and not closing: a frame may go out (before the accept, or once a close has
    begun, messages take daphne's way, which knows what to do with them)."""
    return socket.state == socket.STATE_OPEN


class Outbox:
    """The frames one open socket is sent, in order, keeping only the newest per key (a
    session, or a kind of message) for as long as its reader is behind."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.held: dict[Hashable, Any] = {}
        self.catching_up: asyncio.TimerHandle | None = None

    def send(self, key: Hashable, frame: Any) -> None:
        self.send_all([(key, frame)])

    def send_all(self, frames: list[tuple[Hashable, Any]]) -> None:
        """Frames (each with its key), in order: written together when nothing is held."""
        if self.held or waiting(self.socket.transport) > BEHIND_BYTES:
            for key, frame in frames:
                self.held.pop(key, None)  # a newer frame goes after everything held before
                self.held[key] = frame
            if self.catching_up is None:
                self.catching_up = asyncio.get_running_loop().call_later(
                    CATCH_UP_EVERY, self._catch_up
                )
            return
        write_all(self.socket, [frame for _, frame in frames])

    def _catch_up(self) -> None:
        self.catching_up = None
        while self.held and is_open(self.socket):
            if waiting(self.socket.transport) > BEHIND_BYTES:
                self.catching_up = asyncio.get_running_loop().call_later(
                    CATCH_UP_EVERY, self._catch_up
                )
                return
            write(self.socket, self.held.pop(next(iter(self.held))))
        self.held.clear()  # closing: nothing more goes out

    def close(self) -> None:
        if self.catching_up is not None:
            self.catching_up.cancel()
            self.catching_up = None
        self.held.clear()


def waiting(transport: Any) -> int:
    """Bytes Twisted holds for the connection that the kernel has not taken yet (0 if its
    buffer cannot be read: the socket is then never taken to be behind)."""
    buffered = getattr(transport, "dataBuffer", b"")
    return getattr(transport, "_tempDataLen", 0) + len(buffered) - getattr(transport, "offset", 0)


def write(socket: Any, frame: Any) -> None:
    """Send a prepared frame on an open socket."""
    write_all(socket, [frame])


def write_all(socket: Any, frames: list[Any]) -> None:
    """Send prepared frames on an open socket, in order: each its own WebSocket message,
    all of them in one send (frames one after another are the protocol's own stream)."""
    transport = socket.transport
    # autobahn's own state, read with defaults that take its own way if it is not there.
    compressing = getattr(socket, "_perMessageCompress", True) is not None
    if compressing or getattr(socket, "send_queue", True) or not _idle(transport):
        for frame in frames:
            socket.sendPreparedMessage(frame)
        return
    data = frames[0].payloadHybi if len(frames) == 1 else b"".join(f.payloadHybi for f in frames)
    sent = transport.writeSomeData(data)
    if not isinstance(sent, int):  # the connection is lost: Twisted finds out by itself
        sent = 0
    if sent < len(data):
        transport.write(data[sent:])


def _idle(transport: Any) -> bool:
    """A plain TCP connection with nothing buffered: bytes sent now go out in order. Read
    with defaults that mean "not idle", so a Twisted that keeps its buffer otherwise only
    costs this its shortcut."""
    return (
        getattr(transport, "TLS", True) is False
        and getattr(transport, "connected", False)
        and not getattr(transport, "disconnecting", True)
        and not getattr(transport, "_writeDisconnected", True)
        and getattr(transport, "_tempDataLen", 1) == 0
        and len(getattr(transport, "dataBuffer", b"x")) == getattr(transport, "offset", -1)
        and hasattr(transport, "writeSomeData")
    )
