"""A scriptable HTTP "agent" on loopback, for testing how Onlooker's client copes with agents
that misbehave: a real socket server (http.server in a thread) that answers every request with
what the test set — HTML, an HTTP error, a JSON-RPC error, a slow answer — and records every
request it gets (headers, body, the client's port). It also serves as a push receiver.

    with MisbehavingAgent() as agent:
        agent.answer(b"<h1>Bad gateway</h1>", status=502, content_type="text/html")
        ...
        agent.requests[-1].headers["a2a-version"]
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

RPC_PATH = "/a2a/jsonrpc"
# A SendMessage answer: the task the message went to.
ACCEPTED = {"jsonrpc": "2.0", "result": {"task": {"id": "task-1", "contextId": "ctx-1"}}}


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    client_port: int

    def json(self) -> object:
        return json.loads(self.body)


@dataclass(frozen=True)
class Answer:
    status: int = 200
    content_type: str = "application/json"
    body: object = b"{}"  # bytes as they are; anything else as JSON
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (e.g. A2A-Extensions)
    drop: bool = False  # read the request, then close the connection without an answer


class _Server(ThreadingHTTPServer):
    # socketserver's default backlog of 5 drops connections when many threads connect at once.
    request_queue_size = 128
    daemon_threads = True


class LoopbackAgent:
    """An HTTP agent on a loopback port and a thread of its own, serving `handler` (which
    finds this object as `self.server.owner`): what it received, the JSON-RPC calls among it,
    and a close that releases handlers waiting on `closing`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.requests: list[Received] = []
        self.closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.owner = self  # type: ignore[attr-defined]
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def rpc_url(self) -> str:
        return self.base_url + RPC_PATH

    def calls(self, method: str) -> list[dict]:
        """The params of every JSON-RPC call of `method` received so far."""
        return [
            r.json()["params"]
            for r in self.requests
            if r.method == "POST" and r.json().get("method") == method
        ]

    def close(self) -> None:
        self.closing.set()  # releases handlers still sleeping on a slow answer
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class MisbehavingAgent(LoopbackAgent):
    def __init__(self) -> None:
        self._answer: Answer | Callable[[Received], Answer] = Answer()
        super().__init__(_Handler)

    def answer(
        self,
        body: object,
        *,
        status: int = 200,
        content_type: str = "application/json",
        delay: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer every request from now on like this. A JSON-RPC body (a dict with
        "jsonrpc") without an "id" gets the request's id, as a real server would echo it."""
        self._answer = Answer(status, content_type, body, delay, tuple((headers or {}).items()))

    def hang_up(self, after: float = 0.0) -> None:
        """From now on take each request and close the connection without answering (an
        agent that crashed, or a proxy that dropped the reply, after the request arrived)."""
        self._answer = Answer(drop=True, delay=after)

    def answer_each(self, choose: Callable[[Received], Answer]) -> None:
        """Answer each request from now on with what `choose` makes of it (a card for a GET,
        a result per JSON-RPC method), for tests that need an agent to answer in turn."""
        self._answer = choose

    def rpc_error(self, code: int, message: str, reason: str | None = None) -> None:
        error: dict = {"code": code, "message": message}
        if reason is not None:
            error["data"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "a2a-protocol.org",
                    "metadata": {},
                }
            ]
        self.answer({"jsonrpc": "2.0", "error": error})

    def rpc_result(self, result: object) -> None:
        self.answer({"jsonrpc": "2.0", "result": result})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so a test can see connections being reused

    def do_GET(self) -> None:
        self._respond(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._respond(self.rfile.read(length))

    def _respond(self, body: bytes) -> None:
        owner: MisbehavingAgent = self.server.owner  # type: ignore[attr-defined]
        received = Received(
            self.command,
            self.path,
            {name.lower(): value for name, value in self.headers.items()},
            body,
            self.client_address[1],
        )
        owner.requests.append(received)
        answer = owner._answer(received) if callable(owner._answer) else owner._answer
        if answer.delay and owner.closing.wait(answer.delay):
            return
        if answer.drop:
            self.close_connection = True
            return
        raw = answer.body
        if not isinstance(raw, bytes):
            if isinstance(raw, dict) and "jsonrpc" in raw and "id" not in raw:
                raw = {**raw, "id": _request_id(body)}
            raw = json.dumps(raw).encode()
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(raw)))
            for name, value in answer.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(raw)
        except OSError:
            pass  # the client gave up (a timeout test): nothing to answer

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output quiet


def _request_id(body: bytes) -> object:
    try:
        return json.loads(body).get("id")
    except (ValueError, AttributeError):
        return None
