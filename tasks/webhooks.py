"""The push receiver: `POST /a2a/push/<endpoint id>/`.

Order of checks: known endpoint (404), size (413), credentials (401, before anything is
parsed), content type (415), body (400). A refused request stores nothing but a count on the
agent's `Refusal` row. An accepted one is committed before the 2xx goes out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from standardwebhooks import Webhook

from tasks import ingest, protocol
from tasks.models import Agent, PushEndpoint, Refusal, matches_digest

log = logging.getLogger(__name__)

PUSH_PATH_PREFIX = "/a2a/push/"
CONTENT_TYPES = ("application/json", "application/a2a+json")
SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


@dataclass
class Refused(Exception):
    status: int
    reason: str
    error: str
    detail: str

    def response(self) -> JsonResponse:
        return error_response(self.status, self.error, self.detail)


def error_response(status: int, error: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": error, "detail": detail}, status=status)


@csrf_exempt
def receive_push(request: HttpRequest, endpoint_id: str) -> JsonResponse:
    if request.method != "POST":
        response = error_response(405, "method not allowed", "pushes are POSTed")
        response["Allow"] = "POST"
        return response
    endpoint = _endpoint(endpoint_id)
    if endpoint is None:
        return error_response(404, "unknown push endpoint", f"no push endpoint {endpoint_id!r}")
    try:
        body = _body(request)
        _authenticate(endpoint.agent, endpoint, request, body)
        _check_content_type(request)
        try:
            event = protocol.parse(body)
        except protocol.BadBody as bad:
            raise Refused(400, "malformed", bad.error, bad.detail) from None
    except Refused as refused:
        count_refusal(endpoint.agent, refused.reason, refused.detail)
        return refused.response()
    key = ingest.idempotency_key(request.headers.get("webhook-id"), body)
    result = ingest.apply(endpoint, key, body, event)
    outcome = "duplicate" if result.duplicate else result.delivery.outcome
    return JsonResponse({"outcome": outcome, "delivery": result.delivery.pk})


def _endpoint(endpoint_id: str) -> PushEndpoint | None:
    return (
        PushEndpoint.objects.select_related("agent")
        .filter(public_id=endpoint_id, active=True)
        .first()
    )


def _too_large(size: int) -> Refused:
    limit = settings.ONLOOKER_MAX_PUSH_BYTES
    return Refused(413, "too_large", "body too large", f"{size} bytes; the limit is {limit}")


def _body(request: HttpRequest) -> bytes:
    declared = request.META.get("CONTENT_LENGTH")
    if declared and declared.isdigit() and int(declared) > settings.ONLOOKER_MAX_PUSH_BYTES:
        raise _too_large(int(declared))
    body = request.body
    if len(body) > settings.ONLOOKER_MAX_PUSH_BYTES:
        raise _too_large(len(body))
    return body


def _authenticate(agent: Agent, endpoint: PushEndpoint, request: HttpRequest, body: bytes) -> None:
    if agent.signing_secrets:
        # An agent that signs must always sign: a valid token alone is a downgrade.
        _verify_signature(agent.signing_secrets, request, body)
        return
    authorization = request.headers.get("Authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and matches_digest(credentials.strip(), endpoint.bearer_digest):
        return
    token = request.headers.get("X-A2A-Notification-Token", "")
    if token and matches_digest(token, endpoint.token_digest):
        return
    detail = "expected Authorization: Bearer <credentials> or X-A2A-Notification-Token"
    if authorization or token:
        detail = "the push credentials do not match this endpoint"
    raise Refused(401, "unauthenticated", "unauthenticated", detail)


def _verify_signature(secrets: list[str], request: HttpRequest, body: bytes) -> None:
    headers = {name: request.headers.get(name, "") for name in SIGNATURE_HEADERS}
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
    return "webhook-signature is malformed (expected space-separated v1,<base64> entries)"


def _check_content_type(request: HttpRequest) -> None:
    content_type = (request.content_type or "").lower()
    if content_type not in CONTENT_TYPES:
        raise Refused(
            415,
            "unsupported_media_type",
            "unsupported content type",
            f"{content_type or 'no content type'}; send application/json or application/a2a+json",
        )


def count_refusal(agent: Agent, reason: str, detail: str) -> None:
    log.info("push refused: agent=%s reason=%s", agent.pk, reason)
    now = timezone.now()
    with transaction.atomic():
        refusal, _ = Refusal.objects.get_or_create(
            agent=agent, reason=reason, defaults={"last_at": now}
        )
        Refusal.objects.filter(pk=refusal.pk).update(
            count=F("count") + 1, last_at=now, last_detail=detail[:300]
        )


def _count_oversize(endpoint_id: str, size: int) -> None:
    endpoint = _endpoint(endpoint_id)
    if endpoint is not None:
        count_refusal(endpoint.agent, "too_large", _too_large(size).detail)


class PushBodyLimit:
    """ASGI wrapper: refuse an oversized push before Django reads its body into memory.

    A declared Content-Length over the limit is refused at once; a chunked body is read up to
    the limit and refused as soon as it passes it.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if not (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].startswith(PUSH_PATH_PREFIX)
        ):
            return await self.app(scope, receive, send)
        limit = settings.ONLOOKER_MAX_PUSH_BYTES
        endpoint_id = scope["path"][len(PUSH_PATH_PREFIX) :].strip("/")
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > limit:
                return await self._refuse(send, endpoint_id, int(declared))
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await self._refuse(send, endpoint_id, size)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay_receive():
            return replay.pop() if replay else await receive()

        return await self.app(scope, replay_receive, send)

    async def _refuse(self, send, endpoint_id: str, size: int) -> None:
        await sync_to_async(_count_oversize)(endpoint_id, size)
        response = _too_large(size).response()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": response.content})
