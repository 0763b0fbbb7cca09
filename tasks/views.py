"""Pages for people, and the health check."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tasks import broadcast
from tasks.models import Session

log = logging.getLogger(__name__)
HEALTH_TIMEOUT = 3.0


def _database_ok() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.close()


async def _channel_layer_ok() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel("health.")
    await layer.send(channel, {"type": "health.ping"})
    message = await layer.receive(channel)
    if message.get("type") != "health.ping":
        raise RuntimeError("the channel layer returned another message")


@require_GET
async def healthz(request: HttpRequest) -> JsonResponse:
    checks = {
        "database": sync_to_async(_database_ok, thread_sensitive=False),
        "channel layer": _channel_layer_ok,
    }
    down = {}
    for name, check in checks.items():
        try:
            await asyncio.wait_for(check(), timeout=HEALTH_TIMEOUT)
        except Exception as error:  # noqa: BLE001 - any failure means "down"
            log.warning("health check: %s is down: %r", name, error)
            down[name] = str(error) or type(error).__name__
    if down:
        return JsonResponse({"status": "down", "down": down}, status=503)
    return JsonResponse({"status": "ok", "checks": list(checks)})


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    sessions = (
        Session.objects.visible_to(request.user)
        .select_related("agent")
        .order_by("-needs_human", "-updated_at", "-id")[:200]
    )
    return render(request, "tasks/home.html", {"sessions": sessions})


def _visible_session(request: HttpRequest, session_id: int) -> Session:
    session = (
        Session.objects.visible_to(request.user)
        .select_related("agent")
        .filter(pk=session_id)
        .first()
    )
    if session is None:
        raise Http404("No such session, or not one you may see.")
    return session


@require_GET
@login_required
def session_page(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _visible_session(request, session_id)
    context = {
        "session": session,
        "card": getattr(session, "card", None),
        "messages_": session.messages.all()[:500],
    }
    return render(request, "tasks/session.html", context)


@require_GET
@login_required
def session_card(request: HttpRequest, session_id: int) -> JsonResponse:
    """The session's current fragments: what a browser refetches on every (re)connect."""
    snapshot = broadcast.snapshot(_visible_session(request, session_id))
    del snapshot["type"]
    return JsonResponse(snapshot)
