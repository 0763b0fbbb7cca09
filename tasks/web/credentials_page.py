"""A person's own credentials for agents, on /settings/ ("Your credentials"): save or replace
one (field `token`), or remove it. Parse → answering/credentials.py → respond: a saved token
redirects back to /settings/ with a message that never holds it; a refusal re-renders the
settings page with its status (400 for a token no header can carry, 403 without the answer
permission, 404 for an agent the person may not see) and says what was wrong."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from tasks.answering import credentials
from tasks.answering.rules import AnswerError
from tasks.web.settings_page import render_settings


@require_POST
@login_required
def save_credential(request: HttpRequest, agent_id: int) -> HttpResponse:
    try:
        agent = credentials.agent_for(request.user, agent_id)
        token = credentials.parse_token(request.POST.get("token"))
        credentials.save(request.user, agent, token)
    except AnswerError as refused:
        return render_settings(request, status=refused.status, problem=str(refused))
    messages.success(request, f"Saved your credential for {agent.name}. It is not shown again.")
    return redirect("settings")


@require_POST
@login_required
def remove_credential(request: HttpRequest, agent_id: int) -> HttpResponse:
    try:
        agent = credentials.agent_for(request.user, agent_id)
    except AnswerError as refused:
        return render_settings(request, status=refused.status, problem=str(refused))
    if credentials.remove(request.user, agent):
        messages.success(request, f"Removed your credential for {agent.name}.")
    else:
        messages.info(request, f"You had no saved credential for {agent.name}; nothing changed.")
    return redirect("settings")
