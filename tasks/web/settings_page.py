"""A person's settings page, `/settings/`: their desktop notifications (kept by their browser,
static/js/notify.js), their teams, what they may answer, their own credentials for the agents
they may answer, and their teams' notification channels. It only reads: teams and the answer
permission are given in the admin, credentials are saved by tasks/web/credentials_page.py
(a token) and tasks/web/oauth_views.py (OAuth 2.0). A credential's value is never shown."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tasks.answering import rules
from tasks.models import Agent, PersonalCredential
from tasks.notify import seen

AGENTS_SHOWN = 200  # agents named on the page; a larger fleet is counted, not listed


@dataclass
class AgentGroup:
    """The agents of one team, or (team None) those of everyone."""

    team: str | None
    agents: list[Agent] = field(default_factory=list)


def agent_groups(user) -> tuple[list[AgentGroup], int]:
    """The agents the user may see, grouped by team (everyone's first, then by team name),
    and how many there are in all (only the first AGENTS_SHOWN are named). One query."""
    visible = Agent.objects.visible_to(user).select_related("team")
    found = list(visible.order_by("team__name", "name", "pk")[: AGENTS_SHOWN + 1])
    total = len(found) if len(found) <= AGENTS_SHOWN else visible.count()
    groups: dict[str | None, AgentGroup] = {}
    for agent in found[:AGENTS_SHOWN]:
        team = agent.team.name if agent.team else None
        groups.setdefault(team, AgentGroup(team)).agents.append(agent)
    ordered = sorted(groups.values(), key=lambda g: (g.team is not None, g.team or ""))
    return ordered, total


@dataclass(frozen=True)
class CredentialRow:
    """One agent in "Your credentials": whether the person saved their own credential for it
    (the row, never its value shown), and how it is sent."""

    agent: Agent
    credential: PersonalCredential | None

    @property
    def oauth(self) -> bool:
        return self.agent.auth_scheme.get("kind") == "oauth2"

    @property
    def scheme(self) -> str:
        kind = self.agent.auth_scheme.get("kind")
        if kind == "api_key":
            return f"API key in {self.agent.credential_header}"
        if kind == "oauth2":
            return "OAuth 2.0 (Bearer header)"
        return "Bearer header"  # HTTP bearer, or a card that declares no scheme


def credential_rows(user, groups: list[AgentGroup]) -> list[CredentialRow]:
    """The agents named on the page, each with the person's own credential for it (or
    None): one query for all of them. None of it for a person who may not answer."""
    if not rules.may_answer(user):
        return []
    agents = [agent for group in groups for agent in group.agents]
    own = {
        credential.agent_id: credential
        for credential in PersonalCredential.objects.filter(
            user=user, agent__in=[agent.pk for agent in agents]
        ).defer("secret")  # the token itself is never needed here: not even decrypted
    }
    return [CredentialRow(agent, own.get(agent.pk)) for agent in agents]


def render_settings(request: HttpRequest, *, status: int = 200, problem: str = "") -> HttpResponse:
    """The settings page; `problem`: why a form posted from it was refused (with `status`)."""
    user = request.user
    groups, total = agent_groups(user)
    context = {
        "all_teams": user.is_superuser,
        "teams": [] if user.is_superuser else list(user.groups.order_by("name")),
        "may_answer": rules.may_answer(user),
        "agent_groups": groups,
        "agents_total": total,
        "agents_named": sum(len(g.agents) for g in groups),
        "credential_rows": credential_rows(user, groups),
        "credential_problem": problem,
        "team_channels": seen.channels_for_user(user),
    }
    return render(request, "tasks/settings.html", context, status=status)


@require_GET
@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    return render_settings(request)
