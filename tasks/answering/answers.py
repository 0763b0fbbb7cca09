"""Answering what agents wait for (approvals, questions, connections, and the plain-text
questions of core agents), messaging them and cancelling their tasks. The only writer of an
interaction's answer.

One decision per interaction, ever. An interaction is claimed (open → answering) in one
conditional UPDATE under the session lock before the agent is called, so of two people, two
tabs or two clicks only one reaches the agent; the others hear who answered. From the claim
on, the interaction is bound to that decision: only when nothing reached the agent (no
connection, or the agent refused the first attempt with a JSON-RPC error) does it go back to
open. Any other failure (a timeout, a dropped connection, an HTTP error, a reply that is not
JSON, a process that died mid-call) leaves it sent but not confirmed: the same decision may be
sent again — the identical message, the same messageId, whoever presses — and any other
decision is refused, until the agent's next status closes it or asks it again (ingest).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models.functions import Coalesce
from django.utils import timezone

from tasks.answering import a2a_client, agents
from tasks.models import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    Agent,
    Interaction,
    Message,
    Session,
    Task,
    TaskState,
)
from tasks.notify import outbox
from tasks.pushes import fetched
from tasks.sessions import changes, question_detail, timeline
from tasks.wire import message_parts, profile, protocol

log = logging.getLogger(__name__)

PERMISSION = "tasks.answer_interaction"
MAX_VALUE = 4_000  # characters in a typed answer, and in a reason beside it


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


class AgentForgot(AgentFailed):
    """The agent answered "task not found": it restarted, or dropped the task."""


class NotOffered(AnswerError):
    """A choice the question does not offer: only the agent's own choices are sent as
    choices (a typed answer goes as `value`)."""


class StillWaiting(AnswerError):
    """A dismissal refused: the agent says it still waits for input on the task."""

    status = 409


TASK_NOT_FOUND = -32001
FORGOT = "the agent no longer knows this task (it may have restarted)"
DISMISS_IF = "dismiss it if it is no longer needed"


@dataclass(frozen=True)
class Decision:
    """What a person decided: `approved` for approvals and connections, `value` for
    questions and plain-text replies; `reason` an optional note sent beside it (not part of
    the decision: a retry sends the note first stored)."""

    approved: bool | None = None
    value: str | None = None
    reason: str = ""
    # The value came from a choice button: it must be one the question offers (checked
    # under the claim's lock, against the question as it is then).
    chosen: bool = False

    def as_json(self) -> dict:
        return {"approved": self.approved} if self.approved is not None else {"value": self.value}


# The buttons each kind offers, by the name a form posts as `decision`.
CHOICES = {
    Interaction.Kind.APPROVAL: {"approve": True, "deny": False},
    Interaction.Kind.CONNECTION: {"connected": True, "cancel": False},
}


def _text(name: str, value: object) -> str:
    """A typed field, stripped; refused when it is not text a person could have typed."""
    if not isinstance(value, str):
        raise AnswerError(f"{name} must be text")
    if "\x00" in value:
        raise AnswerError(f"{name} must not contain NUL characters")
    if len(value) > MAX_VALUE:
        raise AnswerError(f"{name} must be at most {MAX_VALUE} characters")
    return value.strip()


def parse_decision(kind: str, form: dict[str, Any]) -> Decision:
    """A decision from a posted form; a bad one is refused with what was wrong."""
    reason = _text("reason", form.get("reason", ""))
    if kind in CHOICES:
        if "choice" in form:
            raise NotOffered(
                "Choices are for questions: answer this with its buttons. Nothing was sent."
            )
        name = form.get("decision", "")
        if name not in CHOICES[kind]:
            allowed = " or ".join(f"'{n}'" for n in CHOICES[kind])
            raise AnswerError(f"decision must be {allowed} for a {kind}")
        return Decision(approved=CHOICES[kind][name], reason=reason)
    # A clicked choice button names itself apart from the text box, so the choice is what was
    # meant even when the box holds text (or nothing).
    if "choice" in form:
        choice = form.get("choice")
        if not _text("choice", choice):
            raise AnswerError("choice must not be empty")
        # Sent as the agent offered it, spaces and all: it is the agent's own string.
        return Decision(value=choice, reason=reason, chosen=True)
    value = form.get("value", "")
    if not isinstance(value, str) or not value.strip():
        raise AnswerError("write an answer first: value must not be empty")
    return Decision(value=_text("value", value), reason=reason)


def may_answer(user) -> bool:
    return user.is_authenticated and user.has_perm(PERMISSION)


def visible(user, interaction_pk: int) -> Interaction:
    """The interaction, if the user may see it (its agent's team); NotFound otherwise."""
    interaction = (
        Interaction.objects.select_related("task__session__agent")
        .filter(pk=interaction_pk, task__agent__in=Agent.objects.visible_to(user))
        .first()
    )
    if interaction is None:
        raise NotFound("No such question, or not one you may see.")
    return interaction


@dataclass(frozen=True)
class _Claim:
    bound: Interaction  # as claimed: its round, and the decision to send, who made it, when
    first: bool  # no earlier attempt can have reached the agent


def answer(user, interaction: Interaction, decision: Decision) -> Interaction:
    """Send `decision` to the agent as the answer to one interaction (from `visible`): the
    first decision, or the same one again while the agent has not confirmed it."""
    if not may_answer(user):
        raise NotAllowed("You may see this, but not answer it: ask for the approver role.")
    if interaction.kind in CHOICES and decision.approved is None:
        raise AnswerError(f"a {interaction.kind} is answered with a decision, not text")
    if interaction.kind not in CHOICES and decision.value is None:
        raise AnswerError(f"a {interaction.get_kind_display()} is answered with text")
    claim = _claim(user, interaction, decision)
    # What is sent is what is stored: a retry (anyone's) sends the very message of the first try.
    bound = claim.bound
    stored = Decision(**bound.answer, reason=bound.reason)
    task, session = interaction.task, interaction.task.session
    try:
        a2a_client.send_message(
            session.agent,
            _human_text(bound, stored),
            message_id=message_id(bound, stored),
            task_id=task.task_id,
            context_id=session.context_id,
            note=stored.reason,
            **_typed(bound, stored),
        )
    except a2a_client.A2AError as error:
        raise _not_taken(interaction, claim, error) from None
    return _record(interaction, claim)


def _not_taken(interaction: Interaction, claim: _Claim, error: a2a_client.A2AError) -> AgentFailed:
    """Record that the agent did not take the answer; returns what to tell the person."""
    bound, agent = claim.bound, interaction.task.session.agent
    refused = error.code is not None
    forgot, known = error.code == TASK_NOT_FOUND, None
    if refused and not forgot and error.reason != "CONTEXT_BUSY":
        # A refusal can mean the task ended, or was forgotten, without Onlooker hearing (a
        # lost push, a restart): the agent's own view of the task says which.
        forgot, known = _agent_view(agent, interaction.task.task_id)
    if claim.first and (error.not_sent or refused):
        _release(interaction, claim, str(error), forgot=forgot)
        told = (
            AgentForgot(f"Not sent: {FORGOT}. You can answer again, or {DISMISS_IF}.")
            if forgot
            else AgentFailed(f"Not sent: {error}; you can answer again.")
        )
    else:
        _unconfirmed(interaction, claim, str(error), forgot=forgot)
        # A retry the agent refused as unknown: the first try may have reached the agent
        # before it forgot, so the decision stays bound; nothing can confirm it now.
        told = (
            AgentForgot(
                f"{bound.sent}, but {FORGOT}. Retry sending {bound.decision_name}, or {DISMISS_IF}."
            )
            if forgot
            else AgentFailed(
                f"Not confirmed: {error}. {bound.sent}; the agent may have it. Retry sending "
                f"{bound.decision_name} (the same message, never another decision)."
            )
        )
    if known is not None:
        # Catch up with the task as the agent has it: if it went on, that closes the question.
        _apply_answer(agent, known)
        if _bound(interaction).state == Interaction.State.CLOSED:
            return AgentFailed(f"The agent did not take it: {error}. It has moved on from this.")
    return told


def _agent_view(agent: Agent, task_id: str) -> tuple[bool, dict | None]:
    """GetTask after a refusal: (whether the agent does not know the task, the task as it
    has it); (False, None) when it cannot tell."""
    try:
        return False, a2a_client.get_task(agent, task_id)
    except a2a_client.A2AError as error:
        return error.code == TASK_NOT_FOUND, None


def message_id(interaction: Interaction, decision: Decision) -> str:
    """Stable for one decision in one round (so a retry is the same message to the agent);
    another round asks anew, so its answer is another message."""
    digest = hashlib.sha256(
        json.dumps([interaction.pk, interaction.round, decision.as_json()], sort_keys=True).encode()
    ).hexdigest()[:24]
    return f"onlooker-answer-{interaction.pk}-{digest}"


def _typed(interaction: Interaction, decision: Decision) -> dict:
    """A core agent's question gets plain text (it cannot read more, and text never
    approves); every other kind gets the interactions/v1 answer."""
    if interaction.kind == Interaction.Kind.TEXT:
        return {}
    typed = {"interactionId": interaction.interaction_id, **decision.as_json()}
    return {"metadata": {profile.INTERACTIONS: typed}, "extensions": [profile.INTERACTIONS]}


def _human_text(interaction: Interaction, decision: Decision) -> str:
    if decision.value is not None:
        return decision.value
    verb = {
        (Interaction.Kind.CONNECTION, True): "Connected",
        (Interaction.Kind.CONNECTION, False): "Cancelled the connection",
    }.get((interaction.kind, decision.approved))
    verb = verb or ("Approved" if decision.approved else "Denied")
    who = interaction.answered_by.get_username() if interaction.answered_by else "someone"
    return f"{verb} by {who} in Onlooker"


@contextmanager
def _changing(interaction: Interaction) -> Iterator[None]:
    """One transaction that changes an interaction: the session row is locked first, as
    everywhere (ingest closes interactions under that lock). The card shows only open
    questions, so it is re-derived (a new revision every browser takes) and the change is
    hinted after commit."""
    with transaction.atomic():
        session = changes.lock(interaction.task.session_id)
        yield
        changes.changed([changes.Changed(session, interaction.task.session.agent.team_id)])


def _claim(user, interaction: Interaction, decision: Decision) -> _Claim:
    """Take the interaction for one call: the first decision, or a retry of the bound one
    (sent and not confirmed, or claimed by a process that died). Refuses anything else."""
    now = timezone.now()
    with _changing(interaction):
        # Under the session lock no other writer moves it between this read and the update;
        # the claim names the round read, so it never takes a round the person did not see.
        current = Interaction.objects.select_related("answered_by").get(pk=interaction.pk)
        decision = _as_offered(current, decision)
        if Interaction.objects.claim(
            current, by=user, answer=decision.as_json(), reason=decision.reason, at=now
        ):
            return _Claim(bound=_bound(interaction), first=True)
        if (
            current.unconfirmed
            and current.answer == decision.as_json()
            and Interaction.objects.reclaim(current, at=now)
        ):
            log.info("%s sends the answer to interaction %s again", user, interaction.pk)
            return _Claim(bound=_bound(interaction), first=False)
    raise AlreadyAnswered(_refusal(current))


NOT_OFFERED = (
    "That choice is not one this question offers, so nothing was sent. Press one of its "
    "choices, or type your answer."
)


def _as_offered(current: Interaction, decision: Decision) -> Decision:
    """A chosen value as the question offers it (the agent's own string), or the bound
    decision posted again by its retry button; NotOffered for anything else, so a forged
    or stale choice never reaches the agent as if it had been offered."""
    if not decision.chosen:
        return decision
    posted = _lines(decision.value or "")
    candidates = question_detail.offered_choices(current.detail)
    if current.unconfirmed and isinstance(current.answer, dict):
        # The retry button posts the bound answer, typed or chosen, as a choice.
        candidates = [*candidates, str(current.answer.get("value", ""))]
    for offered in candidates:
        if _lines(offered) == posted:
            return Decision(value=offered, reason=decision.reason, chosen=True)
    raise NotOffered(NOT_OFFERED)


def _lines(text: str) -> str:
    # Browsers send a button's line breaks as CRLF whatever the page held; compared
    # exactly otherwise (case, spaces, Unicode form): the agent gets its own string back.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _bound(interaction: Interaction) -> Interaction:
    return Interaction.objects.select_related("answered_by", "dismissed_by").get(pk=interaction.pk)


def _refusal(current: Interaction) -> str:
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


def _release(interaction: Interaction, claim: _Claim, error: str, *, forgot: bool = False) -> None:
    """Nothing reached the agent: the question is open again, for any decision."""
    log.warning("answer to interaction %s not sent: %s", interaction.pk, error)
    with _changing(interaction):
        # Closed by the agent meanwhile, it stays closed: it moved on without this answer.
        Interaction.objects.release(claim.bound, error=error, forgotten=forgot)


def _unconfirmed(
    interaction: Interaction, claim: _Claim, error: str, *, forgot: bool = False
) -> None:
    """The agent may have the answer: bound to it, sent and not confirmed."""
    log.warning("answer to interaction %s not confirmed: %s", interaction.pk, error)
    with _changing(interaction):
        Interaction.objects.record_sent(claim.bound, error=error, forgotten=forgot)


def _record(interaction: Interaction, claim: _Claim) -> Interaction:
    """The agent took it. Also when its next status already closed the question meanwhile
    (a push can overtake the reply): it was answered, and the agent confirmed."""
    now = timezone.now()
    with _changing(interaction):
        if Interaction.objects.record_answered(claim.bound, at=now):
            outbox.resolved([(interaction.pk, claim.bound.round)], at=now)
            timeline.answered(claim.bound, at=now)
    return Interaction.objects.select_related("answered_by").get(pk=interaction.pk)


# -- dismissing what the agent no longer knows ----------------------------------------------

NOTE_PROMPT_CHARS = 80  # of the prompt, in the transcript's one-line note


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
    current = _bound(interaction)
    if current.state not in Interaction.DISMISSABLE:
        raise AlreadyAnswered(_refusal(current))
    agent, task = interaction.task.session.agent, interaction.task
    forgotten_round: int | None = current.round
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
    else:
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
        _apply_answer(agent, known)
        forgotten_round = None
    now = timezone.now()
    with _changing(interaction):
        dismissed = Interaction.objects.dismiss(
            current, by=user, at=now, forgotten_round=forgotten_round
        )
        after = _bound(interaction)
        why = after.dismissed_because
        if dismissed:
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
        raise AlreadyAnswered(_refusal(after))
    log.info("%s dismissed interaction %s: %s", user, interaction.pk, why)
    return Dismissed(after.state, f"Dismissed by {user.get_username()}: {why}.")


def _quoted(interaction: Interaction) -> str:
    kind = interaction.get_kind_display().capitalize()
    prompt = " ".join(interaction.prompt[: NOTE_PROMPT_CHARS * 4].split())
    if len(prompt) > NOTE_PROMPT_CHARS:
        prompt = prompt[: NOTE_PROMPT_CHARS - 1].rstrip() + "…"
    return f"({kind}: {prompt or 'no prompt'})"


# -- talking to agents ------------------------------------------------------------------------


class Busy(AnswerError):
    """The agent refused a message sent "only if idle" (-32004 CONTEXT_BUSY)."""

    status = 409


class NotWaiting(AnswerError):
    """The page's reply_to and the session disagree: a reply to a question no longer asked,
    or a new message while a question waits."""

    status = 409


@dataclass(frozen=True)
class Composed:
    """A person's message as the composer posts it."""

    text: str
    message_id: str  # made by the page: a double submit is one message at the agent
    links: tuple[dict, ...] = ()  # url parts
    only_if_idle: bool = False  # metadata.delivery = "reject"
    reply_to: str = ""  # the task the page showed waiting for input; must be the one that is


@dataclass(frozen=True)
class Sent:
    task_id: str
    queued: bool
    replied: bool = False  # the agent answered with a message (now in the transcript)
    answered_question: bool = False  # the message went to the task that waited for input
    unreadable: bool = False  # its reply is not an A2A 1.0 message (not kept)

    @property
    def state(self) -> str:
        return "replied" if self.replied else "queued" if self.queued else "sent"

    def describe(self) -> str:
        if self.replied and self.unreadable:
            return "The agent took it and replied with a message Onlooker cannot read."
        if self.replied:
            return "The agent replied: see the transcript."
        if self.queued:
            return "Queued: the agent is busy with this conversation and will take it next."
        if self.answered_question:
            return "Sent as the reply to the agent's question."
        return "Sent."


def _visible_session(user, session_pk: int) -> Session:
    session = (
        Session.objects.select_related("agent")
        .filter(pk=session_pk, agent__in=Agent.objects.visible_to(user))
        .first()
    )
    if session is None:
        raise NotFound("No such session, or not one you may see.")
    if not may_answer(user):
        raise NotAllowed("You may follow this session, but not steer its agent.")
    return session


def waiting_task(session: Session) -> Task | None:
    """The session's newest task (turn), if it waits for input: what the composer answers."""
    newest = (
        session.tasks.annotate(at=Coalesce("status_timestamp", "status_received_at"))
        .order_by("-at", "-id")
        .first()
    )
    return newest if newest is not None and newest.state == TaskState.INPUT_REQUIRED else None


def parse_message(form: dict[str, Any]) -> Composed:
    """A composed message from a posted form; a bad one is refused with what was wrong."""
    text = parse_decision(Interaction.Kind.QUESTION, {"value": form.get("text", "")}).value
    message_id = form.get("message_id", "")
    if not (isinstance(message_id, str) and 8 <= len(message_id) <= 64):
        raise AnswerError("message_id must be 8 to 64 characters (the page makes one)")
    if not message_id.replace("-", "").isalnum():
        raise AnswerError("message_id may hold only letters, digits and dashes")
    links = form.get("links", "")
    try:
        url_parts = message_parts.links_from_form(links if isinstance(links, str) else "")
    except message_parts.BadLinks as error:
        raise AnswerError(str(error)) from None
    reply_to = form.get("reply_to", "")
    if not isinstance(reply_to, str) or len(reply_to) > protocol.MAX_ID:
        raise AnswerError("reply_to must name a task of this session")
    return Composed(
        text=text,
        message_id=message_id,
        links=tuple(url_parts),
        only_if_idle=form.get("only_if_idle") in ("on", "1", "true"),
        reply_to=reply_to,
    )


def send_message(user, session_pk: int, composed: Composed) -> Sent:
    """A message from a person in the session's conversation. When the newest task waits for
    input, the message answers it (same task, same context: the A2A lifecycle), through
    `answer` when the agent asked a question there, so a question gets one answer whether it
    comes from its form or the composer. Otherwise it starts work: a new task, a queued one
    when the agent is busy, or just the agent's reply."""
    session = _visible_session(user, session_pk)
    waiting = waiting_task(session)
    # What the page showed must be what is: a reply goes only to a question the person saw,
    # and a new message never turns into the answer to one they did not.
    if composed.reply_to and (waiting is None or waiting.task_id != composed.reply_to):
        raise NotWaiting(
            "The agent no longer waits for that reply (the task moved on); nothing was sent. "
            "Reload the page to see where it is."
        )
    if waiting is not None and not composed.reply_to:
        raise NotWaiting(
            "The agent now waits for an answer to its question; nothing was sent. Read it, "
            "then send your message again as the reply."
        )
    question = _question(waiting) if waiting is not None else None
    if question is not None:
        if composed.links:
            raise AnswerError(
                "links cannot go with an answer to the agent's question: answer it, then send "
                "the links in a message of their own"
            )
        answer(user, question, Decision(value=composed.text))
        return Sent(task_id=waiting.task_id, queued=False, answered_question=True)
    busy = set(session.tasks.exclude(state__in=TERMINAL_STATES).values_list("task_id", flat=True))
    result = _start_work(
        session.agent, composed, context_id=session.context_id,
        task_id=waiting.task_id if waiting else None,
    )  # fmt: skip
    if "message" in result:
        return Sent(task_id="", queued=False, replied=True, unreadable=result["unreadable"])
    task_id = str(result["task"].get("id", ""))
    if waiting is not None and task_id == waiting.task_id:
        return Sent(task_id=task_id, queued=False, answered_question=True)
    return Sent(task_id=task_id, queued=bool(busy - {task_id}))


def _question(task: Task) -> Interaction | None:
    """The question a waiting task asks (the newest not closed), as `answer` takes it."""
    return (
        task.interactions.exclude(state=Interaction.State.CLOSED)
        .select_related("task__session__agent", "answered_by")
        .order_by("-opened_at", "-id")
        .first()
    )


def start_session(user, agent_pk: int, composed: Composed) -> Session:
    """A new conversation with an agent: a message without a context (the agent makes one).
    Returns the session it opened."""
    agent = Agent.objects.visible_to(user).filter(pk=agent_pk).first()
    if agent is None:
        raise NotFound("No such agent, or not one you may use.")
    if not may_answer(user):
        raise NotAllowed("You may follow these agents, but not start work with them.")
    result = _start_work(agent, composed)
    answered = result.get("task") or result.get("message") or {}
    if not isinstance(answered.get("contextId"), str):
        raise AgentFailed("The agent answered without starting a task; nothing to follow.")
    session = Session.objects.filter(agent=agent, context_id=answered["contextId"]).first()
    if session is None:
        raise AgentFailed("The agent answered with a task Onlooker cannot read.")
    return session


def _start_work(
    agent: Agent, composed: Composed, *, context_id: str | None = None, task_id: str | None = None
) -> dict:
    """Send a person's message; returns `{"task": …}` or `{"message": …}` as the agent
    answered, already applied. New work gets a fresh push config, so it reports to Onlooker;
    a reply to a waiting task goes to a task that already does."""
    endpoint, push = (None, None) if task_id else agents.new_push_config(agent)
    try:
        result = a2a_client.send_message(
            agent, composed.text, message_id=f"onlooker-message-{composed.message_id}",
            task_id=task_id, context_id=context_id, push=push, parts=composed.links,
            metadata={"delivery": "reject"} if composed.only_if_idle else None,
        )  # fmt: skip
    except a2a_client.A2AError as error:
        if endpoint is not None:
            endpoint.delete()  # the agent never heard of this push config
        if error.code == -32004 and error.reason == "CONTEXT_BUSY":
            raise Busy("The agent is busy; nothing was sent.") from None
        raise AgentFailed(f"The agent did not take the message: {error}.") from None
    task = result.get("task")
    if isinstance(task, dict):
        _apply_answer(agent, task)
        return {"task": task}
    message = result["message"]
    if context_id and not message.get("contextId"):
        # Its reply in the conversation it was sent in, where the person reads it.
        message = {**message, "contextId": context_id}
    # No task carries the person's message back in its history: it is kept with the reply.
    sent = {
        "messageId": f"onlooker-message-{composed.message_id}",
        "role": "ROLE_USER",
        "parts": [{"text": composed.text}, *composed.links],
    }
    if message.get("contextId"):
        sent["contextId"] = message["contextId"]
    if task_id:
        sent["taskId"] = task_id
    _apply_answer(agent, sent, kind="message")
    readable = _apply_answer(agent, message, kind="message")
    return {"message": message, "unreadable": not readable}


def cancel(user, session_pk: int, task_id: str) -> str:
    """Ask the agent to cancel one of the session's tasks; returns its new state, in words."""
    session = _visible_session(user, session_pk)
    task = session.tasks.filter(task_id=task_id).first()
    if task is None:
        raise AnswerError("task_id names no task of this session")
    try:
        answer = a2a_client.cancel_task(session.agent, task.task_id)
    except a2a_client.A2AError as error:
        raise AgentFailed(f"The agent did not cancel: {error}.") from None
    _apply_answer(session.agent, answer)
    state = answer.get("status", {}).get("state", "") if isinstance(answer, dict) else ""
    label = TaskState(state).label if state in TaskState.values else "unknown"
    return f"The agent says the task is now {label}."


def _apply_answer(agent: Agent, answered: dict, *, kind: str = "task") -> bool:
    """What the agent answered is news about the session: apply it like a push would be, so
    the page shows it without waiting for one. False when Onlooker cannot read it."""
    try:
        if kind == "message":
            fetched.apply_fetched_message(agent, answered)
        else:
            fetched.apply_fetched(agent, answered)
    except protocol.BadBody as bad:
        log.warning("agent %s answered a %s Onlooker cannot read: %s", agent.pk, kind, bad.detail)
        return False
    return True
