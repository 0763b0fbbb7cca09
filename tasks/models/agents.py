"""Agents and the ways their pushes come in: each agent, its push endpoints, and counts of the
pushes it was refused. Push tokens are kept as digests only."""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

from tasks.models.sealed import SealedTextField
from tasks.wire import tiers
from tasks.wire.stored_json import StoredJSONDecoder


def digest(secret: str) -> str:
    """Push tokens are stored as digests: they are only ever compared, never shown again."""
    return hashlib.sha256(secret.encode()).hexdigest()


def matches_digest(presented: str, stored: str) -> bool:
    return bool(stored) and hmac.compare_digest(digest(presented), stored)


def duration_words(delta: timedelta) -> str:
    """A duration as people read it: "4 h", "30 min", "1 d 2 h", "1 min 30 s"."""
    seconds = int(delta.total_seconds())
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min"), (seconds, "s")]
    return " ".join(f"{n} {unit}" for n, unit in parts if n) or "0 s"


class AgentQuerySet(models.QuerySet):
    def visible_to(self, user) -> AgentQuerySet:
        """Agents without a team are everyone's; a team's agents are its members'."""
        if user.is_superuser:
            return self
        return self.filter(Q(team__isnull=True) | Q(team__in=user.groups.all()))


class Agent(models.Model):
    name = models.CharField(max_length=200)
    card_url = models.URLField(max_length=500)
    rpc_url = models.URLField("JSON-RPC URL", max_length=500)
    protocol_version = models.CharField(max_length=20)
    extensions = models.JSONField(
        decoder=StoredJSONDecoder, default=list, blank=True, help_text="URIs the card declares"
    )
    push_notifications = models.BooleanField(default=False)
    # The card's own words as of its last fetch, plain text and bounded
    # (answering/agent_card.parse_card): the name it gives itself (`name` is what people call
    # it), its description and skills.
    card_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    skills = models.JSONField(
        decoder=StoredJSONDecoder, default=list, blank=True, help_text="name, description, tags"
    )
    # The shared credential: sent (as `credential_header`) when Onlooker calls the agent for
    # no one person, or for a person without their own (answering/callers.py). Encrypted at
    # rest, never displayed.
    credential = SealedTextField(blank=True)
    # How the card says callers authenticate (answering/agent_card.py parses
    # `securitySchemes`): {"kind": "bearer"} (also when the card says nothing),
    # {"kind": "api_key", "header": "X-API-Key"}, or {"kind": "oauth2", "authorization_url",
    # "token_url", "revocation_url", "scopes": [...]}. Written with the card.
    auth_scheme = models.JSONField(decoder=StoredJSONDecoder, default=dict, blank=True)
    # answers need the person's own credential: no shared one stands in for a person.
    per_person = models.BooleanField(
        "per-person credentials",
        default=False,
        help_text="answers, messages and cancels need the person's own credential",
    )
    # The OAuth client an administrator registered at the agent's authorization server, for
    # the card's authorization code flow (answering/oauth.py).
    oauth_client_id = models.CharField("OAuth client id", max_length=200, blank=True)
    oauth_client_secret = SealedTextField("OAuth client secret", blank=True)
    # The A2A version the agent's last answer declared (`A2A-Version`), when it is not the
    # one Onlooker speaks; "" when it matched or said none.
    answered_version = models.CharField(max_length=20, blank=True)
    # The credential goes to rpc_url, which the card names: at the card's own origin unless a
    # person allowed another when registering the agent.
    allow_other_rpc_origin = models.BooleanField(
        "JSON-RPC URL may be at another origin than the card", default=False
    )
    # A card refresh that named a JSON-RPC URL at an origin nobody agreed to: not followed.
    refused_rpc_url = models.CharField("refused JSON-RPC URL", max_length=500, blank=True)
    refused_rpc_url_at = models.DateTimeField("JSON-RPC URL refused at", null=True, blank=True)
    # Standard Webhooks secrets (whsec_…). Two during a rotation; never displayed.
    signing_secret = SealedTextField(blank=True, fail_closed=True)
    previous_signing_secret = SealedTextField(blank=True, fail_closed=True)
    # The agent's token for Onlooker's card API, kept as a digest; shown once when made.
    api_token_digest = models.CharField(max_length=64, blank=True, db_index=True)
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL)
    card_fetched_at = models.DateTimeField(null=True, blank=True)
    # What the agent's last answer echoed in `A2A-Extensions`: the extensions it activated
    # (its tier); None when its answers carry no such header, or before Onlooker has called
    # it (extensions_echoed_at tells which). Written only by answering/agents.record_echo.
    activated_extensions = models.JSONField(
        decoder=StoredJSONDecoder, null=True, blank=True, help_text="URIs the agent echoed"
    )
    extensions_echoed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The team's declared policy for what this agent asks (answering/expiry.py): a question
    # still open this long is denied on the team's behalf, or only marked expired. Never an
    # automatic approval.
    expire_after = models.DurationField(
        null=True, blank=True, help_text="a question still open this long expires"
    )
    on_expiry = models.CharField(
        max_length=10,
        choices=[("deny", "deny it"), ("leave", "mark it expired; the agent keeps waiting")],
        default="deny",
    )
    # Separation of duties: whoever started a task from the composer cannot approve what it
    # asks; someone else must.
    no_self_approval = models.BooleanField(
        "no self-approval",
        default=False,
        help_text="the person who started a task cannot approve its approvals",
    )

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def expiry_reason(self) -> str:
        """What an expiry says, to the agent and to people: "No one answered within 4 h"."""
        if self.expire_after is None:
            return "No one answered in time"
        return f"No one answered within {duration_words(self.expire_after)}"

    @property
    def credential_header(self) -> str:
        """The header a credential goes in: an API key's own header, else Authorization."""
        if self.auth_scheme.get("kind") == "api_key" and self.auth_scheme.get("header"):
            return str(self.auth_scheme["header"])
        return "Authorization"

    @property
    def signing_secrets(self) -> list[str]:
        return [s for s in (self.signing_secret, self.previous_signing_secret) if s]

    @property
    def tier(self) -> str:
        """ "Profile v2: interactions, progress, …" or "Core A2A", from what it echoed."""
        return tiers.describe(
            self.activated_extensions,
            called=self.extensions_echoed_at is not None,
            declared=self.extensions or [],
        )


