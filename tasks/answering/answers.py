"""Answering what agents wait for (approvals, questions, connections, and the plain-text
questions of core agents). The only writer of an interaction's answer; dismissing a question
no answer can reach is in dismissals.py, messages and cancels in talking.py.

One decision per interaction, ever. An interaction is claimed (open → answering) in one
conditional UPDATE under the session lock before the agent is called, so of two people, two
tabs or two clicks only one reaches the agent; the others hear who answered. From the claim
on, the interaction is bound to that decision: only when nothing reached the agent (no
connection, or the agent refused the first attempt with a JSON-RPC error) does it go back to
open. Any other failure (a timeout, a dropped connection, an HTTP error, a reply that is not
JSON, a process that died mid-call) leaves it sent but not confirmed: the same decision may be
sent again — the identical message, the same messageId, whoever presses — and any other
decision is refused, until the agent's next status closes it or asks it again (the applier).

A page's answer is first held a few seconds for Undo (open → held, answering/held.py,
which claims it held → answering when the time has come and sends it through `deliver`, as
any answer is sent); held, it is taken: any other decision is refused.

A decision goes to the agent as the person who made it (answering/callers.py): with their own
credential, or the shared one where the agent allows it. Whose credential goes is settled
before the claim, so an agent that needs the person's own credential refuses them with
nothing stored and nothing sent.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from tasks.answering import a2a_client, callers, record
from tasks.answering.rules import (
    TASK_NOT_FOUND,
    AgentFailed,
    AlreadyAnswered,
    AnswerError,
    NotAllowed,
    NotFound,
    already_decided,
    held_words,
    may_answer,
)
from tasks.models import Agent, Interaction, TaskStart
from tasks.notify import outbox
from tasks.pushes import fetched
from tasks.sessions import changes, question_detail, timeline
from tasks.wire import profile, protocol

log = logging.getLogger(__name__)

MAX_VALUE = 4_000  # characters in a typed answer, and in a reason beside it


class AgentForgot(AgentFailed):
    """The agent answered "task not found": it restarted, or dropped the task."""


class RoundClosed(AnswerError):
    """The decision was made for a round of the question that has closed: the agent asked
    it anew since."""

    status = 410


ASKED_AGAIN = (
    "The agent has asked this again since, so this answer was not sent: answer the question "
    "as it is asked now (a newer link, or the session page)."
)


class NotOffered(AnswerError):
    """A choice the question does not offer: only the agent's own choices are sent as
    choices (a typed answer goes as `value`)."""


FORGOT = "the agent no longer knows this task (it may have restarted)"
DISMISS_IF = "dismiss it if it is no longer needed"
NOT_YOURS = (
    "the agent does not know this task under your own credential (an agent may show a task "
    "only to whoever started it)"
)


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
class Claim:
    bound: Interaction  # as claimed: its round, and the decision to send, who made it, when
    first: bool  # no earlier attempt can have reached the agent


def answer(
    user,
    interaction: Interaction,
    decision: Decision,
    *,
    via: str = "page",
    round_: int = 0,
    hold: timedelta | None = None,
) -> Interaction:
    """Send `decision` to the agent as `user`'s answer to one interaction (from `visible`):
    the first decision, or the same one again while the agent has not confirmed it. `via`
    says where they decided (page, slack, link, api), for the record. `round_`, when given:
    the round the decision was made for (an answer link's), checked under the claim's lock,
    so a question asked anew meanwhile is refused (RoundClosed) rather than decided.
    `hold` (a page's answer, which has an Undo): a first decision is kept that long on the
    server, HELD, and sent then by answering/held.py unless its maker withdraws it; the
    retry of a bound decision is never held (it may already be with the agent)."""
    if not may_answer(user):
        raise NotAllowed("You may see this, but not answer it: ask for the approver role.")
    if decision.approved and self_approval(user, interaction):
        raise NotAllowed(NEEDS_ANOTHER)
    return _send(user, interaction, decision, via=via, round_=round_, hold=hold)


NEEDS_ANOTHER = (
    "Needs another approver: you started this task, and its agent asks that someone else "
    "approve what it asks. Nothing was sent."
)


def self_approval(user, interaction: Interaction) -> bool:
    """Approving this would be `user` approving a task they started, which its agent's
    policy (`no_self_approval`) forbids."""
    agent = interaction.task.session.agent
    return (
        interaction.kind == Interaction.Kind.APPROVAL
        and agent.no_self_approval
        and TaskStart.objects.filter(
            agent=agent, task_id=interaction.task.task_id, started_by=user
        ).exists()
    )


def answer_for_team(
    interaction: Interaction, decision: Decision, *, via: str, round_: int = 0
) -> Interaction:
    """The team's declared policy decides (answering/expiry.py): no person, never an
    approval. `round_`: the round the policy judged (RoundClosed if asked anew since)."""
    if decision.approved:
        raise NotAllowed("a policy never approves")
    return _send(None, interaction, decision, via=via, round_=round_)


def _send(
    user,
    interaction: Interaction,
    decision: Decision,
    *,
    via: str,
    round_: int = 0,
    hold: timedelta | None = None,
) -> Interaction:
    if interaction.kind == Interaction.Kind.CHECK:
        raise AnswerError("a check is marked checked, not answered")
    if interaction.kind in CHOICES and decision.approved is None:
        raise AnswerError(f"a {interaction.kind} is answered with a decision, not text")
    if interaction.kind not in CHOICES and decision.value is None:
        raise AnswerError(f"a {interaction.get_kind_display()} is answered with text")
    agent = interaction.task.session.agent
    # Resolved before the claim: a person an agent refuses (callers.NeedsCredential) leaves
    # the question as it was, and nothing reaches the agent.
    own = callers.for_person(agent, user) if user is not None else callers.shared(agent)
    retry = _retry_caller(agent, interaction, user, own)
    if hold:
        held = _hold(user, interaction, decision, via=via, round_=round_, until=hold)
        if held is not None:
            return held
    claim = _claim(user, interaction, decision, via=via, round_=round_, retry=retry)
    return deliver(interaction, claim, own if claim.first else retry.caller)


def deliver(interaction: Interaction, claim: Claim, caller: callers.Caller) -> Interaction:
    """Send a claimed decision (answering) and record what came of it; AgentFailed when the
    agent did not take it. Also how answering/held.py sends a held decision it claimed."""
    # What is sent is what is stored: a retry (anyone's) sends the very message of the first try.
    bound = claim.bound
    stored = Decision(**bound.answer, reason=bound.reason)
    task, session = interaction.task, interaction.task.session
    try:
        a2a_client.send_message(
            caller,
            _human_text(bound, stored),
            message_id=message_id(bound, stored),
            task_id=task.task_id,
            context_id=session.context_id,
            note=stored.reason,
            **_typed(bound, stored),
        )
    except a2a_client.A2AError as error:
        raise _not_taken(interaction, claim, error, caller) from None
    return _record(interaction, claim)


def _hold(
    user,
    interaction: Interaction,
    decision: Decision,
    *,
    via: str,
    round_: int,
    until: timedelta,
) -> Interaction | None:
    """Take an open interaction for `decision` without calling the agent: open → held, the
    decision stored as a claim's is, and `held_until` when it goes out. Taken as a claim
    is (one conditional UPDATE under the session lock): nobody else may decide it
    meanwhile. None when it is not open (a retry, or taken): `_claim` says what holds."""
    now = timezone.now()
    with changing(interaction):
        current = Interaction.objects.get(pk=interaction.pk)
        if round_ and current.round != round_:
            raise RoundClosed(ASKED_AGAIN)
        if current.state != Interaction.State.OPEN:
            return None
        decision = _as_offered(current, decision)
        held = Interaction.objects.filter(
            pk=current.pk, round=current.round, state=Interaction.State.OPEN
        ).update(
            state=Interaction.State.HELD,
            answered_by=user,
            answered_at=now,
            answer=decision.as_json(),
            reason=decision.reason,
            answered_via=via,
            held_until=now + until,
        )
        if not held:
            return None
    return reread(interaction)


@dataclass(frozen=True)
class _Retry:
    decider_id: int | None  # whose bound decision it sends again (None: the team's policy)
    caller: callers.Caller


def _retry_caller(agent: Agent, interaction: Interaction, user, own: callers.Caller) -> _Retry:
    """How the bound decision is sent again, should this be a retry: as the person who made
    it, whoever presses. The decision is theirs (the text says "Approved by alice"), so the
    agent must hear it from them, and an agent that scopes tasks per subject knows the task
    only under theirs. If they no longer have a credential an agent requires, the retry is
    refused (NeedsCredential, naming them) before anything is claimed or sent."""
    current = Interaction.objects.select_related("answered_by").get(pk=interaction.pk)
    decider = current.answered_by
    if not current.unconfirmed or (decider is None and user is None):
        # A first decision (a retry only if `user` turns out to be its decider, when the
        # claim sees it), or the team's own decision sent again by the team's policy.
        return _Retry(getattr(user, "pk", None), own)
    if decider is not None and user is not None and decider.pk == user.pk:
        return _Retry(decider.pk, own)
    if decider is None:  # the team's policy decided (expiry): the shared credential
        return _Retry(None, callers.shared(agent))
    try:
        return _Retry(decider.pk, callers.for_person(agent, decider))
    except callers.NeedsCredential:
        raise DeciderNeedsCredential(agent, decider.get_username()) from None


class DeciderNeedsCredential(callers.NeedsCredential):
    """A retry of a decision whose decider no longer has the credential the agent needs."""

    def __init__(self, agent: Agent, decider: str) -> None:
        NotAllowed.__init__(
            self,
            f"{decider} made this decision, so it is sent again with their own credential, "
            f"and they have none for {agent.name} now: ask them to connect theirs on the "
            "settings page, then retry. Nothing was sent.",
        )
        self.agent = agent


def _not_taken(
    interaction: Interaction, claim: Claim, error: a2a_client.A2AError, caller: callers.Caller
) -> AgentFailed:
    """Record that the agent did not take the answer; returns what to tell the person."""
    bound, agent = claim.bound, interaction.task.session.agent
    refused = error.code is not None
    forgot, known = error.code == TASK_NOT_FOUND, None
    if refused and not forgot and error.reason != "CONTEXT_BUSY":
        # A refusal can mean the task ended, or was forgotten, without Onlooker hearing (a
        # lost push, a restart): the agent's own view of the task says which.
        forgot, known = _agent_view(caller, interaction.task.task_id)
    if forgot and caller.person_id is not None:
        # An agent that shows a task only to the subject that started it answers "not found"
        # to anyone else's own credential: the agent did not forget it, this person may not
        # act on it. No "forgotten" mark, which would offer everyone the dismissal.
        forgot = False
        error = a2a_client.A2AError(NOT_YOURS, code=error.code, reason=error.reason)
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
        apply_reply(agent, known)
        if reread(interaction).state == Interaction.State.CLOSED:
            return AgentFailed(f"The agent did not take it: {error}. It has moved on from this.")
    return told


def _agent_view(caller: callers.Caller, task_id: str) -> tuple[bool, dict | None]:
    """GetTask after a refusal, as the answer went (an agent may know a task only under the
    subject that sent it): (whether the agent does not know the task, the task as it has
    it); (False, None) when it cannot tell."""
    try:
        return False, a2a_client.get_task(caller, task_id)
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
    if interaction.answered_by is None and interaction.answered_via == "expiry":
        return f"{verb}: {decision.reason}" if decision.reason else verb
    who = interaction.answered_by.get_username() if interaction.answered_by else "someone"
    return f"{verb} by {who} in Onlooker"


@contextmanager
def changing(interaction: Interaction) -> Iterator[None]:
    """One transaction that changes an interaction (a claim, its outcome, a dismissal): the
    session row is locked first, as everywhere (the applier closes interactions under that
    lock). The card shows only open questions, so it is re-derived (a new revision every
    browser takes) and the change is hinted after commit."""
    with transaction.atomic():
        session = changes.lock(interaction.task.session_id)
        yield
        changes.changed([changes.Changed(session, interaction.task.session.agent.team_id)])


def _claim(
    user, interaction: Interaction, decision: Decision, *, via: str, retry: _Retry, round_: int = 0
) -> Claim:
    """Take the interaction for one call: the first decision, or a retry of the bound one
    (sent and not confirmed, or claimed by a process that died) when `retry` was resolved
    for the person who made it. Refuses anything else."""
    now = timezone.now()
    with changing(interaction):
        # Under the session lock no other writer moves it between this read and the update;
        # the claim names the round read, so it never takes a round the person did not see.
        current = Interaction.objects.select_related("answered_by").get(pk=interaction.pk)
        if round_ and current.round != round_:
            raise RoundClosed(ASKED_AGAIN)
        decision = _as_offered(current, decision)
        if Interaction.objects.claim(
            current, by=user, answer=decision.as_json(), reason=decision.reason, at=now, via=via
        ):
            return Claim(bound=reread(interaction), first=True)
        if (
            current.unconfirmed
            and current.answer == decision.as_json()
            # Bound since `retry` was resolved (another decider): refused, never sent with
            # someone else's credential; the person is told to retry, which resolves anew.
            and current.answered_by_id == retry.decider_id
            and Interaction.objects.reclaim(current, at=now)
        ):
            log.info("%s sends the answer to interaction %s again", user, interaction.pk)
            return Claim(bound=reread(interaction), first=False)
    if current.state == Interaction.State.HELD:
        raise AlreadyAnswered(held_words(current))
    raise AlreadyAnswered(already_decided(current))


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


def reread(interaction: Interaction) -> Interaction:
    """The interaction as stored now, with who answered it and who dismissed it."""
    return Interaction.objects.select_related("answered_by", "dismissed_by").get(pk=interaction.pk)


def _release(interaction: Interaction, claim: Claim, error: str, *, forgot: bool = False) -> None:
    """Nothing reached the agent: the question is open again, for any decision."""
    log.warning("answer to interaction %s not sent: %s", interaction.pk, error)
    with changing(interaction):
        # Closed by the agent meanwhile, it stays closed: it moved on without this answer.
        Interaction.objects.release(claim.bound, error=error, forgotten=forgot)


def _unconfirmed(
    interaction: Interaction, claim: Claim, error: str, *, forgot: bool = False
) -> None:
    """The agent may have the answer: bound to it, sent and not confirmed."""
    log.warning("answer to interaction %s not confirmed: %s", interaction.pk, error)
    with changing(interaction):
        if Interaction.objects.record_sent(claim.bound, error=error, forgotten=forgot):
            record.sent_decision(claim.bound, at=claim.bound.answered_at)


def _record(interaction: Interaction, claim: Claim) -> Interaction:
    """The agent took it. Also when its next status already closed the question meanwhile
    (a push can overtake the reply): it was answered, and the agent confirmed."""
    now = timezone.now()
    with changing(interaction):
        # The agent replied: its decision is on the record whether or not a push overtook
        # the reply (a retry's row is the first try's).
        record.sent_decision(claim.bound, at=claim.bound.answered_at)
        record.confirmed(claim.bound, at=now)
        if Interaction.objects.record_answered(claim.bound, at=now):
            outbox.resolved([(interaction.pk, claim.bound.round)], at=now)
            timeline.answered(claim.bound, at=now)
    return Interaction.objects.select_related("answered_by").get(pk=interaction.pk)


def apply_reply(agent: Agent, answered: dict, *, kind: str = "task") -> bool:
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
