"""What people see of team channels: under each question on the session page and in the
monitoring screen's list, which channels were told and when ("Notified ops: Slack 10:02 ·
email: could not reach a@b.example (retrying)"), and on the settings page each of their
teams' channels with its last success and error.

Read only. The sender changes notification rows outside any change of a session, so none of
this is in a session's stored fragments (fragments.py): the lines are rendered per request,
in the parts of the pages that are rendered per request anyway (the session page's activity,
the monitoring screen's list), with one query for every question shown (`attach`). After the
sender commits a change of state, `hint_sent` tells the pages showing that session to
refetch those parts.

Nothing here shows a channel's secret: a webhook by scheme and host only (`shown_target`),
never its path, query or signing secret, and an error text with every URL in it cut the same
way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models.functions import Length
from django.utils import timezone

from tasks.live import broadcast
from tasks.models import Interaction
from tasks.models.notify import Notification, NotificationChannel

Kind = Notification.Kind
State = Notification.State

LABELS = {
    NotificationChannel.Kind.SLACK: "Slack",
    NotificationChannel.Kind.WEBHOOK: "webhook",
    NotificationChannel.Kind.EMAIL: "email",
}
ERROR_CHARS = 160


@dataclass(frozen=True)
class Told:
    """One channel's news of one question's current round."""

    label: str  # "Slack", "webhook", "email"
    target: str  # the channel's shown_target: nothing that would let someone post to it
    state: str  # "sent", "sending", "retrying", "failed" (gave up), "skipped"
    sent_at: datetime | None = None  # when the opening reached it
    reminders: int = 0  # reminders that reached it


@dataclass
class TeamTold:
    team: str
    channels: list[Told] = field(default_factory=list)


def _state(opening: Notification) -> str:
    if opening.state == State.SENT:
        return "sent"
    if opening.state == State.FAILED:
        return "failed"
    if opening.state == State.SKIPPED:
        return "skipped"
    # Pending: not tried yet (or being tried), or failed and to be tried again.
    return "retrying" if opening.error_length else "sending"


def notified_for(interactions: Iterable[Interaction]) -> dict[int, list[TeamTold]]:
    """For each interaction (by pk) whose current round some channel has an opening queued
    for: what each channel was told, grouped by team. One query for all of them; none for
    none. Interactions no channel heard of are left out."""
    rounds = {interaction.pk: interaction.round for interaction in interactions}
    if not rounds:
        return {}
    rows = (
        Notification.objects.filter(
            interaction_id__in=list(rounds), kind__in=[Kind.OPENED, Kind.REMINDER]
        )
        .select_related("channel__team")
        # The payload (a copy of the question) and the error text are not shown here: only
        # whether there is an error.
        .only(
            "interaction_id",
            "round",
            "kind",
            "state",
            "sent_at",
            "channel__kind",
            "channel__target",
            "channel__team__name",
        )
        .annotate(error_length=Length("last_error"))
        .order_by("channel__team__name", "channel_id", "kind", "reminder")
    )
    openings: dict[tuple[int, int], Notification] = {}
    reminders: dict[tuple[int, int], int] = {}
    for row in rows:
        if row.round != rounds[row.interaction_id]:
            continue  # an earlier asking: its answer was given already
        key = (row.interaction_id, row.channel_id)
        if row.kind == Kind.OPENED:
            openings[key] = row
        elif row.state == State.SENT:
            reminders[key] = reminders.get(key, 0) + 1
    found: dict[int, list[TeamTold]] = {}
    for (pk, channel_id), opening in openings.items():  # in team, channel order
        channel = opening.channel
        teams = found.setdefault(pk, [])
        if not teams or teams[-1].team != channel.team.name:
            teams.append(TeamTold(channel.team.name))
        teams[-1].channels.append(
            Told(
                label=LABELS.get(channel.kind, channel.kind),
                target=channel.shown_target,
                state=_state(opening),
                sent_at=opening.sent_at,
                reminders=reminders.get((pk, channel_id), 0),
            )
        )
    return found


def attach(interactions: Iterable[Interaction]) -> None:
    """Set `notified` (a list of TeamTold, empty when no channel heard of it) on each of the
    interactions, for the templates (tasks/_notified.html). One query for all of them."""
    interactions = list(interactions)
    found = notified_for(interactions)
    for interaction in interactions:
        interaction.notified = found.get(interaction.pk, [])


# -- live ------------------------------------------------------------------------------------


def hint_sent(session_id: int, team_id: int | None) -> None:
    """Tell the pages showing the session that what its channels were told changed (an
    opening or reminder sent, failing, given up): the session page refetches its activity and
    a monitoring screen listing the session refetches its list, each rendered with the lines
    again. For the sender to call AFTER the commit that changed the notification rows
    (`transaction.on_commit`), with the session's agent's team (None: an agent without one).

    Not a session's snapshot (nothing of the session changed): a hint of its own kind, which
    never takes the place of a snapshot waiting to be sent (broadcast.notice)."""
    now = timezone.now().isoformat()
    broadcast.notice(
        session_id,
        team_id,
        {"type": "notifications.changed", "session": session_id, "notified": now},
    )


def hint_interactions(interaction_ids: Iterable[int]) -> None:
    """`hint_sent` for the session of each of these interactions, once per session (one
    query finds them and their teams): what the sender calls after committing a batch, with
    the `interaction_id` of each notification whose state it changed."""
    ids = set(interaction_ids)
    if not ids:
        return
    sessions = (
        Interaction.objects.filter(pk__in=ids)
        .values_list("task__session_id", "task__session__agent__team_id")
        .distinct()
    )
    for session_id, team_id in sessions:
        hint_sent(session_id, team_id)


# -- the settings page -----------------------------------------------------------------------

_URL = re.compile(r"""\b([a-z][a-z0-9+.-]*)://([^\s/'"<>?#]+)[^\s'"<>]*""", re.IGNORECASE)
_SECRET = re.compile(r"whsec_[A-Za-z0-9+/=]+")


