"""A page that reads slowly (a phone on a poor network, a tab its browser throttles) holds back
no other page, and once it reads it is sent the newest state of every session, in order,
not every hint it missed: past a little waiting in the server, only the newest frame per
session is kept for it (tasks/live/server_socket.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import threading
from pathlib import Path

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db import connections
from websockets.asyncio.client import ClientConnection, connect

from tasks.models import ProgressCard
from tests.builders import progress, status
from tests.conftest import make_agent
from tests.live_server import LiveServer, push_http, session_cookie, wait_applied

# In the long checks (-m slow; .ci/run runs them): it starts a server of its own.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SESSIONS = 10
# A card of ~34 KB in every hint: a long note and a full plan. The fewer pushes the brisk page
# needs to hear its megabytes, the sooner the slow one reads, well before the server's pings
# (every 20 s, 30 s to answer) drop it for reading nothing.
NOTE = " ".join(f"word{n}" for n in range(2_000))
# The most the kernel holds between the server and a reader that does not read: the
# server's send buffer at its largest, the reader's small receive buffer, and the client
# library's own few messages.
KERNEL_HOLDS = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2]) + 512 * 1024
SENT_PAST = KERNEL_HOLDS + 1536 * 1024  # bytes the brisk page hears before the slow reads
PLAN = progress(*((f"{n} " + "step " * 100, "pending") for n in range(50)))  # 50 of ~500 bytes
WITHIN = 60.0  # seconds


async def open_socket(server: LiveServer, cookie: dict, *, slow: bool = False) -> ClientConnection:
    sock = None
    if slow:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.setblocking(False)
    return await connect(
        f"{server.ws_url}/ws/live/",  # says nothing of what it shows: every fragment
        origin=server.url,
        additional_headers={"Cookie": f"{cookie['name']}={cookie['value']}"},
        open_timeout=WITHIN,
        sock=sock,
        max_queue=1 if slow else 64,  # the slow one takes no more than it is asked for
        max_size=None,
        # Its pings would be answered behind the megabytes the slow page leaves unread: the
        # client would give up on a server that is fine. The server's own pings (Daphne: every
        # 20 s, 30 s to answer) still drop a page that reads nothing for long.
        ping_interval=None,
    )


class Heard:
    def __init__(self) -> None:
        self.bytes = 0
        self.revisions: dict[int, list[int]] = {}

    def add(self, text: str) -> None:
        self.bytes += len(text.encode())
        hint = json.loads(text)
        self.revisions.setdefault(hint["session"], []).append(hint["revision"])

    def has(self, last: dict[int, int]) -> bool:
        return all(self.revisions.get(s, [0])[-1] >= r for s, r in last.items())

    async def listen(self, ws: ClientConnection, until) -> None:
        while not until():
            self.add(await asyncio.wait_for(ws.recv(), timeout=WITHIN))


def test_a_page_that_reads_slowly_holds_back_no_other_and_is_sent_the_newest_of_each_session(
    alice, ops
):
    registered = make_agent(team=ops)
    stop = threading.Event()

    def keep_pushing(context: str) -> int:
        # One push at a time, each applied before the next: every push makes a hint. Pushed
        # as fast as the server takes them, its applier would fold hundreds into each hint
        # and the brisk page would hear its megabytes only after a minute.
        n, delivery = 0, 0
        try:
            with httpx.Client() as client:
                while not stop.is_set():
                    n += 1
                    body = status(
                        "WORKING",
                        task=context,
                        context=context,
                        at=n,
                        text=f"{n} {NOTE}",
                        metadata=PLAN,
                    )
                    response = push_http(server, registered, body, client=client)
                    assert response.status_code == 200, response.text
                    delivery = response.json()["delivery"]
        finally:
            connections.close_all()  # this thread's, left open on the test database else
        return delivery

    async def scenario() -> None:
        # Each database call closes its thread's connection after it: none is left open on
        # the test database when the run ends.
        cookie = await database_sync_to_async(session_cookie)(alice, server.url)
        slow = await open_socket(server, cookie, slow=True)
        brisk = await open_socket(server, cookie)
        brisk_heard, slow_heard = Heard(), Heard()
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(SESSIONS) as pushers:
            pushing = [
                loop.run_in_executor(pushers, keep_pushing, f"slow-{n}") for n in range(SESSIONS)
            ]
            try:
                # The brisk page hears it all as it comes while the slow one reads nothing.
                await brisk_heard.listen(brisk, lambda: brisk_heard.bytes > SENT_PAST)
            finally:
                stop.set()
                deliveries = await asyncio.gather(*pushing)
        for delivery in deliveries:
            await database_sync_to_async(wait_applied)(delivery)
        last = await database_sync_to_async(
            lambda: dict(ProgressCard.objects.values_list("session_id", "revision"))
        )()
        assert len(last) == SESSIONS
        await brisk_heard.listen(brisk, lambda: brisk_heard.has(last))
        await slow_heard.listen(slow, lambda: slow_heard.has(last))
        await slow.close()
        await brisk.close()

        for heard in (brisk_heard, slow_heard):
            for session, revisions in heard.revisions.items():
                assert revisions == sorted(set(revisions)), "a hint out of order, or twice"
                assert revisions[-1] == last[session]
        # The slow page was sent what the kernel holds, the little more the server keeps
        # before it counts as behind, and then each session's newest: not everything.
        assert slow_heard.bytes < KERNEL_HOLDS + 512 * 1024 < brisk_heard.bytes, (
            slow_heard.bytes,
            brisk_heard.bytes,
        )

    with LiveServer() as server:
        asyncio.run(scenario())
