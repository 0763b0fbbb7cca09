"""Pushes as received: the durable spool every accepted push is kept in before it is applied."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tasks.models.agents import Agent, PushEndpoint
from tasks.wire.stored_json import StoredJSONDecoder


class Delivery(models.Model):
    """A push as received: the durable spool. The receiver stores it (pending) and answers;
    the applier (tasks/pushes/applier.py) applies it and records its outcome. A pending
    delivery whose apply failed keeps its error and is tried again at `retry_at`."""

    class Outcome(models.TextChoices):
        PENDING = "pending", "received, not applied yet"
        APPLIED = "applied"
        STALE = "stale", "older than what is stored; state not applied"
        AFTER_TERMINAL = "after_terminal", "task already ended; logged only"
        IGNORED = "ignored", "nothing to apply"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(PushEndpoint, null=True, on_delete=models.SET_NULL)
    idempotency_key = models.CharField(max_length=200)
    received_at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=20)
    task_id = models.CharField(max_length=200, blank=True)
    body = models.TextField()
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.PENDING)
    warnings = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    duplicates = models.PositiveIntegerField(default=0)
    applied_at = models.DateTimeField(null=True, blank=True)
    # Failed applies: how many, the last error, and when to try again (null: at once).
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["agent", "idempotency_key"], name="unique_delivery_key")
        ]
        indexes = [
            # The applier's queue: only pending rows are indexed, so it stays small however
            # many applied deliveries are kept.
            models.Index(fields=["id"], condition=Q(outcome="pending"), name="pending_deliveries"),
            # The agent page's "last push received": one index step, however many it has.
            models.Index(fields=["agent", "received_at"], name="agent_received"),
            # A task's deliveries, newest first: the raw view (tasks/web/deliveries_page.py).
            models.Index(fields=["agent", "task_id", "id"], name="delivery_task_order"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.task_id} ({self.outcome})"
