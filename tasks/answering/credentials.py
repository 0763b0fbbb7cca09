"""A person's own token for an agent, saved on /settings/: save (create or replace) and remove.
The one writer of PersonalCredential rows of kind token (OAuth rows are answering/oauth.py's).
Calls the person makes to that agent then carry it (answering/callers.py), so the agent
knows who acts. The token is sealed at rest and never shown again: not in pages, messages
or logs.

A token goes out in an HTTP header (`Authorization: Bearer …` or an API key's own header),
so only what a header can carry is kept: printable ASCII, no control characters (a newline
would let a token smuggle a header of its own), at most MAX_TOKEN characters. Anything else is
refused with what was wrong, and nothing changes.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from tasks.answering.rules import AnswerError, NotAllowed, NotFound, may_answer
from tasks.models import Agent, PersonalCredential

MAX_TOKEN = 4096  # characters: longer than any bearer token or API key seen in practice


class BadToken(AnswerError):
    """A token no header can carry, or none at all."""


def agent_for(user, agent_id: int) -> Agent:
    """The agent whose credential `user` manages: one they may see (NotFound otherwise, so
    another team's agents are not revealed) and may answer (NotAllowed)."""
    agent = Agent.objects.visible_to(user).filter(pk=agent_id).first()
    if agent is None:
        raise NotFound("No such agent, or not one you may see.")
    if not may_answer(user):
        raise NotAllowed(
            "You may follow this agent, but not answer it, so a credential of yours would "
            "never be used: ask an administrator for the answer permission."
        )
    return agent


def parse_token(value: object) -> str:
    """The token as posted, without surrounding spaces; BadToken says what was wrong."""
    if not isinstance(value, str) or not value.strip():
        raise BadToken("Paste your token first: it must not be empty. Nothing was saved.")
    if len(value) > MAX_TOKEN:
        raise BadToken(
            f"That token is {len(value)} characters long; at most {MAX_TOKEN} are kept. "
            "Nothing was saved."
        )
    token = value.strip(" ")
    # Printable ASCII only: a line break or another control character in a header would end
    # it and start another (header injection), and HTTP headers carry no other text safely.
    if any(not (" " <= ch <= "~") for ch in token):
        raise BadToken(
            "A token may hold only printable ASCII characters: no line breaks, tabs or other "
            "control characters. Nothing was saved."
        )
    return token


def save(user, agent: Agent, token: str) -> PersonalCredential:
    """Keep `token` (from parse_token) as `user`'s credential for `agent` (from agent_for),
    replacing the one they had. An agent that takes OAuth is connected, not given a token."""
    if agent.auth_scheme.get("kind") == "oauth2":
        raise BadToken(
            f"{agent.name} takes OAuth 2.0: use “Connect” to sign in there. Nothing was saved."
        )
    fields = {
        "kind": PersonalCredential.Kind.TOKEN,
        "secret": token,
        "refresh_token": "",
        "expires_at": None,
        "scope": "",
    }
    try:
        with transaction.atomic():
            saved, _ = PersonalCredential.objects.update_or_create(
                user=user, agent=agent, defaults=fields
            )
    except IntegrityError:
        # The same person saving twice at once (two tabs): the other insert won; replace it.
        with transaction.atomic():
            saved, _ = PersonalCredential.objects.update_or_create(
                user=user, agent=agent, defaults=fields
            )
    return saved


def remove(user, agent: Agent) -> bool:
    """Forget `user`'s token for `agent`; False when they had none. (An OAuth connection is
    ended by "Disconnect", which can also revoke it at the server.)"""
    removed, _ = PersonalCredential.objects.filter(
        user=user, agent=agent, kind=PersonalCredential.Kind.TOKEN
    ).delete()
    return bool(removed)
