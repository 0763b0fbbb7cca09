"""What the sender may send now, in what order, and claiming it.

A row is claimed before it is sent: in a short transaction, a due pending row that no other
sender holds (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite's one writer at a time
elsewhere) is leased to this sender (`claimed_until`, LEASE from now) and the lease
committed; sender.py sends it after, outside any transaction, and records the outcome on
the row as claimed.

Per channel and per interaction round, in order:
- an opening still pending when its resolution is already queued is skipped (nobody needs
  "needs approval" for what is answered), and so is that resolution;
- a resolution waits until its opening (on an escalation channel: its escalation) was
  sent, and is skipped if that was skipped or given up on;
- a reminder is sent only while the interaction is still open in that round and not
  expired (an expired question stops reminding), and after its opening was sent, and only
  the latest one due (a sender that was down for hours sends one reminder, not three at
  once); a reminder that fell due before its opening went out is skipped (the opening said
  how long it has waited);
- an escalation is sent only while the interaction is still open in that round and not
  expired: a question answered (or expired) before its escalation fell due escalates to no
  one.

A channel whose failed row waits for its retry has nothing due until then: what was queued
for it since waits as long (its rows go in order).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from tasks.models import Interaction
from tasks.models.notify import Notification
from tasks.notify import shares
from tasks.runtime.writer import writing

Kind = Notification.Kind
State = Notification.State

# A claimed row is this sender's until then: far longer than one send can take
# (sending.TIMEOUT).
LEASE = timedelta(seconds=60)


@dataclass
class Claimed:
    notification: Notification
    until: datetime


def unclaimed(now: datetime) -> Q:
    return Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)


def _due(now: datetime):
    return Notification.objects.filter(
        unclaimed(now), state=State.PENDING, next_attempt_at__lte=now, channel__enabled=True
    )


def due_channels(now: datetime | None = None) -> list[shares.Due]:
    """The enabled channels with something due now, with their teams, but for those waiting
    for a retry (see `_backing_off`): a channel that is down costs no worker until its retry
    is due."""
    now = now or timezone.now()
    retrying = Notification.objects.filter(
        state=State.PENDING, attempts__gt=0, next_attempt_at__gt=now
    ).values("channel_id")
    due = _due(now).exclude(channel_id__in=retrying)
    found = set(due.values_list("channel_id", "channel__team_id"))
    return [shares.Due(channel, team) for channel, team in sorted(found)]


def claim_next(channel_id: int, now: datetime, passed: set[int]) -> Claimed | None:
    """The next row of the channel to send, leased to this sender; rows that are not worth
    sending any more are marked skipped on the way. One row per transaction, and a row
    locked by another sender is passed over, never waited for: two senders never wait on
    each other's locks, so never deadlock."""
    postgresql = connection.vendor == "postgresql"
    while True:
        with writing(), transaction.atomic():
            if _backing_off(channel_id, now):
                return None
            due = _due(now).filter(channel_id=channel_id).exclude(pk__in=passed)
            due = due.order_by("due_at", "pk")
            if postgresql:
                due = due.select_for_update(skip_locked=True, of=("self",))
            row = due.select_related("channel").first()
            if row is None:
                return None
            verdict = _verdict(row, now)
            if verdict == "skip":
                if not _skip(row, now):
                    passed.add(row.pk)  # another sender took it meanwhile
                continue
            if verdict == "wait":
                passed.add(row.pk)
                continue
            until = now + LEASE
            # Conditional on the lease as read: of two senders that read it, one wins.
            claimed = Notification.objects.filter(
                pk=row.pk, state=State.PENDING, claimed_until=row.claimed_until
            ).update(claimed_until=until)
            if not claimed:
                passed.add(row.pk)
                continue
            row.claimed_until = until
            return Claimed(row, until)


def _backing_off(channel_id: int, now: datetime) -> bool:
    """Whether the channel waits for the retry of a row that failed: then what was queued
    for it since waits as long (its rows go in order), rather than each new event trying a
    channel that is down as soon as it is queued."""
    retry_at = (
        Notification.objects.filter(
            channel_id=channel_id, state=State.PENDING, attempts__gt=0, next_attempt_at__gt=now
        )
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
    if retry_at is None:
        return False
    Notification.objects.filter(
        unclaimed(now), channel_id=channel_id, state=State.PENDING, next_attempt_at__lt=retry_at
    ).update(next_attempt_at=retry_at)
    return True


def _skip(row: Notification, now: datetime) -> bool:
    return bool(
        Notification.objects.filter(unclaimed(now), pk=row.pk, state=State.PENDING).update(
            state=State.SKIPPED, claimed_until=None
        )
    )


def _event(row: Notification, kind: str):
    return Notification.objects.filter(
        channel_id=row.channel_id, interaction_id=row.interaction_id, round=row.round, kind=kind
    )


def _still_waiting(row: Notification) -> bool:
    """Whether the row's interaction is still open in the row's round, and not expired."""
    return Interaction.objects.filter(
        pk=row.interaction_id,
        state=Interaction.State.OPEN,
        round=row.round,
        expired_at__isnull=True,
    ).exists()


def _verdict(row: Notification, now: datetime) -> str:
    """send, skip or wait (see the module's docstring)."""
    if row.kind == Kind.OPENED:
        return "skip" if _event(row, Kind.RESOLVED).exists() else "send"
    if row.kind == Kind.ESCALATED:
        return "send" if _still_waiting(row) else "skip"
    # What the channel heard begin: the opening, or on an escalation channel the escalation.
    opening = _event(row, Kind.OPENED).first() or _event(row, Kind.ESCALATED).first()
    if opening is None:
        return "skip"
    if row.kind == Kind.RESOLVED:
        if opening.state == State.SENT:
            return "send"
        if opening.state != State.PENDING:
            return "skip"
        # Its opening never went out: skip both, unless another sender is sending it now
        # (then this waits, to follow it). The opening's lock is only tried, never waited
        # for.
        if opening.claimed_until is not None and opening.claimed_until > now:
            return "wait"
        if connection.vendor == "postgresql":
            held = (
                Notification.objects.filter(pk=opening.pk)
                .select_for_update(skip_locked=True)
                .first()
            )
            if held is None:
                return "wait"
        return "skip" if _skip(opening, now) else "wait"
    # A reminder.
    if not _still_waiting(row):
        return "skip"
    if opening.state != State.SENT or (opening.sent_at and opening.sent_at >= row.due_at):
        return "skip"
    later = _event(row, Kind.REMINDER).filter(
        state=State.PENDING, reminder__gt=row.reminder, due_at__lte=now
    )
    return "skip" if later.exists() else "send"
