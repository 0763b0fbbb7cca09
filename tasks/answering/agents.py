"""Registering agents and their push credentials, reading their cards again, and what
follows when a person edits one. Secrets are returned once, here, and never shown again:
push tokens are kept only as digests.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.contrib.auth.models import Group
from django.db import DatabaseError, transaction
from django.utils import timezone

from tasks.answering import a2a_client, agent_card, agent_policy
from tasks.models import Agent, PushEndpoint, Session, digest
from tasks.sessions import changes, fragments, search

log = logging.getLogger(__name__)
ECHO_REFRESH = timedelta(minutes=1)  # an unchanged echo is written again after this long


class RegistrationError(Exception):
    """The agent cannot be registered; str(error) says why."""


class OtherRpcOrigin(RegistrationError):
    """The card sends Onlooker's calls, and so the agent's credential, to another origin than
    its own; registered only when a person allows it."""


class AlreadyRegistered(RegistrationError):
    """The card URL is registered already: a second registration is made only on purpose
    (`again`), since each one gets its own push URL, secrets and sessions."""

    def __init__(self, existing: list[Agent]) -> None:
        self.existing = existing
        named = ", ".join(f"{agent.name} (agent {agent.pk})" for agent in existing)
        super().__init__(
            f"{existing[0].card_url} is already registered as {named}; nothing was registered"
        )


@dataclass(frozen=True)
class Registration:
    agent: Agent
    endpoint: PushEndpoint
    push_token: str
    push_bearer: str
    signing_secret: str | None
    api_token: str

    def as_json(self) -> dict:
        return {
            "agent": self.agent.pk,
            "push_url": self.endpoint.push_url,
            "push_token": self.push_token,
            "push_bearer": self.push_bearer,
            "signing_secret": self.signing_secret,
            "api_token": self.api_token,
        }


def new_signing_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def check_signing_secret(secret: str) -> str:
    if not secret.startswith("whsec_"):
        raise RegistrationError("a signing secret starts with whsec_ (Standard Webhooks)")
    try:
        key = base64.b64decode(secret.removeprefix("whsec_") + "==", validate=False)
    except (binascii.Error, ValueError):
        raise RegistrationError("the signing secret after whsec_ is not base64") from None
    if not 24 <= len(key) <= 64:
        raise RegistrationError(f"a signing secret holds 24 to 64 bytes, this one {len(key)}")
    return secret


def check_credential(credential: str, auth_scheme: dict | None = None) -> str:
    """The shared credential as the header carries it: "<scheme> <value>" for Authorization,
    the key alone for an agent whose card asks for an API key in a header of its own."""
    credential = credential.strip()
    if credential and not all(" " <= c <= "~" for c in credential):
        raise RegistrationError("a credential is printable ASCII on one line")
    if (auth_scheme or {}).get("kind") == "api_key":
        return credential
    scheme, _, value = credential.partition(" ")
    if credential and not (scheme and value.strip()):
        raise RegistrationError('a credential is "<scheme> <value>", e.g. "Bearer abc123"')
    return credential


def check_oauth_client(client_id: str, client_secret: str) -> tuple[str, str]:
    client_id, client_secret = client_id.strip(), client_secret.strip()
    if client_secret and not client_id:
        raise RegistrationError("an OAuth client secret needs its client id (--oauth-client-id)")
    if len(client_id) > 200 or len(client_secret) > 4096:
        raise RegistrationError("an OAuth client id has at most 200 characters, a secret 4096")
    return client_id, client_secret


def register(
    card_url: str,
    *,
    name: str = "",
    team: str = "",
    signing_secret: str = "",
    generate_signing_secret: bool = False,
    credential: str = "",
    allow_other_rpc_origin: bool = False,
    again: bool = False,
    expire_after: timedelta | None = None,
    on_expiry: str = "deny",
    no_self_approval: bool = False,
    per_person: bool = False,
    oauth_client_id: str = "",
    oauth_client_secret: str = "",
) -> Registration:
    """Register the agent whose card is at (or under) `card_url`. Its JSON-RPC URL must be at
    the card's origin unless `allow_other_rpc_origin`: the card decides where Onlooker sends
    the agent's credential, and whoever serves the card must not steer it elsewhere.

    A card URL that is registered already raises AlreadyRegistered unless `again`: a second
    registration by mistake would split one agent's sessions between two names. The rest
    is the team's policy for what it asks (answering/agent_policy.py)."""
    if on_expiry not in agent_policy.ON_EXPIRY:
        raise RegistrationError(f"on expiry is deny or leave, not {on_expiry!r}")
    signing_secret = _signing_secret(signing_secret, generate_signing_secret)
    # Refused before the card is read where it can be; its form depends on the card's scheme.
    check_credential(credential, {"kind": "api_key"})
    oauth_client_id, oauth_client_secret = check_oauth_client(oauth_client_id, oauth_client_secret)
    if len(name.strip()) > agent_card.MAX_NAME:
        raise RegistrationError(f"a name has at most {agent_card.MAX_NAME} characters")
    card_url, card = _card_to_register(
        card_url, again=again, allow_other_rpc_origin=allow_other_rpc_origin
    )
    credential = check_credential(credential, card.auth_scheme)
    api_token = new_api_token()
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name.strip() or card.name,
            card_url=card_url,
            rpc_url=card.rpc_url,
            protocol_version=card.protocol_version,
            extensions=card.extensions,
            push_notifications=card.push_notifications,
            card_name=card.name,
            description=card.description,
            skills=card.skills,
            auth_scheme=card.auth_scheme,
            credential=credential,
            allow_other_rpc_origin=allow_other_rpc_origin,
            signing_secret=signing_secret,
            team=Group.objects.get_or_create(name=team.strip())[0] if team.strip() else None,
            card_fetched_at=timezone.now(),
            api_token_digest=digest(api_token),
            expire_after=expire_after,
            on_expiry=on_expiry,
            no_self_approval=no_self_approval,
            per_person=per_person,
            oauth_client_id=oauth_client_id,
            oauth_client_secret=oauth_client_secret,
        )
        endpoint, token, bearer = new_endpoint(agent)
    return Registration(agent, endpoint, token, bearer, signing_secret or None, api_token)


