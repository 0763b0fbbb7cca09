"""What Onlooker keeps: agents, where they push, and the sessions their pushes build.

Writers: `agents.py` registers agents and endpoints, `ingest.py` alone applies pushes to
sessions, tasks, interactions, artifacts and the transcript; `answers.py` writes people's
decisions. An interaction's state changes only through the transitions `Interaction.objects`
names, which those two call. Nothing here writes on save.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.formats import time_format

from tasks.runtime.prepared import Prepared
from tasks.wire import tiers
from tasks.wire.stored_json import StoredJSONDecoder

# A default argument: the function reads the value itself, its caller has not
# (sessions/progress_card.py too).
NOT_READ = object()


class TaskState(models.TextChoices):
    SUBMITTED = "TASK_STATE_SUBMITTED", "submitted"
    WORKING = "TASK_STATE_WORKING", "working"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED", "input required"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED", "auth required"
    COMPLETED = "TASK_STATE_COMPLETED", "completed"
    FAILED = "TASK_STATE_FAILED", "failed"
    CANCELED = "TASK_STATE_CANCELED", "canceled"
    REJECTED = "TASK_STATE_REJECTED", "rejected"


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


def digest(secret: str) -> str:
    """Push tokens are stored as digests: they are only ever compared, never shown again."""
    return hashlib.sha256(secret.encode()).hexdigest()


def matches_digest(presented: str, stored: str) -> bool:
    return bool(stored) and hmac.compare_digest(digest(presented), stored)


class AgentQuerySet(models.QuerySet):
    def visible_to(self, user) -> AgentQuerySet:
        """Agents without a team are everyone's; a team's agents are its members'."""
        if user.is_superuser:
            return self
        return self.filter(Q(team__isnull=True) | Q(team__in=user.groups.all()))


class Agent(models.Model):
    name = models.CharField(max_length=200)
    card_url = models.URLField(max_length=500)
    rpc_url = models.URLField("JSON-RPC URL", max_length=500)
    protocol_version = models.CharField(max_length=20)
    extensions = models.JSONField(
        decoder=StoredJSONDecoder, default=list, blank=True, help_text="URIs the card declares"
    )
    push_notifications = models.BooleanField(default=False)
    # The card's own words as of its last fetch, plain text and bounded (a2a_client.parse_card):
    # the name it gives itself (`name` is what people call it), its description and skills.
    card_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    skills = models.JSONField(
        decoder=StoredJSONDecoder, default=list, blank=True, help_text="name, description, tags"
    )
    # Sent as the Authorization header when Onlooker calls the agent; never displayed.
    credential = models.TextField(blank=True)
    # The credential goes to rpc_url, which the card names: at the card's own origin unless a
    # person allowed another when registering the agent.
    allow_other_rpc_origin = models.BooleanField(
        "JSON-RPC URL may be at another origin than the card", default=False
    )
    # A card refresh that named a JSON-RPC URL at an origin nobody agreed to: not followed.
    refused_rpc_url = models.CharField("refused JSON-RPC URL", max_length=500, blank=True)
    refused_rpc_url_at = models.DateTimeField("JSON-RPC URL refused at", null=True, blank=True)
    # Standard Webhooks secrets (whsec_…). Two during a rotation; never displayed.
    signing_secret = models.CharField(max_length=200, blank=True)
    previous_signing_secret = models.CharField(max_length=200, blank=True)
    # The agent's token for Onlooker's card API, kept as a digest; shown once when made.
    api_token_digest = models.CharField(max_length=64, blank=True, db_index=True)
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL)
    card_fetched_at = models.DateTimeField(null=True, blank=True)
    # What the agent's last answer echoed in `A2A-Extensions`: the extensions it activated
    # (its tier); None when its answers carry no such header, or before Onlooker has called
    # it (extensions_echoed_at tells which). Written only by agents.record_echo.
    activated_extensions = models.JSONField(
        decoder=StoredJSONDecoder, null=True, blank=True, help_text="URIs the agent echoed"
    )
    extensions_echoed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def signing_secrets(self) -> list[str]:
        return [s for s in (self.signing_secret, self.previous_signing_secret) if s]

    @property
    def tier(self) -> str:
        """ "Profile v2: interactions, progress, …" or "Core A2A", from what it echoed."""
        return tiers.describe(
            self.activated_extensions,
            called=self.extensions_echoed_at is not None,
            declared=self.extensions or [],
        )


