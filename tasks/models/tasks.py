"""A2A tasks: one of a session's tasks (a turn of its work), as its agent last reported it."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tasks.models import states
from tasks.models.agents import Agent
from tasks.models.states import TERMINAL_STATES, TaskState
from tasks.wire.stored_json import StoredJSONDecoder


class Task(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tasks")
    # Named, not imported: sessions.py reads a session's tasks and interactions, which stand
    # on this module.
    session = models.ForeignKey("tasks.Session", on_delete=models.CASCADE, related_name="tasks")
    task_id = models.CharField(max_length=200)
    state = models.CharField(max_length=40, choices=TaskState.choices)
    # The agent's own status timestamp orders updates; None means the agent sent none.
    status_timestamp = models.DateTimeField(null=True, blank=True)
    status_received_at = models.DateTimeField()
    status_message = models.TextField(blank=True)
    # The card's note: the latest status message that is not a question.
    note = models.TextField(blank=True)
    note_timestamp = models.DateTimeField(null=True, blank=True)
    plan = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    plan_timestamp = models.DateTimeField(null=True, blank=True)
    telemetry = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    uncertain_effects = models.JSONField(decoder=StoredJSONDecoder, default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "task_id"], name="unique_task")]

    def __str__(self) -> str:
        return self.task_id

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def shown_state(self):
        """This turn's state in people's words (tasks/models/states.py)."""
        return states.shown(self.state)

    @property
    def shown_timestamp(self):
        return self.status_timestamp or self.status_received_at


class TaskStart(models.Model):
    """Who started a task from Onlooker's composer (answering/talking.py writes it once the
    agent names the task): kept apart from `Task`, which only the applier writes, and by the
    task's id, as the agent's push may create the task before or after its reply names it.
    An agent with `no_self_approval` asks someone else to approve what that task asks."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="task_starts")
    task_id = models.CharField(max_length=200)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    started_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "task_id"], name="unique_task_start")
        ]

    def __str__(self) -> str:
        return f"{self.task_id} started by {self.started_by_id}"
