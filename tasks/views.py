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
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET

from tasks import board, broadcast
from tasks.api import api_login_required
from tasks.models import Agent, Artifact, Card, Interaction, Session, TaskState

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
def overview(request: HttpRequest) -> HttpResponse:
    """The team monitoring screen: every visible session as its card, those waiting for a
    human first. Filters live in the URL so a wall screen can be bookmarked."""
    filters = board.Filters.from_query(request.GET)
    sessions, total = board.tiles(request.user, filters)
    context = {
        "sessions": sessions,
        "total": total,
        "counts": board.counts(request.user),
        "agents": Agent.objects.visible_to(request.user).order_by("name"),
        "states": TaskState.choices,
        "filters": filters,
        "wall": request.GET.get("display") == "wall",
        "sidebar": board.sidebar(request.user),
    }
    return render(request, "tasks/overview.html", context)


@require_GET
@api_login_required
def live_board(request: HttpRequest) -> JsonResponse:
    """What a (re)connecting page refetches: the counts, the sidebar rows and, with
    `?tiles=1`, the monitoring screen's tiles for the filters given, rendered with the same
    partials as the pages."""
    data = {
        "counts": board.counts(request.user),
        "sidebar": render_to_string(
            "tasks/_sidebar_rows.html", {"sidebar": board.sidebar(request.user)}
        ),
    }
    if request.GET.get("tiles"):
        sessions, total = board.tiles(request.user, board.Filters.from_query(request.GET))
        data["tiles"] = render_to_string("tasks/_tiles.html", {"sessions": sessions})
        data["total"] = total
    return JsonResponse(data)


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


TRANSCRIPT_LIMIT = 500


def _activity(session: Session) -> dict:
    """The session page's body below the heading: transcript, artifacts, open interactions."""
    messages = list(session.messages.order_by("-at", "-id")[:TRANSCRIPT_LIMIT])[::-1]
    return {
        "messages_": messages,
        "artifacts": Artifact.objects.filter(task__session=session).select_related("task"),
        "interactions": Interaction.objects.filter(
            task__session=session, state__in=[Interaction.State.OPEN, Interaction.State.ANSWERING]
        ).order_by("opened_at", "id"),
    }


@require_GET
@login_required
def session_page(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _visible_session(request, session_id)
    context = {
        "session": session,
        "card": Card.objects.filter(session=session).first(),
        "sidebar": board.sidebar(request.user),
        "counts": board.counts(request.user),
        **_activity(session),
    }
    return render(request, "tasks/session.html", context)


@require_GET
@api_login_required
def session_activity(request: HttpRequest, session_id: int) -> HttpResponse:
    """The session page's activity, refetched when a live message says the session changed."""
    session = _visible_session(request, session_id)
    card = Card.objects.filter(session=session).first()
    context = {"session": session, "card": card, **_activity(session)}
    return render(request, "tasks/_activity.html", context)


@require_GET
@api_login_required
def session_card(request: HttpRequest, session_id: int) -> JsonResponse:
    """The session's current fragments: what a browser refetches on every (re)connect."""
    snapshot = broadcast.snapshot(_visible_session(request, session_id))
    del snapshot["type"]
    return JsonResponse(snapshot)