class PushEndpoint(models.Model):
    """Where an agent pushes: `/a2a/push/<public_id>/`. The id is not a secret, the tokens are."""

    public_id = models.CharField(max_length=64, unique=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="endpoints")
    token_digest = models.CharField(max_length=64)
    bearer_digest = models.CharField(max_length=64)
    active = models.BooleanField(default=True)
    # The task a person chose to follow through it ("Follow this task" on the agent page);
    # empty for the agent's own endpoint and for work Onlooker started.
    task_id = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Two presses of "Follow this task" make one follower: the second insert fails.
            models.UniqueConstraint(
                fields=["agent", "task_id"],
                condition=~Q(task_id="") & Q(active=True),
                name="one_follower_per_task",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} → {self.public_id}"

    @property
    def push_url(self) -> str:
        return f"{settings.ONLOOKER_PUBLIC_URL}/a2a/push/{self.public_id}/"


class Refusal(models.Model):
    """Counts of refused pushes per agent and reason: refused requests store nothing else."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="refusals")
    reason = models.CharField(max_length=40)
    count = models.PositiveIntegerField(default=0)
    last_at = models.DateTimeField()
    last_detail = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "reason"], name="unique_refusal_reason")
        ]

    def __str__(self) -> str:
        return f"{self.agent}: {self.reason} × {self.count}"


class SessionQuerySet(models.QuerySet):
    def visible_to(self, user) -> SessionQuerySet:
        return self.filter(agent__in=Agent.objects.visible_to(user))


class Session(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    context_id = models.CharField(max_length=200)
    title = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=40, choices=TaskState.choices, blank=True)
    needs_human = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField()

    objects = SessionQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "context_id"], name="unique_session_context")
        ]
        indexes = [models.Index(fields=["-needs_human", "-updated_at"], name="session_attention")]

    def __str__(self) -> str:
        return self.title or self.context_id

    def derive_state(self, tasks: list[Task], waiting: Any = NOT_READ) -> Interaction | None:
        """The session's state and whether it needs a person, from its tasks (`tasks`: its
        newest, newest first). The state is the newest task's, unless a person is asked
        something in an older one: that task's state then, so a session is never shown done
        (or working) while a question in it waits, and a finished session never needs you.
        Returns the newest open interaction (what the card asks), if any, with its task's
        state as `task_state` (its `task` is not loaded).

        A session needs a person exactly while one of its interactions is open: every writer
        of interactions derives this (changes.derive, under the session's row lock) before
        saving the session, so the flag the screens sort and count by never outlives the
        question. `waiting`: that interaction (or None), when the caller read it for many
        sessions at once (changes.read_all)."""
        if waiting is NOT_READ:
            waiting = next(iter(_NEWEST_OPEN_INTERACTION(self.pk)), None)
        self.needs_human = waiting is not None
        if waiting is not None:
            self.state = waiting.task_state
        elif tasks:
            self.state = tasks[0].state
        return waiting

    @property
    def shown_state(self):
        """The state in people's words (tasks/models/states.py), with what the card says it asks."""
        from tasks.models import states

        card = getattr(self, "card", None)
        return states.of_session(self.state, card.facts if card is not None else None)


# A session's newest open interaction, with its task's state (`task_state`): read by every
# derive (prepared.py says why it is prepared). changes.read_all reads the same for many.
NEWEST_OPEN_ORDER = ("-opened_at", "-id")
_NEWEST_OPEN_INTERACTION = Prepared(
    lambda session_id: (
        Interaction.objects.filter(task__session_id=session_id, state=Interaction.State.OPEN)
        .annotate(task_state=F("task__state"))
        .order_by(*NEWEST_OPEN_ORDER)[:1]
    )
)


class Task(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tasks")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="tasks")
    task_id = models.CharField(max_length=200)
    state = models.CharField(max_length=40, choices=TaskState.choices)
    # The agent's own status timestamp orders updates; None means the agent sent none.
    status_timestamp = models.DateTimeField(null=True, blank=True)
    status_received_at = models.DateTimeField()
    status_message = models.TextField(blank=True)
    # The card's note: the latest status message that is not a question.
    note = models.TextField(blank=True)
    note_timestamp = models.DateTimeField(null=True, blank=True)
    plan = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    plan_timestamp = models.DateTimeField(null=True, blank=True)
    telemetry = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    uncertain_effects = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "task_id"], name="unique_task")]

    def __str__(self) -> str:
        return self.task_id

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def shown_state(self):
        """This turn's state in people's words (tasks/models/states.py)."""
        from tasks.models import states

        return states.shown(self.state)

    @property
    def shown_timestamp(self):
        return self.status_timestamp or self.status_received_at


