"""Catching up with agents. Each agent's card is read again, and pushes lost while Onlooker
was down (or never sent) are recovered by asking each agent what changed (`ListTasks` after
the last update Onlooker saw) and fetching (`GetTask`) every task it holds something newer
of. What comes back is applied like a push of the same snapshot (pushes/fetched.py), so
running this twice changes nothing.

One agent may be registered twice (`add_agent --again`): both registrations list the same
tasks. A task, and every task of its context, belongs to the registration that holds it
first; the other one leaves it alone, so a context never gets a session under each.

Agents scope `ListTasks` and `GetTask` to the subject the caller authenticated as (Nylorun
profile v2), so what a sync finds depends on whose credential it calls with: `sync_agents`
calls with the agent's shared credential and finds the tasks Onlooker's own subject started;
a person's sync (their "Refresh" on the agent page, `sync_agents --as`) calls as them and
finds the tasks they started elsewhere too. What is found is kept the same way whoever found
it: see `sync_agent`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max

from tasks.answering import a2a_client, agents, callers
from tasks.models import Agent, Session, Task
from tasks.pushes import fetched
from tasks.wire import protocol

log = logging.getLogger(__name__)

# Clocks differ: ask from a little before the newest status Onlooker holds.
CLOCK_SKEW = timedelta(minutes=5)


# A dead agent answers no GetTask: stop asking it after this many fail in a row.
MAX_FAILED_IN_A_ROW = 3


@dataclass
class Report:
    agent: Agent
    listed: int = 0
    fetched: int = 0
    applied: int = 0
    # Listed tasks another registration of the same card holds: synced there, not here.
    elsewhere: int = 0
    # Why the agent as a whole could not be synced (its card, its task list); the last one
    # is what stopped it.
    errors: list[str] = field(default_factory=list)
    # One line per listed task that could not be synced; the agent's other tasks were.
    skipped: list[str] = field(default_factory=list)
    # What a person should know though the sync went on (a refused move of the JSON-RPC URL).
    warnings: list[str] = field(default_factory=list)


def last_seen(agent: Agent) -> datetime | None:
    newest = Task.objects.filter(agent=agent).aggregate(newest=Max("status_timestamp"))["newest"]
    return newest - CLOCK_SKEW if newest else None


def sync_agent(
    agent: Agent, since: datetime | None = None, *, caller: callers.Caller | None = None
) -> Report:
    """Recover what `agent` changed since `since`; whatever the agent answers, this returns:
    what went wrong is in the report, so one agent never stops the others.

    `caller` is who asks (`ListTasks`, `GetTask`): by default the agent's shared credential,
    or a person (callers.for_person). Without `since` the shared credential asks from its
    newest status Onlooker holds, minus CLOCK_SKEW (everything when Onlooker holds nothing);
    a person asks for everything, since Onlooker keeps no mark of what it last heard under
    their subject: the agent's newest status came mostly under other subjects, and a task
    they started before it would be missed. Tasks Onlooker holds at that status already are
    listed, not fetched again.

    What is found becomes a session of the agent like any pushed one, visible to its team,
    whoever's credential found it. That is right: the team already sees every session of
    the agent, whoever started the work, and the person chose to bring these in."""
    caller = _asking(agent, caller)
    if since is None and caller.person_id is None:
        since = last_seen(agent)
    report = Report(agent)
    try:
        _sync(caller, since, report)
    except a2a_client.A2AError as error:
        report.errors.append(str(error))
    except RecursionError:
        report.errors.append(_TOO_DEEP)
    except Exception as error:  # noqa: BLE001 - one agent's answers must not stop the sync
        # of the others; the traceback goes to the log for whoever fixes it.
        log.exception("sync of agent %s stopped", agent.pk)
        report.errors.append(
            f"the sync stopped on an unexpected error ({type(error).__name__}); see the log"
        )
    if report.errors:
        log.warning("sync of agent %s: %s", agent.pk, report.errors[-1])
    if report.skipped:
        log.warning(
            "sync of agent %s: %d tasks not synced, first: %s",
            agent.pk,
            len(report.skipped),
            report.skipped[0],
        )
    return report


def _asking(agent: Agent, caller: callers.Caller | None) -> callers.Caller:
    if caller is None:
        return callers.shared(agent)
    if caller.agent.pk != agent.pk:
        raise ValueError("the caller calls another agent")
    # The card read first may move the agent's JSON-RPC URL: the caller follows the move.
    return replace(caller, agent=agent)


_TOO_DEEP = "the agent answered JSON nested too deeply to read"


def _sync(caller: callers.Caller, since: datetime | None, report: Report) -> None:
    agent = caller.agent
    card_error = agents.refresh_card(agent)
    if card_error:
        # The old address may still answer: try it, and say why the card was not read.
        report.errors.append(f"its card could not be read again: {card_error}")
    if agent.refused_rpc_url:
        report.warnings.append(agents.refused_move(agent))
    others = [other.pk for other in agents.registrations_of(agent.card_url) if other != agent]
    failed_in_a_row = 0
    for summary in a2a_client.iter_tasks(caller, status_timestamp_after=since):
        report.listed += 1
        task_id = summary.get("id")
        if not isinstance(task_id, str) or not task_id:
            report.skipped.append(f"a task in its list has {_no_id(task_id)}")
            continue
        shown = f"task '{a2a_client.plain_text(task_id, 60)}'"
        if not _sendable(task_id):
            report.skipped.append(
                f"{shown}: its id holds NUL or a lone surrogate, which Onlooker cannot ask "
                "for or keep"
            )
            continue
        if _known(agent, task_id, summary):
            continue
        if _held_elsewhere(agent, others, task_id, summary.get("contextId")):
            report.elsewhere += 1
            continue
        try:
            _fetch(caller, others, task_id, report)
        except a2a_client.A2AError as error:
            report.skipped.append(f"{shown}: GetTask failed: {error}")
            failed_in_a_row += 1
            if failed_in_a_row == MAX_FAILED_IN_A_ROW:
                raise a2a_client.A2AError(
                    f"stopped after {MAX_FAILED_IN_A_ROW} tasks in a row could not be fetched"
                ) from None
            continue
        except protocol.BadBody as bad:
            detail = a2a_client.plain_text(bad.detail)
            report.skipped.append(f"{shown}: the agent sent a task Onlooker cannot read: {detail}")
        except RecursionError:
            report.skipped.append(f"{shown}: {_TOO_DEEP}")
        failed_in_a_row = 0


def _fetch(caller: callers.Caller, others: list[int], task_id: str, report: Report) -> None:
    agent = caller.agent
    task = a2a_client.get_task(caller, task_id)
    report.fetched += 1
    if not others:
        report.applied += not fetched.apply_fetched(agent, task).duplicate
        return
    with transaction.atomic():
        # Two syncs of the card's registrations at once must not both take a task nobody
        # holds yet: whoever holds the oldest registration's row checks and applies first.
        # (SQLite serialises the whole transaction instead: it begins IMMEDIATE.)
        first = min(agent.pk, *others)
        list(Agent.objects.select_for_update().filter(pk=first).values_list("pk"))
        context_id = task.get("contextId") if isinstance(task, dict) else None
        if _held_elsewhere(agent, others, task_id, context_id):
            report.elsewhere += 1
            return
        report.applied += not fetched.apply_fetched(agent, task).duplicate


def _held_elsewhere(agent: Agent, others: list[int], task_id: str, context_id: object) -> bool:
    """Another registration of the agent's card holds this task, or a session of its context,
    and this registration holds neither: applied here it would be a second session."""
    if not others:
        return False
    # A context id Onlooker cannot keep (NUL, a lone surrogate) is never a session's: parsing
    # refuses it, and a query holding one would fail.
    sendable = isinstance(context_id, str) and context_id and _sendable(context_id)
    context = context_id if sendable else None
    if Task.objects.filter(agent=agent, task_id=task_id).exists():
        return False
    if context and Session.objects.filter(agent=agent, context_id=context).exists():
        return False
    if Task.objects.filter(agent_id__in=others, task_id=task_id).exists():
        return True
    if context is None:
        return False
    return Session.objects.filter(agent_id__in=others, context_id=context).exists()


def _no_id(value: object) -> str:
    if value is None:
        return "no id"
    if value == "":
        return "an empty id"
    if isinstance(value, bool):
        kind = "a boolean"
    elif isinstance(value, int | float):
        kind = "a number"
    elif isinstance(value, list):
        kind = "a list"
    else:
        kind = "an object"
    return f"{kind} for its id; A2A task ids are strings"


def _known(agent: Agent, task_id: str, summary: dict) -> bool:
    """Onlooker already holds this task at this status or a newer one."""
    status = summary.get("status")
    stamp = status.get("timestamp") if isinstance(status, dict) else None
    if not isinstance(stamp, str):
        return False  # undated: fetch it, applying decides
    try:
        theirs = protocol.parse_timestamp(stamp)
    except ValueError:
        return False
    ours = (
        Task.objects.filter(agent=agent, task_id=task_id)
        .values_list("status_timestamp", flat=True)
        .first()
    )
    return ours is not None and theirs <= ours


def _sendable(text: str) -> bool:
    """NUL is refused in every task Onlooker keeps (PostgreSQL stores none), and a lone
    surrogate cannot be encoded as UTF-8: not in GetTask's params nor in a query."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
