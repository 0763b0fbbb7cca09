"""What agents wait for (approvals, questions, connections) and the one decision Onlooker
sends each: `Interaction`, and the transitions of its state in `Interaction.objects`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.formats import time_format

from tasks.models.tasks import Task
from tasks.wire.stored_json import StoredJSONDecoder


class InteractionQuerySet(models.QuerySet):
    """The transitions of an interaction (see `Interaction`), the only writes of its state.

    Each is one conditional UPDATE whose WHERE names the states it leaves and the round it
    belongs to, and returns whether it changed anything: a writer that read an older round,
    or a state another writer has since left, changes nothing and is told so. Callers hold
    the session's row lock (one lock order everywhere); the WHERE is what still holds where
    that lock is not enforced (SQLite) and against a caller that read before taking it."""

    def _row(self, interaction: Interaction, *states: str) -> InteractionQuerySet:
        return self.filter(pk=interaction.pk, round=interaction.round, state__in=states)

    def open(
        self,
        task: Task,
        interaction_id: str,
        *,
        kind: str,
        prompt: str,
        detail: object,
        at: datetime,
        asked_at: datetime | None,
        asked_message_id: str,
        current: bool,
    ) -> tuple[Interaction, bool]:
        """The interaction a status asks, created if new: open when the status is current,
        closed when it is history (the agent asked it once and has moved on since). An
        existing one is returned as it is: whether it is asked anew is `reopen`'s."""
        State = Interaction.State
        return self.get_or_create(
            task=task,
            interaction_id=interaction_id,
            defaults={
                "kind": kind,
                "prompt": prompt,
                "detail": detail,
                "opened_at": at,
                "state": State.OPEN if current else State.CLOSED,
                "asked_at": asked_at,
                "asked_message_id": asked_message_id,
            },
        )

    def reopen(
        self, interaction: Interaction, *, asked_at: datetime | None, asked_message_id: str
    ) -> bool:
        """The agent asks it anew (the applier decides that a status does): a new round, open and
        free of the last round's decision, so the new answer is a new message. One still
        open keeps its round and only remembers the latest asking. True for a new round."""
        asking = {"asked_at": asked_at, "asked_message_id": asked_message_id}
        State = Interaction.State
        if interaction.state == State.OPEN:
            self._row(interaction, State.OPEN).update(**asking)
            return False
        reopenable = [state for state in State.values if state != State.OPEN]
        return bool(
            self._row(interaction, *reopenable).update(
                **asking,
                state=State.OPEN,
                round=F("round") + 1,
                answer=None,
                answered_by=None,
                answered_at=None,
                reason="",
                last_error="",
                answered_via="",
                expired_at=None,
            )
        )

    def close(self, *, keep: Interaction | None = None) -> list[tuple[int, int]]:
        """The agent moved on from these (all pending but `keep`): closed, keeping any
        decision sent to them; a call still in flight records its confirmation over this.
        The (pk, round) of each one it closed, for the notifications that say so. A check
        is no question the agent waits on: it stays open until a person marks it checked."""
        pending = self.filter(state__in=Interaction.PENDING).exclude(kind=Interaction.Kind.CHECK)
        if keep is not None:
            pending = pending.exclude(pk=keep.pk)
        closing = list(pending.values_list("pk", "round"))
        if closing:
            # The caller holds the session's lock: nothing else moves these in between.
            self.filter(pk__in=[pk for pk, _ in closing], state__in=Interaction.PENDING).update(
                state=Interaction.State.CLOSED
            )
        return closing

    def claim(
        self,
        interaction: Interaction,
        *,
        by: Any,
        answer: dict,
        reason: str,
        at: datetime,
        via: str = "page",
    ) -> bool:
        """A person's decision, taken before the agent is called: open → answering, bound
        to `answer` from now on. True for the one caller that won."""
        claimed = self._row(interaction, Interaction.State.OPEN).update(
            state=Interaction.State.ANSWERING,
            answered_by=by,
            answered_at=at,  # when the claim was made, then when it was sent
            answer=answer,
            reason=reason,
            answered_via=via,
        )
        return bool(claimed)

    def reclaim(self, interaction: Interaction, *, at: datetime) -> bool:
        """The bound decision sent again: sent and not confirmed, or claimed by a process
        that died mid-call (a claim older than STALE_CLAIM) → answering. The caller checks
        that the decision is the bound one. True for the one caller that won."""
        State = Interaction.State
        stale = Q(state=State.ANSWERING, answered_at__lt=at - Interaction.STALE_CLAIM)
        retried = self._row(interaction, State.SENT, State.ANSWERING).filter(
            Q(state=State.SENT) | stale
        )
        return bool(retried.update(state=State.ANSWERING, answered_at=at))

    def _claimed(self, claim: Interaction, *states: str) -> InteractionQuerySet:
        # A claim is its round and the time it was made: a retry after a stale claim is a
        # claim of its own, which the stale one's late outcome must not undo.
        return self._row(claim, *states).filter(answered_at=claim.answered_at)

    def release(self, claim: Interaction, *, error: str, forgotten: bool = False) -> bool:
        """Nothing of `claim` (the interaction as claimed) reached the agent: answering →
        open, for any decision. One the agent closed meanwhile stays closed, without the
        decision that never left. `forgotten`: the agent said it does not know the task,
        which marks the round (people are offered "Dismiss"). True when it is open again."""
        State = Interaction.State
        undecided = {
            "answered_by": None,
            "answered_at": None,
            "answer": None,
            "reason": "",
            "answered_via": "",
        }
        mark = {"forgotten_round": claim.round} if forgotten else {}
        if self._claimed(claim, State.ANSWERING).update(
            **undecided, state=State.OPEN, last_error=error[:2_000], **mark
        ):
            return True
        self._claimed(claim, State.CLOSED).update(**undecided)
        return False

    def record_sent(self, claim: Interaction, *, error: str, forgotten: bool = False) -> bool:
        """The call may have reached the agent, which did not confirm it: answering → sent,
        still bound to the decision. True if it was `claim`'s to record."""
        mark = {"forgotten_round": claim.round} if forgotten else {}
        sent = self._claimed(claim, Interaction.State.ANSWERING).update(
            state=Interaction.State.SENT, last_error=error[:2_000], **mark
        )
        return bool(sent)

    def record_answered(self, claim: Interaction, *, at: datetime) -> bool:
        """The agent took the decision: answering → answered. Also when its next status
        closed the question meanwhile (a push can overtake the reply). Any attempt's
        confirmation counts: every attempt of a round sends the same message."""
        State = Interaction.State
        answered = self._row(claim, State.ANSWERING, State.CLOSED).update(
            state=State.ANSWERED, answered_at=at, last_error=""
        )
        return bool(answered)

    def mark_checked(
        self, interaction: Interaction, *, by: Any, at: datetime, via: str = "page"
    ) -> bool:
        """A person looked and marked an uncertain effect checked: open → answered, for a
        check only. Nothing goes to the agent. True when this call marked it. (Not `check`:
        a manager's `check` is Django's system check, and the manager would keep that one.)"""
        checked = self._row(interaction, Interaction.State.OPEN).filter(kind=Interaction.Kind.CHECK)
        return bool(
            checked.update(
                state=Interaction.State.ANSWERED, answered_by=by, answered_at=at, answered_via=via
            )
        )

    def dismiss(
        self, interaction: Interaction, *, by: Any, at: datetime, forgotten_round: int | None
    ) -> bool:
        """A person closed it, as no answer can reach the agent: open or sent → dismissed.
        `forgotten_round`: the round the agent said it does not know the task, or None when
        its task went on without it. True when this call dismissed it."""
        dismissed = self._row(interaction, *Interaction.DISMISSABLE).update(
            state=Interaction.State.DISMISSED,
            dismissed_by=by,
            dismissed_at=at,
            forgotten_round=forgotten_round,
        )
        return bool(dismissed)

    def mark_expired(self, interaction: Interaction, *, at: datetime) -> bool:
        """The agent's declared expiry passed with it still open in this round (answering/
        expiry.py): marked expired, still open (people may still answer; reminders stop).
        Once a round: True for the one caller that marked it."""
        marked = self._row(interaction, Interaction.State.OPEN).filter(expired_at__isnull=True)
        return bool(marked.update(expired_at=at))


