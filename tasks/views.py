"""Pages for people, and the health check."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

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
