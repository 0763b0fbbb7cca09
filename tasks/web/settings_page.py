"""A person's settings page, `/settings/`: their desktop notifications (kept by their browser,
static/js/notify.js), their teams, what they may answer, and their teams' notification
channels. It only reads: teams and the
answer permission are given in the admin."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tasks.answering import rules
from tasks.models import Agent
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


@require_GET
@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    user = request.user
    groups, total = agent_groups(user)
    context = {
        "all_teams": user.is_superuser,
        "teams": [] if user.is_superuser else list(user.groups.order_by("name")),
        "may_answer": rules.may_answer(user),
        "agent_groups": groups,
        "agents_total": total,
        "agents_named": sum(len(g.agents) for g in groups),
        "team_channels": seen.channels_for_user(user),
    }
    return render(request, "tasks/settings.html", context)
