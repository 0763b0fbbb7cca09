"""A session's history: one row per thing that happened to it, in Onlooker's clock.

Written only by `tasks/sessions/timeline.py` (called from the write paths: ingest, answers, the card
API), read by the session page, `/api/sessions/<id>` and nothing else. Rows are small and
bounded (`data` holds a few short values), so a session's whole history is cheap to read.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tasks.wire.stored_json import StoredJSONDecoder


class TimelineEntry(models.Model):
    class Kind(models.TextChoices):
        STATE = "state"  # a task entered a state
        ANSWER = "answer"  # a person's decision reached the agent, or a question was dismissed
        CARD = "card"  # the card got a new revision
        ARTIFACT = "artifact"  # a new artifact version arrived
        CANCEL = "cancel"  # a person asked the agent to cancel a task (actor: who)

    session = models.ForeignKey("tasks.Session", on_delete=models.CASCADE, related_name="timeline")
    task = models.ForeignKey("tasks.Task", null=True, blank=True, on_delete=models.CASCADE)
    # Onlooker's clock (when the push was received, or the answer recorded): agents' clocks
    # can skew, so order is ours; the agent's own timestamp is kept in `data`.
    at = models.DateTimeField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    state = models.CharField(max_length=40, blank=True)
    revision = models.PositiveIntegerField(null=True, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    data = models.JSONField(decoder=StoredJSONDecoder, default=dict, blank=True)

    class Meta:
        verbose_name_plural = "timeline entries"
        indexes = [models.Index(fields=["session", "at", "id"], name="timeline_session_at")]

    def __str__(self) -> str:
        return f"{self.kind} {self.state or self.revision or ''} at {self.at}"
