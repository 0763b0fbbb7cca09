"""Marking an uncertain effect checked: a person looked whether a payment, an upload or the
like the agent could not confirm really happened, and says so. The check (an interaction of
kind check, opened by the applier: pushes/apply/checks.py) is then answered, on the record
as "checked" with who and how, and the channels told of it hear it ended. Nothing is sent
to the agent: it never waited on this.

Once, like every decision: of two people, two tabs or two clicks, one marks it; the others
hear who did ("Already checked by alice, 10:02").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.utils import timezone

from tasks.answering import record
from tasks.answering.answers import changing, reread
from tasks.answering.rules import (
    AlreadyAnswered,
    AnswerError,
    NotAllowed,
    already_decided,
    may_answer,
)
from tasks.models import Interaction
from tasks.notify import outbox
from tasks.sessions import timeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checked:
    state: str
    detail: str  # "Checked by alice, 10:02."


def mark_checked(user, interaction: Interaction, *, via: str = "page") -> Checked:
    """`user` marks the check `interaction` (from answers.visible: its task, session and
    agent loaded) checked. Needs the permission that answers; refused, changing nothing, for
    anything but an open check."""
    if not may_answer(user):
        raise NotAllowed("You may see this, but not mark it checked: ask for the approver role.")
    if interaction.kind != Interaction.Kind.CHECK:
        raise AnswerError(
            "Only an uncertain effect's check is marked checked: answer this with its own "
            "buttons. Nothing was marked."
        )
    now = timezone.now()
    with changing(interaction):
        # Read under the session's lock: the mark names the round and state read here.
        current = reread(interaction)
        current.task = interaction.task  # with its session and agent, for the record
        marked = Interaction.objects.mark_checked(current, by=user, at=now, via=via)
        if marked:
            record.decided(current, record.Made.CHECKED, by=user, via=via, at=now, sent=False)
            outbox.resolved([(current.pk, current.round)], at=now)
            timeline.checked(current, user, at=now)
    after = reread(interaction)
    if not marked:
        raise AlreadyAnswered(_already(after))
    log.info("%s marked check %s checked", user, interaction.pk)
    return Checked(after.state, f"{after.outcome}.")


def _already(current: Interaction) -> str:
    """Why a second mark is refused: 'Already checked by alice, 10:02.'"""
    if current.state == Interaction.State.ANSWERED:
        outcome = current.outcome
        return f"Already {outcome[:1].lower()}{outcome[1:]}."
    return already_decided(current)
