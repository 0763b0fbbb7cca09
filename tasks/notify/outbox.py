"""The only writer of new notifications: called inside the transaction of the change they
report (the applier opens and closes interactions, answers records decisions), so a change and
its notifications commit or roll back together, and a change applied twice queues nothing
twice (one row per event per channel).

An opening queues, per channel of the session's team, the opening and (when the channel
reminds) its reminders, each due one interval later; the sender drops a reminder whose
interaction is no longer open in that round, or has expired. An escalation channel
(`escalate_after`) hears of none of that: it gets one escalation per round, due that long
after the round opened, which the sender drops unless the interaction is still open in that
round (and not expired) when it comes due. A resolution is queued only where the opening was
queued, or the escalation may have gone out: a channel hears the end of what it heard begin
(the sender drops a resolution whose escalation was not sent).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Q
from django.urls import reverse

from tasks.models import Agent, Interaction, Session
from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import answer_links

Kind = Notification.Kind

# Far more than any channel shows (formats.py cuts a prompt to 300 characters and a detail to
# 10 lines), far less than a push may hold.
PAYLOAD_PROMPT_CHARS = 4_000
PAYLOAD_DETAIL_CHARS = 20_000


def channels_for(agent: Agent) -> list[NotificationChannel]:
    """The channels of the teams that see the agent's sessions: its team's, or every team's
    for an agent without a team (everyone sees those)."""
    channels = NotificationChannel.objects.filter(enabled=True)
    if agent.team_id is not None:
        channels = channels.filter(team_id=agent.team_id)
    return list(channels)


def session_url(session_id: int) -> str:
    return settings.ONLOOKER_PUBLIC_URL.rstrip("/") + reverse("session", args=(session_id,))


def _payload(interaction: Interaction, session: Session, agent: Agent) -> dict:
    # Times go in as datetimes and are stored as ISO 8601 text (the field's encoder), as the
    # API and the webhooks show them.
    return {
        "interaction": _bounded(interaction.as_json()),
        "openedAt": interaction.opened_at,
        "session": {
            "id": session.pk,
            "url": session_url(session.pk),
            "title": session.title,
            "agent": {"id": agent.pk, "name": agent.name},
        },
    }


def _bounded(shown: dict) -> dict:
    """The interaction as an event carries it: a push may hold a 1 MB prompt or detail, and
    an event is kept once per channel and reminder, inside the apply's transaction. A longer
    prompt is cut (ending in "…"), a larger detail left out (`detailOmitted`); the whole
    stays on the session page and in /api/sessions/<id>."""
    prompt = shown["prompt"]
    if len(prompt) > PAYLOAD_PROMPT_CHARS:
        shown["prompt"] = prompt[: PAYLOAD_PROMPT_CHARS - 1] + "…"
    if len(json.dumps(shown["detail"], cls=DjangoJSONEncoder)) > PAYLOAD_DETAIL_CHARS:
        shown["detail"] = None
        shown["detailOmitted"] = True
    return shown


def opened(interaction: Interaction, session: Session, agent: Agent, *, at: datetime) -> int:
    """The interaction opened (or was asked anew: `interaction.round` is the new round).
    How many notifications it queued."""
    channels = channels_for(agent)
    if not channels:
        return 0
    # As stored now: a reopen moved the round and dropped the decision in the database only.
    interaction = Interaction.objects.select_related("task", "answered_by").get(pk=interaction.pk)
    payload = _payload(interaction, session, agent)
    payload["actions"] = answer_links.actions(interaction)
    rows = []
    for channel in channels:
        event = (channel.pk, interaction.pk, interaction.round)
        if channel.escalate_after:
            due = at + channel.escalate_after
            rows.append(_row(*event, Kind.ESCALATED, payload, at=at, due=due))
            continue
        rows.append(_row(*event, Kind.OPENED, payload, at=at, due=at))
        if channel.remind_after:
            for n in range(1, NotificationChannel.MAX_REMINDERS + 1):
                due = at + channel.remind_after * n
                rows.append(_row(*event, Kind.REMINDER, payload, at=at, due=due, n=n))
    _queue(rows)
    return len(rows)


def resolved(closed: Iterable[tuple[int, int]], *, at: datetime) -> int:
    """These (interaction pk, round) were answered, closed by the agent or dismissed: each
    channel that was told of their opening is told how they ended. How many it queued."""
    rounds = dict(closed)
    if not rounds:
        return 0
    told = _told(rounds, at)
    if not told:
        return 0
    interactions = Interaction.objects.select_related(
        "task__session__agent", "answered_by", "dismissed_by"
    ).in_bulk([pk for pk, _, _ in told])
    rows = []
    for pk, round_, channel_id in told:
        interaction = interactions[pk]
        session = interaction.task.session
        payload = _payload(interaction, session, session.agent)
        payload["resolution"] = resolution(interaction)
        rows.append(_row(channel_id, pk, round_, Kind.RESOLVED, payload, at=at, due=at))
    _queue(rows)
    return len(rows)


def _told(rounds: dict[int, int], at: datetime) -> list[tuple[int, int, int]]:
    """(interaction pk, round, channel) of each channel that heard these rounds begin, or may
    be hearing it now: an opening queued, or an escalation sent or due (a sender may be
    sending it this moment; claims.py waits for it, and drops the resolution unless it went
    out). An escalation not due yet never goes out: the sender drops it, as the round is
    over by then."""
    heard = Q(kind=Kind.OPENED) | Q(
        Q(state=Notification.State.SENT) | Q(state=Notification.State.PENDING, due_at__lte=at),
        kind=Kind.ESCALATED,
    )
    told = Notification.objects.filter(heard, interaction_id__in=list(rounds)).values_list(
        "interaction_id", "round", "channel_id"
    )
    return [(pk, r, channel) for pk, r, channel in told if rounds[pk] == r]


def resolution(interaction: Interaction) -> dict:
    """How it ended, for people: who decided what, or that the agent or a person closed it."""
    State = Interaction.State
    by = interaction.answered_by.get_username() if interaction.answered_by else None
    if interaction.state == State.DISMISSED:
        who = interaction.dismissed_by.get_username() if interaction.dismissed_by else None
        return {"state": "dismissed", "by": who, "text": f"Dismissed by {who or 'someone'}."}
    if interaction.by_expiry:
        # The team's declared expiry policy denied it: no person did.
        answered = interaction.state == State.ANSWERED
        what = "denied" if answered else "a deny was sent"
        return {
            "state": "answered" if answered else "closed",
            "by": None,
            "text": f"Expired: {interaction.expiry_words}; {what} on the team's behalf.",
        }
    if interaction.state == State.ANSWERED:
        return {
            "state": "answered",
            "by": by,
            "text": f"Answered by {by or 'someone'}: {interaction.decision_name}.",
        }
    if interaction.answer is not None:
        # Closed by the agent after a decision was sent: it went on with it, or without.
        return {
            "state": "closed",
            "by": by,
            "text": f"{by or 'Someone'} sent {interaction.decision_name}; the agent moved on.",
        }
    return {"state": "closed", "by": None, "text": "Closed: the agent moved on without an answer."}


def _row(
    channel_id: int,
    interaction_id: int,
    round_: int,
    kind: str,
    payload: dict,
    *,
    at: datetime,
    due: datetime,
    n: int = 0,
) -> Notification:
    return Notification(
        channel_id=channel_id,
        interaction_id=interaction_id,
        round=round_,
        kind=kind,
        reminder=n,
        payload=payload,
        created_at=at,
        due_at=due,
        next_attempt_at=due,
    )


def _queue(rows: list[Notification]) -> None:
    Notification.objects.bulk_create(rows, ignore_conflicts=True)
    # This process's sender looks at once after the commit, rather than at its next poll.
    transaction.on_commit(_wake)


def _wake() -> None:
    from tasks.notify import sender  # the sender imports the applier, which imports this

    sender.wake()
