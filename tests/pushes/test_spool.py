"""The spool file (SQLite): a push is kept there without waiting for the database's write
lock, moved into the database by the applier with the id its agent was told, counted once
however many copies arrive and wherever they find it, and never applied twice, even when a
crash kept the spool from being cleared after a move.

These commit for real (`transaction=True`): the spool is a file of its own, beside the test
database, and a move is the applier's own transaction.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from tasks.models import Agent, Delivery, Message, Task
from tasks.pushes import applier, deliveries, spool
from tasks.runtime.writer import writing
from tests.builders import status
from tests.conftest import make_agent, push

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        django_settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3",
        reason="the spool file is SQLite's: PostgreSQL keeps pushes in the database",
    ),
]


@pytest.fixture(autouse=True)
def kept_only(settings):
    """Web processes that only keep pushes, and a spool with nothing of other tests'."""
    settings.ONLOOKER_APPLIER = "external"
    file = spool.path()
    assert file is not None, "the tests' SQLite database is a file: it has a spool"
    spool.waiting()  # created if it was not
    with sqlite3.connect(file) as opened:
        opened.execute("DELETE FROM push")


def answer(response) -> tuple[str, int]:
    assert response.status_code == 200, response.content
    return response.json()["outcome"], response.json()["delivery"]


def test_a_push_is_acknowledged_while_an_applier_batch_holds_the_database_write_lock():
    registered = make_agent()
    holding, release = threading.Event(), threading.Event()

    def batch_that_takes_long() -> None:
        with writing(), transaction.atomic():
            Agent.objects.filter(pk=registered.agent.pk).update(name="Renamed")  # locked
            holding.set()
            release.wait(timeout=30)
        connection.close()

    batch = threading.Thread(target=batch_that_takes_long)
    batch.start()
    try:
        assert holding.wait(timeout=10)
        answered = []
        pusher = threading.Thread(
            target=lambda: answered.append(push(Client(), registered, status("WORKING", at=1)))
        )
        pusher.start()
        pusher.join(timeout=5)
        # Answered while the batch still holds the lock: kept without waiting for it.
        assert answered and answer(answered[0])[0] == "accepted"
    finally:
        release.set()
        batch.join(timeout=10)
    assert spool.waiting() == 1


def test_the_applier_moves_a_push_with_the_id_its_agent_was_told_and_clears_the_spool():
    registered = make_agent()
    ids = [
        answer(push(Client(), registered, status("WORKING", at=n, text=f"step {n}")))[1]
        for n in (1, 2)
    ]
    assert ids[1] > ids[0] and not Delivery.objects.exists()

    batch = applier.apply_batch(seconds=60.0)

    assert batch.applied == 2 and spool.waiting() == 0
    assert sorted(Delivery.objects.values_list("pk", "outcome")) == [
        (ids[0], "applied"),
        (ids[1], "applied"),
    ]
    assert Task.objects.get().status_message == "step 2"


def test_a_copy_still_in_the_spool_is_a_duplicate_counted_on_it():
    registered = make_agent()
    body = status("WORKING", at=1, text="only once")
    first = answer(push(Client(), registered, body, msg_id="msg-1"))
    again = answer(push(Client(), registered, body, msg_id="msg-1"))

    assert first[0] == "accepted" and again == ("duplicate", first[1])
    applier.apply_batch()
    delivery = Delivery.objects.get()
    assert (delivery.pk, delivery.duplicates) == (first[1], 1)
    assert Message.objects.count() == 1


def test_a_copy_of_a_push_the_applier_has_taken_is_a_duplicate_of_it_and_applies_nothing():
    registered = make_agent()
    body = status("WORKING", at=1, text="only once")
    first = answer(push(Client(), registered, body, msg_id="msg-1"))
    applier.apply_batch()

    again = answer(push(Client(), registered, body, msg_id="msg-1"))

    assert again == ("duplicate", first[1])
    applier.apply_batch()  # the copy it left in the spool is counted, not applied
    delivery = Delivery.objects.get()
    assert (delivery.pk, delivery.duplicates, delivery.outcome) == (first[1], 1, "applied")
    assert spool.waiting() == 0 and Message.objects.count() == 1


def test_pushes_moved_before_a_crash_kept_the_spool_from_being_cleared_are_applied_once():
    registered = make_agent()
    _, delivery_id = answer(push(Client(), registered, status("WORKING", at=1, text="once")))
    # What a crash right after a batch committed leaves: the push moved, still in the spool.
    with writing(), transaction.atomic():
        deliveries.move_from_spool(100)
    assert spool.waiting() == 1 and Delivery.objects.filter(pk=delivery_id).exists()

    applier.apply_batch()

    delivery = Delivery.objects.get()
    assert (delivery.pk, delivery.outcome, delivery.duplicates) == (delivery_id, "applied", 0)
    assert spool.waiting() == 0 and Message.objects.count() == 1


