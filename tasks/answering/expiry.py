"""Expiry, declared per agent: a question still open `Agent.expire_after` after its round
opened expires, as the team declared (`Agent.on_expiry`). Never an automatic approval.

- "deny": an approval or a connection is denied on the team's behalf
  (answers.answer_for_team, via "expiry", the reason "No one answered within 4 h"), exactly
  as a person's deny is sent: one decision, claimed under the session lock, on the record
  with no person (`by` empty). A question (choices or free text) has no deny a policy could
  send without inventing an answer, so it is only marked expired, as with "leave".
- "leave": marked expired (`Interaction.expired_at`): on the record as "expired", in the
  timeline, "Expired" on the session page, card and inbox; reminders and escalations stop
  (notify/claims.py); nothing is sent, the agent keeps waiting and people may still answer.

Marking is one conditional UPDATE (`Interaction.objects.mark_expired`: still open, in the
round judged, not marked yet) under the session lock, so of several expirers (one per
server, or `manage.py expire_questions` beside them) exactly one marks a round, and only it
goes on to deny. A deny that does not reach the agent leaves the question open and marked
(on the record as "expired"): a policy tries once, and people may still answer.

When a round opened (`round_opened_at`): `opened_at` is the asking status's timestamp (the
agent's clock) and names the first round only, so the latest of it and what Onlooker's own
clock saw begin this round or end the one before (the task's latest change of state, an
earlier round's decision): an agent whose clock is behind never makes a question expire
early, and a question asked anew waits its full time again.

Run by a background thread in each server (`start`, with the notification sender:
`ONLOOKER_NOTIFIER=background`), or by `manage.py expire_questions` (`--once`).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from django.conf import settings
from django.db.models import DateTimeField, ExpressionWrapper, F, Max
from django.utils import timezone

from tasks.answering import answers, record
from tasks.answering.rules import AnswerError
from tasks.models import Decision, DecisionConfirmation, Interaction
from tasks.models.timeline import TimelineEntry
from tasks.runtime.loop import Loop
from tasks.sessions import timeline

log = logging.getLogger(__name__)

POLL_SECONDS = 15.0  # expiries are minutes to days: a look every few seconds is plenty
BATCH = 100  # questions one look expires at most; the next look takes the rest
DENY, LEAVE = "deny", "leave"
Made = Decision.Made


def due(now: datetime | None = None, *, limit: int = BATCH) -> list[Interaction]:
    """Open questions whose agent's expiry has passed since their round opened, oldest
    first (with their task, session and agent)."""
    now = now or timezone.now()
    deadline = ExpressionWrapper(
        F("opened_at") + F("task__session__agent__expire_after"), output_field=DateTimeField()
    )
    # No round opened before `opened_at`: these are all the candidates, refined below.
    candidates = (
        Interaction.objects.filter(
            state=Interaction.State.OPEN,
            expired_at__isnull=True,
            task__session__agent__expire_after__isnull=False,
        )
        .exclude(kind=Interaction.Kind.CHECK)
        .annotate(deadline=deadline)
        .filter(deadline__lte=now)
        .select_related("task__session__agent")
        .order_by("opened_at", "pk")
    )
    found: list[Interaction] = []
    for interaction in candidates.iterator(chunk_size=BATCH):
        agent = interaction.task.session.agent
        if round_opened_at(interaction) + agent.expire_after <= now:
            found.append(interaction)
            if len(found) >= limit:
                break
    return found


def round_opened_at(interaction: Interaction) -> datetime:
    """When the interaction's current round opened, as near as Onlooker can tell, never
    earlier than it could have: `opened_at` (the asking status's timestamp, the agent's
    clock, or when it was received), and no earlier than the task's latest change of state
    as Onlooker received it (its clock: an agent whose clock is behind cannot make a
    question expire early). A later round no earlier than a decision made or confirmed on an
    earlier one, either: the model keeps no time per round."""
    times = [
        interaction.opened_at,
        TimelineEntry.objects.filter(
            task_id=interaction.task_id, kind=TimelineEntry.Kind.STATE
        ).aggregate(at=Max("at"))["at"],
    ]
    if interaction.round > 1:
        earlier = {"interaction_pk": interaction.pk, "round__lt": interaction.round}
        times += [
            Decision.objects.filter(**earlier).aggregate(at=Max("at"))["at"],
            DecisionConfirmation.objects.filter(**earlier).aggregate(at=Max("at"))["at"],
        ]
    return max(at for at in times if at is not None)


def expire(interaction: Interaction, *, now: datetime | None = None) -> str | None:
    """Expire one question of `due` as its agent declares: "denied", "marked", or None when
    another expirer, a person or the agent got there first (or the deny did not reach the
    agent: then it is "marked")."""
    now = now or timezone.now()
    agent = interaction.task.session.agent
    deny = agent.on_expiry == DENY and interaction.kind in answers.CHOICES
    with answers.changing(interaction):
        if not Interaction.objects.mark_expired(interaction, at=now):
            return None
        if not deny:
            _marked(interaction, now)
    if not deny:
        log.info("interaction %s expired (%s): marked", interaction.pk, agent.on_expiry)
        return "marked"
    decision = answers.Decision(approved=False, reason=agent.expiry_reason)
    try:
        answers.answer_for_team(interaction, decision, via="expiry", round_=interaction.round)
    except AnswerError as error:
        return _not_denied(interaction, error, now)
    log.info("interaction %s expired: denied on the team's behalf", interaction.pk)
    return "denied"


def _marked(interaction: Interaction, now: datetime) -> None:
    """On the record and the timeline: expired, nothing sent. Under the session lock."""
    reason = interaction.task.session.agent.expiry_reason
    record.decided(
        interaction, Made.EXPIRED, by=None, via="expiry", at=now, sent=False, reason=reason
    )
    timeline.expired(interaction, at=now)


def _not_denied(interaction: Interaction, error: AnswerError, now: datetime) -> str | None:
    """The deny was not confirmed. It may have reached the agent (bound to it, on the record
    already: "denied"); or nothing was sent: a person answered first, the agent asked anew or
    moved on (None), or the agent could not be reached, and the question stays open, marked
    expired, for people to answer ("marked")."""
    with answers.changing(interaction):
        current = answers.reread(interaction)
        same_round = current.round == interaction.round
        still_open = same_round and current.state == Interaction.State.OPEN
        if still_open:
            _marked(interaction, now)
    if still_open:
        log.warning("interaction %s expired; the deny was not sent: %s", interaction.pk, error)
        return "marked"
    if same_round and current.by_expiry and current.state in Interaction.PENDING:
        log.warning("interaction %s expired; the deny is not confirmed: %s", interaction.pk, error)
        return "denied"
    log.info("interaction %s expired, not denied: %s", interaction.pk, error)
    return None


def expire_due(now: datetime | None = None, *, stopping: threading.Event | None = None) -> int:
    """Expire what is due now (at most BATCH questions); how many were denied or marked."""
    done = 0
    for interaction in due(now):
        if stopping is not None and stopping.is_set():
            break
        if expire(interaction, now=now) is not None:
            done += 1
    return done


class Background(Loop):
    """This process's expirer: looks every `poll_seconds`. Several processes may run one:
    each round is expired once (see the module's docstring)."""

    name = "onlooker-expiry"

    def step(self) -> None:
        expire_due(stopping=self.stopped)


background = Background(POLL_SECONDS)


def start() -> None:
    """Start this process's expirer if the settings say timed work runs here (as the
    notification sender: the ASGI app calls this when it is loaded)."""
    if settings.ONLOOKER_NOTIFIER == "background":
        background.start()
