"""A loopback agent whose replies attack the caller: a reply of tens of MB (sent in chunks, or
declared up front), a gzip body that inflates far beyond its size on the wire, a reply
trickled a byte at a time (its headers or its body). A real socket server (http.server in
threads) that serves its card on GET and answers JSON-RPC on POST, and records each request.

    with HostileAgent() as agent:
        agent.floods("POST", 60 * MB)
        ...
        agent.calls("SendMessage")

Every reply is a valid answer once read in full (a task that COMPLETED, a card), so a caller
without limits takes it: what a test sees is the caller stopping, not the agent failing. The
padding is sent from one buffer, and a flood's gzip is made a chunk at a time: the agent's
own memory stays small, so a test can measure the caller's.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

from tests.peers.misbehaving_agent import LoopbackAgent, Received

MB = 1024 * 1024
CARD_PATH = "/.well-known/agent-card.json"
CHUNK = 64 * 1024
PADDING = b"a" * CHUNK
PLACE = b"\\u0000"  # where padding goes: json.dumps writes "\0" so, and never elsewhere here
# What a JSON-RPC method answers once its reply is read.
TASK = {"id": "task-1", "contextId": "ctx-1", "status": {"state": "TASK_STATE_COMPLETED"}}
RESULTS: dict[str, object] = {
    "SendMessage": {"task": TASK},
    "GetTask": TASK,
    "ListTasks": {"tasks": []},
}

# Writes the reply to a request: the handler and what the request was.
Reply = Callable[["_Handler", Received], None]


class HostileAgent(LoopbackAgent):
    def __init__(self) -> None:
        self.bytes_sent: list[int] = []  # per reply: how much of it went out
        self._replies: dict[str, Reply] = {"GET": _whole, "POST": _whole}
        super().__init__(_Handler)

    @property
    def card_url(self) -> str:
        return self.base_url + CARD_PATH

    def card(self) -> tuple[bytes, bytes]:
        """The agent card around a place for padding in its description: (before, after)."""
        head = b'{"name": "Hostile", "description": "'
        interface = {"url": self.rpc_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        tail = {"supportedInterfaces": [interface], "capabilities": {"pushNotifications": True}}
        return head, b'", ' + json.dumps(tail).encode()[1:]

    # -- how it answers, by HTTP method ("GET": the card; "POST": JSON-RPC) ----------------

    def answers(self, method: str) -> None:
        """Whole, at once, with its Content-Length: a well-behaved agent."""
        self._replies[method] = _whole

    def floods(self, method: str, size: int) -> None:
        """`size` bytes of padding inside the answer, chunked: no length said up front."""
        self._replies[method] = lambda handler, received: handler.flood(received, size)

    def declares(self, method: str, size: int) -> None:
        """The same, with a Content-Length that says so before the body."""
        self._replies[method] = lambda handler, received: handler.flood(
            received, size, declared=True
        )

    def bombs(self, method: str, size: int) -> None:
        """`size` bytes of padding gzipped: a few tens of KB on the wire."""
        self._replies[method] = lambda handler, received: handler.bomb(received, size)

    def trickles(self, method: str, *, every: float, lasting: float, head: bool = False) -> None:
        """One byte every `every` seconds for `lasting` seconds, then the rest at once: of
        the body (leading spaces, which JSON allows), or with `head`, of the status line
        and headers. Each byte comes before any sensible read timeout."""
        slow = max(1, round(lasting / every))
        self._replies[method] = lambda handler, received: handler.trickle(
            received, every=every, slow=slow, head=head
        )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    @property
    def owner(self) -> HostileAgent:
        return self.server.owner  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._reply(b"")

    def do_POST(self) -> None:
        self._reply(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _reply(self, body: bytes) -> None:
        received = Received(
            self.command,
            self.path,
            {name.lower(): value for name, value in self.headers.items()},
            body,
            self.client_address[1],
        )
        self.owner.requests.append(received)
        self.close_connection = True  # an attack ends the connection, whatever its outcome
        # The caller may stop reading and close: what the tests want to see.
        with contextlib.suppress(OSError):
            self.owner._replies[self.command](self, received)

    def document(self, received: Received, padding: int) -> tuple[bytes, bytes]:
        """The answer to `received`, with room for `padding` bytes: (before them, after)."""
        if received.method == "GET":
            return self.owner.card()
        request = received.json()
        result = RESULTS[request["method"]]
        if padding:
            result = _padded(result)
        text = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
        before, _, after = text.partition(PLACE)
        return before, after

    def head(self, *, length: int | None = None, gzip: bool = False) -> bytes:
        lines = ["HTTP/1.1 200 OK", "Content-Type: application/json", "Connection: close"]
        if length is None:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append(f"Content-Length: {length}")
        if gzip:
            lines.append("Content-Encoding: gzip")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def send(self, data: bytes) -> None:
        self.wfile.write(data)
        self.owner.bytes_sent[-1] += len(data)

    def flood(self, received: Received, size: int, *, declared: bool = False) -> None:
        before, after = self.document(received, size)
        self.owner.bytes_sent.append(0)
        self.send(self.head(length=len(before) + size + len(after) if declared else None))
        for part in (before, *_padding(size), after):
            self.send(part if declared else _chunk(part))
        if not declared:
            self.send(b"0\r\n\r\n")

    def bomb(self, received: Received, size: int) -> None:
        before, after = self.document(received, size)
        squeeze = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        packed = [squeeze.compress(part) for part in (before, *_padding(size), after)]
        body = b"".join([*packed, squeeze.flush()])
        self.owner.bytes_sent.append(0)
        self.send(self.head(length=len(body), gzip=True) + body)

    def trickle(self, received: Received, *, every: float, slow: int, head: bool) -> None:
        before, after = self.document(received, 0)
        body = before + after if head else b" " * slow + before + after
        whole = self.head(length=len(body)) + body
        start = 0 if head else len(whole) - len(body)
        self.owner.bytes_sent.append(0)
        self.send(whole[:start])
        for at in range(start, start + slow):
            self.send(whole[at : at + 1])
            if self.owner.closing.wait(every):
                return
        self.send(whole[start + slow :])


def _whole(handler: _Handler, received: Received) -> None:
    before, after = handler.document(received, 0)
    handler.owner.bytes_sent.append(0)
    handler.send(handler.head(length=len(before + after)) + before + after)


def _padded(result: dict) -> dict:
    """The result with a place for padding, in the task's metadata."""
    if "task" in result:
        return {**result, "task": _padded(result["task"])}
    return {**result, "metadata": {"padding": "\0"}}


def _padding(size: int) -> Iterator[bytes]:
    for start in range(0, size, CHUNK):
        yield PADDING[: min(CHUNK, size - start)]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""
