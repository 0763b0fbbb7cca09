"""A task's status: where it falls among the ones already applied (by the agent's
timestamps), and what it carries: the task's state, the card's note and plan, uncertain
effects and telemetry. Its message goes to the transcript, its question to interactions, an
uncertain effect's check to checks.

A status newer than the stored one is *current* and sets the task's state; an older one is
*history*: its message, effect and plan are kept but the state is not touched. A terminal
state is final: later statuses are logged and not applied.
"""

from __future__ import annotations

from datetime import datetime

from tasks.models import INTERRUPTED_STATES, TERMINAL_STATES, Delivery, Task
from tasks.pushes.apply import checks, interactions, transcript
from tasks.pushes.apply.state import Applied
from tasks.wire import profile
from tasks.wire import protocol as p

CURRENT, HISTORY, AFTER_TERMINAL = "current", "history", "after_terminal"
_OUTCOMES = {
    CURRENT: Delivery.Outcome.APPLIED,
    HISTORY: Delivery.Outcome.STALE,
    AFTER_TERMINAL: Delivery.Outcome.AFTER_TERMINAL,
}


def _newer(incoming: datetime | None, stored: datetime | None) -> bool:
    """Order by the agent's timestamps; an agent that sends none is taken in arrival order."""
    if stored is None:
        return True
    if incoming is None:
        return False
    return incoming >= stored


def _placement(task: Task, status: p.Status) -> str:
    stored = task.status_timestamp
    if task.is_terminal:
        if status.timestamp and stored and status.timestamp < stored:
            return HISTORY
        return AFTER_TERMINAL
    if status.state in TERMINAL_STATES or _newer(status.timestamp, stored):
        return CURRENT
    return HISTORY


def apply(applied: Applied, task: Task, status: p.Status, event_metadata: dict) -> str:
    """Apply a task's status; returns the delivery's outcome."""
    placement = _placement(task, status)
    if placement == AFTER_TERMINAL:
        applied.warnings.append(f"the task already ended ({task.state}); not applied")
        return _OUTCOMES[placement]
    message_metadata = status.message.metadata if status.message else {}
    metadatas = (event_metadata, message_metadata)
    at = status.timestamp or applied.now

    _message(applied, task, status, at)
    _effects(applied, task, status, metadatas, at)
    _plan(applied, task, metadatas, status.timestamp)
    _note(task, status)

    current = placement == CURRENT
    if status.state in INTERRUPTED_STATES:
        interactions.opened(applied, task, status, metadatas, at, current=current)
    if current:
        _current(applied, task, status, metadatas, at)
    applied.locked.save_task(task)
    return _OUTCOMES[placement]


def _message(applied: Applied, task: Task, status: p.Status, at: datetime) -> None:
    if status.message is not None and _is_note(status) and status.state not in TERMINAL_STATES:
        # Kept once the card is derived: as a receipt if it changed the card. A final
        # status's text is the turn's reply: the transcript keeps it as said.
        applied.note = (task, status.message, at, status.timestamp is None)
    elif status.message is not None:
        transcript.keep(applied, task, status.message, at, estimated=status.timestamp is None)
    applied.status_at = (task, at)
    if status.timestamp is not None and task.status_timestamp is None:
        # The task's first dated status: messages dated only by their receipt (the
        # user's, in a snapshot that raced the agent's first update) came before it.
        transcript.before_first_dated(applied, task, at)


def _current(
    applied: Applied, task: Task, status: p.Status, metadatas: tuple[dict, ...], at: datetime
) -> None:
    """A current status: the task's state, telemetry and status message."""
    if status.state not in INTERRUPTED_STATES:
        interactions.close(applied, task, keep=None)
    telemetry = profile.find(profile.TELEMETRY, *metadatas)
    if telemetry is not None:
        reported = profile.read_telemetry(telemetry, applied.warnings)
        applied.grown.add(task.agent_id, applied.now, task.telemetry, reported)
        task.telemetry = reported
    locked = applied.locked
    if status.state != task.state or task.pk in locked.fresh:
        locked.fresh.discard(task.pk)
        locked.timeline.state(task, status.state, at=applied.now, agent_timestamp=status.timestamp)
    task.state = status.state
    task.status_timestamp = status.timestamp or task.status_timestamp
    task.status_received_at = applied.now
    task.status_message = status.message.text if status.message else ""


def _effects(
    applied: Applied, task: Task, status: p.Status, metadatas: tuple[dict, ...], at: datetime
) -> None:
    """An uncertain effect: kept on the task, and a check opened for a person to look at."""
    value = profile.find(profile.EFFECTS, *metadatas)
    if value is None:
        return
    effect = profile.read_uncertain(value, applied.warnings)
    if not effect or effect in task.uncertain_effects:
        return  # known already: its check was opened with it
    # Sorted, not in arrival order: pushes may come in any order.
    task.uncertain_effects = sorted([*task.uncertain_effects, effect])
    checks.opened(applied, task, effect, status, at)


def _is_note(status: p.Status) -> bool:
    """Whether a status's text is a card note. A message of an interrupted state, or one
    that opens an interaction, is the interaction's prompt instead."""
    message = status.message
    if message is None or not message.text or status.state in INTERRUPTED_STATES:
        return False
    return profile.find(profile.INTERACTIONS, message.metadata) is None


def _note(task: Task, status: p.Status) -> None:
    """The card's note: the latest status text that is not a question."""
    if not _is_note(status):
        return
    message = status.message
    if _newer(status.timestamp, task.note_timestamp):
        task.note = message.text
        task.note_timestamp = status.timestamp or task.note_timestamp


def _plan(
    applied: Applied, task: Task, metadatas: tuple[dict, ...], timestamp: datetime | None
) -> None:
    value = profile.find(profile.PROGRESS, *metadatas)
    if value is None:
        return
    plan = profile.read_progress(value, applied.warnings)
    if plan is not None and _newer(timestamp, task.plan_timestamp):
        task.plan = plan
        task.plan_timestamp = timestamp or task.plan_timestamp
