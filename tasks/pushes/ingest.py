"""Keep authenticated pushes (the inbox) and apply them to the store. The only writer of
sessions, tasks, interactions, artifacts and the agent side of the transcript: `receive`
keeps a push on its request, the applier (applier.py) calls `apply_delivery` later.

Pushes arrive at least once and in any order, so every rule here is about converging:
- the delivery log is keyed by (agent, idempotency key): a duplicate changes nothing;
- a status newer than the stored one is *current* and sets the task's state; an older one
  is *history*: its message, effect and plan are kept but the state is not touched;
- a terminal state is final: later statuses are logged and not applied;
- facts that accumulate (transcript, uncertain effects, artifacts) are kept whatever the
  order, so shuffled deliveries end where in-order ones do.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone

from tasks.models import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    Agent,
    Artifact,
    Card,
    Delivery,
    Interaction,
    Message,
    PushEndpoint,
    Session,
    Task,
    TaskState,
)
from tasks.notify import outbox
from tasks.pushes import spool
from tasks.runtime import prepared
from tasks.runtime.writer import writing
from tasks.sessions import changes, progress_card, timeline, usage
from tasks.wire import json_safety, message_parts, profile
from tasks.wire import protocol as p

CURRENT, HISTORY, AFTER_TERMINAL = "current", "history", "after_terminal"
_OUTCOMES = {
    CURRENT: Delivery.Outcome.APPLIED,
    HISTORY: Delivery.Outcome.STALE,
    AFTER_TERMINAL: Delivery.Outcome.AFTER_TERMINAL,
}
_EXPECTED_STATE = {
    "approval": TaskState.AUTH_REQUIRED,
    "connection": TaskState.AUTH_REQUIRED,
    "question": TaskState.INPUT_REQUIRED,
}


def _asked_again(interaction: Interaction, status: p.Status) -> bool:
    """Whether a current status asking this interaction asks it anew (a new round), rather
    than repeating the status that asked it (agents republish their task on every follow-up,
    with the same status). Only a later agent timestamp is new; from an agent that sends no
    timestamps, another message. Agent timestamps are compared with agent timestamps only,
    never with our clock."""
    if status.timestamp is not None:
        return interaction.asked_at is None or status.timestamp > interaction.asked_at
    asking = status.message.message_id if status.message else ""
    return bool(asking) and asking != interaction.asked_message_id


def card_receipt(
    session: Session, card: Card | None, *, at: datetime, task: Task | None = None
) -> None:
    """The transcript's line for a card write, OpenClaw's receipt ("Progress card updated
    (rev 4, 1/3 done)"): for card-API writes, and for plan changes that came without a
    note. Call it under the session's row lock, in the write's transaction."""
    Message.objects.create(
        session=session,
        task=task,
        role=Message.Role.AGENT,
        text=progress_card.receipt(card),
        at=at,
        card_update=True,
    )


def idempotency_key(webhook_id: str | None, body: bytes) -> str:
    if webhook_id:
        if len(webhook_id) <= 150:
            return f"id:{webhook_id}"
        return f"id-sha256:{hashlib.sha256(webhook_id.encode()).hexdigest()}"
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


@dataclass
class Result:
    delivery: Delivery
    duplicate: bool
    # Something was kept for the applier to take: the push, or (spool.py) a copy of one it
    # has taken, to be counted on it.
    kept: bool = False

    @property
    def pending(self) -> bool:
        return self.kept or not self.duplicate


def receive(endpoint: PushEndpoint, key: str, body: bytes, event: p.Event) -> Result:
    """Keep an authenticated, parsed push, pending: the only work a push does on its
    request. Once this returns it is committed, so the agent's 2xx means "kept"; the applier
    applies it (applier.py). A second copy of a key is a duplicate. On SQLite it is kept in
    the inbox file, where it never waits for the database's write lock (spool.py)."""
    in_caller_transaction = transaction.get_connection().in_atomic_block
    file = spool.path()
    if file is not None and not in_caller_transaction:
        return _receive_in_inbox(file, endpoint, key, body, event)
    try:
        with writing():
            if in_caller_transaction:
                # In a caller's transaction (a test's): a savepoint, so a duplicate's error
                # does not abort it.
                with transaction.atomic():
                    delivery = _keep(endpoint.agent_id, endpoint, key, body, event)
            else:
                # One INSERT commits on its own: a BEGIN and a COMMIT around it would be two
                # more round trips to PostgreSQL on every push.
                delivery = _keep(endpoint.agent_id, endpoint, key, body, event)
    except IntegrityError:
        duplicate = _duplicate(endpoint.agent_id, key)
        if duplicate is None:
            raise
        return duplicate
    return Result(delivery, duplicate=False)


def _receive_in_inbox(
    file: str, endpoint: PushEndpoint, key: str, body: bytes, event: p.Event
) -> Result:
    agent_id = endpoint.agent_id
    kept = spool.keep(
        file,
        agent_id=agent_id,
        endpoint_id=endpoint.pk,
        key=key,
        received_at=timezone.now(),
        kind=event.kind,
        task_id=event.task_id,
        body=body.decode(),
    )
    if kept.duplicate:
        return Result(Delivery(pk=kept.delivery_id, agent_id=agent_id), duplicate=True)
    if kept.copy_of is not None:  # the database's: this copy is counted on it when moved
        return Result(Delivery(pk=kept.copy_of, agent_id=agent_id), duplicate=True, kept=True)
    return Result(Delivery(pk=kept.delivery_id, agent_id=agent_id), duplicate=False)


def _keep(
    agent_id: int, endpoint: PushEndpoint | None, key: str, body: bytes, event: p.Event
) -> Delivery:
    """The delivery row, pending; its unique (agent, key) refuses a second copy."""
    file = spool.path()
    delivery = Delivery(
        # Where there is an inbox file its sequence numbers every delivery (spool.py).
        pk=spool.next_id(file) if file is not None else None,
        agent_id=agent_id,
        endpoint=endpoint,
        idempotency_key=key,
        received_at=timezone.now(),
        kind=event.kind,
        task_id=event.task_id,
        body=body.decode(),
    )
    prepared.insert(delivery)  # Delivery.objects.create(), its INSERT made once
    return delivery


def _duplicate(agent_id: int, key: str) -> Result | None:
    """The delivery already kept under this key, counted once more; None if there is none
    (the IntegrityError was about something else)."""
    delivery = Delivery.objects.filter(agent_id=agent_id, idempotency_key=key).first()
    if delivery is None:
        return None
    with writing():
        Delivery.objects.filter(pk=delivery.pk).update(duplicates=F("duplicates") + 1)
    return Result(delivery, duplicate=True)


class Locked:
    """What one batch has locked and loaded: each session row once, each task once. Shared by
    the appliers of one batch, in its transaction (the row locks last until it ends)."""

    def __init__(self, *, nowait: bool = False) -> None:
        self.nowait = nowait
        self.sessions: dict[int, Session] = {}
        self.tasks: dict[tuple[int, str], Task] = {}
        self._held: set[tuple[int, str]] = set()
        # (agent, task id) → session id, for the tasks `preload` found.
        self.session_of: dict[tuple[int, str], int] = {}
        # The locked sessions' cards (a session without one is not here): derive reads them
        # from here rather than one query per session. Only derive writes a card in a batch.
        self.cards: dict[int, Card] = {}
        self.forgot = False
        # The batch's timeline entries, inserted together once it is applied (applier.py).
        self.timeline = timeline.Pending()
        # Tasks created here that have had no status yet: their first one is a state entry
        # even when it repeats the state they were created in.
        self.fresh: set[int] = set()

    def preload(self, deliveries: list[Delivery]) -> None:
        """Lock and load, in four queries, the sessions, tasks and cards these deliveries go
        to that exist already, rather than four queries per task as each is first met. A session
        another process holds is passed over, and its deliveries are deferred (`held`)."""
        wanted = {(d.agent_id, d.task_id) for d in deliveries if d.task_id}
        if not wanted:
            return
        self.session_of = sessions_of = {
            (agent_id, task_id): session_id
            for agent_id, task_id, session_id in Task.objects.filter(
                agent_id__in={a for a, _ in wanted}, task_id__in={t for _, t in wanted}
            ).values_list("agent_id", "task_id", "session_id")
            if (agent_id, task_id) in wanted
        }
        if not sessions_of:
            return
        sessions = changes.lock_all(set(sessions_of.values()), skip_locked=self.nowait)
        self.sessions.update((session.pk, session) for session in sessions)
        self._held = {key for key, id_ in sessions_of.items() if id_ not in self.sessions}
        if self.sessions:
            self.cards = Card.objects.in_bulk(list(self.sessions), field_name="session_id")
        for task in Task.objects.filter(
            session_id__in=self.sessions.keys(),
            agent_id__in={a for a, _ in wanted},
            task_id__in={t for _, t in sessions_of},
        ):
            self.tasks[(task.agent_id, task.task_id)] = task

    def held(self, delivery: Delivery) -> bool:
        """Whether `preload` found the session of this delivery's task held by another
        process (its deliveries wait for a later batch)."""
        return (delivery.agent_id, delivery.task_id) in self._held

    def forget(self) -> None:
        """A delivery was rolled back: what it changed of these objects in memory is not in
        the database, so they are read again (the row locks stay: the transaction goes on)."""
        self.sessions.clear()
        self.tasks.clear()
        self.cards.clear()
        self.timeline.drop()
        self.forgot = True

    def session(self, session_id: int) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = changes.lock(session_id, nowait=self.nowait)
        return session

    def open_session(self, agent: Agent, context_id: str, at: datetime) -> Session:
        session = changes.open_session(agent, context_id, at=at, nowait=self.nowait)
        return self.sessions.setdefault(session.pk, session)


def apply_delivery(
    delivery: Delivery, event: p.Event, locked: Locked | None = None, *, save: bool = True
) -> _Applier:
    """Apply a stored delivery's event (in the caller's transaction) and record its outcome
    on the delivery (`save=False`: in memory only, for the caller to write with others, see
    `record_outcomes`). The session it changed is derived afterwards, once for all of the
    batch's deliveries to it (`derive`), then published (changes.publish)."""
    applier = _Applier(delivery.agent, delivery.received_at, locked=locked or Locked())
    delivery.outcome = applier.run(event)
    delivery.warnings = applier.warnings
    delivery.applied_at = timezone.now()
    delivery.last_error = ""
    delivery.retry_at = None
    if save:
        delivery.save(update_fields=_OUTCOME_FIELDS)
    return applier


_OUTCOME_FIELDS = ["outcome", "warnings", "applied_at", "last_error", "retry_at"]


def record_outcomes(deliveries: list[Delivery]) -> None:
    """Write applied deliveries' outcomes: one UPDATE per outcome for those without warnings
    (nearly all), one per delivery for the rest."""
    plain: dict[str, list[int]] = {}
    for delivery in deliveries:
        if delivery.warnings:
            delivery.save(update_fields=_OUTCOME_FIELDS)
        else:
            plain.setdefault(delivery.outcome, []).append(delivery.pk)
    if not plain:
        return
    at = max(d.applied_at for d in deliveries)
    for delivery in deliveries:
        if not delivery.warnings:
            delivery.applied_at = at
    for outcome, pks in plain.items():
        Delivery.objects.filter(pk__in=pks).update(
            outcome=outcome, warnings=[], applied_at=at, last_error="", retry_at=None
        )


def derive(appliers: list[_Applier], read: changes.Read | None = None) -> Card | None:
    """After one session's deliveries are applied, in order: derive its state and card once;
    returns the card. The latest applied note becomes the card's receipt if it changed the
    card; the others never reached the card, so they are kept as the agent said them.
    `read`: what deriving reads of the session, read with others' (changes.read_all)."""
    session = appliers[-1].session
    if appliers[-1].locked.forgot:
        session.refresh_from_db()  # as its deliveries left it, whatever a failed one did
    noted = [a for a in appliers if a.note is not None]
    for applier in noted[:-1]:
        applier.keep_note_as_said()
    locked = appliers[-1].locked
    written = changes.derive(
        session,
        updated_at=appliers[-1].now,
        timeline=locked.timeline,
        card=locked.cards.get(session.pk, progress_card.NOT_READ),
        read=read,
    )
    receipt_by = (
        noted[-1]
        if noted
        else next((a for a in reversed(appliers) if a.status_at is not None), None)
    )
    if receipt_by is not None:
        receipt_by.receipt(written)
    if written.card is not None:
        locked.cards[session.pk] = written.card  # a card it created, for a later derive
    return written.card


def apply_fetched(agent: Agent, task: dict) -> Result:
    """A task Onlooker asked the agent for (GetTask, ListTasks, a SendMessage answer),
    applied exactly as a push of the same snapshot would be, and deduplicated by content.
    Raises protocol.BadBody if the agent's answer is not a valid A2A 1.0 task."""
    return _apply_fetched(agent, "task", task)


def apply_fetched_message(agent: Agent, message: dict) -> Result:
    """A Message the agent answered a SendMessage with (instead of a task): kept in the
    transcript exactly as a pushed message would be. Raises protocol.BadBody if it is not a
    valid A2A 1.0 message."""
    return _apply_fetched(agent, "message", message)


def _apply_fetched(agent: Agent, member: str, value: dict) -> Result:
    try:
        body = json.dumps({member: value}, sort_keys=True, separators=(",", ":")).encode()
    except RecursionError:
        # Too deep for the encoder, so far beyond what parsing keeps: refused as a push
        # nested this deep is, rather than an error no caller expects.
        raise p.BadBody(
            "nested too deeply",
            f"the {member} nests too deeply: Onlooker keeps at most {json_safety.MAX_DEPTH} levels",
        ) from None
    event = p.parse(body)
    key = f"fetched:{hashlib.sha256(body).hexdigest()}"
    # Its caller acts on what the agent said: stored and applied at once, in one transaction,
    # rather than through the inbox.
    try:
        with transaction.atomic():
            delivery = _keep(agent.pk, None, key, body, event)
            delivery.agent = agent
            applied = apply_delivery(delivery, event)
            usage.record([applied.grown])
            if applied.session is not None:
                card = derive([applied])
                applied.locked.timeline.write()
                changed = [changes.Changed(applied.session, agent.team_id, card)]
                changes.changed(changed, derived=True)
    except IntegrityError:
        duplicate = _duplicate(agent.pk, key)
        if duplicate is None:
            raise
        return duplicate
    return Result(delivery, duplicate=False)


def _newer(incoming: datetime | None, stored: datetime | None) -> bool:
    """Order by the agent's timestamps; an agent that sends none is taken in arrival order."""
    if stored is None:
        return True
    if incoming is None:
        return False
    return incoming >= stored


def _parts_digest(parts: list[dict]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass
class _Applier:
    agent: Agent
    now: datetime  # when the delivery was received
    locked: Locked
    warnings: list[str] = field(default_factory=list)
    session: Session | None = None
    # The applied status's note message and time: what a card receipt is kept as.
    note: tuple[Task, p.Message, datetime, bool] | None = None
    status_at: tuple[Task, datetime] | None = None
    # What this delivery adds to the usage ledger: written with its batch's (usage.record).
    grown: usage.Deltas = field(default_factory=usage.Deltas)

    def run(self, event: p.Event) -> str:
        if isinstance(event, p.MessageEvent):
            return self._message_event(event.message)
        task = self._lock_task(event.task_id, event.context_id)
        outcome = Delivery.Outcome.APPLIED
        if isinstance(event, p.TaskSnapshot):
            self._history(task, event.history, event.status.timestamp)
            for artifact in event.artifacts:
                self._snapshot_artifact(task, artifact)
            outcome = self._status(task, event.status, event.metadata)
        elif isinstance(event, p.StatusUpdate):
            outcome = self._status(task, event.status, event.metadata)
        else:
            self._artifact_update(task, event)
        return outcome

    # -- sessions and tasks -------------------------------------------------------------

    def _lock_task(self, task_id: str, context_id: str) -> Task:
        # One lock order everywhere: a writer locks the session row first and everything
        # under it (tasks, interactions, transcript) is then serialized by that lock.
        key = (self.agent.pk, task_id)
        task = self.locked.tasks.get(key)
        if task is not None:
            self.session = self.locked.sessions[task.session_id]
        else:
            session_id = (
                Task.objects.filter(agent=self.agent, task_id=task_id)
                .values_list("session_id", flat=True)
                .first()
            )
            if session_id is not None:
                self.session = self.locked.session(session_id)
            else:
                self.session = self.locked.open_session(self.agent, context_id, self.now)
            task, created = Task.objects.get_or_create(
                agent=self.agent,
                task_id=task_id,
                defaults={
                    "session": self.session,
                    "state": TaskState.SUBMITTED,
                    "status_received_at": self.now,
                },
            )
            if created:
                self.locked.fresh.add(task.pk)
            if task.session_id != self.session.pk:
                # Created meanwhile under another context: its own session is the one to lock.
                self.session = self.locked.session(task.session_id)
            self.locked.tasks[key] = task
        # Keyed on the task, never on the context: some SDKs put a fresh contextId on
        # follow-up pushes, and the task's session is the one it started in.
        if context_id != self.session.context_id:
            self.warnings.append(
                f"contextId {context_id!r} differs from the task's {self.session.context_id!r};"
                " kept the task's"
            )
        return task

    # -- card receipts --------------------------------------------------------------------

    def keep_note_as_said(self) -> None:
        """The note did not reach the card (a later one in the same batch did)."""
        task, message, at, estimated = self.note
        self._transcript(task, message, at, estimated=estimated)

    def receipt(self, written: progress_card.Written) -> None:
        """A status that changed the card's plan or note leaves one transcript line, the
        receipt, in place of its text (the card shows the note). A note that changed nothing
        on the card (older than the one shown, or the same text again) is kept as what the
        agent said."""
        card = written.card
        wrote = (
            written.content_changed
            and card is not None
            and card.source == Card.Source.STATUS
            and (card.plan is not None or bool(card.markdown))
        )
        if self.note is not None:
            task, message, at, estimated = self.note
            if wrote:
                receipt = p.Part(text=progress_card.receipt(card))
                message = replace(message, parts=(receipt,))
            self._transcript(task, message, at, estimated=estimated, card_update=wrote)
        elif wrote and self.status_at is not None:
            task, at = self.status_at
            card_receipt(self.session, card, at=at, task=task)

    # -- statuses -------------------------------------------------------------------------

    def _placement(self, task: Task, status: p.Status) -> str:
        stored = task.status_timestamp
        if task.is_terminal:
            if status.timestamp and stored and status.timestamp < stored:
                return HISTORY
            return AFTER_TERMINAL
        if status.state in TERMINAL_STATES or _newer(status.timestamp, stored):
            return CURRENT
        return HISTORY

    def _status(self, task: Task, status: p.Status, event_metadata: dict) -> str:
        placement = self._placement(task, status)
        if placement == AFTER_TERMINAL:
            self.warnings.append(f"the task already ended ({task.state}); not applied")
            return _OUTCOMES[placement]
        message_metadata = status.message.metadata if status.message else {}
        metadatas = (event_metadata, message_metadata)
        at = status.timestamp or self.now

        if (
            status.message is not None
            and self._is_note(status)
            and status.state not in TERMINAL_STATES
        ):
            # Kept once the card is derived: as a receipt if it changed the card. A final
            # status's text is the turn's reply: the transcript keeps it as said.
            self.note = (task, status.message, at, status.timestamp is None)
        elif status.message is not None:
            self._transcript(task, status.message, at, estimated=status.timestamp is None)
        self.status_at = (task, at)
        if status.timestamp is not None and task.status_timestamp is None:
            # The task's first dated status: messages dated only by their receipt (the
            # user's, in a snapshot that raced the agent's first update) came before it.
            Message.objects.filter(task=task, estimated_time=True, at__gt=at).update(
                at=at - timedelta(microseconds=1)
            )
        self._effects(task, metadatas)
        self._plan(task, metadatas, status.timestamp)
        self._note(task, status)

        current = placement == CURRENT
        if status.state in INTERRUPTED_STATES:
            self._interaction(task, status, metadatas, at, current=current)
        if current:
            if status.state not in INTERRUPTED_STATES:
                self._close_interactions(task, keep=None)
            telemetry = profile.find(profile.TELEMETRY, *metadatas)
            if telemetry is not None:
                reported = profile.read_telemetry(telemetry, self.warnings)
                self.grown.add(task.agent_id, self.now, task.telemetry, reported)
                task.telemetry = reported
            if status.state != task.state or task.pk in self.locked.fresh:
                self.locked.fresh.discard(task.pk)
                self.locked.timeline.state(
                    task, status.state, at=self.now, agent_timestamp=status.timestamp
                )
            task.state = status.state
            task.status_timestamp = status.timestamp or task.status_timestamp
            task.status_received_at = self.now
            task.status_message = status.message.text if status.message else ""
        prepared.update(task)  # task.save(), its UPDATE made once
        return _OUTCOMES[placement]

    def _effects(self, task: Task, metadatas: tuple[dict, ...]) -> None:
        value = profile.find(profile.EFFECTS, *metadatas)
        if value is None:
            return
        effect = profile.read_uncertain(value, self.warnings)
        if effect and effect not in task.uncertain_effects:
            # Sorted, not in arrival order: pushes may come in any order.
            task.uncertain_effects = sorted([*task.uncertain_effects, effect])

    @staticmethod
    def _is_note(status: p.Status) -> bool:
        """Whether a status's text is a card note. A message of an interrupted state, or one
        that opens an interaction, is the interaction's prompt instead."""
        message = status.message
        if message is None or not message.text or status.state in INTERRUPTED_STATES:
            return False
        return profile.find(profile.INTERACTIONS, message.metadata) is None

    def _note(self, task: Task, status: p.Status) -> None:
        """The card's note: the latest status text that is not a question."""
        if not self._is_note(status):
            return
        message = status.message
        if _newer(status.timestamp, task.note_timestamp):
            task.note = message.text
            task.note_timestamp = status.timestamp or task.note_timestamp

    def _plan(self, task: Task, metadatas: tuple[dict, ...], timestamp: datetime | None) -> None:
        value = profile.find(profile.PROGRESS, *metadatas)
        if value is None:
            return
        plan = profile.read_progress(value, self.warnings)
        if plan is not None and _newer(timestamp, task.plan_timestamp):
            task.plan = plan
            task.plan_timestamp = timestamp or task.plan_timestamp

    # -- interactions ---------------------------------------------------------------------

    def _interaction(
        self,
        task: Task,
        status: p.Status,
        metadatas: tuple[dict, ...],
        at: datetime,
        *,
        current: bool,
    ) -> None:
        opened = None
        value = profile.find(profile.INTERACTIONS, *metadatas)
        if value is not None:
            opened = profile.read_interaction(value, self.warnings)
        if opened is not None:
            expected = _EXPECTED_STATE[opened.kind]
            if status.state != expected:
                self.warnings.append(
                    f"interactions/v1: a {opened.kind} arrived with {status.state}; "
                    f"the profile uses {expected}"
                )
        else:
            # A core agent asks in plain text; a text reply to it can never approve anything.
            text = status.message.text if status.message else ""
            reference = status.message.message_id if status.message else at.isoformat()
            opened = profile.OpenInteraction(f"text:{reference}", "text", text)

        asking = {
            "asked_at": status.timestamp,
            "asked_message_id": status.message.message_id if status.message else "",
        }
        interaction, created = Interaction.objects.open(
            task,
            opened.interaction_id,
            kind=opened.kind,
            prompt=opened.prompt,
            detail=opened.detail,
            at=at,
            current=current,
            **asking,
        )
        if not current:
            return
        # Asked for the first time, or anew (a new round): the team hears of it.
        asked = created or (
            _asked_again(interaction, status) and Interaction.objects.reopen(interaction, **asking)
        )
        if asked:
            outbox.opened(interaction, self.session, self.agent, at=self.now)
        self._close_interactions(task, keep=interaction)

    def _close_interactions(self, task: Task, keep: Interaction | None) -> None:
        """The agent moved on from these: closed, keeping any decision sent to them (a call
        still in flight records its confirmation over this)."""
        if task.state not in INTERRUPTED_STATES:
            # Only a waiting task has pending interactions, and `task.state` is still the
            # stored one here (this status's is set after): most pushes need no UPDATE.
            return
        outbox.resolved(task.interactions.close(keep=keep), at=self.now)

    # -- transcript -----------------------------------------------------------------------

    def _transcript(
        self,
        task: Task | None,
        message: p.Message,
        at: datetime,
        *,
        estimated: bool,
        card_update: bool = False,
    ) -> None:
        session = self.session
        text = message.text
        # Links, files and data travel beside the text; a message may be only those.
        parts, files = message_parts.kept(message.parts)
        if not text and not parts:
            return
        if estimated and task is not None and task.status_timestamp is not None:
            # Dated only by receipt, after the task's dated statuses began: keep it before
            # the first of them rather than after the agent's answers.
            first = task.message_set.filter(estimated_time=False).order_by("at").first()
            if first is not None and first.at <= at:
                at = first.at - timedelta(microseconds=1)
        # A message already in the transcript (a snapshot repeating history) is skipped.
        prepared.insert(
            Message(
                session=session,
                task=task,
                message_id=message.message_id,
                role=message.role,
                text=text,
                at=at,
                estimated_time=estimated,
                card_update=card_update,
                parts=parts,
                files=files,
            ),
            ignore_conflicts=True,
        )
        if not session.title and message.role == Message.Role.USER and text.strip():
            changes.name(session, text)

    def _history(
        self, task: Task, history: tuple[p.Message, ...], timestamp: datetime | None
    ) -> None:
        at = timestamp or self.now
        for message in history:
            self._transcript(task, message, at, estimated=timestamp is None)

    def _message_event(self, message: p.Message) -> str:
        task = None
        if message.task_id:
            task = Task.objects.filter(agent=self.agent, task_id=message.task_id).first()
        if task is not None:
            self.session = self.locked.session(task.session_id)
        elif message.context_id:
            self.session = self.locked.open_session(self.agent, message.context_id, self.now)
        else:
            self.warnings.append("a message with neither a known taskId nor a contextId")
            return Delivery.Outcome.IGNORED
        self._transcript(task, message, self.now, estimated=True)
        return Delivery.Outcome.APPLIED

    # -- artifacts ------------------------------------------------------------------------

    def _files(self, *metadatas: dict) -> dict | None:
        value = profile.find(profile.FILES, *metadatas)
        return None if value is None else profile.read_files(value, self.warnings)

    def _new_version(
        self, task: Task, artifact: p.Artifact, parts: list[dict], files, *, complete: bool = True
    ) -> None:
        last = task.artifacts.filter(artifact_id=artifact.artifact_id).aggregate(n=Max("sequence"))
        artifact = Artifact.objects.create(
            task=task,
            artifact_id=artifact.artifact_id,
            sequence=(last["n"] or 0) + 1,
            name=artifact.name,
            description=artifact.description,
            parts=parts,
            files=files,
            complete=complete,
            markdown_html=progress_card.artifact_html(parts, files),
            received_at=self.now,
        )
        self.locked.timeline.artifact(artifact)

    def _snapshot_artifact(self, task: Task, artifact: p.Artifact) -> None:
        """A task snapshot repeats artifacts already seen: only new content is a new version."""
        parts = [part.to_json() for part in artifact.parts]
        digest = _parts_digest(parts)
        known = task.artifacts.filter(artifact_id=artifact.artifact_id).values_list(
            "parts", flat=True
        )
        if any(_parts_digest(existing) == digest for existing in known):
            return
        self._new_version(task, artifact, parts, self._files(artifact.metadata))

    def _artifact_update(self, task: Task, event: p.ArtifactUpdate) -> None:
        artifact = event.artifact
        parts = [part.to_json() for part in artifact.parts]
        files = self._files(artifact.metadata, event.metadata)
        if task.is_terminal:
            self.warnings.append("artifact arrived after the task ended; kept")
        latest = task.artifacts.filter(artifact_id=artifact.artifact_id).order_by("-sequence")
        latest = latest.select_for_update().first()
        if event.append:
            if latest is None:
                self.warnings.append(
                    f"append for artifact {artifact.artifact_id!r} not seen before; "
                    "kept as its first version"
                )
                self._new_version(task, artifact, parts, files, complete=bool(event.last_chunk))
                return
            # A2A chunks carry no index: they are assembled in arrival order.
            latest.parts = [*latest.parts, *parts]
            latest.files = files or latest.files
            latest.name = artifact.name or latest.name
            latest.complete = bool(event.last_chunk)  # appending: a stream, until it says last
            latest.markdown_html = progress_card.artifact_html(latest.parts, latest.files)
            latest.save(update_fields=["parts", "files", "name", "complete", "markdown_html"])
            return
        if latest is not None and latest.parts == parts and (files or None) == latest.files:
            if event.last_chunk and not latest.complete:
                latest.complete = True
                latest.save(update_fields=["complete"])
            return
        # A version's first chunk. Complete unless the agent says more follows (lastChunk:
        # false): agents that send whole artifacts often never mention lastChunk, and a later
        # append marks the version as arriving again.
        self._new_version(task, artifact, parts, files, complete=event.last_chunk is not False)