class PushEndpoint(models.Model):
    """Where an agent pushes: `/a2a/push/<public_id>/`. The id is not a secret, the tokens are."""

    public_id = models.CharField(max_length=64, unique=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="endpoints")
    token_digest = models.CharField(max_length=64)
    bearer_digest = models.CharField(max_length=64)
    active = models.BooleanField(default=True)
    # The one task it serves: the task a person chose to follow through it (`followed`), or
    # the task a message from Onlooker started (set once the agent's reply names it); empty
    # for the agent's own endpoint.
    task_id = models.CharField(max_length=200, blank=True)
    followed = models.BooleanField(default=False)
    # Whose credential created its push config at the agent (None: the shared one): agents
    # keep configs per subject, so deleting it goes out as the same caller.
    created_for = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # When its task ended (answering/push_configs.py): its token is refused after
    # settings.ONLOOKER_PUSH_TOKEN_GRACE_SECONDS, and the push config is deleted at the agent
    # (best effort, retried until `config_deleted_at` or the attempts run out).
    ended_at = models.DateTimeField(null=True, blank=True)
    config_deleted_at = models.DateTimeField(null=True, blank=True)
    delete_attempts = models.PositiveIntegerField(default=0)
    next_delete_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_delete_error = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            # Two presses of "Follow this task" make one follower: the second insert fails.
            models.UniqueConstraint(
                fields=["agent", "task_id"],
                condition=~Q(task_id="") & Q(active=True) & Q(followed=True),
                name="one_follower_per_task",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} → {self.public_id}"

    @property
    def push_url(self) -> str:
        return f"{settings.ONLOOKER_PUBLIC_URL}/a2a/push/{self.public_id}/"


class Refusal(models.Model):
    """Counts of refused pushes per agent and reason: refused requests store nothing else."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="refusals")
    reason = models.CharField(max_length=40)
    count = models.PositiveIntegerField(default=0)
    last_at = models.DateTimeField()
    last_detail = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "reason"], name="unique_refusal_reason")
        ]

    def __str__(self) -> str:
        return f"{self.agent}: {self.reason} × {self.count}"
