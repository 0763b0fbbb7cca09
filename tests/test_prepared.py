"""A prepared read (tasks/prepared.py) gives exactly what the QuerySet it stands for gives:
the same rows in the same order, JSON decoded and timestamps aware (an annotation's too), on
either database; the key goes where the QuerySet filtered by it, beside its other
parameters."""

from __future__ import annotations

from datetime import datetime

from django.db.models import F
from django.db.models.functions import Coalesce
from django.test import Client

from tasks import profile
from tasks.models import Card, Interaction, Session, Task
from tasks.prepared import Prepared
from tests.builders import approval, progress, status
from tests.conftest import push


def fields(rows, *extra: str) -> list[dict]:
    return [
        {f.attname: getattr(row, f.attname) for f in type(row)._meta.concrete_fields}
        | {name: getattr(row, name) for name in extra}
        for row in rows
    ]


def test_a_prepared_read_gives_what_its_queryset_gives(token_agent):
    plan = progress(("Read the logs", "completed"), ("Fix it", "in_progress"))
    telemetry = {profile.TELEMETRY: {"steps": 3, "costUsd": 0.25, "traceId": "t-1"}}
    for body in (
        status("WORKING", task="t-1", at=1, text="Reading **logs**", metadata=plan),
        status("COMPLETED", task="t-1", at=2, text="Done", metadata=telemetry),
        status("AUTH_REQUIRED", task="t-2", at=3, metadata=approval("i-1", "Ship v2?")),
        status("WORKING", task="t-3", text="Undated"),
    ):
        assert push(Client(), token_agent, body).status_code == 200
    session = Session.objects.get()

    def tasks(session_id):
        return (
            Task.objects.filter(session_id=session_id)
            .annotate(at=Coalesce("status_timestamp", "status_received_at"))
            .order_by("-at", "-id")
        )

    def waiting(session_id):
        return (
            Interaction.objects.filter(task__session_id=session_id, state=Interaction.State.OPEN)
            .annotate(task_state=F("task__state"))
            .order_by("-opened_at", "-id")
        )

    def card(session_id):
        return Card.objects.filter(session_id=session_id)

    for build, extra in ((tasks, ("at",)), (waiting, ("task_state",)), (card, ())):
        prepared = Prepared(build)
        expected = fields(build(session.pk), *extra)
        assert expected  # something to compare
        assert fields(prepared(session.pk), *extra) == expected
        assert fields(prepared(session.pk + 1000), *extra) == []  # the key is the filter

    decoded = fields(Prepared(tasks)(session.pk), "at")
    assert [row["plan"][0]["label"] for row in decoded if row["plan"]] == ["Read the logs"]
    assert all(isinstance(row["at"], datetime) and row["at"].tzinfo for row in decoded)
