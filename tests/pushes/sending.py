"""Pushes sent through the real view by the tests of what becomes of them: `send` says what
became of one."""

from __future__ import annotations

from tasks.models import Delivery, Task
from tests.conftest import push

# A files/v1 value, as an artifact's metadata carries it.
FILES = {"kind": "report", "version": 1, "size": 12, "sha256": "a" * 64, "path": "out/r.md"}


def send(client, agent, body, **kwargs):
    """Push, and say what became of it: "duplicate", or the outcome the applier recorded."""
    response = push(client, agent, body, **kwargs)
    assert response.status_code == 200, response.content
    answer = response.json()
    if answer["outcome"] == "duplicate":
        return "duplicate"
    assert answer["outcome"] == "accepted", answer
    return Delivery.objects.get(pk=answer["delivery"]).outcome


def task() -> Task:
    return Task.objects.get(task_id="task-1")
