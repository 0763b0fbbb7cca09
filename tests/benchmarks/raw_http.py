"""A minimal HTTP/1.1 client for open-loop load: keep-alive connections over asyncio streams,
each request's bytes built once before the load starts.

httpx spends one to two milliseconds of CPU on each request; at 500 pushes/s on a 2-core
machine that is a whole core, and the burst measured its own client instead of the server
(the client at 99% of a core, the server's event loop idle in epoll most of the time). This
sends what an HTTP client sends and reads the status line, the headers and a body of the
Content-Length they give; nothing else (no chunked bodies, no redirects, no TLS): enough for
the push endpoint, which always answers with a Content-Length.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class BadAnswer(Exception):
    """The server answered something this client does not read."""


@dataclass(frozen=True)
class Answer:
    status_code: int
    body: bytes
    keep_alive: bool

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def request(method: str, host: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Pool:
    """Up to `size` keep-alive connections to one server, opened as they are first needed."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port, self.size = host, port, size
        self._idle: asyncio.Queue[Connection] = asyncio.Queue()
        self._open = 0

    async def acquire(self, timeout: float) -> Connection:
        """An idle connection, or a new one while fewer than `size` are open; raises
        TimeoutError if none is free within `timeout` seconds."""
        if self._idle.empty() and self._open < self.size:
            self._open += 1
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), max(timeout, 0.001)
                )
            except BaseException:
                self._open -= 1
                raise
        return await asyncio.wait_for(self._idle.get(), max(timeout, 0.0))

    def release(self, connection: Connection, *, reusable: bool) -> None:
        if reusable:
            self._idle.put_nowait(connection)
            return
        self._open -= 1
        connection[1].close()

    async def close(self) -> None:
        while not self._idle.empty():
            _, writer = self._idle.get_nowait()
            writer.close()
            self._open -= 1


async def exchange(connection: Connection, data: bytes, timeout: float) -> Answer:
    """Send one request's bytes and read its answer within `timeout` seconds."""
    return await asyncio.wait_for(_exchange(connection, data), timeout)


async def _exchange(connection: Connection, data: bytes) -> Answer:
    reader, writer = connection
    writer.write(data)
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise BadAnswer(f"not an HTTP status line: {status_line[:80]!r}")
    headers = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" not in headers:
        raise BadAnswer("an answer without Content-Length")
    body = await reader.readexactly(int(headers["content-length"]))
    keep_alive = headers.get("connection", "").lower() != "close"
    return Answer(int(parts[1]), body, keep_alive)
