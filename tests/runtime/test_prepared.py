"""A prepared read (tasks/runtime/prepared.py) gives exactly what the QuerySet it stands for gives:
the same rows in the same order, JSON decoded and timestamps aware (an annotation's too), on
either database; the key goes where the QuerySet filtered by it, beside its other
parameters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError, DataError, IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tasks.models import Delivery, Interaction, Message, ProgressCard, Session, Task
from tasks.runtime import prepared
from tasks.runtime.prepared import Prepared
from tasks.wire import profile
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
        return ProgressCard.objects.filter(session_id=session_id)

    for build, extra in ((tasks, ("at",)), (waiting, ("task_state",)), (card, ())):
        prepared = Prepared(build)
        expected = fields(build(session.pk), *extra)
        assert expected  # something to compare
        assert fields(prepared(session.pk), *extra) == expected
        assert fields(prepared(session.pk + 1000), *extra) == []  # the key is the filter

    decoded = fields(Prepared(tasks)(session.pk), "at")
    assert [row["plan"][0]["label"] for row in decoded if row["plan"]] == ["Read the logs"]
    assert all(isinstance(row["at"], datetime) and row["at"].tzinfo for row in decoded)


def test_a_prepared_read_with_several_keys_puts_each_where_its_queryset_filtered_by_it(
    token_agent,
):
    for task in ("t-1", "t-2"):
        assert push(Client(), token_agent, status("WORKING", task=task)).status_code == 200
    agent_id = Session.objects.get().agent_id

    def task(agent_id, task_id):
        return Task.objects.filter(agent_id=agent_id, task_id=task_id)

    prepared = Prepared(task, keys=(int, str))
    for task_id in ("t-1", "t-2", "t-3"):  # text keys too, and one that finds nothing
        assert fields(prepared(agent_id, task_id)) == fields(task(agent_id, task_id))
    assert prepared(agent_id + 1000, "t-1") == []  # the other key is a filter too
    with pytest.raises(TypeError):
        prepared(agent_id)
    ignoring = Prepared(
        lambda agent_id, task_id: Task.objects.filter(agent_id=agent_id), keys=(int, str)
    )
    with pytest.raises(ValueError, match="each of its keys"):
        ignoring(agent_id, "t-1")


def test_a_prepared_read_by_a_time_locking_its_rows_gives_them_with_their_related_rows(
    token_agent, django_assert_num_queries
):
    """As the applier claims what is due: a datetime key, rows locked, and each row's agent
    made from the same query, as select_related makes it."""
    for at in (1, 2, 3):
        push(Client(), token_agent, status("WORKING", task=f"t-{at}", at=at))
    received = sorted(Delivery.objects.values_list("received_at", flat=True))

    def received_by(when):
        return (
            Delivery.objects.filter(received_at__lte=when)
            .select_related("agent")
            .select_for_update(of=("self",))
            .order_by("pk")
        )

    claim = Prepared(received_by, keys=(datetime,))
    with transaction.atomic():  # a locking read is one only inside a transaction
        for when in (received[0] - timedelta(seconds=1), received[1], received[2]):
            rows = claim(when)
            assert fields(rows) == fields(received_by(when))
            with django_assert_num_queries(0):
                agents = [row.agent.name for row in rows]
            assert agents == [token_agent.agent.name] * len(rows)
    assert [len(claim(when)) for when in received] == [1, 2, 3]


def stored(card: ProgressCard) -> dict:
    return fields([ProgressCard.objects.get(pk=card.pk)])[0]


def test_a_prepared_update_stores_what_save_stores(token_agent):
    assert push(Client(), token_agent, status("WORKING", at=1, text="Reading")).status_code == 200
    card = ProgressCard.objects.get()
    by_save, by_update = {}, {}
    for values in (
        {"plan": [{"step": "Ship", "status": "in_progress"}], "facts": {"state": "x", "n": 1.5}},
        {"plan": None, "facts": None, "markdown": "", "html": ""},  # SQL NULL, not JSON null
        {"markdown": "**Done**", "updated_at": card.updated_at + timedelta(seconds=90)},
    ):
        for how, results in ((ProgressCard.save, by_save), (prepared.update, by_update)):
            for name, value in values.items():
                setattr(card, name, value)
            card.revision += 1
            how(card)
            results[len(results)] = stored(card)
    assert by_update == {n: row | {"revision": row["revision"] + 1} for n, row in by_save.items()}
    assert ProgressCard.objects.filter(plan__isnull=True).count() == 1

    session = Session.objects.get()
    session.title, session.needs_human = "Renamed", True
    prepared.update(session, ("title",))  # only the fields named
    assert (Session.objects.get().title, Session.objects.get().needs_human) == ("Renamed", False)


def test_a_prepared_update_leaves_to_save_what_is_not_a_stored_row(token_agent):
    assert push(Client(), token_agent, status("WORKING", at=1, text="Reading")).status_code == 200
    card = ProgressCard.objects.get()
    ProgressCard.objects.all().delete()
    with pytest.raises(DatabaseError), transaction.atomic():  # as save(update_fields=…)
        prepared.update(card, ("markdown",))
    prepared.update(card)  # as save() does: no row to update, so it is inserted
    assert stored(card)["markdown"] == card.markdown


def three_cards(agent) -> list[ProgressCard]:
    for n in range(3):
        body = status("WORKING", task=f"t-{n}", context=f"ctx-{n}", at=1, text=f"Note {n}")
        assert push(Client(), agent, body).status_code == 200
    return list(ProgressCard.objects.order_by("pk"))


def test_updating_several_rows_at_once_stores_what_updating_each_stores(token_agent):
    cards = three_cards(token_agent)
    later = cards[0].updated_at + timedelta(seconds=90)
    for values in (
        [  # JSON, text with quotes, backslashes and more than one script, a time
            {"plan": [{"step": "Ship", "status": "in_progress"}], "facts": {"n": 1.5}},
            {"markdown": "it's \\ “done” ✓ 完了", "updated_at": later},
            {"plan": [], "facts": {"state": "x"}, "html": "<p>x</p>"},
        ],
        [{"plan": None, "facts": None}] * 3,  # NULL in every row: SQL NULL, not JSON null
    ):
        by_one, by_all = [], []
        for card, changes in zip(cards, values, strict=True):
            for name, value in changes.items():
                setattr(card, name, value)
            card.revision += 1
        for card in cards:
            prepared.update(card)
            by_one.append(stored(card))
        for card in cards:
            card.revision += 1
        with CaptureQueriesContext(connection) as queries:
            prepared.update_all(cards)
        by_all = [stored(card) for card in cards]
        assert by_all == [row | {"revision": row["revision"] + 1} for row in by_one]
        assert len(queries) == (1 if connection.vendor == "postgresql" else 3)
    assert ProgressCard.objects.filter(plan__isnull=True).count() == 3

    sessions = list(Session.objects.order_by("pk"))
    for n, session in enumerate(sessions):
        session.title, session.needs_human = f"Renamed {n}", True
    prepared.update_all(sessions, ("title",))  # only the fields named
    assert list(Session.objects.order_by("pk").values_list("title", "needs_human")) == [
        (f"Renamed {n}", False) for n in range(3)
    ]


def test_updating_several_rows_at_once_refuses_a_text_too_long_rather_than_cut_it(token_agent):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite keeps a text of any length in a column of a given one")
    three_cards(token_agent)
    sessions = list(Session.objects.order_by("pk"))
    sessions[0].title, sessions[2].title = "short", "x" * 201  # the column holds 200
    with pytest.raises(DataError), transaction.atomic():
        prepared.update_all(sessions, ("title",))
    assert set(Session.objects.values_list("title", flat=True)) == {""}


def test_updating_several_rows_at_once_leaves_to_save_a_row_not_stored(token_agent):
    cards = three_cards(token_agent)
    ProgressCard.objects.filter(pk=cards[1].pk).delete()
    for card in cards:
        card.markdown = f"Again {card.pk}"
    prepared.update_all(cards + [cards[0]])  # a row given twice is written once
    assert sorted(ProgressCard.objects.values_list("markdown", flat=True)) == sorted(
        f"Again {card.pk}" for card in cards
    )
    cards[2].markdown = "Only these"
    ProgressCard.objects.filter(pk=cards[2].pk).delete()
    with pytest.raises(DatabaseError), transaction.atomic():  # as save(update_fields=…)
        prepared.update_all(cards, ("markdown",))


def test_updating_several_rows_at_once_saves_each_row_not_stored_yet(token_agent):
    at = three_cards(token_agent)[0].updated_at
    ProgressCard.objects.all().delete()
    new = [
        ProgressCard(session=session, revision=1, markdown=f"New {session.pk}", updated_at=at)
        for session in Session.objects.order_by("pk")
    ]
    prepared.update_all(new)  # no key yet: none of them may stand for another
    assert sorted(ProgressCard.objects.values_list("markdown", flat=True)) == sorted(
        card.markdown for card in new
    )


def test_a_prepared_insert_stores_what_save_stores_and_gives_back_the_key(token_agent):
    assert push(Client(), token_agent, status("WORKING", at=1, text="Reading")).status_code == 200
    session, task = Session.objects.get(), Task.objects.get()
    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)

    def message(message_id: str) -> Message:
        return Message(
            session=session,
            task=task,
            message_id=message_id,
            role=Message.Role.AGENT,
            text="Line «one»\nline two",
            at=at,
            parts=[{"kind": "data", "data": {"n": 1.5, "ok": None}}],
            files=[],
        )

    by_save, by_insert = message("m-save"), message("m-insert")
    by_save.save()
    prepared.insert(by_insert)

    assert by_insert.pk is not None and by_insert.pk != by_save.pk
    assert not by_insert._state.adding
    stored = {m.message_id: m for m in Message.objects.filter(message_id__startswith="m-")}
    assert fields([stored["m-insert"]]) == [
        row | {"id": by_insert.pk, "message_id": "m-insert"} for row in fields([stored["m-save"]])
    ]
    assert stored["m-insert"].at == at and stored["m-insert"].parts[0]["data"]["n"] == 1.5


def test_a_prepared_insert_refuses_a_unique_row_again_unless_told_to_skip_it(token_agent):
    assert push(Client(), token_agent, status("WORKING", at=1, text="Reading")).status_code == 200
    session = Session.objects.get()

    def message() -> Message:
        return Message(
            session=session, message_id="m-1", role="agent", text="Hi", at=session.created_at
        )

    prepared.insert(message())
    with pytest.raises(IntegrityError), transaction.atomic():
        prepared.insert(message())
    skipped = message()
    prepared.insert(skipped, ignore_conflicts=True)  # as bulk_create(ignore_conflicts=True)
    assert skipped.pk is None
    assert Message.objects.filter(message_id="m-1").count() == 1
