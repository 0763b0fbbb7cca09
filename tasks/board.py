"""What the monitoring screen and the sidebar show: visible sessions in attention order (those
waiting for a human first, then the most recently updated), the filters from the URL, and the
counts. The pages render it; the board endpoint sends the same thing to a reconnecting page."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet
from django.http import QueryDict
from django.utils import timezone

from tasks import activity, fragments
from tasks.models import Agent, Interaction, Session, TaskState
from tasks.notify import seen

OVERVIEW_LIMIT = 300
SIDEBAR_LIMIT = 100


def attention_order(sessions: QuerySet[Session]) -> QuerySet[Session]:
    return sessions.order_by("-needs_human", "-updated_at", "-id")


@dataclass(frozen=True)
class Filters:
    agent: str = ""
    state: str = ""

    @classmethod
    def from_query(cls, query: QueryDict) -> Filters:
        """Unknown values are ignored rather than refused: a stale bookmark still opens."""
        agent, state = query.get("agent", ""), query.get("state", "")
        return cls(agent if agent.isdigit() else "", state if state in TaskState.values else "")

    @property
    def active(self) -> bool:
        return bool(self.agent or self.state)

    def apply(self, rows: QuerySet, to: str = "") -> QuerySet:
        """Filter sessions, or rows reaching their session through `to` (e.g. "task__session__")."""
        if self.agent:
            rows = rows.filter(**{f"{to}agent_id": int(self.agent)})
        if self.state:
            rows = rows.filter(**{f"{to}state": self.state})
        return rows


NO_FILTERS = Filters()


def counts(user, filters: Filters = NO_FILTERS) -> dict[str, int]:
    """Waiting for a human, working, failed today: over everything the user may see that
    the filters let through, so the line above a filtered screen describes that screen."""
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    return filters.apply(Session.objects.visible_to(user)).aggregate(
        waiting=Count("pk", filter=Q(needs_human=True)),
        working=Count("pk", filter=Q(state__in=[TaskState.SUBMITTED, TaskState.WORKING])),
        failed_today=Count("pk", filter=Q(state=TaskState.FAILED, updated_at__gte=today)),
    )


def _with_fragments(sessions: QuerySet[Session]) -> QuerySet[Session]:
    return sessions.select_related("view", "card", "agent")


def sidebar(user) -> list[str]:
    """The sidebar's rows, as stored HTML (fragments.py)."""
    visible = _with_fragments(Session.objects.visible_to(user))
    return [fragments.one(s, "sidebar") for s in attention_order(visible)[:SIDEBAR_LIMIT]]


def tiles(user, filters: Filters, *, include_waiting: bool = True) -> tuple[list[str], int]:
    """The monitoring screen's tiles, as stored HTML, and how many sessions match in all.
    Without `include_waiting`, sessions that need a person are left out: the screen lists
    them above the tiles (`waiting`), and one session shown twice pushes the tiles below
    the fold."""
    shown = filters.apply(Session.objects.visible_to(user))
    if not include_waiting:
        shown = shown.filter(needs_human=False)
    chosen = attention_order(_with_fragments(shown))[:OVERVIEW_LIMIT]
    return [fragments.one(s, "tile") for s in chosen], shown.count()


WAITING_LIMIT = 20


def anything_visible(user) -> bool:
    """Whether the person may see any session at all (else the screen says how to add one)."""
    return Session.objects.visible_to(user).exists()


def waiting(user, filters: Filters = NO_FILTERS) -> list[Interaction]:
    """The open questions of every session the user may see that the filters let through,
    oldest first: who has waited longest is answered first. Each within the page's budget
    (activity.questions), with which team channels were told of it (`notified`, one query
    for all: tasks/notify/seen.py)."""
    rows = filters.apply(Interaction.objects.all(), to="task__session__")
    found = activity.questions(
        rows.filter(
            state__in=[
                Interaction.State.OPEN,
                Interaction.State.ANSWERING,
                Interaction.State.SENT,
            ],
            task__agent__in=Agent.objects.visible_to(user),
        )
        .select_related("task__session__agent", "answered_by")
        # The list names the session; its task's texts, as large as a push, are not shown.
        .defer("task__status_message", "task__note", "task__plan", "task__telemetry")
        .order_by("opened_at", "id")[:WAITING_LIMIT]
    )
    seen.attach(found)
    return found