class Interaction(models.Model):
    """One thing an agent waits for, and the one decision Onlooker sends it.

    Its state changes only through the transitions of `Interaction.objects`, each a
    conditional UPDATE guarded by the states it leaves and by its round, so a late writer
    never touches a newer round. pushes/apply/, the agent's side, makes these:
      open     the agent asks it: created open (closed, if the asking status is history);
      reopen   the agent asks it anew, after any state but open: a new round, open again,
               free of the last round's decision;
      close    the agent moved on: open, answering or sent → closed, keeping any decision.
    answering/answers.py and dismissals.py, people's side, the rest:
      claim    a decision, before the call: open → answering, bound to it from now on;
      reclaim  the bound decision sent again: sent, or a stale claim (a dead process) →
               answering;
      release  nothing reached the agent: answering → open, the decision dropped;
      record_answered  the agent took it: answering → answered (closed → answered too: its
               next status can overtake the reply);
      record_sent      it may have reached the agent, unconfirmed: answering → sent;
      dismiss  a person closed it, as no answer can reach the agent: open or sent →
               dismissed;
      mark_checked  a person marked an uncertain effect checked (kind check only): open →
               answered. The applier opens checks (open) and never closes or reopens one;
      mark_expired  the agent's declared expiry passed (answering/expiry.py): stays open,
               `expired_at` set, once a round (a new round clears it). A deny on expiry is
               then a claim like a person's, with no one as `answered_by`.
    From the claim on, the interaction is bound to its decision until the agent's next
    status closes it or really asks it again. Only a task that waits (its state input or
    auth required) has pending interactions: every current status that does not ask closes
    them, and only a status that asks opens one. Checks aside: an uncertain effect opens one
    whatever the state, and only a person ends it."""

    class Kind(models.TextChoices):
        APPROVAL = "approval"
        QUESTION = "question"
        CONNECTION = "connection"
        TEXT = "text", "plain-text question"
        # An effect the agent cannot tell happened (effects/v1 `uncertain`: a payment, an
        # upload): a person checks it and marks it checked. Nothing is sent to the agent, and
        # the agent's next status does not close it.
        CHECK = "check"

    class State(models.TextChoices):
        OPEN = "open"
        # A person's decision, kept on the server a few seconds before it is sent so Undo
        # can withdraw it (answer, reason, answered_by/via hold it; `held_until` says when).
        HELD = "held", "held for undo"
        ANSWERING = "answering"
        SENT = "sent", "sent, not confirmed"
        ANSWERED = "answered"
        CLOSED = "closed", "closed by the agent"
        # A person closed it: the agent no longer knew its task (it restarted, or the task
        # ended without Onlooker hearing), so no answer could ever reach it.
        DISMISSED = "dismissed", "dismissed by a person"

    # A claim older than this belongs to a process that died mid-call: its decision may have
    # reached the agent, so it binds like a sent one. Far longer than any call can take
    # (answering/a2a_client's timeouts are seconds).
    STALE_CLAIM = timedelta(minutes=2)
    # What the agent waits on, or Onlooker may have told it: its next status settles these.
    PENDING = (State.OPEN, State.ANSWERING, State.SENT)
    # What the pages list as waiting for a person: a held decision too, with its Undo.
    LISTED = (State.OPEN, State.HELD, State.ANSWERING, State.SENT)
    # What a person may dismiss: nothing is in flight, and nothing was confirmed.
    DISMISSABLE = (State.OPEN, State.SENT)

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="interactions")
    # An agent's id (≤ 200), or "text:" + the message id for a core agent's question.
    interaction_id = models.CharField(max_length=220)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    prompt = models.TextField(blank=True)
    detail = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.OPEN)
    opened_at = models.DateTimeField()
    # The status that last asked it: only a later one (or, from an agent that sends no
    # timestamps, another message) asks again. Each asking is a round with its own answer.
    asked_at = models.DateTimeField(null=True, blank=True, help_text="agent's timestamp")
    asked_message_id = models.CharField(max_length=200, blank=True)
    round = models.PositiveIntegerField(default=1)
    answer = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    reason = models.TextField(blank=True, help_text="the note sent beside the answer")
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # When the claim was made, then when it was sent (or confirmed).
    answered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # The round in which the agent answered "task not found": a later round (the agent asked
    # again, so it knows the task after all) is not marked by it.
    forgotten_round = models.PositiveIntegerField(null=True, blank=True)
    # Kept apart from answered_by/at: a decision sent before the agent forgot stays on record.
    dismissed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="dismissed_interactions",
    )
    dismissed_at = models.DateTimeField(null=True, blank=True)
    # How the decision was made: page, slack, link, expiry or api (answering/record.py).
    answered_via = models.CharField(max_length=10, blank=True)
    # The agent's declared expiry passed with it still open (answering/expiry.py): denied on
    # the team's behalf, or only marked, the agent still waiting. Cleared by a new round.
    expired_at = models.DateTimeField(null=True, blank=True)
    # While HELD: when the held decision is sent unless withdrawn.
    held_until = models.DateTimeField(null=True, blank=True)

    objects = InteractionQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "interaction_id"], name="unique_interaction")
        ]
        # Give it to a group ("approvers"); seeing a session is not enough to answer it.
        permissions = [("answer_interaction", "Can answer what agents wait for")]

    def __str__(self) -> str:
        return f"{self.kind} {self.interaction_id} ({self.state})"

    def as_json(self) -> dict:
        """As `/api/sessions/<id>` and the notification webhooks show it (`task` and
        `answered_by` loaded)."""
        return {
            "interactionId": self.interaction_id,
            "taskId": self.task.task_id,
            "kind": self.kind,
            "prompt": self.prompt,
            "detail": self.detail,  # as the agent sent it (interactions/v1), null when none
            "state": self.state,
            # The decision sent (or being sent), who made it and when; null before one.
            "answer": self.answer,
            "reason": self.reason or None,
            "answeredBy": self.answered_by.get_username() if self.answered_by else None,
            "answeredAt": self.answered_at,
        }

    @property
    def forgotten(self) -> bool:
        """The agent said it no longer knows this task, and nothing has happened since:
        people who may answer are offered "Dismiss"."""
        return (
            self.state in (self.State.OPEN, self.State.SENT)
            and self.forgotten_round is not None
            and self.forgotten_round == self.round
        )

    @property
    def dismissal(self) -> str:
        """'Dismissed by alice, 10:05: the agent no longer knew this task'."""
        who = self.dismissed_by.get_username() if self.dismissed_by else "someone"
        at = self.dismissed_at
        when = time_format(timezone.localtime(at), "H:i") if at else ""
        return f"Dismissed by {who}, {when}: {self.dismissed_because}"

    @property
    def dismissed_because(self) -> str:
        # A dismissal marks the round when the agent said it did not know the task; one
        # made because the agent's task had gone on without it clears the mark.
        if self.forgotten_round is not None and self.forgotten_round == self.round:
            return "the agent no longer knew this task"
        return "the agent no longer waited for it"

    @property
    def unconfirmed(self) -> bool:
        """Its decision may have reached the agent, which has not confirmed it: only that
        decision may be sent (again)."""
        if self.state == self.State.SENT:
            return True
        return (
            self.state == self.State.ANSWERING
            and self.answered_at is not None
            and self.answered_at < timezone.now() - self.STALE_CLAIM
        )

    @property
    def decision_name(self) -> str:
        """The stored decision in a person's words: "Approve", "Deny", "I've connected",
        "Cancel", "Checked", or the answer quoted briefly."""
        if self.kind == self.Kind.CHECK:
            return "Checked"
        answer = self.answer or {}
        approved = answer.get("approved")
        if approved is None:
            value = str(answer.get("value", ""))
            return f"the answer “{value if len(value) <= 40 else value[:39] + '…'}”"
        if self.kind == self.Kind.CONNECTION:
            return "I've connected" if approved else "Cancel"
        return "Approve" if approved else "Deny"

    @property
    def sent_form(self) -> tuple[str, str]:
        """The form field and value that post the stored decision again (the retry)."""
        approved = (self.answer or {}).get("approved")
        if approved is None:
            return "choice", str((self.answer or {}).get("value", ""))
        names = (
            {True: "connected", False: "cancel"}
            if self.kind == self.Kind.CONNECTION
            else {
                True: "approve",
                False: "deny",
            }
        )
        return "decision", names[approved]

    @property
    def by_expiry(self) -> bool:
        """Its decision is the team's declared expiry policy's (a deny), no person's."""
        return self.answered_via == "expiry" and self.answered_by_id is None

    @property
    def expiry_words(self) -> str:
        """Why it expired: 'no one answered within 4 h'. A deny sent it as its reason; a
        question only marked expired says its agent's expiry as it is now."""
        reason = self.reason if self.by_expiry and self.reason else ""
        if not reason:
            reason = self.task.agent.expiry_reason
        return reason[:1].lower() + reason[1:]

    @property
    def sent(self) -> str:
        """'Approve was sent at 10:02 by alice'."""
        who = self.answered_by.get_username() if self.answered_by else "someone"
        if self.by_expiry:
            who = "the team's expiry policy"
        when = time_format(timezone.localtime(self.answered_at), "H:i") if self.answered_at else ""
        name = self.decision_name
        return f"{name[:1].upper()}{name[1:]} was sent at {when} by {who}"

    @property
    def outcome(self) -> str:
        """'Approved by alice, 10:02' and the like, once someone answers."""
        if self.state == self.State.DISMISSED:
            return self.dismissal
        if self.state == self.State.OPEN and self.expired_at is not None:
            return f"Expired: {self.expiry_words}"
        if self.by_expiry and self.state == self.State.ANSWERED:
            return f"{'Cancelled' if self.kind == self.Kind.CONNECTION else 'Denied'}: " + (
                self.expiry_words
            )
        who = self.answered_by.get_username() if self.answered_by else "someone"
        if self.unconfirmed:
            return f"{self.sent}; the agent has not confirmed yet"
        if self.state == self.State.ANSWERING:
            return f"Being answered by {who} right now"
        if self.state == self.State.HELD:
            return f"Being answered by {who}: sending in a few seconds"
        if self.state == self.State.CLOSED and self.answer is not None:
            return f"{self.sent}; the agent moved on"
        when = time_format(timezone.localtime(self.answered_at), "H:i") if self.answered_at else ""
        approved = (self.answer or {}).get("approved")
        if self.kind == self.Kind.CHECK:
            done = "Checked"
        elif approved is None:
            done = "Answered"
        elif self.kind == self.Kind.CONNECTION:
            done = "Connected" if approved else "Cancelled"
        else:
            done = "Approved" if approved else "Denied"
        return f"{done} by {who}, {when}"
