"""The record of decisions is append-only in every code path: the model and its queryset
refuse to change or delete a row, the database refuses an UPDATE (and on PostgreSQL a
DELETE) however it is sent, the admin shows rows and nothing more, and deleting what a row
is about (the agent, the session, the person) leaves the row whole."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction

from tasks.models import Agent, Decision, DecisionConfirmation, Session
from tasks.models.decisions import AppendOnly
from tests.api.recorded import ask, on_record


@pytest.fixture
def row(team_agent, alice) -> Decision:
    interaction = ask(team_agent)
    made = on_record(interaction, "deny", by=alice, reason="Not on a Friday")
    DecisionConfirmation.objects.create(
        interaction_pk=interaction.pk, round=interaction.round, at=made.at
    )
    return made


def as_stored(row: Decision) -> tuple:
    return Decision.objects.filter(pk=row.pk).values_list("decision", "reason", "by").get()


def test_the_queryset_refuses_update_and_delete(row):
    for model in (Decision, DecisionConfirmation):
        with pytest.raises(AppendOnly):
            model.objects.filter(pk__gt=0).update(round=9)
        with pytest.raises(AppendOnly):
            model.objects.all().delete()
    assert as_stored(row) == ("deny", "Not on a Friday", "alice")
    assert DecisionConfirmation.objects.count() == 1


def test_a_row_refuses_a_second_save_and_its_delete(row):
    row.decision = "approve"
    with pytest.raises(AppendOnly):
        row.save()
    with pytest.raises(AppendOnly):
        row.delete()
    confirmation = DecisionConfirmation.objects.get()
    with pytest.raises(AppendOnly):
        confirmation.save()
    assert as_stored(row) == ("deny", "Not on a Friday", "alice")


@pytest.mark.parametrize("table", ["tasks_decision", "tasks_decisionconfirmation"])
def test_the_database_refuses_an_update_sent_around_the_model(row, table):
    refused = pytest.raises(DatabaseError, match="append-only")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET round = 9")  # noqa: S608
    assert as_stored(row) == ("deny", "Not on a Friday", "alice")
    assert DecisionConfirmation.objects.get().round == 1


@pytest.mark.parametrize("table", ["tasks_decision", "tasks_decisionconfirmation"])
def test_postgresql_refuses_a_delete_sent_around_the_model(row, table):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite leaves DELETE to the model (Django's test flush empties tables)")
    refused = pytest.raises(DatabaseError, match="append-only")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table}")  # noqa: S608
    assert Decision.objects.count() == DecisionConfirmation.objects.count() == 1


def test_deleting_the_agent_its_session_and_the_person_leaves_the_row(row, alice):
    before = Decision.objects.values().get(pk=row.pk)

    Session.objects.filter(pk=row.session_pk).delete()
    Agent.objects.filter(pk=row.agent_pk).delete()
    User.objects.filter(pk=alice.pk).delete()

    assert Decision.objects.values().get(pk=row.pk) == before
    assert DecisionConfirmation.objects.count() == 1


# -- the admin ------------------------------------------------------------------------------------


def test_the_admin_lists_and_shows_rows_with_no_actions(row, admin_client):
    listing = admin_client.get("/admin/tasks/decision/")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert 'name="action"' not in page and "action-checkbox" not in page
    assert "/admin/tasks/decision/add/" not in page

    shown = admin_client.get(f"/admin/tasks/decision/{row.pk}/change/")
    assert shown.status_code == 200
    assert 'name="_save"' not in shown.content.decode()
    assert f"/admin/tasks/decision/{row.pk}/delete/" not in shown.content.decode()


@pytest.mark.parametrize("model", ["decision", "decisionconfirmation"])
def test_the_admin_refuses_to_add_change_or_delete(row, admin_client, model):
    pk = row.pk if model == "decision" else DecisionConfirmation.objects.get().pk
    base = f"/admin/tasks/{model}/"

    assert admin_client.post(f"{base}{pk}/change/", {"round": 9, "reason": "x"}).status_code == 403
    assert admin_client.get(f"{base}{pk}/delete/").status_code == 403
    assert admin_client.post(f"{base}{pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.get(f"{base}add/").status_code == 403
    # Django's own "delete selected" is no action here either.
    selected = {"action": "delete_selected", "_selected_action": [pk], "post": "yes"}
    assert admin_client.post(base, selected).status_code in (200, 302, 403)

    assert as_stored(row) == ("deny", "Not on a Friday", "alice")
    assert DecisionConfirmation.objects.get().round == 1
