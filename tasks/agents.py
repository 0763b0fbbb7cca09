"""Registering agents and their push credentials. Secrets are returned once, here, and
never shown again: push tokens are kept only as digests.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass

from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from tasks import a2a_client
from tasks.models import Agent, PushEndpoint, digest


class RegistrationError(Exception):
    """The agent cannot be registered; str(error) says why."""


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


def check_credential(credential: str) -> str:
    scheme, _, value = credential.strip().partition(" ")
    if credential and not (scheme and value.strip()):
        raise RegistrationError('a credential is "<scheme> <value>", e.g. "Bearer abc123"')
    return credential.strip()


def register(
    card_url: str,
    *,
    name: str = "",
    team: str = "",
    signing_secret: str = "",
    generate_signing_secret: bool = False,
    credential: str = "",
) -> Registration:
    if signing_secret and generate_signing_secret:
        raise RegistrationError("give a signing secret or ask for one to be generated, not both")
    if generate_signing_secret:
        signing_secret = new_signing_secret()
    elif signing_secret:
        check_signing_secret(signing_secret)
    credential = check_credential(credential)
    if len(name.strip()) > a2a_client.MAX_NAME:
        raise RegistrationError(f"a name has at most {a2a_client.MAX_NAME} characters")
    try:
        card_url = a2a_client.card_url_for(card_url)
        if len(card_url) > a2a_client.MAX_URL:
            raise RegistrationError(f"the card URL is longer than {a2a_client.MAX_URL} characters")
        card = a2a_client.fetch_card(card_url)
    except a2a_client.A2AError as error:
        raise RegistrationError(str(error)) from None
    api_token = new_api_token()
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name.strip() or card.name,
            card_url=card_url,
            rpc_url=card.rpc_url,
            protocol_version=card.protocol_version,
            extensions=card.extensions,
            push_notifications=card.push_notifications,
            credential=credential,
            signing_secret=signing_secret,
            team=Group.objects.get_or_create(name=team.strip())[0] if team.strip() else None,
            card_fetched_at=timezone.now(),
            api_token_digest=digest(api_token),
        )
        endpoint, token, bearer = new_endpoint(agent)
    return Registration(agent, endpoint, token, bearer, signing_secret or None, api_token)


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


def new_endpoint(agent: Agent) -> tuple[PushEndpoint, str, str]:
    token, bearer = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    endpoint = PushEndpoint.objects.create(
        agent=agent,
        public_id=secrets.token_urlsafe(16),
        token_digest=digest(token),
        bearer_digest=digest(bearer),
    )
    return endpoint, token, bearer


def new_push_config(agent: Agent) -> tuple[PushEndpoint, a2a_client.PushConfig]:
    """A fresh endpoint and the push config naming it, for a message that starts work: the
    agent pushes that task's updates there."""
    endpoint, token, bearer = new_endpoint(agent)
    push = a2a_client.PushConfig(
        url=endpoint.push_url, token=token, bearer=bearer, id=endpoint.public_id
    )
    return endpoint, push


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
    person gave the agent stays."""
    try:
        card = a2a_client.fetch_card(agent.card_url)
    except a2a_client.A2AError as error:
        agent.last_error = str(error)
        agent.save(update_fields=["last_error"])
        return agent.last_error
    agent.rpc_url, agent.protocol_version = card.rpc_url, card.protocol_version
    agent.extensions, agent.push_notifications = card.extensions, card.push_notifications
    agent.card_fetched_at, agent.last_error = timezone.now(), ""
    agent.save(
        update_fields=[
            "rpc_url",
            "protocol_version",
            "extensions",
            "push_notifications",
            "card_fetched_at",
            "last_error",
        ]
    )
    return None
