"""An agent's page, `/agents/<id>/`: its card as last read, what Onlooker last heard from it
and what went wrong, and its sessions; for people who may answer, "Refresh from the agent"
and "Follow this task" (tasks/answering/following.py). Shown to whoever may see the agent
(its team); anyone else gets a 404, as for its sessions.

Both actions call the agent as the person who presses (following.py). On an agent that takes
only each person's own credential, someone without one sees "Connect your credential for
ops-bot to …", linking to their settings, instead of the two forms; a post from them all the
same is refused (403, the same link) and nothing is sent."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from tasks.answering import agents, callers, following, rules
from tasks.models import Agent, Delivery, PushEndpoint, Refusal
from tasks.sessions import board
from tasks.wire import tiers

SESSIONS_SHOWN = 50
FOLLOWED_SHOWN = 50
REFUSALS_SINCE = timedelta(hours=24)


def _visible(request: HttpRequest, agent_id: int) -> Agent:
    agent = Agent.objects.visible_to(request.user).select_related("team").filter(pk=agent_id)
    found = agent.first()
    if found is None:
        raise Http404("No such agent, or not one you may see.")
    return found


def last_push(agent: Agent):
    """When the agent's newest push arrived (what Onlooker fetched itself is not a push):
    read backwards along the (agent, received_at) index."""
    pushes = Delivery.objects.filter(agent=agent).exclude(idempotency_key__startswith="fetched:")
    return pushes.order_by("-received_at").values_list("received_at", flat=True).first()


def _extensions(agent: Agent) -> list[dict]:
    """Each URI the card declares, with its short name when it is the profile's, and what
    the agent's answers echo of it (`A2A-Extensions`, tasks/wire/tiers.py)."""
    echoed = agent.activated_extensions
    if agent.extensions_echoed_at is None:
        unknown = "not known yet (Onlooker has not called it)"
    else:
        unknown = "not echoed (its answers name no extensions)"
    return [
        {
            "uri": uri,
            "name": tiers.SHORT_NAMES.get(uri, ""),
            "echo": unknown if echoed is None else _echo(uri in echoed),
        }
        for uri in agent.extensions or []
    ]


def _echo(activated: bool) -> str:
    return "activated" if activated else "not activated"


def _context(request: HttpRequest, agent: Agent, connect_to: str = "") -> dict:
    """`connect_to`: what the person was refused for want of their own credential."""
    may_act = rules.may_answer(request.user)
    if may_act and not connect_to and callers.needs_credential(agent, request.user):
        connect_to = "refresh or follow its tasks"
    sessions = agent.sessions.select_related("card").order_by("-updated_at", "-id")
    followed = PushEndpoint.objects.filter(agent=agent, active=True).exclude(task_id="")
    return {
        "agent": agent,
        "extensions": _extensions(agent),
        "refused_move": agents.refused_move(agent),
        "last_push": last_push(agent),
        "refusals": list(
            Refusal.objects.filter(
                agent=agent, last_at__gte=timezone.now() - REFUSALS_SINCE
            ).order_by("-last_at")
        ),
        "sessions": list(sessions[:SESSIONS_SHOWN]),
        "sessions_total": sessions.count(),
        "followed": list(followed.order_by("-created_at")[:FOLLOWED_SHOWN]),
        "may_act": may_act,
        "connect_to": connect_to,
        "sidebar": board.sidebar(request.user),
        "counts": board.counts(request.user),
    }


@require_GET
@login_required
def agent_page(request: HttpRequest, agent_id: int) -> HttpResponse:
    return render(request, "tasks/agent.html", _context(request, _visible(request, agent_id)))


def _acted(request: HttpRequest, agent_id: int, act, doing: str) -> HttpResponse:
    """POST-redirect-GET with a message saying what happened; a refusal for lack of the
    permission is a 403 page with it (for lack of their own credential: the page links
    where to connect it, `doing` says for what), and an agent nobody may see here a 404."""
    try:
        agent = following.acting_on(request.user, agent_id)
        ok, text = act(agent)
    except rules.NotFound as error:
        raise Http404(str(error)) from None
    except callers.NeedsCredential as needs:
        context = _context(request, needs.agent, connect_to=doing)
        return render(request, "tasks/agent.html", context, status=403)
    except rules.NotAllowed as error:
        messages.error(request, str(error))
        agent = _visible(request, agent_id)
        return render(request, "tasks/agent.html", _context(request, agent), status=403)
    except rules.AnswerError as error:
        messages.error(request, str(error))
        return redirect("agent", agent_id)
    (messages.success if ok else messages.error)(request, text)
    return redirect("agent", agent_id)


@require_POST
@login_required
def refresh_agent(request: HttpRequest, agent_id: int) -> HttpResponse:
    """ "Refresh from the agent": its card, then the tasks it changed (`sync_agents`' code)."""

    def act(agent: Agent) -> tuple[bool, str]:
        outcome = following.refresh(agent, request.user)
        return outcome.ok, outcome.text

    return _acted(request, agent_id, act, "refresh")


@require_POST
@login_required
def follow_task(request: HttpRequest, agent_id: int) -> HttpResponse:
    """ "Follow this task": a push config at the agent for a task Onlooker did not start."""

    def act(agent: Agent) -> tuple[bool, str]:
        task_id = following.parse_task_id(request.POST.get("task_id", ""))
        followed = following.follow(agent, task_id, request.user)
        return followed.ok, followed.text

    return _acted(request, agent_id, act, "follow this task")
