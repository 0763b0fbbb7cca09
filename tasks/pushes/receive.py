"""The push receiver: `POST /a2a/push/<endpoint id>/`.

Order of checks: known endpoint (404), size (413), credentials (401, before anything is
parsed), a task's endpoint past its grace once the task ended (401), content type (415),
webhook-id (400), body (400). A refused request stores nothing but a count on the agent's
`Refusal` row. An accepted one is committed (a pending `Delivery`,
deliveries.py) before the 2xx goes out, and applied after by the applier (applier.py):
`200 {"outcome": "accepted" | "duplicate", "delivery": id}`. One that could not be committed
is a 503 (Standard Webhooks senders retry a 5xx), never a 2xx.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.utils.datastructures import CaseInsensitiveMapping
from django.views.decorators.csrf import csrf_exempt
from standardwebhooks import Webhook

from tasks.live import broadcast
from tasks.models import Agent, PushEndpoint, matches_digest
from tasks.pushes import applier, deliveries, refusals
from tasks.runtime import connections, outage
from tasks.wire import agent_text, protocol
from tasks.wire.numbers import whole_number

log = logging.getLogger(__name__)

CONTENT_TYPES = ("application/json", "application/a2a+json")
SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


@dataclass
class Refused(Exception):
    status: int
    reason: str
    error: str
    detail: str

    def as_json(self) -> dict:
        return {"error": self.error, "detail": self.detail}


def error_response(status: int, error: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": error, "detail": detail}, status=status)


NOT_STORED = {
    "error": "not stored",
    "detail": "the delivery could not be stored and nothing of it was kept; send it again",
}


def handle_push(
    endpoint_id: str, headers: Mapping[str, str], read_body: Callable[[], bytes]
) -> tuple[int, dict]:
    """The whole receiver, shared by the ASGI fast path and the Django view: (status, JSON).
    A database that fails it anywhere (down, or its connection broken) is a 503, which the
    agent retries, never a 500."""
    if outage.is_away():
        return 503, NOT_STORED
    try:
        return _handle_push(endpoint_id, headers, read_body)
    except DatabaseError as error:
        _log_not_stored(error, "endpoint %.40s", endpoint_id)
        return 503, NOT_STORED


def _log_not_stored(error: Exception, what: str, *args: object) -> None:
    # An unreachable database is one line (outage.py says when it is back); anything else
    # is a fault worth its traceback.
    if outage.noticed(error):
        log.warning("push not stored: the database cannot be reached (" + what + ")", *args)
    elif connections.lost(error):
        log.warning("push not stored: the database connection was lost (" + what + ")", *args)
    else:
        log.exception("push not stored: the database failed (" + what + ")", *args)


def _handle_push(
    endpoint_id: str, headers: Mapping[str, str], read_body: Callable[[], bytes]
) -> tuple[int, dict]:
    endpoint = _endpoint(endpoint_id)
    if endpoint is None:
        return 404, {
            "error": "unknown push endpoint",
            "detail": f"no push endpoint {endpoint_id!r}",
        }
    try:
        body = _body(headers, read_body)
        _authenticate(endpoint.agent, endpoint, headers, body)
        _check_not_ended(endpoint)
        _check_content_type(headers)
        _check_webhook_id(headers)
        try:
            event = protocol.parse(body)
        except protocol.BadBody as bad:
            raise Refused(400, "malformed", bad.error, bad.detail) from None
    except Refused as refused:
        count_refusal(endpoint.agent, refused.reason, refused.detail)
        return refused.status, refused.as_json()
    key = deliveries.idempotency_key(headers.get("webhook-id"), body)
    try:
        result = deliveries.receive(endpoint, key, body, event)
    except Exception as error:  # noqa: BLE001 - rolled back whole: say so, and the agent sends it again
        _log_not_stored(error, "agent=%s key=%.40s", endpoint.agent_id, key)
        return 503, NOT_STORED
    if result.pending:
        applier.wake(result.delivery.pk)
    outcome = "duplicate" if result.duplicate else "accepted"
    return 200, {"outcome": outcome, "delivery": result.delivery.pk}


@csrf_exempt
def receive_push(request: HttpRequest, endpoint_id: str) -> JsonResponse:
    """The receiver as a Django view (test client, WSGI); under ASGI `PushReceiver` answers."""
    if request.method != "POST":
        response = error_response(405, "method not allowed", "pushes are POSTed")
        response["Allow"] = "POST"
        return response
    status, data = handle_push(endpoint_id, request.headers, lambda: request.body)
    response = JsonResponse(data, status=status)
    if status == 503:
        response["Retry-After"] = str(outage.RETRY_AFTER)
    return response


# public id → (expires at, endpoint with its agent): the one query every push made, and the
# costliest part of keeping it. Only found endpoints are kept, so a new one works at once.
_endpoints: dict[str, tuple[float, PushEndpoint]] = {}


def _endpoint(endpoint_id: str) -> PushEndpoint | None:
    ttl = settings.ONLOOKER_ENDPOINT_CACHE_SECONDS
    now = time.time()
    if ttl > 0:
        cached = _endpoints.get(endpoint_id)
        if cached is not None and cached[0] > now:
            return cached[1]
    endpoint = (
        PushEndpoint.objects.select_related("agent")
        .filter(public_id=endpoint_id, active=True)
        .first()
    )
    if ttl > 0 and endpoint is not None:
        if len(_endpoints) > 10_000:  # endpoints no longer pushed to
            _endpoints.clear()
        _endpoints[endpoint_id] = (now + ttl, endpoint)
    return endpoint


def _too_large(size: int) -> Refused:
    limit = settings.ONLOOKER_MAX_PUSH_BYTES
    return Refused(413, "too_large", "body too large", f"{size} bytes; the limit is {limit}")


def _body(headers: Mapping[str, str], read_body: Callable[[], bytes]) -> bytes:
    declared = whole_number(headers.get("content-length", ""))
    if declared is not None and declared > settings.ONLOOKER_MAX_PUSH_BYTES:
        raise _too_large(declared)
    body = read_body()
    if len(body) > settings.ONLOOKER_MAX_PUSH_BYTES:
        raise _too_large(len(body))
    return body


def _authenticate(
    agent: Agent, endpoint: PushEndpoint, headers: Mapping[str, str], body: bytes
) -> None:
    if agent.signing_secrets:
        # An agent that signs must always sign: a valid token alone is a downgrade.
        _verify_signature(agent.signing_secrets, headers, body)
        return
    authorization = headers.get("Authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and matches_digest(credentials.strip(), endpoint.bearer_digest):
        return
    token = headers.get("X-A2A-Notification-Token", "")
    if token and matches_digest(token, endpoint.token_digest):
        return
    detail = "expected Authorization: Bearer {credentials} or X-A2A-Notification-Token"
    if authorization or token:
        detail = "the push credentials do not match this endpoint"
    raise Refused(401, "unauthenticated", "unauthenticated", detail)


def _check_not_ended(endpoint: PushEndpoint) -> None:
    """A task's own endpoint is refused once its task ended more than
    ONLOOKER_PUSH_TOKEN_GRACE_SECONDS ago (answering/push_configs.py marks `ended_at`): late
    and retried pushes still land within the grace, a leaked token does not live for ever.
    The agent's own endpoint (no task) never ends. Checked after the credentials, so only a
    sender that holds them learns the task ended.

    `ended_at` comes with the endpoint `_endpoint` may have cached, and the clock is read
    here: a cached endpoint whose end is known is refused on time; only an end marked after
    it was cached is seen up to ONLOOKER_ENDPOINT_CACHE_SECONDS late."""
    if endpoint.ended_at is None or not endpoint.task_id:
        return
    grace = timedelta(seconds=settings.ONLOOKER_PUSH_TOKEN_GRACE_SECONDS)
    if timezone.now() - endpoint.ended_at <= grace:
        return
    ended = endpoint.ended_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    raise Refused(
        401,
        "token_expired",
        "token expired",
        f"this task's push token expired: the task ended at {ended}, and its token is "
        f"accepted for {settings.ONLOOKER_PUSH_TOKEN_GRACE_SECONDS} s after",
    )


def _verify_signature(secrets: list[str], all_headers: Mapping[str, str], body: bytes) -> None:
    headers = {name: all_headers.get(name, "") for name in SIGNATURE_HEADERS}
    missing = [name for name, value in headers.items() if not value]
    if missing:
        raise Refused(
            401,
            "unauthenticated",
            "signature required",
            f"this agent signs its pushes (Standard Webhooks); missing {', '.join(missing)}",
        )
    problem = "no signature matched"
    for secret in secrets:
        try:
            Webhook(secret).verify(body, headers, json_parse=False)
            return
        except Exception as error:  # noqa: BLE001 - the library raises ValueError,
            # UnicodeDecodeError and binascii.Error besides its own error; all mean "not verified".
            problem = _signature_problem(error)
    raise Refused(401, "unauthenticated", "bad signature", problem)


def _signature_problem(error: Exception) -> str:
    message = str(error)
    if "timestamp too" in message:
        return "webhook-timestamp is more than 5 minutes from now"
    if message == "Invalid Signature Headers":
        return "webhook-timestamp is not a Unix time in seconds"
    if isinstance(error, UnicodeDecodeError):
        return "the body is not UTF-8"
    if message == "No matching signature found":
        return "no signature matched"
    return "webhook-signature is malformed (expected space-separated v1,{base64} entries)"


def _check_content_type(headers: Mapping[str, str]) -> None:
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in CONTENT_TYPES:
        raise Refused(
            415,
            "unsupported_media_type",
            "unsupported content type",
            f"{content_type or 'no content type'}; send application/json or application/a2a+json",
        )


# Printable ASCII and printable Latin-1: headers arrive decoded as Latin-1, and every id a
# Standard Webhooks sender makes (msg_<base62>, a UUID) is printable ASCII.
_NOT_PRINTABLE = re.compile(r"[^ -~\xa0-\xff]")


def _check_webhook_id(headers: Mapping[str, str]) -> None:
    """The id becomes the delivery's idempotency key: a control character in it would be kept
    as junk, and NUL is refused by PostgreSQL on every retry (a 503 the agent retries for
    ever). A signature over the id does not make it storable, so signed ids are checked too."""
    bad = _NOT_PRINTABLE.search(headers.get("webhook-id") or "")
    if bad is not None:
        raise Refused(
            400,
            "malformed",
            "bad webhook-id",
            f"webhook-id has a character that is not printable (U+{ord(bad[0]):04X}) at "
            f"position {bad.start()}; send printable ASCII, such as a UUID",
        )


def count_refusal(agent: Agent, reason: str, detail: str) -> None:
    """Count a refusal on the agent's row (refusals.py: at most one write a second). Details
    quote what the agent sent, and the admin shows them: kept as plain text, markup dropped
    (so Onlooker's own details write placeholders as {this}, never as <this>)."""
    refusals.count(agent.pk, reason, agent_text.plain_text(detail, 300))


def _count_oversize(endpoint_id: str, size: int) -> None:
    endpoint = _endpoint(endpoint_id)
    if endpoint is not None:
        count_refusal(endpoint.agent, "too_large", _too_large(size).detail)


class PushReceiver:
    """ASGI wrapper that answers pushes itself and passes everything else to Django.

    A push needs none of the page middleware (sessions, CSRF, messages), and under ASGI each
    sync middleware costs a thread hop: answering here does the whole push in one hop to the
    same `handle_push` the Django view calls. An oversized body is refused before it is read:
    a declared Content-Length over the limit at once, a chunked body as soon as it passes it.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        match = _PUSH_PATH.match(scope["path"]) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        broadcast.use_loop(asyncio.get_running_loop())  # delayed hints go out from here
        if outage.is_away():  # at once, not after reading a body that cannot be kept
            return await _send_json(send, 503, NOT_STORED, close=True, retry_after=True)
        endpoint_id = match["endpoint"]
        limit = settings.ONLOOKER_MAX_PUSH_BYTES
        headers = _asgi_headers(scope)
        declared = whole_number(headers.get("content-length", ""))
        if declared is not None and declared > limit:
            return await self._refuse_oversize(send, endpoint_id, declared)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await self._refuse_oversize(send, endpoint_id, size)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        status, data = await sync_to_async(_handle_in_thread)(endpoint_id, headers, body)
        await _send_json(send, status, data, retry_after=status == 503)

    async def _refuse_oversize(self, send, endpoint_id: str, size: int) -> None:
        await sync_to_async(_count_oversize)(endpoint_id, size)
        refused = _too_large(size)
        await _send_json(send, refused.status, refused.as_json(), close=True)


_PUSH_PATH = re.compile(r"^/a2a/push/(?P<endpoint>[^/]+)/$")


def _asgi_headers(scope) -> CaseInsensitiveMapping:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        # Repeated headers are joined as Django joins them.
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return CaseInsensitiveMapping(headers)


def _handle_in_thread(endpoint_id: str, headers: Mapping[str, str], body: bytes):
    # Pushes all run on this one long-lived thread (no request context names another), which
    # keeps its database connection from one push to the next: tasks/runtime/connections.py.
    connections.keep_unless_broken()
    return handle_push(endpoint_id, headers, lambda: body)


async def _send_json(
    send, status: int, data: dict, *, close: bool = False, retry_after: bool = False
) -> None:
    body = json.dumps(data).encode()
    # With its length given the answer goes out whole, not as a chunked stream.
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    if retry_after:
        headers.append((b"retry-after", b"%d" % outage.RETRY_AFTER))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
