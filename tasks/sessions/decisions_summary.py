"""How fast people answer: the record of decisions (tasks/models/decisions.py) summed per agent
and per person over a range of UTC days ending today, for `/api/decisions/summary` and the
monitoring screen's "Decisions" table (templates/tasks/_decisions_summary.html).

What counts:
- `decisions`: the rows people made in the range (answers, approvals, denials, dismissals,
  checks), as a person may read them (decision_record.visible). What the team's expiry
  policy did (via "expiry") is counted as an expiry, not as a decision.
- `approved` / `denied`: approve or connect / deny or decline, by people.
- time to decision (p50, p90, whole seconds): the wait (`at` − `openedAt`) of what a person
  decided on the question itself: approvals, denials, answers and checks. Not dismissals
  (closing what the agent forgot says nothing of how fast its question was answered) and
  not expiries (their wait is the policy's). Nearest-rank percentiles: the p-th is the
  smallest wait at least p% of the waits are at most, so it is always a wait that happened.
- `escalations` (per agent): questions of the agent's (an interaction's round) that an
  escalation channel was told of in the range (`interaction.escalated`, sent), counted
  once however many channels were told. Of the agents the person may see now.
- `expiries` (per agent): rows the expiry policy made (via "expiry").

The percentiles are computed here in Python over the range's rows, read as a few columns in
one query: a team's decisions over a year are thousands of rows, well within a page load.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta

from django.utils import timezone

from tasks.models import Agent, Decision, Notification
from tasks.sessions import decision_record

Made, Via = Decision.Made, Decision.Via
MIN_DAYS, MAX_DAYS, DEFAULT_DAYS = 1, 366, 30  # as /api/usage, so the page's ranges agree
APPROVED = frozenset({Made.APPROVE, Made.CONNECT})
DENIED = frozenset({Made.DENY, Made.DECLINE})
NOT_TIMED = frozenset({Made.DISMISS, Made.EXPIRED})
_DAYS = re.compile(r"[0-9]{1,3}")


class BadDays(ValueError):
    """A `days` that is not a whole number from MIN_DAYS to MAX_DAYS."""


def parse_days(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_DAYS
    if not _DAYS.fullmatch(raw) or not MIN_DAYS <= int(raw) <= MAX_DAYS:
        raise BadDays(f"days is a whole number from {MIN_DAYS} to {MAX_DAYS}")
    return int(raw)


def percentile(waits: list[int], p: int) -> int | None:
    """The nearest-rank p-th percentile of `waits` (sorted); None for none."""
    if not waits:
        return None
    return waits[max(math.ceil(p * len(waits) / 100), 1) - 1]


def duration_text(seconds: int | None) -> str:
    """A wait as people read it: 42 s, 3 min 5 s, 2 h 10 min, 3 d 4 h; "–" for none."""
    if seconds is None:
        return "–"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


@dataclass
class Tally:
    """One agent's or one person's figures; `waits` sorted once `close` is called."""

    id: int
    name: str
    decisions: int = 0
    approved: int = 0
    denied: int = 0
    escalations: int = 0
    expiries: int = 0
    waits: list[int] = field(default_factory=list)
    linked: bool = False  # an agent that still exists, for the page's link

    def close(self) -> Tally:
        self.waits.sort()
        return self

    @property
    def p50(self) -> int | None:
        return percentile(self.waits, 50)

    @property
    def p90(self) -> int | None:
        return percentile(self.waits, 90)

    @property
    def p50_text(self) -> str:
        return duration_text(self.p50)

    @property
    def p90_text(self) -> str:
        return duration_text(self.p90)

    def figures(self) -> dict:
        return {
            "decisions": self.decisions,
            "approved": self.approved,
            "denied": self.denied,
            "p50Seconds": self.p50,
            "p90Seconds": self.p90,
        }


@dataclass
class Summary:
    days: int
    since: datetime
    agents: list[Tally]
    people: list[Tally]


def start_of(days: int, now: datetime | None = None) -> datetime:
    """The first moment of the range of `days` UTC days that ends today."""
    today = (now or timezone.now()).astimezone(UTC).date()
    return datetime.combine(today - timedelta(days=days - 1), time(), tzinfo=UTC)


def summary(user, days: int) -> Summary:
    """The figures of the rows `user` may read over `days` UTC days ending today. Two
    queries (the rows, the escalations) and one for the names of agents still here."""
    since = start_of(days)
    agents: dict[int, Tally] = {}
    people: dict[int, Tally] = {}
    columns = ("agent_pk", "agent_name", "by_pk", "by", "decision", "via", "at", "opened_at")
    rows = decision_record.visible(user).filter(at__gte=since).order_by("at", "id")
    for agent_pk, agent_name, by_pk, by, made, via, at, opened_at in rows.values_list(*columns):
        agent = agents.setdefault(agent_pk, Tally(agent_pk, agent_name))
        agent.name = agent_name  # the newest row's name
        if via == Via.EXPIRY:
            agent.expiries += 1
            continue
        counted = [agent]
        if by_pk is not None:
            person = people.setdefault(by_pk, Tally(by_pk, by))
            person.name = by
            counted.append(person)
        wait = max(int((at - opened_at).total_seconds()), 0)
        for tally in counted:
            tally.decisions += 1
            tally.approved += made in APPROVED
            tally.denied += made in DENIED
            if by_pk is not None and made not in NOT_TIMED:
                tally.waits.append(wait)
    _escalations(user, since, agents)
    for agent in Agent.objects.visible_to(user).filter(pk__in=agents).only("name"):
        agents[agent.pk].name, agents[agent.pk].linked = agent.name, True
    return Summary(days, since, _ordered(agents), _ordered(people))


def _escalations(user, since: datetime, agents: dict[int, Tally]) -> None:
    escalated = (
        Notification.objects.filter(
            kind=Notification.Kind.ESCALATED,
            state=Notification.State.SENT,
            sent_at__gte=since,
            interaction__task__session__agent__in=Agent.objects.visible_to(user),
        )
        .values_list(
            "interaction__task__session__agent_id",
            "interaction__task__session__agent__name",
            "interaction_id",
            "round",
        )
        .order_by()
        .distinct()
    )
    for agent_pk, name, _interaction, _round in escalated:
        agents.setdefault(agent_pk, Tally(agent_pk, name)).escalations += 1


def _ordered(tallies: dict[int, Tally]) -> list[Tally]:
    """Busiest first, then by name."""
    found = [t.close() for t in tallies.values()]
    return sorted(found, key=lambda t: (-(t.decisions + t.expiries), t.name.casefold(), t.id))


def report(user, days: int) -> dict:
    """`/api/decisions/summary`'s answer (a contract: scripts depend on these names)."""
    found = summary(user, days)
    return {
        "days": found.days,
        "since": decision_record.when(found.since),
        "byAgent": [
            {
                "agent": {"id": t.id, "name": t.name},
                **t.figures(),
                "escalations": t.escalations,
                "expiries": t.expiries,
            }
            for t in found.agents
        ],
        "byPerson": [{"by": t.name, **t.figures()} for t in found.people],
    }


def panel(user, days: int) -> Summary:
    """The monitoring screen's "Decisions" table, over the days its usage panel shows."""
    return summary(user, min(max(days, MIN_DAYS), MAX_DAYS))
