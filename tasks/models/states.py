"""The A2A task states Onlooker stores (`TaskState`: the choices of a task's and a session's
state, and the sets of them that end a task or wait for a person), and a session's state in
the words people use, with the tone its pill is drawn in. The one place that turns A2A states
into words: the card, its collapsed line, the sidebar row, the tile, the session page, the
live message's announcement and the state filter all ask here.

An interrupted state says what the person is asked for (the open interaction's kind), or that
their answer went and the agent has not gone on yet. A finished state never says a person is
needed: a session is only shown as finished once nothing in it waits for anyone (ingest
derives its state so). The JSON API keeps the A2A values; only what people read changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


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


# Pill tones, styled by `.pill-<tone>` in onlooker.css: colour always comes with the words.
OK, WARN, DANGER, INFO, NEUTRAL = "ok", "warn", "danger", "info", "neutral"


@dataclass(frozen=True)
class Shown:
    words: str
    tone: str
    # A person is asked for something right now.
    asks: bool = False
    # The session will not move again: waiting lines and unfinished steps are over.
    finished: bool = False


_PLAIN = {
    TaskState.SUBMITTED: Shown("Queued", NEUTRAL),
    TaskState.WORKING: Shown("Working", INFO),
    TaskState.COMPLETED: Shown("Done", OK, finished=True),
    TaskState.FAILED: Shown("Failed", DANGER, finished=True),
    TaskState.REJECTED: Shown("Rejected", DANGER, finished=True),
    TaskState.CANCELED: Shown("Cancelled", NEUTRAL, finished=True),
}
_ASKS = {
    "approval": Shown("Needs approval", WARN, asks=True),
    "connection": Shown("Needs a connection", WARN, asks=True),
    "question": Shown("Needs an answer", WARN, asks=True),
}
# An interrupted state whose open interaction does not say what it asks (a core agent's plain
# text, or none known yet): what the state itself asks for.
_INTERRUPTED = {
    TaskState.INPUT_REQUIRED: _ASKS["question"],
    TaskState.AUTH_REQUIRED: _ASKS["connection"],
}
ANSWER_SENT = Shown("Answer sent", INFO)
NO_STATE = Shown("No state yet", NEUTRAL)
# A task an agent completed after a person said no (the demo's deploy, denied, ends COMPLETED:
# the build stands, production untouched) did not do what was asked: it ends as the denial,
# not as a green "Done".
_REFUSED = {
    "approval": Shown("Denied", DANGER, finished=True),
    "connection": Shown("Declined", DANGER, finished=True),
}


def refused(kind: str, answer: object) -> Shown | None:
    """How a completed session ends whose last decision (of `kind`, `answer`) said no."""
    said_no = isinstance(answer, dict) and answer.get("approved") is False
    return _REFUSED.get(kind) if said_no else None


def shown(state: str, *, asking: str | None = None, answered: bool = False) -> Shown:
    """`state` (an A2A value, or "" for none yet) in words. `asking` is the kind of the open
    interaction, if one is open; `answered` says a person's answer went and the agent has
    not gone on yet."""
    if state in _PLAIN:
        return _PLAIN[state]
    if state in INTERRUPTED_STATES:
        if asking is not None:
            return _ASKS.get(asking, _INTERRUPTED[state])
        if answered:
            return ANSWER_SENT
        return _INTERRUPTED[state]
    return NO_STATE


def of_facts(facts: dict | None) -> Shown:
    """A state from a card's facts (sessions/progress_card.from_session writes them): its
    state, the open question's kind, whether an answer went."""
    facts = facts or {}
    if facts.get("state") == TaskState.COMPLETED and facts.get("refused") in _REFUSED:
        return _REFUSED[facts["refused"]]
    question = facts.get("question") or {}
    return shown(
        facts.get("state", ""),
        asking=question.get("kind") if isinstance(question, dict) else None,
        answered=bool(facts.get("answer")),
    )


def of_session(state: str, facts: dict | None) -> Shown:
    """A session's state, with what its card says it asks when the card was derived from
    this very state (a card read before a change must not word the state after it)."""
    if facts and facts.get("state", "") == state:
        return of_facts(facts)
    return shown(state)


def filter_choices() -> list[tuple[str, str]]:
    """The state filter's options: each A2A value in the words its sessions are shown with
    (an interrupted state by what it asks for most often)."""
    words = {
        TaskState.INPUT_REQUIRED: "Needs an answer",
        TaskState.AUTH_REQUIRED: "Needs approval or a connection",
    }
    return [(value, words.get(value) or shown(value).words) for value in TaskState.values]


def uncertain_words(effect: str) -> str:
    """An effect whose outcome was lost (effects/v1), as people say it: "upload:report.pdf"
    reads "Upload of report.pdf unconfirmed". The id is the agent's: an id without a
    `verb:target` shape is named as it is."""
    verb, _, target = effect.partition(":")
    verb = " ".join(verb.replace("_", " ").replace("-", " ").split())
    target = target.strip()
    if verb and target:
        return f"{verb[:1].upper()}{verb[1:]} of {target} unconfirmed"
    return f"Outcome of “{effect.strip()}” unconfirmed"
