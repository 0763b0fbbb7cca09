"""An uncertain effect (effects/v1 `uncertain`) opens a check: an item a person looks at and
marks checked (answering/checks.py), opened and notified like a question. Unlike a question,
the agent does not wait on it: its next status neither closes nor asks it again, and only a
person ends it.

One check per effect: the same effect pushed again (a replay, a repeated status, or the same
effect in a later turn while its check is still open) opens nothing more. Once checked, the
same effect reported by a later turn is a new uncertainty, and opens a check of its own.
"""

from __future__ import annotations

from datetime import datetime

from tasks.models import Interaction, Task
from tasks.notify import outbox
from tasks.pushes.apply.state import Applied
from tasks.sessions import effect_checks
from tasks.wire import protocol as p


def opened(applied: Applied, task: Task, effect: str, status: p.Status, at: datetime) -> None:
    """The check of `effect`, reported by `status` of `task` at `at` (the agent's time, else
    the push's): opened, and the team told, unless one is open for it already."""
    interaction_id = effect_checks.interaction_id(effect)
    still_open = Interaction.objects.filter(
        task__session_id=task.session_id,
        interaction_id=interaction_id,
        kind=Interaction.Kind.CHECK,
        state=Interaction.State.OPEN,
    )
    if still_open.exclude(task=task).exists():
        return  # asked in an earlier turn, and nobody has looked yet: one item to check
    check, created = Interaction.objects.open(
        task,
        interaction_id,
        kind=Interaction.Kind.CHECK,
        prompt=effect_checks.prompt(effect),
        detail=effect_checks.detail(effect),
        at=at,
        asked_at=status.timestamp,
        asked_message_id=status.message.message_id if status.message else "",
        current=True,  # whatever the status's place: the effect is a fact either way
    )
    if not created:
        if check.kind != Interaction.Kind.CHECK:
            applied.warnings.append(
                f"effects/v1: the agent's own interaction {interaction_id!r} has the id of "
                "this effect's check; no check was opened"
            )
        return  # the same effect again: its check stays as it is (open, or checked)
    outbox.opened(check, applied.session, applied.agent, at=applied.now)
