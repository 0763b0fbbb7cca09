"""Pages for people, and the health check."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from tasks import broadcast
from tasks.models import Agent, Session, TaskState

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


OVERVIEW_LIMIT = 300
SIDEBAR_LIMIT = 100


def _attention_order(sessions):
    return sessions.order_by("-needs_human", "-updated_at", "-id")


def _sidebar(request: HttpRequest) -> list[Session]:
    visible = Session.objects.visible_to(request.user).select_related("card")
    return list(_attention_order(visible)[:SIDEBAR_LIMIT])


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """The team monitoring screen: every visible session as its card, those waiting for a
    human first. Filters live in the URL so a wall screen can be bookmarked."""
    visible = Session.objects.visible_to(request.user)
    agents = Agent.objects.visible_to(request.user).order_by("name")
    shown = visible.select_related("agent", "card")
    agent, state = request.GET.get("agent", ""), request.GET.get("state", "")
    if agent.isdigit():
        shown = shown.filter(agent_id=int(agent))
    if state in TaskState.values:
        shown = shown.filter(state=state)
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    counts = visible.aggregate(
        waiting=Count("pk", filter=Q(needs_human=True)),
        working=Count("pk", filter=Q(state__in=[TaskState.SUBMITTED, TaskState.WORKING])),
        failed_today=Count("pk", filter=Q(state=TaskState.FAILED, updated_at__gte=today)),
    )
    total = shown.count()
    context = {
        "sessions": list(_attention_order(shown)[:OVERVIEW_LIMIT]),
        "total": total,
        "counts": counts,
        "agents": agents,
        "states": TaskState.choices,
        "selected_agent": agent,
        "selected_state": state,
        "wall": request.GET.get("display") == "wall",
        "sidebar": _sidebar(request),
    }
    return render(request, "tasks/overview.html", context)


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
        "sidebar": _sidebar(request),
        "counts": {
            "waiting": Session.objects.visible_to(request.user).filter(needs_human=True).count()
        },
    }
    return render(request, "tasks/session.html", context)


@require_GET
@login_required
def session_card(request: HttpRequest, session_id: int) -> JsonResponse:
    """The session's current fragments: what a browser refetches on every (re)connect."""
    snapshot = broadcast.snapshot(_visible_session(request, session_id))
    del snapshot["type"]
    return JsonResponse(snapshot)
