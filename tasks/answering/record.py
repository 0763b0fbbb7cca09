"""The one writer of the record of decisions (tasks/models/decisions.py): called inside the
transaction of the change a decision makes, so the record holds a decision exactly when the
interaction does, and never edits what it wrote.

    decided(...)     a decision was made: sent to the agent (whether or not it confirmed), a
                     dismissal, a mark of expiry, a check
    confirmed(...)   the agent's reply came for the decision of that round
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from tasks.models import Decision, DecisionConfirmation, Interaction

Made = Decision.Made

# Each kind's words for approved / not approved.
_YES_NO = {
    Interaction.Kind.CONNECTION: (Made.CONNECT, Made.DECLINE),
}


def request_digest(prompt: str, detail: Any) -> str:
    """SHA-256 of the question as people were shown it: its prompt and detail as JSON with
    sorted keys, no spaces, non-ASCII as is (`{"detail":…,"prompt":…}`), hex."""
    shown = json.dumps(
        {"prompt": prompt, "detail": detail},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(shown.encode()).hexdigest()


def made_of(interaction: Interaction) -> str:
    """What the interaction's stored answer decides: approve, deny, connect, decline, answer."""
    approved = (interaction.answer or {}).get("approved")
    if approved is None:
        return Made.ANSWER
    yes, no = _YES_NO.get(interaction.kind, (Made.APPROVE, Made.DENY))
    return yes if approved else no


def decided(
    interaction: Interaction,
    made: str,
    *,
    by: Any,
    via: str,
    at: datetime,
    sent: bool,
    value: Any = None,
    reason: str = "",
) -> None:
    """Record one decision on `interaction` as it stands in this round (its `task`, session
    and agent loaded). The same decision again in the same round (a retry) adds nothing."""
    task = interaction.task
    agent = task.session.agent
    Decision.objects.bulk_create(
        [
            Decision(
                interaction_pk=interaction.pk,
                interaction_id=interaction.interaction_id,
                round=interaction.round,
                session_pk=task.session_id,
                task_id=task.task_id,
                agent_pk=agent.pk,
                agent_name=agent.name,
                team_pk=agent.team_id,
                kind=interaction.kind,
                decision=made,
                value=value,
                reason=reason,
                by_pk=by.pk if by is not None else None,
                by=by.get_username() if by is not None else "",
                via=via or Decision.Via.PAGE,
                at=at,
                opened_at=interaction.opened_at,
                request_digest=request_digest(interaction.prompt, interaction.detail),
                sent=sent,
            )
        ],
        ignore_conflicts=True,
    )


def sent_decision(interaction: Interaction, *, at: datetime) -> None:
    """The decision bound to `interaction` (as claimed) went to the agent."""
    answer = interaction.answer or {}
    decided(
        interaction,
        made_of(interaction),
        by=interaction.answered_by,
        via=interaction.answered_via,
        at=at,
        sent=True,
        value=answer.get("value"),
        reason=interaction.reason,
    )


def confirmed(interaction: Interaction, *, at: datetime) -> None:
    """The agent's reply came for the decision of `interaction.round`."""
    DecisionConfirmation.objects.bulk_create(
        [DecisionConfirmation(interaction_pk=interaction.pk, round=interaction.round, at=at)],
        ignore_conflicts=True,
    )
