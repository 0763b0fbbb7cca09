"""A 2xx means the delivery is committed: nothing that runs after the apply (rendering the
fragments, storing them, hinting browsers) can undo it, and a delivery that cannot be committed
is a 5xx the agent retries, never a 2xx.

Failures are real: a database trigger refuses writes to a table (on SQLite and PostgreSQL
alike), a template that cannot render, a channel layer on a closed port. These tests commit
for real (`transaction=True`), so a rolled-back push cannot hide inside the test's own
transaction.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from tasks.models import Delivery, Session, SessionFragments, Task
from tasks.wire import profile
from tests.builders import status
from tests.conftest import make_agent, push
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def completed(trace_id: str = "tr-1") -> dict:
    body = status("COMPLETED", at=5, text="All done")
    body["statusUpdate"]["metadata"] = {profile.TELEMETRY: {"costUsd": 0.25, "traceId": trace_id}}
    return body


def kept(task_id: str = "task-1") -> bool:
    return (
        Delivery.objects.filter(task_id=task_id).exists()
        and Task.objects.filter(task_id=task_id).exists()
        and Session.objects.filter(context_id="ctx-1").exists()
    )


def test_a_lone_surrogate_in_the_trace_id_never_turns_a_lost_push_into_a_2xx():
    registered = make_agent(signing=True)
    raw = (
        b'{"statusUpdate": {"taskId": "task-1", "contextId": "ctx-1", "status": '
        b'{"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-30T12:00:05Z"}, '
        b'"metadata": {"' + profile.TELEMETRY.encode() + b'": {"traceId": "tr\\ud800"}}}}'
    )
    first = push(Client(), registered, raw, msg_id="msg_surrogate")
    # Kept (the surrogate replaced) or refused naming it: never a 2xx for a lost push.
    assert first.status_code in (200, 400), first.content
    if first.status_code == 200:
        assert kept(), "answered 200 but the delivery, task or session is gone"
        again = push(Client(), registered, raw, msg_id="msg_surrogate")
        assert again.status_code == 200
        assert again.json()["outcome"] == "duplicate"
    else:
        assert Delivery.objects.count() == 0


def test_fragments_the_database_refuses_to_store_do_not_undo_the_push(database):
    registered = make_agent(signing=True)
    assert push(Client(), registered, status("WORKING", at=1, text="Starting")).status_code == 200
    assert SessionFragments.objects.count() == 1
    database.refuse("tasks_sessionfragments", "UPDATE", "INSERT")

    response = push(Client(), registered, completed(), msg_id="msg_done")

    assert response.status_code == 200
    assert response.json()["outcome"] == "accepted"
    assert kept()
    assert Task.objects.get().state == "TASK_STATE_COMPLETED"
    # The stale fragments were dropped, so nothing shows the session as it was before.
    assert not SessionFragments.objects.exists()
    again = push(Client(), registered, completed(), msg_id="msg_done")
    assert again.json()["outcome"] == "duplicate"


def test_fragments_that_can_be_neither_stored_nor_dropped_still_let_the_push_commit(database):
    registered = make_agent(signing=True)
    assert push(Client(), registered, status("WORKING", at=1)).status_code == 200
    database.refuse("tasks_sessionfragments", "UPDATE", "INSERT", "DELETE")

    response = push(Client(), registered, completed())

    assert response.status_code == 200
    assert kept()
    assert Task.objects.get().state == "TASK_STATE_COMPLETED"


def test_a_template_that_cannot_render_does_not_undo_the_push(settings, tmp_path: Path):
    broken = tmp_path / "tasks"
    broken.mkdir()
    (broken / "_tile.html").write_text("{% url 'no-such-route' %}")
    settings.TEMPLATES = [
        {**settings.TEMPLATES[0], "DIRS": [tmp_path, *settings.TEMPLATES[0]["DIRS"]]}
    ]
    registered = make_agent(signing=True)

    response = push(Client(), registered, completed())

    assert response.status_code == 200
    assert kept()


def test_a_channel_layer_that_is_down_does_not_undo_the_push(settings, fresh_channel_layers):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},
        }
    }
    registered = make_agent(signing=True)

    response = push(Client(), registered, completed())

    assert response.status_code == 200
    assert kept()


def test_a_delivery_that_cannot_be_committed_is_a_5xx_and_the_retry_applies_it(database, settings):
    settings.ONLOOKER_SPOOL = "off"  # kept in the database, whose trigger refuses it
    registered = make_agent(signing=True)
    database.refuse("tasks_delivery", "INSERT")

    refused = push(Client(), registered, completed(), msg_id="msg_retry")

    assert refused.status_code == 503
    assert refused.json()["error"] == "not stored"
    assert not Delivery.objects.exists()
    assert not Task.objects.exists()
    assert not Session.objects.exists()

    database.allow_all()
    retried = push(Client(), registered, completed(), msg_id="msg_retry")
    assert retried.status_code == 200
    assert retried.json()["outcome"] == "accepted"
    assert kept()


def test_a_push_the_spool_file_cannot_keep_is_a_5xx_and_the_retry_applies_it(
    settings, tmp_path: Path
):
    if connection.vendor != "sqlite":
        pytest.skip("the spool file is SQLite's: PostgreSQL keeps pushes in the database")
    # An spool file that cannot be opened (its directory is missing): a full disk or a
    # permission taken away fails the same way, in the INSERT that keeps the push.
    settings.ONLOOKER_SPOOL = str(tmp_path / "missing" / "spool.sqlite3")
    registered = make_agent(signing=True)

    refused = push(Client(), registered, completed(), msg_id="msg_retry")

    assert refused.status_code == 503, refused.content
    assert refused.json()["error"] == "not stored"
    assert not Delivery.objects.exists() and not Task.objects.exists()

    (tmp_path / "missing").mkdir()
    retried = push(Client(), registered, completed(), msg_id="msg_retry")
    assert retried.status_code == 200, retried.content
    assert retried.json()["outcome"] == "accepted"
    assert Delivery.objects.get().pk == retried.json()["delivery"]
    assert kept()
