"""Apply a kept push's event to the store. The only writer of tasks, interactions, artifacts
and the agent side of the transcript (and, through sessions/changes.py, of the sessions they
open): the applier (applier.py) calls `apply_delivery` for each delivery of a batch, then
`derive` once for each session they changed. By what an event carries: `status` (the
task's state, the card's note and plan), `interactions` (questions and approvals),
`transcript` (messages, card receipts) and `artifacts`; `state` holds what they share.

Pushes arrive at least once and in any order, so every rule here is about converging:
- the delivery log is keyed by (agent, idempotency key): a duplicate changes nothing
  (deliveries.py);
- a status newer than the stored one is *current* and sets the task's state; an older one
  is *history*: its message, effect and plan are kept but the state is not touched;
- a terminal state is final: later statuses are logged and not applied;
- facts that accumulate (transcript, uncertain effects, artifacts) are kept whatever the
  order, so shuffled deliveries end where in-order ones do.
"""

from __future__ import annotations

from tasks.models import Delivery, ProgressCard, Task, TaskState
from tasks.pushes import deliveries
from tasks.pushes.apply import artifacts, status, transcript
from tasks.pushes.apply.state import Applied, Locked
from tasks.sessions import changes, progress_card
from tasks.wire import protocol as p

__all__ = ["Applied", "Locked", "apply_delivery", "derive"]


def apply_delivery(
    delivery: Delivery, event: p.Event, locked: Locked | None = None, *, save: bool = True
) -> Applied:
    """Apply a stored delivery's event (in the caller's transaction) and record its outcome
    on the delivery (`save=False`: in memory only, for the caller to write with others, see
    deliveries.record_outcomes). The session it changed is derived afterwards, once for all
    of the batch's deliveries to it (`derive`), then published (changes.changed)."""
    applied = Applied(delivery.agent, delivery.received_at, locked=locked or Locked())
    outcome = _run(applied, event)
    deliveries.record_outcome(delivery, outcome, applied.warnings, save=save)
    return applied


def _run(applied: Applied, event: p.Event) -> str:
    if isinstance(event, p.MessageEvent):
        return transcript.message_event(applied, event.message)
    task = _lock_task(applied, event.task_id, event.context_id)
    outcome = Delivery.Outcome.APPLIED
    if isinstance(event, p.TaskSnapshot):
        transcript.history(applied, task, event.history, event.status.timestamp)
        for artifact in event.artifacts:
            artifacts.snapshot_artifact(applied, task, artifact)
        outcome = status.apply(applied, task, event.status, event.metadata)
    elif isinstance(event, p.StatusUpdate):
        outcome = status.apply(applied, task, event.status, event.metadata)
    else:
        artifacts.artifact_update(applied, task, event)
    return outcome


def _lock_task(applied: Applied, task_id: str, context_id: str) -> Task:
    # One lock order everywhere: a writer locks the session row first and everything
    # under it (tasks, interactions, transcript) is then serialized by that lock.
    agent, locked = applied.agent, applied.locked
    key = (agent.pk, task_id)
    task = locked.tasks.get(key)
    if task is not None:
        applied.session = locked.sessions[task.session_id]
    else:
        session_id = (
            Task.objects.filter(agent=agent, task_id=task_id)
            .values_list("session_id", flat=True)
            .first()
        )
        if session_id is not None:
            applied.session = locked.session(session_id)
        else:
            applied.session = locked.open_session(agent, context_id, applied.now)
        task, created = Task.objects.get_or_create(
            agent=agent,
            task_id=task_id,
            defaults={
                "session": applied.session,
                "state": TaskState.SUBMITTED,
                "status_received_at": applied.now,
            },
        )
        if created:
            locked.fresh.add(task.pk)
        if task.session_id != applied.session.pk:
            # Created meanwhile under another context: its own session is the one to lock.
            applied.session = locked.session(task.session_id)
        locked.tasks[key] = task
    # Keyed on the task, never on the context: some SDKs put a fresh contextId on
    # follow-up pushes, and the task's session is the one it started in.
    if context_id != applied.session.context_id:
        applied.warnings.append(
            f"contextId {context_id!r} differs from the task's {applied.session.context_id!r};"
            " kept the task's"
        )
    return task


def derive(applied: list[Applied], read: changes.Read | None = None) -> ProgressCard | None:
    """After one session's deliveries are applied, in order: derive its state and card once;
    returns the card. The latest applied note becomes the card's receipt if it changed the
    card; the others never reached the card, so they are kept as the agent said them.
    `read`: what deriving reads of the session, read with others' (changes.read_all)."""
    session = applied[-1].session
    if applied[-1].locked.forgot:
        session.refresh_from_db()  # as its deliveries left it, whatever a failed one did
    noted = [one for one in applied if one.note is not None]
    for one in noted[:-1]:
        transcript.keep_note_as_said(one)
    locked = applied[-1].locked
    written = changes.derive(
        session,
        updated_at=applied[-1].now,
        timeline=locked.timeline,
        card=locked.cards.get(session.pk, progress_card.NOT_READ),
        read=read,
        gathered=locked.derived,
    )
    receipt_by = (
        noted[-1]
        if noted
        else next((one for one in reversed(applied) if one.status_at is not None), None)
    )
    if receipt_by is not None:
        transcript.receipt(receipt_by, written)
    if written.card is not None:
        locked.cards[session.pk] = written.card  # a card it created, for a later derive
    return written.card