def test_a_new_spool_file_numbers_deliveries_above_those_the_database_has(settings, tmp_path):
    registered = make_agent()
    settings.ONLOOKER_SPOOL = "off"  # kept in the database, as before there was a spool
    for n in range(3):
        push(Client(), registered, status("WORKING", task=f"t-{n}", at=1))
    highest = max(Delivery.objects.values_list("pk", flat=True))

    settings.ONLOOKER_SPOOL = str(tmp_path / "new-spool.sqlite3")
    _, delivery_id = answer(push(Client(), registered, status("WORKING", task="t-new", at=1)))

    assert delivery_id > highest
    applier.apply_batch()
    assert Delivery.objects.get(task_id="t-new").pk == delivery_id


def test_pushes_of_an_agent_deleted_before_they_were_moved_are_dropped():
    gone, staying = make_agent(name="Gone"), make_agent(name="Staying")
    push(Client(), gone, status("WORKING", at=1))
    _, kept = answer(push(Client(), staying, status("WORKING", at=1)))
    Agent.objects.filter(pk=gone.agent.pk).delete()

    batch = applier.apply_batch()

    assert batch.applied == 1 and spool.waiting() == 0
    assert list(Delivery.objects.values_list("pk", flat=True)) == [kept]


def test_a_push_the_applier_moves_at_once_is_accepted_not_taken_for_a_copy_of_itself():
    # The applier may move a push between the receiver keeping it and looking in the
    # database for an earlier copy (seen under load: 3 of 3,000 pushes answered
    # "duplicate"). What the receiver then finds is the push itself, as the move left it:
    # its row, under the id the spool gives it and its own key, made here beforehand.
    registered = make_agent()
    with sqlite3.connect(spool.path()) as opened:
        (last,) = opened.execute("SELECT seq FROM sqlite_sequence WHERE name = 'push'").fetchone()
    Delivery.objects.create(
        pk=last + 1,
        agent=registered.agent,
        idempotency_key=deliveries.idempotency_key("msg-moved", b""),
        received_at=timezone.now(),
        kind="statusUpdate",
        task_id="task-1",
        body="{}",
    )

    outcome, delivery_id = answer(push(Client(), registered, status("WORKING"), msg_id="msg-moved"))

    assert (outcome, delivery_id) == ("accepted", last + 1)


def test_pushes_kept_in_the_spool_are_applied_after_it_is_turned_off(settings):
    registered = make_agent()
    _, delivery_id = answer(push(Client(), registered, status("WORKING", at=1, text="kept")))

    settings.ONLOOKER_SPOOL = "off"  # a restart with the spool off, before they were applied
    applier.apply_batch()

    assert Delivery.objects.get(pk=delivery_id).outcome == "applied"
    assert Task.objects.get().status_message == "kept"
    settings.ONLOOKER_SPOOL = ""
    assert spool.waiting() == 0


def test_a_push_whose_ids_hold_a_lone_surrogate_is_kept_in_the_spool_and_applied():
    registered = make_agent()
    body = status("WORKING", task="t\ud800", context="c\udfff", text="hi \ud800")

    outcome, delivery_id = answer(push(Client(), registered, body))

    assert outcome == "accepted"
    applier.apply_batch()
    assert Delivery.objects.get(pk=delivery_id).outcome == "applied"
    assert Task.objects.get().task_id == "t\ufffd"


def test_a_batch_whose_spool_could_not_be_cleared_still_stands_and_the_next_move_clears_it(
    monkeypatch,
):
    registered = make_agent()
    _, delivery_id = answer(push(Client(), registered, status("WORKING", at=1, text="kept")))
    monkeypatch.setattr(spool, "BUSY_TIMEOUT_SECONDS", 0.1)
    results = []

    connected, locked = threading.Event(), threading.Event()

    def apply_in_a_thread_of_its_own() -> None:  # its own connection, with that timeout
        try:
            spool.waiting()
            connected.set()
            locked.wait(timeout=10)
            results.append(applier.apply_batch())
        finally:
            connection.close()

    worker = threading.Thread(target=apply_in_a_thread_of_its_own)
    worker.start()
    assert connected.wait(timeout=10)
    # Another writer holds the spool's lock longer than the applier waits for it.
    with sqlite3.connect(spool.path(), isolation_level=None) as other:
        other.execute("BEGIN IMMEDIATE")
        locked.set()
        worker.join(timeout=30)
        other.execute("ROLLBACK")

    assert results and results[0].applied == 1  # applied and committed all the same
    assert Delivery.objects.get(pk=delivery_id).outcome == "applied"
    assert spool.waiting() == 1  # still there: the next move finds it moved, and clears it
    applier.apply_batch()
    assert spool.waiting() == 0
    assert Delivery.objects.get().duplicates == 0 and Message.objects.count() == 1


def test_a_spool_an_earlier_version_kept_as_its_inbox_file_is_used_while_it_is_the_only_one(
    tmp_path,
):
    # What it holds was acknowledged, and must be applied, whatever the file is called now.
    database = str(tmp_path / "onlooker.sqlite3")
    assert spool._beside(database) == f"{database}-spool"
    (tmp_path / "onlooker.sqlite3-inbox").touch()
    assert spool._beside(database) == f"{database}-inbox"
    (tmp_path / "onlooker.sqlite3-spool").touch()
    assert spool._beside(database) == f"{database}-spool"
