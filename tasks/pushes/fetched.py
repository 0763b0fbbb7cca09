"""What Onlooker fetched from an agent (a task it asked for, the answer to a message it sent),
kept and applied exactly as a push of the same content would be, at once: its caller acts on
what the agent said."""

from __future__ import annotations

import hashlib
import json

from django.db import IntegrityError, transaction

from tasks.models import Agent
from tasks.pushes import apply, deliveries
from tasks.sessions import changes, usage
from tasks.wire import json_safety
from tasks.wire import protocol as p


def apply_fetched(agent: Agent, task: dict) -> deliveries.Result:
    """A task Onlooker asked the agent for (GetTask, ListTasks, a SendMessage answer),
    applied exactly as a push of the same snapshot would be, and deduplicated by content.
    Raises protocol.BadBody if the agent's answer is not a valid A2A 1.0 task."""
    return _apply_fetched(agent, "task", task)


def apply_fetched_message(agent: Agent, message: dict) -> deliveries.Result:
    """A Message the agent answered a SendMessage with (instead of a task): kept in the
    transcript exactly as a pushed message would be. Raises protocol.BadBody if it is not a
    valid A2A 1.0 message."""
    return _apply_fetched(agent, "message", message)


def _apply_fetched(agent: Agent, member: str, value: dict) -> deliveries.Result:
    try:
        body = json.dumps({member: value}, sort_keys=True, separators=(",", ":")).encode()
    except RecursionError:
        # Too deep for the encoder, so far beyond what parsing keeps: refused as a push
        # nested this deep is, rather than an error no caller expects.
        raise p.BadBody(
            "nested too deeply",
            f"the {member} nests too deeply: Onlooker keeps at most {json_safety.MAX_DEPTH} levels",
        ) from None
    event = p.parse(body)
    key = f"fetched:{hashlib.sha256(body).hexdigest()}"
    # Its caller acts on what the agent said: stored and applied at once, in one transaction,
    # rather than through the spool.
    try:
        with transaction.atomic():
            delivery = deliveries.keep(agent.pk, None, key, body, event)
            delivery.agent = agent
            applied = apply.apply_delivery(delivery, event)
            usage.record([applied.grown])
            if applied.session is not None:
                card = apply.derive([applied])
                applied.locked.timeline.write()
                changed = [changes.Changed(applied.session, agent.team_id, card)]
                changes.changed(changed, derived=True)
    except IntegrityError:
        duplicate = deliveries.count_duplicate(agent.pk, key)
        if duplicate is None:
            raise
        return duplicate
    return deliveries.Result(delivery, duplicate=False)