def _signing_secret(given: str, generate: bool) -> str:
    if given and generate:
        raise RegistrationError("give a signing secret or ask for one to be generated, not both")
    if generate:
        return new_signing_secret()
    if given:
        check_signing_secret(given)
    return given


def _card_to_register(
    card_url: str, *, again: bool, allow_other_rpc_origin: bool
) -> tuple[str, agent_card.AgentCard]:
    """The card's URL (a base URL becomes its card URL) and the card read there. Refused,
    before anything is stored, when that agent is registered already (unless `again`) or its
    card names a JSON-RPC URL at another origin (unless `allow_other_rpc_origin`)."""
    try:
        card_url = agent_card.card_url_for(card_url)
        if len(card_url) > agent_card.MAX_URL:
            raise RegistrationError(f"the card URL is longer than {agent_card.MAX_URL} characters")
        existing = registrations_of(card_url)
        if existing and not again:
            raise AlreadyRegistered(existing)
        card = agent_card.fetch_card(card_url)
    except a2a_client.A2AError as error:
        raise RegistrationError(str(error)) from None
    card_origin, rpc_origin = agent_card.origin(card_url), agent_card.origin(card.rpc_url)
    if card_origin != rpc_origin and not allow_other_rpc_origin:
        raise OtherRpcOrigin(
            f"the agent card at {card_origin} names a JSON-RPC URL at another origin, "
            f"{rpc_origin}: Onlooker would send the agent's credential there. Register it "
            "only if you trust that origin with it, allowing another JSON-RPC origin"
        )
    return card_url, card


def card_key(card_url: str) -> str:
    """What makes two card URLs the same agent's: origin, path and query (so `HTTP://Host:80/`
    and `http://host/` are one); the URL itself when it has no origin."""
    try:
        key = agent_card.origin(card_url)
    except ValueError:
        return card_url
    parts = urlsplit(card_url)
    return key + parts.path + (f"?{parts.query}" if parts.query else "")


