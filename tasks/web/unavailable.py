"""503 while the database is away (tasks/runtime/outage.py): the styled page for people, JSON for
scripts and pages' own requests, both with Retry-After; never a 500, and nothing waits for
the database to time out once it is known to be away."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.decorators import sync_and_async_middleware
from django.views.defaults import server_error as django_server_error

from tasks.runtime import outage

log = logging.getLogger(__name__)

DETAIL = "Onlooker cannot reach its database right now; try again in a few seconds"
# Answers for itself, saying which part is down: a load balancer asks it to know.
HEALTH_PATH = "/healthz"


def answer(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        response: HttpResponse = JsonResponse(
            {"error": "unavailable", "detail": DETAIL}, status=503
        )
    else:
        # No context and no request: rendering must not touch the database (no user).
        response = HttpResponse(render_to_string("503.html"), status=503)
    response["Retry-After"] = str(outage.RETRY_AFTER)
    return response


def _wants_json(request: HttpRequest) -> bool:
    if request.path.startswith(("/api/", "/a2a/")):
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


@sync_and_async_middleware
def while_database_away(get_response: Callable) -> Callable:
    """Answer at once while the database is away, before anything asks it (the session,
    the user)."""
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponse:
            if outage.is_away() and request.path != HEALTH_PATH:
                return answer(request)
            return await get_response(request)

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        if outage.is_away() and request.path != HEALTH_PATH:
            return answer(request)
        return get_response(request)

    return middleware


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an error that means the database cannot be reached (the request was
    already past the check when it went away) is a 503 too; anything else is the 500 page."""
    error = sys.exc_info()[1]
    if error is not None and outage.noticed(error):
        return answer(request)
    return django_server_error(request)


# "Try again later", as HTTP's 503 (WebSocket's own, 1013, is not an application's to send
# in autobahn): the page reconnects with its backoff, saying so meanwhile.
CLOSE_TRY_AGAIN_LATER = 4503


class SocketsWhileDatabaseAway:
    """The live socket's handshake needs the database (the session, the user, the groups):
    while it is away, or when it goes away during one, the socket is accepted and closed at
    once with 4503, a clean answer the page understands, rather than a handshake that dies
    with no HTTP answer at all."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if outage.is_away():
            return await _try_again_later(send)
        accepted = False

        async def watched_send(message: dict) -> None:
            nonlocal accepted
            accepted = accepted or message["type"] == "websocket.accept"
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except DatabaseError as error:
            # Finding out may take a connection attempt: not on the event loop. Either way
            # the page is told to try again (a restart's dead connection is gone by then).
            if not await sync_to_async(outage.noticed, thread_sensitive=False)(error):
                log.warning("a live socket's handshake met a database error: %s", error)
            if not accepted:
                await _try_again_later(send)


async def _try_again_later(send: Callable) -> None:
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN_LATER})
