"""Who may act on agents, and the refusals every action on them shares (answers, dismissals,
talking, following): each an `AnswerError` whose words are for the person who tried and whose
`status` is the HTTP status a view answers with.
"""

from __future__ import annotations

from tasks.models import Interaction

PERMISSION = "tasks.answer_interaction"
TASK_NOT_FOUND = -32001  # the JSON-RPC error of an agent that does not know the task


class AnswerError(Exception):
    """Why an answer was not sent, in words for the person who tried; `status` is the HTTP
    status a view answers with."""

    status = 400


class NotFound(AnswerError):
    status = 404


class NotAllowed(AnswerError):
    status = 403


class AlreadyAnswered(AnswerError):
    status = 409


class AgentFailed(AnswerError):
    status = 502


def may_answer(user) -> bool:
    return user.is_authenticated and user.has_perm(PERMISSION)


def held_words(current: Interaction) -> str:
    """Why a held interaction refuses another decision: someone's is about to go out."""
    who = current.answered_by.get_username() if current.answered_by else "someone"
    return (
        f"{who} has just answered this ({current.decision_name}); it is sent in a few "
        "seconds unless they undo it. Nothing else was sent."
    )


def already_decided(current: Interaction) -> str:
    """Why another decision (or a dismissal) is refused: what became of the question."""
    if current.state == Interaction.State.HELD:
        return held_words(current)
    if current.unconfirmed:
        return (
            f"{current.sent}; the agent has not confirmed yet — "
            f"Retry sending {current.decision_name}"
        )
    if current.state == Interaction.State.ANSWERING:
        return f"{current.outcome}: {current.decision_name}."
    if current.state == Interaction.State.DISMISSED:
        return f"Already dismissed: {current.dismissal}."
    if current.state == Interaction.State.CLOSED:
        if current.answer is not None:
            return f"{current.outcome}."
        return "The agent no longer waits for this: it moved on."
    return f"Already answered: {current.outcome}."
