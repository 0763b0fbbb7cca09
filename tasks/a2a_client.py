"""Onlooker's calls to agents: agent card discovery and A2A 1.0 JSON-RPC, over httpx.

One pooled `httpx.Client` per process serves every call: views call this from worker threads,
and httpx's connection pool is thread-safe. Timeouts come from the module constants below, read
on every call. Every call is bounded as a whole: it ends within ONLOOKER_AGENT_CALL_SECONDS
(connecting, sending and reading the whole reply, however the agent paces it) and reads at most
ONLOOKER_AGENT_REPLY_BYTES of reply (MAX_CARD_BYTES for a card), decompressed, so no agent can
hold a person's request or the server's memory. Every failure is an `A2AError`: `str(error)` is
a sentence a person can read, and
`code`, `reason`, `http_status` and `not_sent` say what happened, for code that has to decide.
The agent's credential and push secrets never appear in errors or logs.

The calls take the agent as anything with `rpc_url`, `extensions` and `credential` (the `Agent`
model has them) and return the agent's JSON as plain dicts, camelCase as on the wire:

- `send_message` → `{"task": {...}}` or `{"message": {...}}` (a `SendMessageResponse`)
- `get_task`, `cancel_task` → the `Task`
- `list_tasks` → a `TaskPage`; `iter_tasks` follows the pages
- `create_task_push_notification_config` → the `TaskPushNotificationConfig` as the agent stored
  it (agents echo the secrets back: do not log or show it)
- `delete_task_push_notification_config` → None
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import ssl
import threading
import time
import unicodedata
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

from tasks import profile, tiers

logger = logging.getLogger(__name__)

CARD_PATH = "/.well-known/agent-card.json"
A2A_VERSION = "1.0"
CONNECT_TIMEOUT = 5.0  # seconds to open a connection
READ_TIMEOUT = 10.0  # seconds to wait for the answer (SendMessage is sent returnImmediately)
MAX_CONNECTIONS = 20  # per process, over all agents
KEEPALIVE_SECONDS = 5.0  # an idle pooled connection is closed after this long
# A card is parsed into a few bounded fields (MAX_DESCRIPTION, MAX_SKILLS below): a generous
# one with fifty long skills is tens of KiB, so a MiB leaves room and still bounds the parse.
MAX_CARD_BYTES = 1024 * 1024
PAGE_SIZE = 50  # ListTasks: the spec's default; agents accept 1..100
MAX_PAGES = 100  # iter_tasks stops an agent that pages forever
MAX_AGENT_TEXT = 200  # characters of an agent's own words (an error, a header) shown to people
# What the Agent model stores; a longer name is shortened, a longer URL or version refused.
MAX_NAME, MAX_URL, MAX_VERSION = 200, 500, 20
# What is kept of a card's own words for the agent page: longer text is cut, further skills
# and tags are left out (a card is the agent's to write, and any size).
MAX_DESCRIPTION, MAX_SKILLS, MAX_TAGS, MAX_TAG = 2_000, 50, 10, 60


class A2AError(Exception):
    """A call to an agent failed; str(error) says how, in words.

    `code` is the JSON-RPC error code, `reason` the ErrorInfo reason from `error.data` (e.g.
    `TASK_NOT_FOUND`, `CONTEXT_BUSY`), `http_status` the HTTP status when there was an answer.
    `not_sent` is true only when the request certainly never reached the agent (no connection
    was made); after any other failure the agent may have received it.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str | None = None,
        http_status: int | None = None,
        not_sent: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.http_status = http_status
        self.not_sent = not_sent


class AgentAddress(Protocol):
    """Where and how to call an agent; `tasks.models.Agent` is one."""

    rpc_url: str
    extensions: list[str]  # extension URIs the agent's card declares
    credential: str  # the Authorization header value ("Bearer …"), or ""


