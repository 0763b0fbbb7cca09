"""A person's own credential for an agent: a token they saved on /settings/, or the OAuth
tokens "Connect" obtained. Calls a person makes to that agent carry it
(answering/callers.py), so the agent knows who acts. Sealed at rest, never shown again."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tasks.models.agents import Agent
from tasks.models.sealed import SealedTextField


class PersonalCredential(models.Model):
    class Kind(models.TextChoices):
        TOKEN = "token", "token"
        OAUTH = "oauth", "OAuth"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_credentials"
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="personal_credentials")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # The token as the person gave it, or the OAuth access token; the scheme's header is
    # made from it when calling (answering/callers.py).
    secret = SealedTextField()
    refresh_token = SealedTextField(blank=True)
    # When the OAuth access token stops working (None: the server did not say).
    expires_at = models.DateTimeField(null=True, blank=True)
    scope = models.CharField(max_length=500, blank=True)
    # Set while one process refreshes the OAuth tokens (answering/oauth.py claims it with a
    # conditional UPDATE), so no lock is held across the call to the token endpoint.
    refreshing_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "agent"], name="one_credential_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}'s {self.get_kind_display()} for {self.agent_id}"
