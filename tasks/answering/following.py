"""What a person who may answer can ask of an agent from its page (tasks/web/agent_page.py):
read it again ("Refresh from the agent": the card, then what changed, by the very code
`sync_agents` runs), and follow a task Onlooker did not start ("Follow this task": a push
config at the agent naming a new endpoint of Onlooker's, then the task fetched at once).

Both call the agent as the person who asks (callers.for_person): agents scope `ListTasks`,
`GetTask` and push configs to the subject the caller authenticated as, so a person refreshes
and follows the tasks they started elsewhere too, with their own credential, or the shared
one when they have none and the agent allows it. An agent that is `per_person` refuses a
person without a credential (callers.NeedsCredential) before anything is sent.

Both run in a sync view's thread with a2a_client's timeouts; what they did comes back as a
sentence for the page.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from tasks.answering import a2a_client, agents, callers, sync
from tasks.answering.rules import (
    TASK_NOT_FOUND,
    AgentFailed,
    AnswerError,
    NotAllowed,
    NotFound,
    may_answer,
)
from tasks.models import Agent, PushEndpoint, Session
from tasks.pushes import fetched
from tasks.wire import protocol

log = logging.getLogger(__name__)

MAX_TASK_ID = 200  # what Task.task_id and PushEndpoint.task_id hold
MAX_SAID = 500  # characters of the agent's errors put in a page message
PUSH_NOT_SUPPORTED = -32003
_ENDPOINT_IN_URL = re.compile(r"/a2a/push/([^/?#]+)/?$")


class AlreadyFollowed(AnswerError):
    status = 409


def acting_on(user, agent_pk: int) -> Agent:
    """The agent, if the user may see it (NotFound otherwise) and may act on it: only people
    who may answer call agents (NotAllowed)."""
    agent = Agent.objects.visible_to(user).filter(pk=agent_pk).first()
    if agent is None:
        raise NotFound("No such agent, or not one you may see.")
    if not may_answer(user):
        raise NotAllowed(
            "You may look at this agent, but not call it: that takes the permission to answer."
        )
    return agent


def _said(text: str) -> str:
    return a2a_client.plain_text(text, MAX_SAID)


# --- Refresh from the agent ----------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    ok: bool  # False: the page shows it as an error
    text: str


def refresh(agent: Agent, user) -> Outcome:
    """Read the agent's card again and fetch every task it changed, as `user` sees the agent
    (`sync.sync_agent` as that person, what `sync_agents --as` does for it). NeedsCredential,
    before anything is sent, when the agent takes only their own credential and they have
    none."""
    caller = callers.for_person(agent, user)
    report = sync.sync_agent(agent, caller=caller)
    counts = (
        f"{report.listed} task{'s' if report.listed != 1 else ''} listed, "
        f"{report.fetched} fetched, {report.applied} applied"
    )
    if report.elsewhere:
        counts += f", {report.elsewhere} left to its other registration"
    if report.skipped:
        counts += f", {len(report.skipped)} not synced (first: {report.skipped[0]})"
    notes = "".join(f" {warning[:1].upper()}{warning[1:]}." for warning in report.warnings)
    if report.errors:  # the card unread is one of these
        return Outcome(False, _said(f"Refresh failed: {report.errors[-1]}. {counts}.{notes}"))
    return Outcome(not report.skipped, _said(f"Refreshed: card re-read, {counts}.{notes}"))


# --- Follow this task ----------------------------------------------------------------------


def parse_task_id(value: object) -> str:
    """A task id as a person typed it: text, at most MAX_TASK_ID characters, none of them a
    control or format character (nor a lone surrogate, which cannot be sent or stored)."""
    if not isinstance(value, str):
        raise AnswerError("task_id must be text")
    value = value.strip()
    if not value:
        raise AnswerError("Give the id of the task to follow.")
    if len(value) > MAX_TASK_ID:
        raise AnswerError(f"A task id has at most {MAX_TASK_ID} characters.")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in value):
        raise AnswerError("A task id holds no control, format or surrogate characters.")
    return value


@dataclass(frozen=True)
class Followed:
    ok: bool  # False: following, but the task could not be fetched (said in `text`)
    text: str
    session: Session | None  # where the task shows, once fetched


def follow(agent: Agent, task_id: str, user) -> Followed:
    """Have the agent push `task_id`'s updates to Onlooker: a new endpoint and a push config
    naming it, as for work Onlooker starts; then the task itself, fetched and applied, so it
    shows at once. Refused (AnswerError) when the card says the agent sends no pushes, when
    Onlooker follows the task already, or when the agent does not take the config: then no
    endpoint is left. A failed fetch after that is said, and the following stays.

    Every call goes out as `user` (NeedsCredential first when the agent takes only their own
    credential and they have none): the agent knows the task under their subject, and keeps
    the config under it, so the endpoint records whose credential created it and its config
    is deleted as the same caller when the task ends (answering/push_configs.py)."""
    caller = callers.for_person(agent, user)
    shown = f"task “{a2a_client.plain_text(task_id, 60)}”"
    if not agent.push_notifications:
        raise AnswerError(
            "Its card says the agent sends no push notifications, so Onlooker cannot follow "
            "its tasks. Refresh from the agent if that has changed."
        )
    if PushEndpoint.objects.filter(agent=agent, task_id=task_id, active=True).exists():
        raise AlreadyFollowed(f"Onlooker already follows {shown}.")
    _check_configs_at_agent(caller, task_id, shown)
    created_for = user if caller.person_id else None  # None: the shared credential's
    try:
        with transaction.atomic():
            endpoint, push = agents.new_push_config(agent, task_id=task_id, created_for=created_for)
    except IntegrityError:  # another press got there first
        raise AlreadyFollowed(f"Onlooker already follows {shown}.") from None
    try:
        a2a_client.create_task_push_notification_config(
            caller, task_id, push.url, token=push.token, bearer=push.bearer, config_id=push.id
        )
    except a2a_client.A2AError as error:
        _forget(caller, endpoint, task_id, error)
        raise _refused(error, shown) from None
    return _fetch(caller, task_id, shown)


def _check_configs_at_agent(caller: callers.Caller, task_id: str, shown: str) -> None:
    """Refuse a task the agent already pushes to one of Onlooker's endpoints (work Onlooker
    started, or followed before this field existed), and one the agent does not know. An
    agent that cannot list its configs is not refused for that: creating one says the rest."""
    try:
        configs = a2a_client.list_task_push_notification_configs(caller, task_id)
    except a2a_client.A2AError as error:
        if error.code == TASK_NOT_FOUND:
            raise _refused(error, shown) from None
        return
    ids = []
    for config in configs:
        url = config.get("url")
        match = _ENDPOINT_IN_URL.search(url) if isinstance(url, str) else None
        if match and len(match[1]) <= 64:
            ids.append(match[1])
    mine = PushEndpoint.objects.filter(agent=caller.agent, public_id__in=ids, active=True)
    if ids and mine.exists():
        raise AlreadyFollowed(f"Onlooker already follows {shown}: the agent pushes it here.")


def _forget(
    caller: callers.Caller, endpoint: PushEndpoint, task_id: str, error: a2a_client.A2AError
) -> None:
    """The config was not taken: the endpoint goes, so nothing pushes to it. Should the
    agent have kept the config all the same (the answer was lost), ask it to drop it too;
    its pushes would be refused by the missing endpoint anyway."""
    endpoint.delete()
    if error.not_sent:
        return
    try:
        # As the caller that created it: the agent keeps configs per subject.
        a2a_client.delete_task_push_notification_config(caller, task_id, endpoint.public_id)
    except a2a_client.A2AError:
        log.info("agent %s: could not delete a push config it may not hold", caller.agent.pk)


def _refused(error: a2a_client.A2AError, shown: str) -> AnswerError:
    if error.code == TASK_NOT_FOUND:
        return AnswerError(f"The agent does not know {shown}: nothing is followed.")
    if error.code == PUSH_NOT_SUPPORTED:
        return AnswerError(
            f"The agent says it does not support push notifications: {shown} is not followed."
        )
    return AgentFailed(
        _said(f"The agent did not take the push config: {error}. Nothing is followed.")
    )


def _fetch(caller: callers.Caller, task_id: str, shown: str) -> Followed:
    agent = caller.agent
    following = f"Following {shown}"
    try:
        task = a2a_client.get_task(caller, task_id)
        fetched.apply_fetched(agent, task)
    except a2a_client.A2AError as error:
        text = f"{following}; fetching it failed ({error}): its next push will show it."
        return Followed(False, _said(text), None)
    except protocol.BadBody as bad:
        text = f"{following}; the agent sent a task Onlooker cannot read: {bad.detail}."
        return Followed(False, _said(text), None)
    except RecursionError:
        text = f"{following}; the agent answered JSON nested too deeply to read."
        return Followed(False, text, None)
    session = Session.objects.filter(agent=agent, tasks__task_id=task_id).first()
    return Followed(True, f"{following}: fetched, its updates will show here.", session)
