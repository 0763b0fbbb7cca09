"""The team's declared policy for what an agent asks: expiry (`expire_after`, `on_expiry`:
answering/expiry.py) and separation of duties (`no_self_approval`: answering/duties.py).
Set when the agent is registered (`add_agent`), changed later with `set_agent_policy` or in
the admin; described here in the words those print.
"""

from __future__ import annotations

from datetime import timedelta

from tasks.models import Agent
from tasks.models.agents import duration_words
from tasks.notify.channels import ChannelError, parse_interval

ON_EXPIRY = ("deny", "leave")
LONGEST_EXPIRY = timedelta(days=30)
UNCHANGED = object()


class PolicyError(ValueError):
    """What was wrong with a policy, in words for the person who gave it."""


def parse_expiry(text: str) -> timedelta:
    """ "4h", "30m", "1d2h" → a timedelta from 1 minute to 30 days."""
    try:
        return parse_interval(text, longest=LONGEST_EXPIRY, what="an expiry")
    except ChannelError as error:
        raise PolicyError(str(error)) from None


def check_on_expiry(on_expiry: str) -> str:
    if on_expiry not in ON_EXPIRY:
        raise PolicyError(f"on expiry is deny or leave, not {on_expiry!r}")
    return on_expiry


def compact(delta: timedelta | None) -> str | None:
    """A duration as the commands take it: "4h", "30m", "1d2h"; None for none."""
    if delta is None:
        return None
    seconds = int(delta.total_seconds())
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def set_policy(
    agent: Agent,
    *,
    expire_after: timedelta | None | object = UNCHANGED,
    on_expiry: str | None = None,
    no_self_approval: bool | None = None,
    per_person: bool | None = None,
) -> list[str]:
    """Change what is given (None or UNCHANGED: left as it is); the fields it changed.
    Only these fields are written, so a concurrent save of the agent keeps its own."""
    changed = []
    if expire_after is not UNCHANGED and expire_after != agent.expire_after:
        agent.expire_after = expire_after
        changed.append("expire_after")
    if on_expiry is not None and check_on_expiry(on_expiry) != agent.on_expiry:
        agent.on_expiry = on_expiry
        changed.append("on_expiry")
    if no_self_approval is not None and no_self_approval != agent.no_self_approval:
        agent.no_self_approval = no_self_approval
        changed.append("no_self_approval")
    if per_person is not None and per_person != agent.per_person:
        agent.per_person = per_person
        changed.append("per_person")
    if changed:
        agent.save(update_fields=changed)
    return changed


def as_json(agent: Agent) -> dict:
    return {
        "expire_after": compact(agent.expire_after),
        "on_expiry": agent.on_expiry,
        "no_self_approval": agent.no_self_approval,
        "per_person": agent.per_person,
    }


def describe(agent: Agent) -> list[str]:
    """The policy in a line each: expiry, separation of duties, whose credential answers."""
    if agent.expire_after is None:
        expiry = "Expiry:          none (questions wait until someone answers)"
    elif agent.on_expiry == "deny":
        expiry = (
            f"Expiry:          after {duration_words(agent.expire_after)} an open approval or "
            "connection is denied on the team's behalf (a question is marked expired)"
        )
    else:
        expiry = (
            f"Expiry:          after {duration_words(agent.expire_after)} an open question is "
            "marked expired; the agent keeps waiting"
        )
    duties = (
        "Self-approval:   not allowed (whoever started a task needs another approver)"
        if agent.no_self_approval
        else "Self-approval:   allowed"
    )
    credentials = (
        "Credentials:     each person's own (answers need it; no shared credential stands in)"
        if agent.per_person
        else "Credentials:     each person's own when they saved one, else the shared one"
    )
    return [expiry, duties, credentials]
