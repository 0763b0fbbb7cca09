"""Catching up with agents. Each agent's card is read again, and pushes lost while Onlooker
was down (or never sent) are recovered by asking each agent what changed (`ListTasks` after
the last update Onlooker saw) and fetching (`GetTask`) every task it holds something newer
of. What comes back goes through ingest like a push of the same snapshot, so running this
twice changes nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Max

from tasks import a2a_client, agents, ingest, protocol
from tasks.models import Agent, Task

log = logging.getLogger(__name__)

# Clocks differ: ask from a little before the newest status Onlooker holds.
CLOCK_SKEW = timedelta(minutes=5)


@dataclass
class Report:
    agent: Agent
    listed: int = 0
    fetched: int = 0
    applied: int = 0
    errors: list[str] = field(default_factory=list)
    # What a person should know though the sync went on (a refused move of the JSON-RPC URL).
    warnings: list[str] = field(default_factory=list)


def last_seen(agent: Agent) -> datetime | None:
    newest = Task.objects.filter(agent=agent).aggregate(newest=Max("status_timestamp"))["newest"]
    return newest - CLOCK_SKEW if newest else None


def sync_agent(agent: Agent, since: datetime | None = None) -> Report:
    """Recover what `agent` changed since `since` (default: its newest status Onlooker holds,
    minus CLOCK_SKEW; everything when Onlooker holds nothing)."""
    report = Report(agent)
    since = since if since is not None else last_seen(agent)
    card_error = agents.refresh_card(agent)
    if card_error:
        # The old address may still answer: try it, and say why the card was not read.
        report.errors.append(f"its card could not be read again: {card_error}")
    if agent.refused_rpc_url:
        report.warnings.append(agents.refused_move(agent))
    try:
        for summary in a2a_client.iter_tasks(agent, status_timestamp_after=since):
            report.listed += 1
            if _known(agent, summary):
                continue
            task = a2a_client.get_task(agent, str(summary.get("id", "")))
            report.fetched += 1
            result = ingest.apply_fetched(agent, task)
            report.applied += not result.duplicate
    except a2a_client.A2AError as error:
        report.errors.append(str(error))
    except protocol.BadBody as bad:
        detail = a2a_client.plain_text(bad.detail)
        report.errors.append(f"the agent sent a task Onlooker cannot read: {detail}")
    if report.errors:
        log.warning("sync of agent %s: %s", agent.pk, report.errors[-1])
    return report


def _known(agent: Agent, summary: dict) -> bool:
    """Onlooker already holds this task at this status or a newer one."""
    stamp = (summary.get("status") or {}).get("timestamp")
    if not isinstance(stamp, str):
        return False  # undated: fetch it, ingest decides
    try:
        theirs = protocol.parse_timestamp(stamp)
    except ValueError:
        return False
    ours = (
        Task.objects.filter(agent=agent, task_id=summary.get("id"))
        .values_list("status_timestamp", flat=True)
        .first()
    )
    return ours is not None and theirs <= ours