class Delivery(models.Model):
    """A push as received: the durable inbox. The receiver stores it (pending) and answers;
    the applier (applier.py) applies it and records its outcome. A pending delivery whose
    apply failed keeps its error and is tried again at `retry_at`."""

    class Outcome(models.TextChoices):
        PENDING = "pending", "received, not applied yet"
        APPLIED = "applied"
        STALE = "stale", "older than what is stored; state not applied"
        AFTER_TERMINAL = "after_terminal", "task already ended; logged only"
        IGNORED = "ignored", "nothing to apply"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(PushEndpoint, null=True, on_delete=models.SET_NULL)
    idempotency_key = models.CharField(max_length=200)
    received_at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=20)
    task_id = models.CharField(max_length=200, blank=True)
    body = models.TextField()
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.PENDING)
    warnings = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    duplicates = models.PositiveIntegerField(default=0)
    applied_at = models.DateTimeField(null=True, blank=True)
    # Failed applies: how many, the last error, and when to try again (null: at once).
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["agent", "idempotency_key"], name="unique_delivery_key")
        ]
        indexes = [
            # The applier's queue: only pending rows are indexed, so it stays small however
            # many applied deliveries are kept.
            models.Index(fields=["id"], condition=Q(outcome="pending"), name="pending_deliveries"),
            # The agent page's "last push received": one index step, however many it has.
            models.Index(fields=["agent", "received_at"], name="agent_received"),
            # A task's deliveries, newest first: the raw view (tasks/web/deliveries_page.py).
            models.Index(fields=["agent", "task_id", "id"], name="delivery_task_order"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.task_id} ({self.outcome})"


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
        """The agent asks it anew (ingest decides that a status does): a new round, open and
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
            )
        )

    def close(self, *, keep: Interaction | None = None) -> list[tuple[int, int]]:
        """The agent moved on from these (all pending but `keep`): closed, keeping any
        decision sent to them; a call still in flight records its confirmation over this.
        The (pk, round) of each one it closed, for the notifications that say so."""
        pending = self.filter(state__in=Interaction.PENDING)
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
        self, interaction: Interaction, *, by: Any, answer: dict, reason: str, at: datetime
    ) -> bool:
        """A person's decision, taken before the agent is called: open → answering, bound
        to `answer` from now on. True for the one caller that won."""
        claimed = self._row(interaction, Interaction.State.OPEN).update(
            state=Interaction.State.ANSWERING,
            answered_by=by,
            answered_at=at,  # when the claim was made, then when it was sent
            answer=answer,
            reason=reason,
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
        undecided = {"answered_by": None, "answered_at": None, "answer": None, "reason": ""}
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


class Interaction(models.Model):
    """One thing an agent waits for, and the one decision Onlooker sends it.

    Its state changes only through the transitions of `Interaction.objects`, each a
    conditional UPDATE guarded by the states it leaves and by its round, so a late writer
    never touches a newer round. ingest.py, the agent's side, makes these:
      open     the agent asks it: created open (closed, if the asking status is history);
      reopen   the agent asks it anew, after any state but open: a new round, open again,
               free of the last round's decision;
      close    the agent moved on: open, answering or sent → closed, keeping any decision.
    answers.py, people's side, the rest:
      claim    a decision, before the call: open → answering, bound to it from now on;
      reclaim  the bound decision sent again: sent, or a stale claim (a dead process) →
               answering;
      release  nothing reached the agent: answering → open, the decision dropped;
      record_answered  the agent took it: answering → answered (closed → answered too: its
               next status can overtake the reply);
      record_sent      it may have reached the agent, unconfirmed: answering → sent;
      dismiss  a person closed it, as no answer can reach the agent: open or sent →
               dismissed.
    From the claim on, the interaction is bound to its decision until the agent's next
    status closes it or really asks it again. Only a task that waits (its state input or
    auth required) has pending interactions: every current status that does not ask closes
    them, and only a status that asks opens one."""

    class Kind(models.TextChoices):
        APPROVAL = "approval"
        QUESTION = "question"
        CONNECTION = "connection"
        TEXT = "text", "plain-text question"

    class State(models.TextChoices):
        OPEN = "open"
        ANSWERING = "answering"
        SENT = "sent", "sent, not confirmed"
        ANSWERED = "answered"
        CLOSED = "closed", "closed by the agent"
        # A person closed it: the agent no longer knew its task (it restarted, or the task
        # ended without Onlooker hearing), so no answer could ever reach it.
        DISMISSED = "dismissed", "dismissed by a person"

    # A claim older than this belongs to a process that died mid-call: its decision may have
    # reached the agent, so it binds like a sent one. Far longer than any call can take
    # (a2a_client's timeouts are seconds).
    STALE_CLAIM = timedelta(minutes=2)
    # What the agent waits on, or Onlooker may have told it: its next status settles these.
    PENDING = (State.OPEN, State.ANSWERING, State.SENT)
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
        "Cancel", or the answer quoted briefly."""
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
    def sent(self) -> str:
        """'Approve was sent at 10:02 by alice'."""
        who = self.answered_by.get_username() if self.answered_by else "someone"
        when = time_format(timezone.localtime(self.answered_at), "H:i") if self.answered_at else ""
        name = self.decision_name
        return f"{name[:1].upper()}{name[1:]} was sent at {when} by {who}"

    @property
    def outcome(self) -> str:
        """'Approved by alice, 10:02' and the like, once someone answers."""
        if self.state == self.State.DISMISSED:
            return self.dismissal
        who = self.answered_by.get_username() if self.answered_by else "someone"
        if self.unconfirmed:
            return f"{self.sent}; the agent has not confirmed yet"
        if self.state == self.State.ANSWERING:
            return f"Being answered by {who} right now"
        if self.state == self.State.CLOSED and self.answer is not None:
            return f"{self.sent}; the agent moved on"
        when = time_format(timezone.localtime(self.answered_at), "H:i") if self.answered_at else ""
        approved = (self.answer or {}).get("approved")
        if approved is None:
            done = "Answered"
        elif self.kind == self.Kind.CONNECTION:
            done = "Connected" if approved else "Cancelled"
        else:
            done = "Approved" if approved else "Denied"
        return f"{done} by {who}, {when}"


class Artifact(models.Model):
    """One version of an artifact; every version is kept."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="artifacts")
    artifact_id = models.CharField(max_length=200)
    sequence = models.PositiveIntegerField(help_text="1 for the first version seen, then 2, …")
    name = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    parts = models.JSONField(decoder=StoredJSONDecoder, default=list)
    files = models.JSONField(
        decoder=StoredJSONDecoder, null=True, blank=True, help_text="files/v1 data"
    )
    # False while the agent streams the version in chunks and has not sent `lastChunk`.
    complete = models.BooleanField(default=True)
    # A text/markdown version's note, rendered and sanitized once when it arrives
    # (sessions/progress_card.py); empty for any other version.
    markdown_html = models.TextField(blank=True)
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "artifact_id", "sequence"], name="unique_artifact_version"
            )
        ]
        ordering = ["task_id", "artifact_id", "sequence"]

    def __str__(self) -> str:
        return f"{self.artifact_id} v{self.sequence}"


class Message(models.Model):
    """The session transcript: what people sent, what the agent said, and Onlooker's notes
    of what people did that the agent never heard (a dismissed question)."""

    class Role(models.TextChoices):
        USER = "ROLE_USER", "user"
        AGENT = "ROLE_AGENT", "agent"
        # Onlooker's own one-line notes (a question dismissed): said by neither side, and
        # never sent to the agent. Not an A2A role, so it cannot be mistaken for one.
        ONLOOKER = "onlooker", "Onlooker"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.CASCADE)
    message_id = models.CharField(max_length=200, blank=True)
    role = models.CharField(max_length=20, choices=Role.choices)
    text = models.TextField()
    at = models.DateTimeField()
    # True when the agent gave no time and `at` is when Onlooker received it.
    estimated_time = models.BooleanField(default=False)
    # The agent's status text that became the card's note: the session page shows it as a
    # one-line receipt, since the card already shows it in full.
    card_update = models.BooleanField(default=False)
    # The message's other parts (url, raw, data) as the page shows them, bounded
    # (tasks/wire/message_parts.py); a raw part's bytes are kept apart in `files`, which only its
    # download loads.
    parts = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    files = models.JSONField(
        decoder=StoredJSONDecoder, default=list, blank=True, help_text="raw parts, base64"
    )

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "message_id"],
                condition=~Q(message_id=""),
                name="unique_transcript_message",
            )
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:40]}"


class SessionView(models.Model):
    """A session's fragments as the pages and live messages show them (card, collapsed card,
    sidebar row, monitoring tile), rendered once when the session changes. Written only by
    `fragments.py`; never per person. `version` names the templates that rendered them, so
    fragments from older templates are rendered afresh on read instead."""

    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="view")
    version = models.CharField(max_length=16)
    revision = models.PositiveIntegerField(default=0)
    card = models.TextField()
    summary = models.TextField()
    sidebar = models.TextField()
    tile = models.TextField()

    def __str__(self) -> str:
        return f"fragments of {self.session} (rev {self.revision})"


class SessionText(models.Model):
    """A session's own searchable text (tasks/sessions/search.py): title, agent name, plan step
    titles and card note, as of its last change. Written only by `search.keep` and
    `search.agent_renamed`; the full-text index over it is the database's (migration 0016)."""

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, primary_key=True, related_name="search_text"
    )
    title = models.TextField(blank=True)
    agent = models.TextField(blank=True)
    plan = models.TextField(blank=True)
    note = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"search text of session {self.session_id}"


