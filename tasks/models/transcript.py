"""What a session's tasks made and what was said in it: artifacts (every version kept) and
the transcript's messages."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tasks.models.sessions import Session
from tasks.models.tasks import Task
from tasks.wire.stored_json import StoredJSONDecoder


class Artifact(models.Model):
    """One version of an artifact; every version is kept."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="artifacts")
    artifact_id = models.CharField(max_length=200)
    sequence = models.PositiveIntegerField(help_text="1 for the first version seen, then 2, …")
    name = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    parts = models.JSONField(decoder=StoredJSONDecoder, default=list)
    files = models.JSONField(
        decoder=StoredJSONDecoder, null=True, blank=True, help_text="files/v1 data"
    )
    # False while the agent streams the version in chunks and has not sent `lastChunk`.
    complete = models.BooleanField(default=True)
    # A text/markdown version's note, rendered and sanitized once when it arrives
    # (sessions/progress_card.py); empty for any other version.
    markdown_html = models.TextField(blank=True)
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "artifact_id", "sequence"], name="unique_artifact_version"
            )
        ]
        ordering = ["task_id", "artifact_id", "sequence"]

    def __str__(self) -> str:
        return f"{self.artifact_id} v{self.sequence}"


class Message(models.Model):
    """The session transcript: what people sent, what the agent said, and Onlooker's notes
    of what people did that the agent never heard (a dismissed question)."""

    class Role(models.TextChoices):
        USER = "ROLE_USER", "user"
        AGENT = "ROLE_AGENT", "agent"
        # Onlooker's own one-line notes (a question dismissed): said by neither side, and
        # never sent to the agent. Not an A2A role, so it cannot be mistaken for one.
        ONLOOKER = "onlooker", "Onlooker"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.CASCADE)
    message_id = models.CharField(max_length=200, blank=True)
    role = models.CharField(max_length=20, choices=Role.choices)
    text = models.TextField()
    # `text` as the page shows it: an agent's markdown rendered and sanitized once, when the
    # message is written, by the card's sanitizer (empty: shown as plain text).
    html = models.TextField(blank=True, default="")
    at = models.DateTimeField()
    # True when the agent gave no time and `at` is when Onlooker received it.
    estimated_time = models.BooleanField(default=False)
    # The agent's status text that became the card's note: the session page shows it as a
    # one-line receipt, since the card already shows it in full.
    card_update = models.BooleanField(default=False)
    # The message's other parts (url, raw, data) as the page shows them, bounded
    # (tasks/wire/message_parts.py); a raw part's bytes are kept apart in `files`, which only its
    # download loads.
    parts = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    files = models.JSONField(
        decoder=StoredJSONDecoder, default=list, blank=True, help_text="raw parts, base64"
    )

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "message_id"],
                condition=~Q(message_id=""),
                name="unique_transcript_message",
            )
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:40]}"
