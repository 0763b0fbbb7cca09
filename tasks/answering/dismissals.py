"""Dismissing what the agent no longer knows: a question no answer can reach (the agent
restarted and forgot its task, or went on without Onlooker hearing) is closed by a person who
may answer, on the agent's own word, with a note in the transcript.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.utils import timezone

from tasks.answering import a2a_client, record
from tasks.answering.answers import apply_reply, changing, reread
from tasks.answering.rules import (
    TASK_NOT_FOUND,
    AgentFailed,
    AlreadyAnswered,
    AnswerError,
    NotAllowed,
    already_decided,
    may_answer,
)
from tasks.models import INTERRUPTED_STATES, Interaction, Message, TaskState
from tasks.notify import outbox
from tasks.sessions import timeline

log = logging.getLogger(__name__)

NOTE_PROMPT_CHARS = 80  # of the prompt, in the transcript's one-line note


class StillWaiting(AnswerError):
    """A dismissal refused: the agent says it still waits for input on the task."""

    status = 409


@dataclass(frozen=True)
class Dismissed:
    state: str
    detail: str


def dismiss(user, interaction: Interaction) -> Dismissed:
    """Close an interaction no answer can reach: the agent, asked again now (GetTask), does
    not know its task, or no longer waits for input on it. Refused, changing nothing, while
    the agent still waits, or when it cannot be asked. Leaves a note in the transcript."""
    if not may_answer(user):
        raise NotAllowed("You may see this, but not dismiss it: ask for the approver role.")
    if interaction.kind == Interaction.Kind.CHECK:
        # No agent waits on a check, so none can forget it: only a person's look ends it.
        raise AnswerError(
            "A check is not dismissed: look whether the effect happened, then mark it "
            "checked. Nothing was dismissed."
        )
    current = reread(interaction)
    if current.state not in Interaction.DISMISSABLE:
        raise AlreadyAnswered(already_decided(current))
    task = interaction.task
    forgotten_round = _forgotten_round(interaction, current)
    now = timezone.now()
    with changing(interaction):
        dismissed = Interaction.objects.dismiss(
            current, by=user, at=now, forgotten_round=forgotten_round
        )
        after = reread(interaction)
        why = after.dismissed_because
        if dismissed:
            record.decided(
                current, record.Made.DISMISS, by=user, via="page", at=now, sent=False, reason=why
            )
            outbox.resolved([(interaction.pk, current.round)], at=now)
            timeline.dismissed(current, user, at=now, because=why)
            Message.objects.create(
                session_id=task.session_id,
                task=task,
                # One note per round, whatever races past the conditional update above.
                message_id=f"onlooker-dismissed-{interaction.pk}-{current.round}",
                role=Message.Role.ONLOOKER,
                text=f"Dismissed by {user.get_username()}: {why}. {_quoted(current)}",
                at=now,
            )
    if not dismissed:
        if after.state == Interaction.State.CLOSED:
            # The agent's task had gone on (catching up closed it, or a push did meanwhile):
            # the question is gone, which is what the person asked for.
            return Dismissed(after.state, "Closed: the agent had moved on.")
        raise AlreadyAnswered(already_decided(after))
    log.info("%s dismissed interaction %s: %s", user, interaction.pk, why)
    return Dismissed(after.state, f"Dismissed by {user.get_username()}: {why}.")


def _forgotten_round(interaction: Interaction, current: Interaction) -> int | None:
    """Ask the agent (GetTask) whether it still waits: the round it forgot when it does not
    know the task; None when it went on (caught up with here, as a push would have been).
    Refuses while it still waits, or when it cannot be asked or read."""
    agent, task = interaction.task.session.agent, interaction.task
    try:
        known = a2a_client.get_task(agent, task.task_id)
    except a2a_client.A2AError as error:
        if error.code != TASK_NOT_FOUND:
            # Unreachable is not "forgotten": an agent that is down for a minute may still
            # hold the task and wait for this answer, and a dismissed question is hidden
            # from everyone who could give it. Only the agent's own word closes it.
            raise AgentFailed(
                f"Nothing was dismissed: Onlooker could not ask the agent whether it still "
                f"waits for this ({error}). Try again once it answers."
            ) from None
        return current.round
    status = known.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    if state not in TaskState.values:
        raise AgentFailed(
            "Nothing was dismissed: the agent answered with a task Onlooker cannot read, "
            "so it cannot tell whether the agent still waits for this."
        )
    if state in INTERRUPTED_STATES:
        raise StillWaiting(
            "The agent still knows this task and waits for an answer: answer it instead. "
            "Nothing was dismissed."
        )
    # The agent went on and Onlooker missed it: catch up, as a push would have.
    apply_reply(agent, known)
    return None


def _quoted(interaction: Interaction) -> str:
    kind = interaction.get_kind_display().capitalize()
    prompt = " ".join(interaction.prompt[: NOTE_PROMPT_CHARS * 4].split())
    if len(prompt) > NOTE_PROMPT_CHARS:
        prompt = prompt[: NOTE_PROMPT_CHARS - 1].rstrip() + "…"
    return f"({kind}: {prompt or 'no prompt'})"