STEP_WORDS = {
    "completed": "done",
    "in_progress": "in progress",
    "pending": "to do",
    "failed": "failed",
    "skipped": "skipped",
    "unfinished": "unfinished",
}


class Card(models.Model):
    """A session's progress card. Written only by `sessions/progress_card.py`; `html` is the
    sanitized rendering of `markdown`, made once at write time. A cleared card stays as a tombstone
    (no plan, no markdown) so its revisions continue."""

    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="card")
    revision = models.PositiveIntegerField()
    plan = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    markdown = models.TextField(blank=True)
    markdown_sha256 = models.CharField(max_length=64, blank=True)
    html = models.TextField(blank=True)
    # What an A2A session's card shows beside plan and note: state, the open question,
    # uncertain effects, cost and trace id.
    facts = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    updated_at = models.DateTimeField()

    class Source(models.TextChoices):
        STATUS = "status", "from the agent's status"
        API = "api", "written through the card API"

    # Who wrote the plan and note the card shows, and when: the latest writer wins (README,
    # "Two writers, one card").
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.STATUS)
    source_at = models.DateTimeField(null=True, blank=True)
    # The digest of the plan and note the agent's statuses last gave: a push that does not
    # change them leaves a card-API write in place.
    status_digest = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"card of {self.session} (rev {self.revision})"

    @property
    def is_cleared(self) -> bool:
        return self.plan is None and not self.markdown and not self.facts

    # What the card partial shows beside plan and note (facts are written by
    # sessions/progress_card.py).
    @property
    def shown_state(self):
        """The state in people's words (tasks/models/states.py)."""
        from tasks.models import states

        return states.of_facts(self.facts)

    @property
    def finished(self) -> bool:
        return self.shown_state.finished

    @property
    def question(self) -> dict | None:
        # A finished session asks nothing, whatever an older version stored beside it.
        return None if self.finished else (self.facts or {}).get("question")

    @property
    def uncertain(self) -> list[str]:
        return (self.facts or {}).get("uncertain", [])

    @property
    def uncertain_lines(self) -> list[str]:
        from tasks.models import states

        return [states.uncertain_words(effect) for effect in self.uncertain]

    @property
    def telemetry(self) -> dict | None:
        return (self.facts or {}).get("telemetry")

    @property
    def answer(self) -> dict | None:
        """Who answered, while the agent has not gone on: never once the session ended."""
        return None if self.finished else (self.facts or {}).get("answer")

    @property
    def steps(self) -> list[dict]:
        """The plan as shown: each step with its status in words. Once the session ended,
        a step still pending or in progress will not be done: it is marked unfinished, and
        its note (said while it was going, "waiting for approval") is dropped."""
        finished = self.finished
        shown = []
        for position, step in enumerate(self.plan or [], start=1):
            status = step["status"]
            note = step.get("note", "")
            if finished and status in ("pending", "in_progress"):
                status, note = "unfinished", ""
            shown.append(
                {
                    "position": position,
                    "step": step["step"],
                    "note": note,
                    "status": status,
                    "words": STEP_WORDS.get(status, status),
                }
            )
        return shown

    # At most this many steps on a monitoring tile: the one going on and those around it;
    # the session page shows them all.
    TILE_STEPS = 5

    @property
    def tile_steps(self) -> list[dict]:
        steps = self.steps
        if len(steps) <= self.TILE_STEPS:
            return steps
        current = self.current_step
        middle = current["position"] - 1 if current else 0
        start = max(0, min(middle - self.TILE_STEPS // 2, len(steps) - self.TILE_STEPS))
        return steps[start : start + self.TILE_STEPS]

    @property
    def hidden_tile_steps(self) -> int:
        return len(self.plan or []) - len(self.tile_steps)

    @property
    def step_count(self) -> str:
        """ "Step 2 of 5", from the plan (never from the agent's note); once the session
        ended, how many steps were done: "3 of 5 steps done"."""
        plan = self.plan or []
        if not plan:
            return ""
        if self.finished:
            done = sum(step["status"] == "completed" for step in plan)
            return f"{done} of {len(plan)} step{'s' if len(plan) != 1 else ''} done"
        current = self.current_step
        return f"Step {current['position']} of {current['total']}"

    @property
    def current_step(self) -> dict | None:
        """The step a collapsed card names: the one in progress, else the next pending one,
        else the last one done; with its 1-based position."""
        plan = self.plan or []
        for wanted in ("in_progress", "pending"):
            for position, step in enumerate(plan, start=1):
                if step["status"] == wanted:
                    return {"position": position, "total": len(plan), **step}
        if plan:
            return {"position": len(plan), "total": len(plan), **plan[-1]}
        return None

    def as_json(self) -> dict | None:
        if self.is_cleared:
            return None
        return {
            "revision": self.revision,
            "updatedAt": self.updated_at,
            "plan": self.plan,
            "markdown": self.markdown or None,
            "html": self.html,
        }


class UsageDay(models.Model):
    """One agent's telemetry/v1 usage on one UTC day, summed over its tasks. Written only by
    tasks/sessions/usage.py, which says how (a task adds what its telemetry grew by)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="usage_days")
    date = models.DateField()
    # Whole nano-dollars: sums are exact integers on every database (SQLite would keep a
    # DecimalField as a float), and 0.1 + 0.2 is 0.3.
    cost_nanos = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    steps = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "date"], name="unique_usage_day")]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.date}"


# The notification models live beside their code; importing them here registers them.
from tasks.models.notify import Notification, NotificationChannel  # noqa: E402, F401
from tasks.models.reset_limits import ResetLimit  # noqa: E402, F401
from tasks.models.timeline import TimelineEntry  # noqa: E402, F401
