"""The card API, for agents that write their progress card directly (OpenClaw-style):
`POST /api/progress-card` and `GET /api/progress-card?sessionKey=…`, with the agent's API
token as `Authorization: Bearer`."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from tasks.answering.agents import agent_for_api_token
from tasks.models import Agent, Session
from tasks.pushes.apply import transcript
from tasks.sessions import changes, progress_card
from tasks.wire import json_safety
from tasks.wire.numbers import whole_number

# Far over anything valid (8 KiB of markdown and 50 steps of 512 bytes, JSON-escaped):
# refused before it is parsed.
MAX_BODY_BYTES = 256 * 1024
MAX_SESSION_KEY = 200


def _error(status: int, error: str, field: str | None = None) -> JsonResponse:
    body = {"error": error}
    if field is not None:
        body["field"] = field
    return JsonResponse(body, status=status)


def _agent(request: HttpRequest) -> Agent | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return agent_for_api_token(token.strip())


def _session_key(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise progress_card.CardError("sessionKey", "sessionKey must be a non-empty string")
    if len(value) > MAX_SESSION_KEY:
        raise progress_card.CardError("sessionKey", f"sessionKey is longer than {MAX_SESSION_KEY}")
    if "\x00" in value:
        raise progress_card.CardError("sessionKey", "sessionKey must not contain U+0000 (NUL)")
    return value


@csrf_exempt
def card(request: HttpRequest) -> JsonResponse:
    agent = _agent(request)
    if agent is None:
        return _error(401, "a valid agent API token is required as Authorization: Bearer")
    if request.method == "GET":
        return _read(agent, request.GET.get("sessionKey"))
    if request.method == "POST":
        return _write(agent, request)
    response = _error(405, "use GET or POST")
    response["Allow"] = "GET, POST"
    return response


def _read(agent: Agent, key: str | None) -> JsonResponse:
    try:
        key = _session_key(key)
    except progress_card.CardError as error:
        return _error(400, error.message, error.field)
    session = Session.objects.filter(agent=agent, context_id=key).select_related("card").first()
    card = getattr(session, "card", None) if session else None
    return JsonResponse({"card": card.as_json() if card else None})


def _write(agent: Agent, request: HttpRequest) -> JsonResponse:
    declared = whole_number(request.META.get("CONTENT_LENGTH") or "0") or 0
    if declared > MAX_BODY_BYTES or len(request.body) > MAX_BODY_BYTES:
        return _error(413, f"the body is over {MAX_BODY_BYTES} bytes; a card is far smaller")
    try:
        # Lone surrogates become U+FFFD here, so no field can fail to encode when stored.
        data = json_safety.loads(request.body.decode("utf-8"))
    except UnicodeDecodeError:
        return _error(400, "the body must be UTF-8 encoded JSON")
    except json_safety.TooDeep as deep:
        return _error(400, f"{deep}; a card is flat", deep.member)
    except RecursionError:
        return _error(400, f"the body nests more than {json_safety.MAX_DEPTH} levels deep")
    except ValueError:
        return _error(400, "the body must be a JSON object")
    if not isinstance(data, dict):
        return _error(400, "the body must be a JSON object")
    try:
        unknown = sorted(set(data) - {"sessionKey", "plan", "markdown"})
        if unknown:
            field = json_safety.cut(unknown[0], 60)
            raise progress_card.CardError(field, f"{field} is not a card field")
        key = _session_key(data.get("sessionKey"))
        plan, markdown = progress_card.normalize(data.get("plan"), data.get("markdown"))
    except progress_card.CardError as error:
        return _error(400, error.message, error.field)
    now = timezone.now()
    with transaction.atomic():
        session = changes.open_session(agent, key, at=now)
        written = progress_card.store_written(session, plan, markdown)
        card = written.card
        if card is not None:
            # The transcript's one writer of the agent side keeps the receipt.
            transcript.card_receipt(session, card, at=now)
            changes.card_written(session, written)
            changed = [changes.Changed(session, agent.team_id, card)]
            changes.changed(changed, derived=True, updated_at=now)
    return JsonResponse(
        {
            "revision": card.revision if card else None,
            "steps": progress_card.step_counts(card.plan) if card else None,
            "receipt": progress_card.receipt(card),
        }
    )
