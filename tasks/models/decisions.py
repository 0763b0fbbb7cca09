"""The record of decisions: one row per decision anyone (or the team's expiry policy) made on
something an agent waited for, kept as it was made. Append-only: rows are only ever inserted
(answering/record.py is the one writer); nothing edits or deletes one, the admin included.

The row names what it is about by value (ids, the agent's name, who decided), not by foreign
key: deleting a session, an agent or a person leaves the record of what they decided whole.
Whether the agent confirmed a decision is learnt after it is made, so it is a row of its own
(`DecisionConfirmation`), also append-only.
"""

from __future__ import annotations

from django.db import models

from tasks.wire.stored_json import StoredJSONDecoder


class AppendOnly(Exception):
    """Something tried to change or delete a row of the record."""


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnly("the record of decisions is append-only")

    def delete(self):
        raise AppendOnly("the record of decisions is append-only")

    _raw_delete = delete


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise AppendOnly("the record of decisions is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnly("the record of decisions is append-only")


class Decision(AppendOnlyModel):
    class Made(models.TextChoices):
        APPROVE = "approve"
        DENY = "deny"
        ANSWER = "answer"
        CONNECT = "connect"
        DECLINE = "decline"
        DISMISS = "dismiss"
        EXPIRED = "expired"
        CHECKED = "checked"

    class Via(models.TextChoices):
        PAGE = "page"
        SLACK = "slack"
        LINK = "link"
        EXPIRY = "expiry"
        API = "api"

    # What it was about, by value (see the module's docstring).
    interaction_pk = models.BigIntegerField()
    interaction_id = models.CharField(max_length=220)
    round = models.PositiveIntegerField()
    session_pk = models.BigIntegerField()
    task_id = models.CharField(max_length=200)
    agent_pk = models.BigIntegerField()
    agent_name = models.CharField(max_length=200)
    # The team the agent belonged to when it was made: who may read the row (None: everyone).
    team_pk = models.BigIntegerField(null=True)
    kind = models.CharField(max_length=20)
    decision = models.CharField(max_length=10, choices=Made.choices)
    value = models.JSONField(decoder=StoredJSONDecoder, null=True)
    reason = models.TextField(blank=True)
    by_pk = models.BigIntegerField(null=True)
    by = models.CharField(max_length=150, blank=True, help_text="username; empty for the team")
    via = models.CharField(max_length=10, choices=Via.choices)
    at = models.DateTimeField()
    opened_at = models.DateTimeField()
    # SHA-256 of the question and detail exactly as shown (answering/record.request_digest).
    request_digest = models.CharField(max_length=64)
    # Whether it goes to the agent at all (a dismissal, a check or a mark of expiry do not).
    sent = models.BooleanField()

    class Meta:
        constraints = [
            # A retry of the bound decision is the same decision. A round can hold two: a
            # mark of expiry and the answer that came after it, or a sent decision the agent
            # forgot and its dismissal.
            models.UniqueConstraint(
                fields=["interaction_pk", "round", "decision"], name="one_decision_a_round"
            )
        ]
        indexes = [
            models.Index(fields=["team_pk", "at", "id"], name="decision_team_at"),
            models.Index(fields=["at", "id"], name="decision_at"),
        ]

    def __str__(self) -> str:
        return f"{self.decision} #{self.interaction_pk}.{self.round} by {self.by or 'the team'}"


class DecisionConfirmation(AppendOnlyModel):
    """The agent's reply came for the decision of this round."""

    interaction_pk = models.BigIntegerField()
    round = models.PositiveIntegerField()
    at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["interaction_pk", "round"], name="one_confirmation_a_round"
            )
        ]

    def __str__(self) -> str:
        return f"confirmed #{self.interaction_pk}.{self.round}"