def shown_error(channel: NotificationChannel, text: str | None = None) -> str:
    """An error of the channel (`text`, or its last one), short and without secrets: its
    target's path and every other URL's cut to scheme and host, signing secrets taken out."""
    text = channel.last_error if text is None else text
    if not text:
        return ""
    if channel.target and channel.kind != NotificationChannel.Kind.EMAIL:
        text = text.replace(channel.target, channel.shown_target)
    text = _URL.sub(lambda m: f"{m.group(1)}://{m.group(2).rsplit('@', 1)[-1]}/…", text)
    text = _SECRET.sub("whsec_…", text)
    text = " ".join(text.split())
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def without_secrets(channel: NotificationChannel, text: str) -> str:
    """The text with the channel's URL cut to scheme and host, and signing secrets taken out,
    but other URLs and its length kept: for the admin, who may read a receiver's words."""
    if channel.target and channel.kind != NotificationChannel.Kind.EMAIL:
        text = text.replace(channel.target, channel.shown_target)
    return _SECRET.sub("whsec_…", text)


def channels_for_user(user) -> list[NotificationChannel]:
    """The channels of the person's teams (a superuser's: every team's), by team, each with
    `label` (Slack, webhook, email), `shown_interval` (its reminders') and
    `shown_last_error` (`shown_error`). One query."""
    if not user.is_authenticated:
        return []
    channels = NotificationChannel.objects.select_related("team").defer(
        "signing_secret", "last_error_detail"
    )
    if not user.is_superuser:
        channels = channels.filter(team__user=user)
    found = list(channels.order_by("team__name", "pk"))
    for channel in found:
        channel.label = LABELS.get(channel.kind, channel.kind)
        channel.shown_last_error = shown_error(channel)
        channel.shown_interval = interval_words(channel.remind_after)
    return found


def interval_words(interval: timedelta | None) -> str:
    """A reminder interval as people write it: "15 min", "1 h 30 min", "2 d"."""
    if interval is None:
        return ""
    seconds, words = int(interval.total_seconds()), []
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        if seconds >= size:
            words.append(f"{seconds // size} {unit}")
            seconds %= size
    return " ".join(words) or "0 s"