def registrations_of(card_url: str) -> list[Agent]:
    """Every registration of the agent whose card is at `card_url`, oldest first."""
    key = card_key(card_url)
    # Compared in Python: origins are normalised, which a database lookup cannot do, and
    # registrations are few.
    candidates = Agent.objects.only("pk", "name", "card_url").order_by("pk")
    return [agent for agent in candidates if card_key(agent.card_url) == key]


def new_api_token() -> str:
    # The prefix makes a leaked token recognisable (and greppable) for what it is.
    return "onl_" + secrets.token_urlsafe(32)


def replace_api_token(agent: Agent) -> str:
    token = new_api_token()
    agent.api_token_digest = digest(token)
    agent.save(update_fields=["api_token_digest"])
    return token


def agent_for_api_token(token: str) -> Agent | None:
    if not token.startswith("onl_"):
        return None
    # A digest lookup: the index finds it, and no comparison leaks timing about the token.
    return Agent.objects.filter(api_token_digest=digest(token)).first()


def new_endpoint(
    agent: Agent, *, task_id: str = "", created_for=None
) -> tuple[PushEndpoint, str, str]:
    token, bearer = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    endpoint = PushEndpoint.objects.create(
        agent=agent,
        task_id=task_id,
        followed=bool(task_id),  # only "Follow this task" names its task up front
        created_for=created_for,
        public_id=secrets.token_urlsafe(16),
        token_digest=digest(token),
        bearer_digest=digest(bearer),
    )
    return endpoint, token, bearer


def new_push_config(
    agent: Agent, *, task_id: str = "", created_for=None
) -> tuple[PushEndpoint, a2a_client.PushConfig]:
    """A fresh endpoint and the push config naming it, for a message that starts work (or,
    with `task_id`, for a task a person follows): the agent pushes that task's updates there."""
    endpoint, token, bearer = new_endpoint(agent, task_id=task_id, created_for=created_for)
    push = a2a_client.PushConfig(
        url=endpoint.push_url, token=token, bearer=bearer, id=endpoint.public_id
    )
    return endpoint, push


def serves_task(endpoint: PushEndpoint, task_id: str) -> None:
    """The agent named the task a message with this endpoint's push config started: the
    endpoint ends with that task (answering/push_configs.py)."""
    if task_id and not endpoint.task_id:
        PushEndpoint.objects.filter(pk=endpoint.pk, task_id="").update(task_id=task_id[:200])
        endpoint.task_id = task_id[:200]


def rotate_signing_secret(agent: Agent) -> str:
    """Start a rotation: the new secret signs from now on, the old one stays valid until
    `retire_previous_signing_secret`, so pushes in flight keep verifying."""
    secret = new_signing_secret()
    agent.previous_signing_secret = agent.signing_secret
    agent.signing_secret = secret
    agent.save(update_fields=["signing_secret", "previous_signing_secret"])
    return secret


def retire_previous_signing_secret(agent: Agent) -> None:
    agent.previous_signing_secret = ""
    agent.save(update_fields=["previous_signing_secret"])


def refresh_card(agent: Agent) -> str | None:
    """Read the agent's card again (its URL, version or extensions may have changed); the
    error in words when it could not be read, which is also kept on the agent. The name a
    person gave the agent stays.

    The JSON-RPC URL moves only within the origins a person agreed to: its current one and
    the card's own. A card naming another origin is not followed (the credential would go
    there): the URL stays, and the refused one is kept on the agent (`refused_move`)."""
    try:
        card = agent_card.fetch_card(agent.card_url)
    except a2a_client.A2AError as error:
        agent.last_error = str(error)
        agent.save(update_fields=["last_error"])
        return agent.last_error
    if _origin(card.rpc_url) in {_origin(agent.card_url), _origin(agent.rpc_url)} - {None}:
        agent.rpc_url, agent.protocol_version = card.rpc_url, card.protocol_version
        agent.refused_rpc_url, agent.refused_rpc_url_at = "", None
    elif card.rpc_url != agent.refused_rpc_url:
        agent.refused_rpc_url, agent.refused_rpc_url_at = card.rpc_url, timezone.now()
        log.warning("agent %s: refused a JSON-RPC URL at another origin", agent.pk)
    agent.extensions, agent.push_notifications = card.extensions, card.push_notifications
    agent.card_name, agent.description, agent.skills = card.name, card.description, card.skills
    agent.auth_scheme = card.auth_scheme
    agent.card_fetched_at, agent.last_error = timezone.now(), ""
    agent.save(
        update_fields=[
            "rpc_url",
            "refused_rpc_url",
            "refused_rpc_url_at",
            "protocol_version",
            "extensions",
            "push_notifications",
            "card_name",
            "description",
            "skills",
            "auth_scheme",
            "card_fetched_at",
            "last_error",
        ]
    )
    return None


