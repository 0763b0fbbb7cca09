"""Who a call to an agent acts for. The Nylorun profile v2 says a call acts for "the subject
the caller authenticated as": a person's answer, message, cancel, follow or sync goes out
with that person's own credential (answering/credentials.py keeps it; OAuth tokens are
refreshed by answering/oauth.py), so the agent knows who acts. Without one, the agent's
shared credential stands in, unless the agent is `per_person`: then nothing is sent.

    caller = callers.for_person(agent, user)     # NeedsCredential when per_person and none
    a2a_client.send_message(caller, ...)

A `Caller` is what a2a_client calls (rpc_url, extensions, credential, credential_header);
calls Onlooker makes for no one person (expiry, dismissals, card reads) use the `Agent`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.answering.rules import NotAllowed
from tasks.models import Agent, PersonalCredential


class NeedsCredential(NotAllowed):
    """The agent takes answers only with the person's own credential, and they have none.
    `agent` names it, for the "Connect your credential for ops-bot" link."""

    def __init__(self, agent: Agent) -> None:
        super().__init__(
            f"{agent.name} takes answers only with your own credential: connect yours on "
            "the settings page, then answer."
        )
        self.agent = agent


class CredentialBroken(NeedsCredential):
    """The person connected their own credential, and it cannot be used now (an OAuth
    refresh was refused, or the server did not answer in time). Nothing is sent: going with
    the shared credential instead would act as someone else than the person expects. A
    NeedsCredential, so every place that offers the way to connect one offers it here."""

    def __init__(self, agent: Agent) -> None:
        also = "" if agent.per_person else ", or disconnect it to act with the shared one"
        NotAllowed.__init__(
            self,
            f"Your connection to {agent.name} could not be renewed just now: nothing was "
            f"sent. Reconnect it on the settings page{also}.",
        )
        self.agent = agent


@dataclass(frozen=True)
class Caller:
    """An agent called as one person (or with its shared credential: `person` None)."""

    agent: Agent
    credential: str = field(repr=False)
    credential_header: str
    person_id: int | None

    @property
    def rpc_url(self) -> str:
        return self.agent.rpc_url

    @property
    def extensions(self) -> list[str]:
        return self.agent.extensions

    @property
    def pk(self) -> int | None:
        return self.agent.pk


def header_value(agent: Agent, token: str) -> str:
    """A person's token as the card's scheme sends it: an API key as given, anything else
    (HTTP bearer, OAuth 2.0, a card that says nothing) as `Bearer <token>`."""
    if agent.auth_scheme.get("kind") == "api_key":
        return token
    return f"Bearer {token}"


def own_credential(agent: Agent, user) -> PersonalCredential | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return PersonalCredential.objects.filter(agent=agent, user=user).first()


def for_person(agent: Agent, user) -> Caller:
    """How `user` calls `agent`: with their own credential when they have one (an OAuth
    token is refreshed first when it is about to expire; CredentialBroken when it cannot be
    used now), else with the shared one; an agent that is `per_person` raises
    NeedsCredential instead. Either refusal comes before anything is sent."""
    own = own_credential(agent, user)
    if own is not None:
        token = _usable_token(own)
        if not token:
            raise CredentialBroken(agent)
        return Caller(agent, header_value(agent, token), agent.credential_header, user.pk)
    if agent.per_person:
        raise NeedsCredential(agent)
    return shared(agent)


def shared(agent: Agent) -> Caller:
    return Caller(agent, agent.credential, agent.credential_header, None)


def needs_credential(agent: Agent, user) -> bool:
    """Whether `user` may not answer `agent` until they connect a credential (the page then
    shows the link instead of the buttons). No call is made to find out."""
    return agent.per_person and own_credential(agent, user) is None


def _usable_token(own: PersonalCredential) -> str:
    if own.kind == PersonalCredential.Kind.OAUTH:
        from tasks.answering import oauth  # the OAuth client loads only where it is used

        return oauth.access_token(own)
    return own.secret
