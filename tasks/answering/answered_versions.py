"""Which A2A version an agent answers as, when it is not the one Onlooker speaks.

Every JSON-RPC answer's `A2A-Version` header is read by a2a_client (`on_version`, set when
the app starts); here it is kept on `Agent.answered_version`, so the agent's page can say
"It answers as A2A 1.1; Onlooker speaks 1.0". Only that field is written, and only when it
changes: a sync's many calls in a row write nothing, and a concurrent save of the agent
keeps its own fields. A later answer that matches again clears it.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError

from tasks.models import Agent

log = logging.getLogger(__name__)


def record(agent: object, answered: str) -> None:
    """Keep the version the agent's latest answer declared ("" when it matched or named
    none); a failure to store it never fails the call it came with."""
    agent = getattr(agent, "agent", agent)  # a callers.Caller records for its agent
    if not isinstance(agent, Agent) or agent.pk is None:
        return  # an address that is not a registered agent (discovery, tests)
    if agent.answered_version == answered:
        return
    try:
        Agent.objects.filter(pk=agent.pk).update(answered_version=answered)
    except DatabaseError:
        log.warning("agent %s: could not record the A2A version it answered as", agent.pk)
        return
    agent.answered_version = answered