@dataclass(frozen=True)
class AgentCard:
    name: str
    rpc_url: str
    protocol_version: str
    extensions: list[str]
    push_notifications: bool
    # The card's own words, made plain (`plain_text`) and bounded: shown, never interpreted.
    description: str = ""
    skills: list[dict] = field(default_factory=list)  # {"name", "description", "tags"}


@dataclass(frozen=True)
class PushConfig:
    """Where the agent should push a task's updates. The agent sends `token` as
    `X-A2A-Notification-Token` and `bearer` as `Authorization: Bearer …` (SDKs differ)."""

    url: str
    token: str | None = field(default=None, repr=False)
    bearer: str | None = field(default=None, repr=False)
    id: str | None = None

    def as_json(self) -> dict:
        config: dict[str, Any] = {"url": self.url}
        if self.id:
            config["id"] = self.id
        if self.token:
            config["token"] = self.token
        if self.bearer:
            config["authentication"] = {"scheme": "Bearer", "credentials": self.bearer}
        return config


@dataclass(frozen=True)
class TaskPage:
    tasks: list[dict]
    next_page_token: str | None  # None on the last page
    total_size: int | None


# Called after every 2xx answer with the profile extensions the agent echoed as activated
# (`A2A-Extensions`, PROTOCOL §3): the app sets it to agents.record_echo when it starts, so
# every call, whoever makes it, records the agent's tier. This module stores nothing itself.
on_echo: Callable[[AgentAddress, list[str]], None] | None = None


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
            _client = httpx.Client(
                transport=_AgentTransport(),
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


class _AgentTransport(httpx.BaseTransport):
    """HTTP/1.1 over a pool of deadline-keeping sockets. httpx's own transport cannot be
    given a network backend (encode/httpx#3749 proposes it), so this one hands requests to
    httpcore itself and its errors back under httpx's names, as the callers expect."""

    def __init__(self) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=MAX_CONNECTIONS,
            keepalive_expiry=KEEPALIVE_SECONDS,
            network_backend=_DeadlineBackend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        sent = httpcore.Request(
            request.method,
            httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            answer = self._pool.handle_request(sent)
        return httpx.Response(
            answer.status,
            headers=answer.headers,
            stream=_ReplyStream(answer),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        self._pool.close()


class _ReplyStream(httpx.SyncByteStream):
    def __init__(self, answer: httpcore.Response) -> None:
        self._answer = answer

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx_errors():
            yield from self._answer.stream

    def close(self) -> None:
        with _as_httpx_errors():
            self._answer.close()


# httpcore's errors and httpx's names for them, the most specific first.
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as error:
        for theirs, ours in _HTTPX_ERRORS:
            if isinstance(error, theirs):
                raise ours(str(error)) from error
        raise


# --- a call and its whole reply, within the limits -------------------------------------------


@dataclass(frozen=True)
class _Limits:
    """How long a call may take and how much reply it may read; `what` names the reply in
    the sentence said past either ("the agent's reply", "the agent card at …")."""

    seconds: float
    max_bytes: int
    what: str

    def too_large(self) -> str:
        return f"{self.what} was larger than {_size(self.max_bytes)}"

    def too_slow(self) -> str:
        return f"{self.what} did not arrive in full within {self.seconds:g} s"


def _rpc_limits() -> _Limits:
    return _Limits(
        settings.ONLOOKER_AGENT_CALL_SECONDS,
        settings.ONLOOKER_AGENT_REPLY_BYTES,
        "the agent's reply",
    )


@dataclass(frozen=True)
class _Reply:
    """An agent's whole reply, decompressed."""

    status_code: int
    headers: httpx.Headers
    content: bytes


def _exchange(method: str, url: str, limits: _Limits, **request: Any) -> _Reply:
    """One request and the agent's whole reply, within `limits`: past either, an A2AError
    that says which (the agent may have acted on the request by then). httpx's errors go to
    the caller, a connect or pool timeout included (then nothing was sent)."""
    ends = time.monotonic() + limits.seconds
    token = _call_ends.set(ends)
    try:
        with http_client().stream(
            method, url, timeout=_timeout(limits.seconds), **request
        ) as response:
            content = _read_within(response, limits, ends)
        return _Reply(response.status_code, response.headers, content)
    except (httpx.ConnectTimeout, httpx.PoolTimeout):
        raise  # whenever it came, nothing was sent: the caller's words say so
    except httpx.TimeoutException:
        if time.monotonic() < ends:
            raise  # one read waited READ_TIMEOUT: the caller says so
        raise A2AError(limits.too_slow()) from None
    finally:
        _call_ends.reset(token)


def _read_within(response: httpx.Response, limits: _Limits, ends: float) -> bytes:
    """The reply's body, decompressed, refused as soon as it is known to be too large: by
    its Content-Length before reading any, then by the bytes it has made so far. Never more
    than the limit (and one network read) is held."""
    status = response.status_code
    if _declared_length(response) > limits.max_bytes:
        raise A2AError(limits.too_large(), http_status=status)
    inflate = _inflater(response, limits)
    body = bytearray()
    for raw in response.iter_raw():
        try:
            # One more byte than fits is enough to know it does not.
            body += inflate(raw, limits.max_bytes - len(body) + 1)
        except zlib.error:
            raise A2AError(f"{limits.what} was not valid gzip", http_status=status) from None
        if len(body) > limits.max_bytes:
            raise A2AError(limits.too_large(), http_status=status)
        # The sockets keep the deadline; this keeps it too should a reply flow fast past it.
        if time.monotonic() >= ends:
            raise A2AError(limits.too_slow(), http_status=status)
    return bytes(body)


def _declared_length(response: httpx.Response) -> int:
    try:
        return int(response.headers.get("content-length", ""))
    except ValueError:  # absent (chunked, or up to the close): counted as it comes
        return 0


def _inflater(response: httpx.Response, limits: _Limits) -> Callable[[bytes, int], bytes]:
    """How raw bytes become the body: as they are, or inflated from gzip, making at most
    `room` bytes of each chunk (a 64 KiB chunk of gzip can inflate to 64 MiB: the rest of it
    is left unread, and the reply refused)."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return lambda raw, room: raw
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16).decompress
    shown = plain_text(encoding, 40)
    raise A2AError(
        f"{limits.what} came encoded as '{shown}', which Onlooker does not read",
        http_status=response.status_code,
    )


def _size(count: int) -> str:
    """A byte count as people read it: 4 MiB, 512 KiB, 1,000 bytes."""
    for unit, name in ((1024 * 1024, "MiB"), (1024, "KiB")):
        if count >= unit and count % unit == 0:
            return f"{count // unit:,} {name}"
    return f"{count:,} bytes"


# --- card discovery -----------------------------------------------------------------------


def card_url_for(url: str) -> str:
    """Accept the agent's base URL or its card URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise A2AError(f"{url!r} is not an http(s) URL")
    if parts.path.endswith(".json"):
        return url
    return url.rstrip("/") + CARD_PATH


def fetch_card(url: str) -> AgentCard:
    """Discover an agent from its base or card URL; also how a registered agent's card is
    refreshed (`fetch_card(agent.card_url)`)."""
    card_url = card_url_for(url)
    limits = _Limits(
        settings.ONLOOKER_AGENT_CALL_SECONDS, MAX_CARD_BYTES, f"the agent card at {card_url}"
    )
    try:
        reply = _exchange("GET", card_url, limits)
    except httpx.TimeoutException:
        raise A2AError(f"the agent did not answer in time at {card_url}") from None
    except httpx.HTTPError as error:
        raise A2AError(f"could not reach {card_url}: {plain_text(str(error))}") from None
    if reply.status_code != 200:
        raise A2AError(
            f"{card_url} answered HTTP {reply.status_code}, not an agent card",
            http_status=reply.status_code,
        )
    try:
        card = json.loads(reply.content)
    except ValueError:
        raise A2AError(f"{card_url} did not answer JSON", http_status=200) from None
    return parse_card(card, card_url)


def parse_card(card: object, card_url: str) -> AgentCard:
    if not isinstance(card, dict):
        raise A2AError(f"{card_url} is not an agent card (not a JSON object)")
    interface = _jsonrpc_1x(card.get("supportedInterfaces"))
    if interface is None:
        raise A2AError(
            f"the agent card at {card_url} offers no JSON-RPC interface with protocol version "
            "1.x; Onlooker speaks A2A 1.0 over JSON-RPC"
        )
    capabilities = card.get("capabilities") if isinstance(card.get("capabilities"), dict) else {}
    declared = capabilities.get("extensions") or []
    extensions = [
        e["uri"]
        for e in declared
        if isinstance(e, dict) and isinstance(e.get("uri"), str) and _unbroken(e["uri"])
    ]
    # The name is shown on every tile: the agent's words, made plain like its errors.
    name = plain_text(card.get("name"), MAX_NAME)
    return AgentCard(
        name=name or urlsplit(card_url).hostname or "agent",
        rpc_url=interface["url"],
        protocol_version=interface["protocolVersion"],
        extensions=extensions,
        push_notifications=capabilities.get("pushNotifications") is True,
        description=plain_text(card.get("description"), MAX_DESCRIPTION),
        skills=_skills(card.get("skills")),
    )


def _skills(skills: object) -> list[dict]:
    """The card's skills as the agent page shows them: name, description and tags, plain
    text; one without a name or description is left out."""
    if not isinstance(skills, list):
        return []
    shown = []
    for skill in skills[:MAX_SKILLS]:
        if not isinstance(skill, dict):
            continue
        name = plain_text(skill.get("name"), MAX_NAME) or plain_text(skill.get("id"), MAX_NAME)
        description = plain_text(skill.get("description"), MAX_DESCRIPTION)
        tags = skill.get("tags") if isinstance(skill.get("tags"), list) else []
        words = [plain_text(tag, MAX_TAG) for tag in tags[:MAX_TAGS]]
        if name or description:
            shown.append(
                {"name": name, "description": description, "tags": [t for t in words if t]}
            )
    return shown


def _jsonrpc_1x(interfaces: object) -> dict | None:
    if not isinstance(interfaces, list):
        return None
    for interface in interfaces:
        if not isinstance(interface, dict):
            continue
        version = str(interface.get("protocolVersion", ""))
        url = interface.get("url")
        if (
            interface.get("protocolBinding") == "JSONRPC"
            and (version == "1" or version.startswith("1."))
            and len(version) <= MAX_VERSION
            and _unbroken(version)
            and isinstance(url, str)
            and _clean_url(url)
        ):
            return interface
    return None


def _clean_url(url: str) -> bool:
    """An http(s) URL with a host, a valid port and nothing hidden in it (no spaces, control
    or format characters, which would be shown to people and stored)."""
    if not _unbroken(url):
        return False
    try:
        origin(url)
    except ValueError:
        return False
    return True


def _unbroken(uri: str) -> bool:
    """At most MAX_URL characters, none of them a space, control or format character."""
    return len(uri) <= MAX_URL and not any(c.isspace() or _hidden(c) for c in uri)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str:
    """`scheme://host[:port]` of an http(s) URL, without the port when it is the scheme's
    default: two URLs reach the same server exactly when their origins are equal. The
    credential is sent to the JSON-RPC URL, so its origin is what a person must agree to.
    ValueError when the URL has none (not http(s), no host, a port that is not one)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname  # lower case, without user info or IPv6 brackets
    port = parts.port  # ValueError for a port that is not a number in range
    if scheme not in _DEFAULT_PORTS or not host:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


# --- JSON-RPC methods -----------------------------------------------------------------------


def send_message(
    agent: AgentAddress,
    text: str,
    *,
    message_id: str | None = None,
    task_id: str | None = None,
    context_id: str | None = None,
    metadata: dict | None = None,
    extensions: Sequence[str] = (),
    push: PushConfig | None = None,
    return_immediately: bool = True,
    parts: Sequence[dict] = (),
    note: str = "",
) -> dict:
    """`SendMessage` with one text part, a second one when a `note` is given (a reason
    beside an answer), then `parts` (e.g. url file parts). Give a stable `message_id` when a
    retry must not become a second message; give both `task_id` and `context_id` on a
    follow-up (a2a-sdk agents otherwise invent a new context).
    Returns `{"task": …}` or `{"message": …}`."""
    message: dict[str, Any] = {
        "messageId": message_id or str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": text}, *([{"text": note}] if note else []), *parts],
    }
    if task_id:
        message["taskId"] = task_id
    if context_id:
        message["contextId"] = context_id
    if metadata:
        message["metadata"] = metadata
    if extensions:
        message["extensions"] = list(extensions)
    # Blocking SendMessage only returns when the task ends or waits for a human: too long
    # for a web request, so the default asks for the task as soon as it exists.
    configuration: dict[str, Any] = {"returnImmediately": return_immediately}
    if push is not None:
        # The 1.0 key; the spec prose's `pushNotificationConfig` is silently ignored by agents.
        configuration["taskPushNotificationConfig"] = push.as_json()
    result = _call(agent, "SendMessage", {"message": message, "configuration": configuration})
    if not isinstance(result, dict) or not (
        isinstance(result.get("task"), dict) or isinstance(result.get("message"), dict)
    ):
        raise _not_a2a("SendMessage")
    return result


def get_task(agent: AgentAddress, task_id: str, *, history_length: int | None = None) -> dict:
    params: dict[str, Any] = {"id": task_id}
    if history_length is not None:
        params["historyLength"] = history_length
    return _task(_call(agent, "GetTask", params), "GetTask")


def cancel_task(agent: AgentAddress, task_id: str) -> dict:
    """The task as the agent left it (CANCELED, or still going if it cancels later)."""
    return _task(_call(agent, "CancelTask", {"id": task_id}), "CancelTask")


def list_tasks(
    agent: AgentAddress,
    *,
    context_id: str | None = None,
    status_timestamp_after: datetime | None = None,
    page_size: int = PAGE_SIZE,
    page_token: str | None = None,
) -> TaskPage:
    """One page of the agent's tasks, most recently updated first."""
    params: dict[str, Any] = {"pageSize": page_size}
    if context_id:
        params["contextId"] = context_id
    if status_timestamp_after is not None:
        params["statusTimestampAfter"] = _rfc3339(status_timestamp_after)
    if page_token:
        params["pageToken"] = page_token
    result = _call(agent, "ListTasks", params)
    tasks = result.get("tasks", []) if isinstance(result, dict) else None
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise _not_a2a("ListTasks")
    next_token = result.get("nextPageToken")
    total = result.get("totalSize")
    return TaskPage(
        tasks=tasks,
        next_page_token=next_token if isinstance(next_token, str) and next_token else None,
        total_size=total if isinstance(total, int) and not isinstance(total, bool) else None,
    )


def iter_tasks(
    agent: AgentAddress,
    *,
    context_id: str | None = None,
    status_timestamp_after: datetime | None = None,
    page_size: int = PAGE_SIZE,
) -> Iterator[dict]:
    """Every task `list_tasks` finds, page after page."""
    token: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = list_tasks(
            agent,
            context_id=context_id,
            status_timestamp_after=status_timestamp_after,
            page_size=page_size,
            page_token=token,
        )
        yield from page.tasks
        if page.next_page_token is None:
            return
        if page.next_page_token in seen:
            raise A2AError("the agent's task list does not advance (it repeats a page)")
        seen.add(page.next_page_token)
        token = page.next_page_token
    raise A2AError(f"the agent's task list goes on for more than {MAX_PAGES} pages")


def create_task_push_notification_config(
    agent: AgentAddress,
    task_id: str,
    url: str,
    *,
    token: str | None = None,
    bearer: str | None = None,
    config_id: str | None = None,
) -> dict:
    config = PushConfig(url=url, token=token, bearer=bearer, id=config_id)
    # 1.0 sends the config itself as the params (flattened), with the task id inside.
    result = _call(
        agent, "CreateTaskPushNotificationConfig", {"taskId": task_id, **config.as_json()}
    )
    if not isinstance(result, dict):
        raise _not_a2a("CreateTaskPushNotificationConfig")
    return result


def list_task_push_notification_configs(agent: AgentAddress, task_id: str) -> list[dict]:
    """The push configs the agent keeps for a task (agents echo their secrets: do not log
    or show them)."""
    result = _call(agent, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    configs = result.get("configs", []) if isinstance(result, dict) else None
    if not isinstance(configs, list):
        raise _not_a2a("ListTaskPushNotificationConfigs")
    return [config for config in configs if isinstance(config, dict)]


def delete_task_push_notification_config(agent: AgentAddress, task_id: str, config_id: str) -> None:
    """Idempotent in A2A 1.0: deleting a config that is gone is not an error."""
    _call(agent, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})


# --- the call and its failures -------------------------------------------------------------


def _headers(agent: AgentAddress) -> dict[str, str]:
    headers = {
        "A2A-Version": A2A_VERSION,
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    # Only the profile's extensions, and only those the card declares: asking an agent for
    # extensions it never offered means nothing, and others are not Onlooker's to activate.
    declared = set(agent.extensions or ())
    wanted = [uri for uri in profile.EXTENSIONS if uri in declared]
    if wanted:
        headers["A2A-Extensions"] = ",".join(wanted)
    if agent.credential:
        headers["Authorization"] = agent.credential
    return headers


def _call(agent: AgentAddress, method: str, params: dict) -> Any:
    request_id = uuid.uuid4().hex
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    try:
        reply = _post(agent, body)
        if on_echo is not None and 200 <= reply.status_code < 300:
            _record_echo(agent, reply)
        return _result(reply, request_id)
    except A2AError as error:
        # The sentence holds no secret: only the URL's host and path and the agent's words.
        logger.warning("A2A %s to %s failed: %s", method, _shown(agent.rpc_url), error)
        raise


def _record_echo(agent: AgentAddress, reply: _Reply) -> None:
    # Bookkeeping beside the call: if it fails, the agent's answer (perhaps to a decision it
    # has now taken) must still reach the caller.
    try:
        on_echo(agent, tiers.activated(reply.headers.get("A2A-Extensions")))
    except Exception:
        logger.exception("could not record the extensions %s echoed", _shown(agent.rpc_url))


def _post(agent: AgentAddress, body: dict) -> _Reply:
    where = _shown(agent.rpc_url)
    limits = _rpc_limits()
    connect, read = min(CONNECT_TIMEOUT, limits.seconds), READ_TIMEOUT
    try:
        return _exchange("POST", agent.rpc_url, limits, json=body, headers=_headers(agent))
    # Before a connection exists nothing was sent; after, the agent may have the request.
    except httpx.ConnectTimeout:
        raise A2AError(
            f"could not connect to the agent at {where} within {connect:g} s", not_sent=True
        ) from None
    except httpx.PoolTimeout:
        raise A2AError("too many calls to agents are in progress", not_sent=True) from None
    except httpx.TimeoutException:
        raise A2AError(f"the agent did not answer within {read:g} s") from None
    except httpx.ConnectError:
        raise A2AError(f"could not connect to the agent at {where}", not_sent=True) from None
    except httpx.HTTPError as error:
        raise A2AError(
            f"the connection to the agent at {where} failed ({type(error).__name__})"
        ) from None
    except httpx.InvalidURL:
        raise A2AError(f"the agent's address {where} is not a valid URL", not_sent=True) from None


_NOT_JSON = object()


def _result(reply: _Reply, request_id: str) -> Any:
    status = reply.status_code
    try:
        answer = json.loads(reply.content)
    except ValueError:  # also UnicodeDecodeError
        answer = _NOT_JSON
    # JSON-RPC errors usually come with HTTP 200, but some servers pair them with a 4xx/5xx:
    # the agent's own error says more than the status.
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        raise _rpc_error(answer["error"], status)
    if status in (401, 403):
        raise A2AError(
            f"the agent answered HTTP {status}: it refused Onlooker's credentials",
            http_status=status,
        )
    if not 200 <= status < 300:
        raise A2AError(f"the agent answered HTTP {status}", http_status=status)
    if answer is _NOT_JSON:
        content_type = reply.headers.get("content-type", "").split(";")[0].strip()
        shown = plain_text(content_type, 100) or "no content type"
        raise A2AError(
            f"the agent answered something that is not JSON ({shown})", http_status=status
        )
    if not isinstance(answer, dict) or "result" not in answer or answer.get("id") != request_id:
        raise A2AError(
            "the agent answered JSON that is not a JSON-RPC response to Onlooker's request",
            http_status=status,
        )
    return answer["result"]


_SENTENCES = {
    -32001: "the agent no longer knows this task",
    -32002: "the agent cannot cancel this task (it has already ended)",
    -32003: "the agent does not support push notifications",
    -32005: "the agent does not accept this kind of content",
    -32008: "the agent requires an extension Onlooker did not ask for",
    -32009: "the agent does not speak A2A 1.0",
    -32601: "the agent does not know this A2A 1.0 method",
}


def _rpc_error(error: dict, http_status: int) -> A2AError:
    code = error.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    reason = _reason(error.get("data"))
    said = plain_text(error.get("message"))
    if code == -32004 and reason == "CONTEXT_BUSY":
        sentence = "the agent is busy with this conversation"
    elif code == -32004:
        sentence = "the agent does not support this operation" + (f" ({said})" if said else "")
    elif code in _SENTENCES:
        sentence = _SENTENCES[code]
    elif said:
        sentence = f"the agent answered an error: {said}"
    else:
        sentence = f"the agent answered JSON-RPC error {code}"
    return A2AError(sentence, code=code, reason=reason, http_status=http_status)


def _reason(data: object) -> str | None:
    """The ErrorInfo reason: 1.0 puts a list of typed objects in `data`; 0.3 agents put one
    plain object there."""
    entries = data if isinstance(data, list) else [data]
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("reason"), str):
            return entry["reason"][:100]
    return None


# Agents' words are read from a bounded prefix: an excerpt is short, and the markup and
# spaces it drops cannot make a 100 KB message cost more than this much work.
_EXCERPT_WINDOW = 20_000
_TAG = re.compile(r"<[^<>]*>")  # [^<>]: one pass over the text, whatever it holds
_TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # colours, cursor moves
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})  # controls, bidi/format marks, surrogates


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in _HIDDEN_CATEGORIES


def plain_text(text: object, limit: int = MAX_AGENT_TEXT) -> str:
    """An agent's own words as people see them (a JSON-RPC error message, a header, its
    name): plain text on one line, at most `limit` characters, "…" when cut. Markup is
    dropped and entities decoded; control and format characters (terminal escapes, bidi
    overrides that reorder what is shown) and lone surrogates (which no database stores) are
    removed. Every place that shows an agent's words to people goes through this."""
    if not isinstance(text, str):
        return ""
    cut = len(text) > _EXCERPT_WINDOW
    text = html.unescape(_TAG.sub(" ", _TERMINAL_ESCAPE.sub("", text[:_EXCERPT_WINDOW])))
    text = "".join(" " if c.isspace() else c for c in text if not _hidden(c) or c.isspace())
    text = " ".join(text.split())
    if cut or len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def _not_a2a(method: str) -> A2AError:
    return A2AError(f"the agent answered {method} with something that is not A2A 1.0")


def _task(result: Any, method: str) -> dict:
    if not isinstance(result, dict) or not isinstance(result.get("id"), str):
        raise _not_a2a(method)
    return result


def _shown(url: str) -> str:
    """The URL without user info, query or fragment: those may hold secrets."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def _rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("status_timestamp_after must be timezone-aware")
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
