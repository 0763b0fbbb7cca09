"""The questions and approvals an agent waits on: opened (or asked anew) by an interrupted
status, closed when the task moves on; the team hears of both (the notification outbox)."""

from __future__ import annotations

from datetime import datetime

from tasks.models import INTERRUPTED_STATES, Interaction, Task, TaskState
from tasks.notify import outbox
from tasks.pushes.apply.state import Applied
from tasks.wire import profile
from tasks.wire import protocol as p

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


def opened(
    applied: Applied,
    task: Task,
    status: p.Status,
    metadatas: tuple[dict, ...],
    at: datetime,
    *,
    current: bool,
) -> None:
    """An interrupted status: the interaction it asks, opened (or recorded as closed, if
    the status is not current)."""
    asked = _read(applied, status, metadatas, at)
    asking = {
        "asked_at": status.timestamp,
        "asked_message_id": status.message.message_id if status.message else "",
    }
    interaction, created = Interaction.objects.open(
        task,
        asked.interaction_id,
        kind=asked.kind,
        prompt=asked.prompt,
        detail=asked.detail,
        at=at,
        current=current,
        **asking,
    )
    if interaction.kind == Interaction.Kind.CHECK:
        # An uncertain effect's check took this id first: only a person ends a check.
        applied.warnings.append(
            f"interactions/v1: {asked.interaction_id!r} is the id of an uncertain effect's "
            "check; not asked"
        )
        return
    if not current:
        return
    # Asked for the first time, or anew (a new round): the team hears of it.
    anew = created or (
        _asked_again(interaction, status) and Interaction.objects.reopen(interaction, **asking)
    )
    if anew:
        outbox.opened(interaction, applied.session, applied.agent, at=applied.now)
    close(applied, task, keep=interaction)


def _read(
    applied: Applied, status: p.Status, metadatas: tuple[dict, ...], at: datetime
) -> profile.OpenInteraction:
    """What the status asks: the profile's interaction, or a core agent's question."""
    asked = None
    value = profile.find(profile.INTERACTIONS, *metadatas)
    if value is not None:
        asked = profile.read_interaction(value, applied.warnings)
    if asked is not None:
        expected = _EXPECTED_STATE[asked.kind]
        if status.state != expected:
            applied.warnings.append(
                f"interactions/v1: a {asked.kind} arrived with {status.state}; "
                f"the profile uses {expected}"
            )
        return asked
    # A core agent asks in plain text; a text reply to it can never approve anything.
    text = status.message.text if status.message else ""
    reference = status.message.message_id if status.message else at.isoformat()
    return profile.OpenInteraction(f"text:{reference}", "text", text)


def close(applied: Applied, task: Task, keep: Interaction | None) -> None:
    """The agent moved on from these: closed, keeping any decision sent to them (a call
    still in flight records its confirmation over this)."""
    if task.state not in INTERRUPTED_STATES:
        # Only a waiting task has pending interactions, and `task.state` is still the
        # stored one here (this status's is set after): most pushes need no UPDATE.
        return
    outbox.resolved(task.interactions.close(keep=keep), at=applied.now)
