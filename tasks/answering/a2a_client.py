"""Onlooker's calls to agents: A2A 1.0 JSON-RPC, over HTTP (an agent's card is read by
agent_card.py, within the same bounds and with the same errors).

Every call goes over agent_http's pooled client and is bounded as a whole: it ends within
ONLOOKER_AGENT_CALL_SECONDS (connecting, sending and reading the whole reply, however the agent
paces it) and reads at most ONLOOKER_AGENT_REPLY_BYTES of reply (MAX_CARD_BYTES for a card),
decompressed, so no agent can hold a person's request or the server's memory. Every failure
is an `A2AError`: `str(error)` is a sentence a person can read, and `code`, `reason`,
`http_status` and `not_sent` say what happened, for code that has to decide (an agent that
does not speak A2A 1.0 is told apart, with the versions it names). The agent's credential
and push secrets never appear in errors or logs. Every request says `A2A-Version: 1.0`; the
version each answer declares goes to `on_version`, as its echoed extensions go to `on_echo`.

The calls take the agent as anything with `rpc_url`, `extensions`, `credential` and
`credential_header` (the `Agent` model has them, calling with its shared credential;
answering/callers.py makes one that calls as a person) and return the agent's JSON as plain
dicts, camelCase as on the wire:

- `send_message` → `{"task": {...}}` or `{"message": {...}}` (a `SendMessageResponse`)
- `get_task`, `cancel_task` → the `Task`
- `list_tasks` → a `TaskPage`; `iter_tasks` follows the pages
- `create_task_push_notification_config` → the `TaskPushNotificationConfig` as the agent stored
  it (agents echo the secrets back: do not log or show it)
- `delete_task_push_notification_config` → None
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from tasks.answering import agent_http
from tasks.wire import profile, tiers
from tasks.wire.agent_text import plain_text

logger = logging.getLogger(__name__)

A2A_VERSION = "1.0"
PAGE_SIZE = 50  # ListTasks: the spec's default; agents accept 1..100
MAX_PAGES = 100  # iter_tasks stops an agent that pages forever


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
    credential: str  # the credential header's value ("Bearer …", an API key), or ""
    credential_header: str  # the header it goes in: "Authorization", or an API key's own


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

# Called after every answer with the A2A version it declared (`A2A-Version`) when that is not
# the one Onlooker speaks ("1.1"), or "" when it matched or named none: the app sets it to
# answered_versions.record, so the agent's page can say an agent answers as another version.
# A 2xx without the header says none; any other status only counts when it names one.
on_version: Callable[[AgentAddress, str], None] | None = None


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
        headers[agent.credential_header] = agent.credential
    return headers


def _call(agent: AgentAddress, method: str, params: dict) -> Any:
    request_id = uuid.uuid4().hex
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    try:
        reply = _post(agent, body)
        if on_echo is not None and 200 <= reply.status_code < 300:
            _record_echo(agent, reply)
        if on_version is not None:
            _record_version(agent, reply)
        return _result(reply, request_id)
    except A2AError as error:
        # The sentence holds no secret: only the URL's host and path and the agent's words.
        logger.warning("A2A %s to %s failed: %s", method, _shown(agent.rpc_url), error)
        raise


def _record_echo(agent: AgentAddress, reply: agent_http.Reply) -> None:
    # Bookkeeping beside the call: if it fails, the agent's answer (perhaps to a decision it
    # has now taken) must still reach the caller.
    try:
        on_echo(agent, tiers.activated(reply.headers.get("A2A-Extensions")))
    except Exception:
        logger.exception("could not record the extensions %s echoed", _shown(agent.rpc_url))


def _record_version(agent: AgentAddress, reply: agent_http.Reply) -> None:
    declared = reply.headers.get("A2A-Version")
    if declared is None and not 200 <= reply.status_code < 300:
        return  # a proxy's error page says nothing about the agent's version
    try:
        on_version(agent, answered_as(declared))
    except Exception:
        logger.exception("could not record the A2A version %s answered", _shown(agent.rpc_url))


# A version as agents write it (1.0, '0.3', v1.1, 1.0.2): its major and minor parts.
_VERSION = re.compile(r"(?<![\d.])(\d{1,3})\.(\d{1,3})(?!\d)")
_VERSION_TEXT = 2000  # characters of an agent's words searched for versions


def versions_in(text: str) -> list[str]:
    """The distinct versions `text` (bounded by the caller) names, as major.minor, in order
    (at most 5)."""
    found: list[str] = []
    for major, minor in _VERSION.findall(text):
        version = f"{int(major)}.{int(minor)}"
        if version not in found:
            found.append(version)
    return found[:5]


def answered_as(declared: str | None) -> str:
    """The version an answer's `A2A-Version` declares, as major.minor, when it is not the one
    Onlooker speaks (a patch part does not count); "" when it is, or names none."""
    versions = versions_in((declared or "")[:100])
    if not versions or A2A_VERSION in versions:
        return ""
    return versions[0]


def _rpc_limits() -> agent_http.Limits:
    return agent_http.Limits(
        settings.ONLOOKER_AGENT_CALL_SECONDS,
        settings.ONLOOKER_AGENT_REPLY_BYTES,
        "the agent's reply",
    )


def _post(agent: AgentAddress, body: dict) -> agent_http.Reply:
    where = _shown(agent.rpc_url)
    limits = _rpc_limits()
    connect = min(agent_http.CONNECT_TIMEOUT, limits.seconds)
    read = agent_http.READ_TIMEOUT
    try:
        return agent_http.exchange(
            "POST", agent.rpc_url, limits, json=body, headers=_headers(agent)
        )
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
    except agent_http.ReplyRefused as refused:
        raise A2AError(str(refused), http_status=refused.http_status) from None


_NOT_JSON = object()


def _result(reply: agent_http.Reply, request_id: str) -> Any:
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
    speaks = _versions_it_speaks(code, error)
    if speaks:
        sentence = f"the agent does not speak A2A {A2A_VERSION} (it supports {speaks})"
    elif code == -32004 and reason == "CONTEXT_BUSY":
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


# Where an agent's error starts naming what it accepts ("Expected version '0.3'", "supported
# versions: 0.3", "supportedVersions"); "not supported" too, as what follows it is then what
# it would take.
_ACCEPTS = re.compile(r"expected|supported|supports|accepts|accepted", re.IGNORECASE)


def _versions_it_speaks(code: int | None, error: dict) -> str:
    """The versions a version error says the agent speaks, comma-separated, or "".
    a2a-sdk answers -32009 "A2A version '1.0' is not supported by this handler. Expected
    version '0.3'."; others answer -32600 naming "supported versions" in the message or the
    data (only an error that speaks of versions counts: -32600 is any invalid request).
    When 1.0 is among them the agent does speak it (it took the request for another
    version): "" then, and the usual sentence says the rest."""
    if code not in (-32009, -32600):
        return ""
    message = error.get("message")
    text = message[:_VERSION_TEXT] if isinstance(message, str) else ""
    data = error.get("data")
    if data is not None:
        text += " " + json.dumps(data)[:_VERSION_TEXT]
    if code == -32600 and "version" not in text.lower():
        return ""
    accepts = _ACCEPTS.search(text)
    named = versions_in(text[accepts.end() :] if accepts else text)
    return "" if A2A_VERSION in named else ", ".join(named)


def _reason(data: object) -> str | None:
    """The ErrorInfo reason: 1.0 puts a list of typed objects in `data`; 0.3 agents put one
    plain object there."""
    entries = data if isinstance(data, list) else [data]
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("reason"), str):
            return entry["reason"][:100]
    return None


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