def _origin(url: str) -> str | None:
    try:
        return agent_card.origin(url)
    except ValueError:  # a URL stored before origins were checked
        return None


def refused_move(agent: Agent) -> str:
    """What a refused card refresh did, in words ("" when none was refused)."""
    if not agent.refused_rpc_url:
        return ""
    return (
        f"its card moved the JSON-RPC URL to another origin, {agent.refused_rpc_url}: "
        f"Onlooker keeps calling {agent.rpc_url} and does not send the agent's credential "
        "there (accept the move in the admin if that origin is the agent's own)"
    )


def accept_refused_rpc_url(agent: Agent) -> None:
    """A person vouches for the origin a card refresh moved to: calls go there from now on."""
    if not agent.refused_rpc_url:
        return
    agent.rpc_url, agent.allow_other_rpc_origin = agent.refused_rpc_url, True
    agent.refused_rpc_url, agent.refused_rpc_url_at = "", None
    agent.save(
        update_fields=[
            "rpc_url",
            "allow_other_rpc_origin",
            "refused_rpc_url",
            "refused_rpc_url_at",
        ]
    )


def changed(agent: Agent) -> None:
    """Call in the transaction that changed what its sessions' fragments show of the agent
    (its name) or where their hints go (its team). The stored fragments are dropped with the
    change, so no page shows the old name once it commits (pages render what is missing);
    after commit they are stored again and hinted, one session at a time under its lock, so
    a push applied meanwhile with the old name is overwritten too."""
    fragments.forget_agent(agent)
    search.agent_renamed(agent)
    transaction.on_commit(lambda: restore_fragments(agent.pk), robust=True)


def restore_fragments(agent_id: int) -> int:
    """Store the fragments of the agent's sessions again, most recently updated first (what
    the screens show first), and hint browsers; returns how many were stored."""
    ids = Session.objects.filter(agent_id=agent_id).order_by("-updated_at", "-id")
    stored = 0
    for session_id in list(ids.values_list("pk", flat=True)):
        with transaction.atomic():
            session = (
                Session.objects.select_for_update(of=("self",))
                .select_related("agent")
                .filter(pk=session_id)
                .first()
            )
            if session is None:
                continue  # deleted meanwhile
            changes.changed([changes.Changed(session, session.agent.team_id)], derived=True)
            stored += 1
    return stored


def record_echo(agent: object, activated: list[str] | None) -> None:
    """Keep which extensions the agent activated on its latest answer (a2a_client.on_echo).
    Only these two fields are written, so a concurrent save of the agent keeps its own; a
    failure to store it never fails the call it came with."""
    agent = getattr(agent, "agent", agent)  # a callers.Caller records for its agent
    if not isinstance(agent, Agent) or agent.pk is None:
        return  # an address that is not a registered agent (discovery, tests)
    now = timezone.now()
    seen = agent.extensions_echoed_at
    if agent.activated_extensions == activated and seen and now - seen < ECHO_REFRESH:
        return  # a sync's many calls in a row write once
    try:
        Agent.objects.filter(pk=agent.pk).update(
            activated_extensions=activated, extensions_echoed_at=now
        )
    except DatabaseError:
        log.warning("agent %s: could not record the extensions it echoed", agent.pk)
        return
    agent.activated_extensions, agent.extensions_echoed_at = activated, now
