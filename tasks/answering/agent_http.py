"""The HTTP of Onlooker's calls to agents: one pooled client, a deadline kept by every socket
wait, and a request's whole reply read within limits.

One pooled `httpx.Client` per process serves every call: views call agents from worker
threads, and httpx's connection pool is thread-safe. Timeouts come from the module constants
below, read on every call. `exchange` makes one request and reads its whole reply within a
`Limits`: the call's seconds (connecting, sending and reading, however the agent paces it)
and the reply's bytes, decompressed. Past either, or for a reply it cannot read, it raises
`ReplyRefused`; httpx's own errors go to the caller. The caller (a2a_client) turns both
into sentences about the agent.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from tasks.runtime import outbound_http
from tasks.wire.agent_text import plain_text

CONNECT_TIMEOUT = 5.0  # seconds to open a connection
READ_TIMEOUT = 10.0  # seconds to wait for the answer (SendMessage is sent returnImmediately)
MAX_CONNECTIONS = 20  # per process, over all agents
KEEPALIVE_SECONDS = 5.0  # an idle pooled connection is closed after this long


class ReplyRefused(Exception):
    """A reply past its limits, or in a form Onlooker does not read: str(error) says which,
    in words; the agent may have acted on the request by then. `http_status` is the reply's
    status once it had one."""

    def __init__(self, sentence: str, *, http_status: int | None = None) -> None:
        super().__init__(sentence)
        self.http_status = http_status


# --- the connection pool ------------------------------------------------------------------

_client: httpx.Client | None = None
_client_pid: int | None = None
_client_lock = threading.Lock()


def http_client() -> httpx.Client:
    """The process's pooled client, created on first use. A forked child makes its own: the
    parent's sockets must not be shared."""
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            transport = outbound_http.Transport(
                _DeadlineBackend(),
                max_connections=MAX_CONNECTIONS,
                keepalive_expiry=KEEPALIVE_SECONDS,
            )
            _client = httpx.Client(
                transport=transport,
                follow_redirects=False,  # a redirected call is a misconfigured agent
                # gzip is the one encoding _read_within inflates within the size limit.
                headers={"User-Agent": "Onlooker", "Accept-Encoding": "gzip"},
            )
            _client_pid = os.getpid()
        return _client


def close_http_client() -> None:
    """Close the pool (at shutdown); the next call opens a new one."""
    global _client
    with _client_lock:
        if _client is not None:
            _client.close()
        _client = None


def _timeout(seconds: float) -> httpx.Timeout:
    # Waiting for a pooled connection comes before any socket: the deadline bounds it here.
    return httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT, pool=min(READ_TIMEOUT, seconds))


# --- the deadline, kept by every socket wait -------------------------------------------------
#
# httpx's timeouts are per read, and httpcore takes the read timeout once for the headers and
# once for the body: an agent that sends a byte before each read times out holds a call for
# as long as it likes. So the pool's sockets are wrapped: each connect, read and write waits
# at most until the end of the call in progress on this thread (the sync client does all of
# a call's I/O on the caller's thread, and views call agents from their own threads).

_call_ends: ContextVar[float | None] = ContextVar("agent_call_ends", default=None)


def _time_left(timeout: float | None, late: type[Exception]) -> float | None:
    """How long one socket wait may take: its own timeout, but never past the call's end;
    `late` (httpcore's timeout for that wait) once the end has passed."""
    ends = _call_ends.get()
    if ends is None:
        return timeout
    left = ends - time.monotonic()
    if left <= 0:
        raise late("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # Nothing of the request is sent before the handshake ends: a connect timeout.
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, left, local_address, socket_options)
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


# --- a call and its whole reply, within the limits -------------------------------------------


@dataclass(frozen=True)
class Limits:
    """How long a call may take and how much reply it may read; `what` names the reply in
    the sentence said past either ("the agent's reply", "the agent card at …")."""

    seconds: float
    max_bytes: int
    what: str

    def too_large(self) -> str:
        return f"{self.what} was larger than {_size(self.max_bytes)}"

    def too_slow(self) -> str:
        return f"{self.what} did not arrive in full within {self.seconds:g} s"


@dataclass(frozen=True)
class Reply:
    """An agent's whole reply, decompressed."""

    status_code: int
    headers: httpx.Headers
    content: bytes


def exchange(method: str, url: str, limits: Limits, **request: Any) -> Reply:
    """One request and the agent's whole reply, within `limits`: past either, a ReplyRefused
    that says which (the agent may have acted on the request by then). httpx's errors go to
    the caller, a connect or pool timeout included (then nothing was sent)."""
    ends = time.monotonic() + limits.seconds
    token = _call_ends.set(ends)
    try:
        with http_client().stream(
            method, url, timeout=_timeout(limits.seconds), **request
        ) as response:
            content = _read_within(response, limits, ends)
        return Reply(response.status_code, response.headers, content)
    except (httpx.ConnectTimeout, httpx.PoolTimeout):
        raise  # whenever it came, nothing was sent: the caller's words say so
    except httpx.TimeoutException:
        if time.monotonic() < ends:
            raise  # one read waited READ_TIMEOUT: the caller says so
        raise ReplyRefused(limits.too_slow()) from None
    finally:
        _call_ends.reset(token)


def _read_within(response: httpx.Response, limits: Limits, ends: float) -> bytes:
    """The reply's body, decompressed, refused as soon as it is known to be too large: by
    its Content-Length before reading any, then by the bytes it has made so far. Never more
    than the limit (and one network read) is held."""
    status = response.status_code
    if _declared_length(response) > limits.max_bytes:
        raise ReplyRefused(limits.too_large(), http_status=status)
    inflate = _inflater(response, limits)
    body = bytearray()
    for raw in response.iter_raw():
        try:
            # One more byte than fits is enough to know it does not.
            body += inflate(raw, limits.max_bytes - len(body) + 1)
        except zlib.error:
            raise ReplyRefused(f"{limits.what} was not valid gzip", http_status=status) from None
        if len(body) > limits.max_bytes:
            raise ReplyRefused(limits.too_large(), http_status=status)
        # The sockets keep the deadline; this keeps it too should a reply flow fast past it.
        if time.monotonic() >= ends:
            raise ReplyRefused(limits.too_slow(), http_status=status)
    return bytes(body)


def _declared_length(response: httpx.Response) -> int:
    try:
        return int(response.headers.get("content-length", ""))
    except ValueError:  # absent (chunked, or up to the close): counted as it comes
        return 0


def _inflater(response: httpx.Response, limits: Limits) -> Callable[[bytes, int], bytes]:
    """How raw bytes become the body: as they are, or inflated from gzip, making at most
    `room` bytes of each chunk (a 64 KiB chunk of gzip can inflate to 64 MiB: the rest of it
    is left unread, and the reply refused)."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return lambda raw, room: raw
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16).decompress
    shown = plain_text(encoding, 40)
    raise ReplyRefused(
        f"{limits.what} came encoded as '{shown}', which Onlooker does not read",
        http_status=response.status_code,
    )


def _size(count: int) -> str:
    """A byte count as people read it: 4 MiB, 512 KiB, 1,000 bytes."""
    for unit, name in ((1024 * 1024, "MiB"), (1024, "KiB")):
        if count >= unit and count % unit == 0:
            return f"{count // unit:,} {name}"
    return f"{count:,} bytes"
