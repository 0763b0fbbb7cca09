"""OAuth 2.0 "Connect" and "Disconnect" for agents whose card declares an authorization
code flow (answering/oauth.py does the work):

- `connect` (POST /oauth/<id>/connect/): a person who may answer, an agent they see whose
  card declares OAuth 2.0 and whose client is registered → a page that sends the browser on
  to its authorization server; else a page saying why (403, 404, 400).
- `callback` (GET /oauth/callback/?state=…&code=…): where the authorization server sends the
  browser back. A missing, unknown, expired, reused or altered state, a refusal by the
  person or the server, a code the server does not take: a 400 page saying so, nothing
  stored. Success: back to /settings/ with "Connected to ops-bot".
- `disconnect` (POST /oauth/<id>/disconnect/): the tokens revoked (where the card says
  how) and forgotten.

The callback's URL holds the code, so its answers go out with `Referrer-Policy:
strict-origin` and are never cached.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_POST

from tasks.answering import oauth, rules
from tasks.models import Agent
from tasks.wire.agent_text import plain_text

MAX_PARAMETER = 4096  # characters of a state, code or error the callback reads
NO_PERMISSION = (
    "Connecting an agent lets you answer it as yourself; ask an administrator for the "
    "permission to answer first. Nothing was stored."
)


def _page(request: HttpRequest, status: int, heading: str, detail: str) -> HttpResponse:
    return render(
        request,
        "tasks/oauth_result.html",
        {"heading": heading, "detail": detail, "status": status},
        status=status,
    )


def _visible_agent(request: HttpRequest, agent_id: int) -> Agent | None:
    return Agent.objects.visible_to(request.user).filter(pk=agent_id).first()


@require_POST
@login_required
def connect(request: HttpRequest, agent_id: int) -> HttpResponse:
    if not rules.may_answer(request.user):
        return _page(request, 403, "You may not answer agents", NO_PERMISSION)
    agent = _visible_agent(request, agent_id)
    if agent is None:
        return _page(request, 404, "No such agent", "There is no agent here by that id.")
    try:
        url = oauth.start(request.session, request.user, agent)
    except oauth.OAuthFailed as failed:
        return _page(request, failed.status, f"Cannot connect to {agent.name}", str(failed))
    # Not a redirect: answering a form with one to another site breaks `form-action 'self'`.
    context = {"agent": agent, "authorization_url": url, "authorization_host": urlsplit(url).netloc}
    response = render(request, "tasks/oauth_continue.html", context)
    response["Referrer-Policy"] = "no-referrer"
    add_never_cache_headers(response)  # the URL holds this Connect's state
    return response


@require_GET
@login_required
def callback(request: HttpRequest) -> HttpResponse:
    response = _callback(request)
    # The code is in this page's URL: no other site learns it from a Referer.
    response["Referrer-Policy"] = "strict-origin"
    add_never_cache_headers(response)
    return response


def _callback(request: HttpRequest) -> HttpResponse:
    if not rules.may_answer(request.user):  # taken away since Connect was pressed
        return _page(request, 403, "Not connected", NO_PERMISSION)
    state = request.GET.get("state", "")[:MAX_PARAMETER]
    error = request.GET.get("error", "")
    try:
        entry = oauth.take_pending(request.session, request.user, state) if error else None
        if entry is not None:
            return _refused_at_server(request, entry, error)
        credential = oauth.finish(
            request.session, request.user, state, request.GET.get("code", "")[:MAX_PARAMETER]
        )
    except oauth.OAuthFailed as failed:
        return _page(request, failed.status, "Not connected", str(failed))
    messages.success(request, f"Connected to {credential.agent.name}.")
    return redirect(reverse("settings"))


def _refused_at_server(request: HttpRequest, entry: dict, error: str) -> HttpResponse:
    """The authorization server sent an error back instead of a code (its state was ours)."""
    agent = Agent.objects.filter(pk=entry["agent"]).first()
    name = agent.name if agent else "the agent"
    if error == "access_denied":
        detail = (
            f"You did not allow Onlooker to act for you at {name}: nothing was connected. "
            "Connect again from the settings page when you want to."
        )
    else:
        said = plain_text(request.GET.get("error_description")) or plain_text(error)
        detail = f"{name}'s authorization server refused: {said}. Nothing was connected."
    return _page(request, 400, "Not connected", detail)


@require_POST
@login_required
def disconnect(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _visible_agent(request, agent_id)
    if agent is None:
        return _page(request, 404, "No such agent", "There is no agent here by that id.")
    if oauth.disconnect(request.user, agent):
        messages.success(request, f"Disconnected from {agent.name}: Onlooker forgot your tokens.")
    else:
        messages.info(request, f"You were not connected to {agent.name}.")
    return redirect(reverse("settings"))
