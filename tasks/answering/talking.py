"""Talking to agents from a session (the composer: a message that starts work, or the reply
to the task waiting for input), starting a new session with an agent, and cancelling a task.
Whatever the agent answers is applied at once, as a push would be.

Each goes to the agent as the person who sends it (answering/callers.py): their own credential,
or the shared one where the agent allows it. The caller is resolved first, so a person an agent
refuses (callers.NeedsCredential) gets the refusal with nothing stored and nothing sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models.functions import Coalesce
from django.utils import timezone

from tasks.answering import a2a_client, agents, callers, duties
from tasks.answering.answers import Decision, answer, apply_reply, parse_decision
from tasks.answering.rules import AgentFailed, AnswerError, NotAllowed, NotFound, may_answer
from tasks.models import TERMINAL_STATES, Agent, Interaction, Session, Task, TaskState
from tasks.sessions import timeline
from tasks.wire import message_parts, protocol


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
    caller = callers.for_person(session.agent, user)  # before anything is stored or sent
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
        caller, user, composed, context_id=session.context_id,
        task_id=waiting.task_id if waiting else None,
    )  # fmt: skip
    if "message" in result:
        return Sent(task_id="", queued=False, replied=True, unreadable=result["unreadable"])
    task_id = str(result["task"].get("id", ""))
    if waiting is not None and task_id == waiting.task_id:
        return Sent(task_id=task_id, queued=False, answered_question=True)
    duties.started(user, session.agent, task_id)  # new work: this person started it
    return Sent(task_id=task_id, queued=bool(busy - {task_id}))


def _question(task: Task) -> Interaction | None:
    """The question a waiting task asks (the newest not closed), as `answer` takes it. A
    check is never it: a person marks that checked, and nothing of it goes to the agent."""
    return (
        task.interactions.exclude(state=Interaction.State.CLOSED)
        .exclude(kind=Interaction.Kind.CHECK)
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
    result = _start_work(callers.for_person(agent, user), user, composed)
    if "task" in result:
        duties.started(user, agent, str(result["task"].get("id", "")))
    answered = result.get("task") or result.get("message") or {}
    if not isinstance(answered.get("contextId"), str):
        raise AgentFailed("The agent answered without starting a task; nothing to follow.")
    session = Session.objects.filter(agent=agent, context_id=answered["contextId"]).first()
    if session is None:
        raise AgentFailed("The agent answered with a task Onlooker cannot read.")
    return session


def _start_work(
    caller: callers.Caller,
    user,
    composed: Composed,
    *,
    context_id: str | None = None,
    task_id: str | None = None,
) -> dict:
    """Send `user`'s message as `caller`; returns `{"task": …}` or `{"message": …}` as the
    agent answered, already applied. New work gets a fresh push config, so it reports to
    Onlooker; a reply to a waiting task goes to a task that already does. A config made with
    the person's own credential is theirs at the agent (which keeps configs per subject), so
    the endpoint remembers them: ending it must go out as them."""
    agent = caller.agent
    created_for = user if caller.person_id is not None else None
    endpoint, push = (
        (None, None) if task_id else agents.new_push_config(agent, created_for=created_for)
    )
    try:
        result = a2a_client.send_message(
            caller, composed.text, message_id=f"onlooker-message-{composed.message_id}",
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
        if endpoint is not None and isinstance(task.get("id"), str):
            agents.serves_task(endpoint, task["id"])
        apply_reply(agent, task)
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
    apply_reply(agent, sent, kind="message")
    readable = apply_reply(agent, message, kind="message")
    return {"message": message, "unreadable": not readable}


def cancel(user, session_pk: int, task_id: str) -> str:
    """Ask the agent to cancel one of the session's tasks; returns its new state, in words."""
    session = _visible_session(user, session_pk)
    caller = callers.for_person(session.agent, user)  # refused before anything is sent
    task = session.tasks.filter(task_id=task_id).first()
    if task is None:
        raise AnswerError("task_id names no task of this session")
    try:
        left = a2a_client.cancel_task(caller, task.task_id)
    except a2a_client.A2AError as error:
        raise AgentFailed(f"The agent did not cancel: {error}.") from None
    # Who asked, on the session's timeline before the agent's "Cancelled" is applied, so the
    # page that shows the cancelled task can already say by whom.
    timeline.cancelled(task, user, at=timezone.now())
    apply_reply(session.agent, left)
    state = left.get("status", {}).get("state", "") if isinstance(left, dict) else ""
    label = TaskState(state).label if state in TaskState.values else "unknown"
    return f"The agent says the task is now {label}."
