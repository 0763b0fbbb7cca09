"""Cost and usage: telemetry/v1 summed per UTC day, per agent and per team, for the agents a
person may see, as `/api/usage` and as the monitoring screen's panel. A task adds what its
telemetry grew by, on the UTC day the status arrived: the same telemetry again adds nothing."""

from __future__ import annotations

import importlib
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tasks.models import Agent, Session, Task, UsageDay
from tasks.pushes import applier, fetched
from tasks.wire import profile
from tests.builders import artifact, status
from tests.conftest import make_agent, push

DAY = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def telemetry(**values) -> dict:
    return {profile.TELEMETRY: values}


def finished(task: str, at: int = 1, context: str | None = None, **values) -> dict:
    return status(
        "COMPLETED",
        task=task,
        context=context or f"ctx-{task}",
        at=at,
        metadata=telemetry(**values),
    )


def send(registered, body, *, when: datetime = DAY, msg_id: str | None = None) -> None:
    with time_machine.travel(when, tick=False):
        response = push(Client(), registered, body, msg_id=msg_id)
    assert response.status_code == 200, response.content


def usage_json(user: User, query: str = "", *, when: datetime = DAY):
    client = Client()
    client.force_login(user)
    with time_machine.travel(when, tick=False):
        return client.get(f"/api/usage{query}")


def day_of(data: dict, day: str) -> dict:
    return next(d for d in data["days"] if d["date"] == day)


@pytest.fixture
def ops_agent(ops):
    return make_agent(signing=True, team=ops, name="Ops agent")


@pytest.fixture
def admin(db) -> User:
    return User.objects.create_superuser("root")


# -- the sums ----------------------------------------------------------------------------


def test_a_days_cost_sums_every_finished_task_of_the_day_exactly(alice, ops_agent):
    send(ops_agent, finished("t1", costUsd=0.1, tokens=1000, steps=3))
    send(ops_agent, finished("t2", costUsd=0.2, tokens=234, steps=4))
    send(ops_agent, finished("t3", costUsd=0.5), when=DAY - timedelta(days=2))

    data = usage_json(alice).json()

    assert day_of(data, "2026-12-02") == {
        "date": "2026-12-02",
        "costUsd": 0.3,
        "tokens": 1234,
        "steps": 7,
    }
    assert day_of(data, "2026-11-30") == {
        "date": "2026-11-30",
        "costUsd": 0.5,
        "tokens": 0,
        "steps": 0,
    }
    assert data["byAgent"] == [
        {
            "agent": {"id": ops_agent.agent.pk, "name": "Ops agent"},
            "costUsd": 0.8,
            "tokens": 1234,
            "steps": 7,
        }
    ]


def test_the_range_lists_every_utc_day_oldest_first_ending_today(alice, ops_agent):
    data = usage_json(alice, "?days=7").json()

    assert [d["date"] for d in data["days"]] == [
        (date(2026, 12, 2) - timedelta(days=n)).isoformat() for n in range(6, -1, -1)
    ]
    assert all((d["costUsd"], d["tokens"], d["steps"]) == (0, 0, 0) for d in data["days"])
    assert data["byAgent"] == []
    assert len(usage_json(alice).json()["days"]) == 30  # the default


def test_a_push_counts_on_the_utc_day_it_arrived(alice, ops_agent):
    midnight = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
    send(ops_agent, finished("late", costUsd=1.25), when=midnight - timedelta(seconds=1))
    send(ops_agent, finished("early", costUsd=2.5), when=midnight + timedelta(seconds=1))

    data = usage_json(alice, "?days=2", when=midnight + timedelta(seconds=2)).json()

    assert [(d["date"], d["costUsd"]) for d in data["days"]] == [
        ("2026-12-01", 1.25),
        ("2026-12-02", 2.5),
    ]
    # A day later, the earlier of them has left a one-day range.
    today = usage_json(alice, "?days=1", when=midnight + timedelta(hours=23, minutes=59)).json()
    assert [(d["date"], d["costUsd"]) for d in today["days"]] == [("2026-12-02", 2.5)]


def test_the_same_telemetry_again_adds_nothing(alice, ops_agent):
    body = finished("t1", costUsd=0.4, tokens=100, steps=2)
    send(ops_agent, body, msg_id="msg_once")
    send(ops_agent, body, msg_id="msg_once")  # a duplicate delivery
    send(ops_agent, body, msg_id="msg_again")  # the same status once more: after the end
    # A GetTask sync re-applies the finished task as the agent returns it.
    snapshot = {
        "id": "t1",
        "contextId": "ctx-t1",
        "status": body["statusUpdate"]["status"],
        "metadata": telemetry(costUsd=0.4, tokens=100, steps=2),
    }
    with time_machine.travel(DAY, tick=False):
        fetched.apply_fetched(Agent.objects.get(pk=ops_agent.agent.pk), snapshot)

    today = day_of(usage_json(alice).json(), "2026-12-02")
    assert (today["costUsd"], today["tokens"], today["steps"]) == (0.4, 100, 2)


def test_telemetry_that_grows_while_a_task_runs_adds_only_what_it_grew_by(alice, ops_agent):
    def working(at: int, **values) -> dict:
        return status("WORKING", task="t1", at=at, metadata=telemetry(**values))

    send(ops_agent, working(1, costUsd=0.1, tokens=100, steps=1), when=DAY - timedelta(days=1))
    send(ops_agent, working(2, costUsd=0.1, tokens=100, steps=1))  # unchanged
    send(ops_agent, working(3, costUsd=0.25, tokens=400, steps=2))
    send(ops_agent, finished("t1", at=4, context="ctx-1", costUsd=0.3, tokens=500, steps=2))

    data = usage_json(alice).json()
    yesterday, today = day_of(data, "2026-12-01"), day_of(data, "2026-12-02")
    assert (yesterday["costUsd"], yesterday["tokens"], yesterday["steps"]) == (0.1, 100, 1)
    assert (today["costUsd"], today["tokens"], today["steps"]) == (0.2, 400, 1)
    # All told, what the session page sums for the task.
    assert data["byAgent"][0]["costUsd"] == 0.3 and data["byAgent"][0]["tokens"] == 500


def test_telemetry_that_drops_a_number_subtracts_nothing(alice, ops_agent):
    send(ops_agent, status("WORKING", task="t1", at=1, metadata=telemetry(costUsd=0.5, tokens=9)))
    send(ops_agent, finished("t1", at=2, context="ctx-1", tokens=3))  # no cost, fewer tokens

    today = day_of(usage_json(alice).json(), "2026-12-02")
    assert (today["costUsd"], today["tokens"]) == (0.5, 9)


def test_numbers_too_large_are_capped_and_never_fail_the_push(alice, ops_agent):
    largest = 2**53 - 1  # what telemetry/v1 accepts at most
    send(ops_agent, finished("t1", costUsd=largest, tokens=largest, steps=largest))
    send(ops_agent, finished("t2", costUsd=largest, tokens=largest, steps=largest))
    send(ops_agent, finished("t3", costUsd=-1, tokens=True, steps="7"))  # dropped as invalid

    today = day_of(usage_json(alice).json(), "2026-12-02")
    assert today["tokens"] == today["steps"] == 2 * largest
    assert today["costUsd"] == 2 * largest / 10**9  # one report counts for this at most
    assert Task.objects.get(task_id="t3").state == "TASK_STATE_COMPLETED"


# -- who sees what -------------------------------------------------------------------------


def test_another_teams_agents_are_never_counted(alice, charlie, ops_agent):
    other = make_agent(signing=True, team=Group.objects.create(name="billing"), name="Billing")
    shared = make_agent(signing=True, name="Shared")
    send(ops_agent, finished("t1", costUsd=1.0))
    send(other, finished("t1", costUsd=10.0, tokens=10))
    send(shared, finished("t1", costUsd=0.5))

    seen = usage_json(alice).json()
    assert [a["agent"]["name"] for a in seen["byAgent"]] == ["Ops agent", "Shared"]
    assert day_of(seen, "2026-12-02")["costUsd"] == 1.5
    assert day_of(seen, "2026-12-02")["tokens"] == 0

    on_no_team = usage_json(charlie).json()
    assert [a["agent"]["name"] for a in on_no_team["byAgent"]] == ["Shared"]
    assert day_of(on_no_team, "2026-12-02")["costUsd"] == 0.5


def test_by_agent_is_most_costly_first(admin, ops_agent):
    cheap = make_agent(signing=True, name="Cheap")
    send(cheap, finished("t1", costUsd=0.01, tokens=99999))
    send(ops_agent, finished("t1", costUsd=0.02))

    names = [a["agent"]["name"] for a in usage_json(admin).json()["byAgent"]]
    assert names == ["Ops agent", "Cheap"]


# -- the API's edges -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "?days=0",
        "?days=367",
        "?days=-1",
        "?days=7.5",
        "?days=",
        "?days=abc",
        "?days=%C2%B2",  # a superscript two: a digit to str.isdigit, not a number
        "?days=%D9%A3",  # an Arabic-Indic three
        "?days=%ED%A0%80",  # a lone surrogate, as UTF-8
        "?days=%00",
        "?days=" + "9" * 5000,
    ],
)
def test_a_bad_days_is_refused_with_a_json_message(alice, query):
    response = usage_json(alice, query)

    assert response.status_code == 400
    assert response.json() == {
        "error": "bad days",
        "detail": "days is a whole number from 1 to 366",
    }


def test_the_api_answers_only_a_logged_in_get(db):
    response = Client().get("/api/usage")
    assert response.status_code == 401 and set(response.json()) == {"error", "detail"}
    client = Client()
    client.force_login(User.objects.create_user("dora"))
    assert client.post("/api/usage").status_code == 405
    assert usage_json(User.objects.get(username="dora"), "?days=366").status_code == 200


# -- the write path's cost -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_batch_writes_its_telemetry_in_one_statement(settings):
    settings.ONLOOKER_APPLIER = "external"  # pushes are kept; the test applies them
    registered = make_agent(name="Busy")
    other = make_agent(name="Other")
    for n in range(4):
        send(registered, finished(f"t{n}", costUsd=0.1, tokens=10))
    send(other, finished("t1", costUsd=1.0))
    send(registered, status("WORKING", task="plain", at=1, text="no telemetry"))

    with time_machine.travel(DAY, tick=False), CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert batch.applied == 6
    writes = [q["sql"] for q in queries if "tasks_usageday" in q["sql"]]
    assert len(writes) == 1, writes
    assert sorted(UsageDay.objects.values_list("agent__name", "cost_nanos", "tokens")) == [
        ("Busy", 400_000_000, 40),
        ("Other", 1_000_000_000, 0),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_batch_without_telemetry_writes_nothing_to_the_ledger(settings):
    settings.ONLOOKER_APPLIER = "external"
    registered = make_agent()
    send(registered, status("WORKING", at=1, text="Starting"))
    send(registered, status("COMPLETED", at=2, text="Done"))

    with CaptureQueriesContext(connection) as queries:
        assert applier.apply_batch(seconds=60.0).applied == 2

    assert not [q for q in queries if "tasks_usageday" in q["sql"]]


@pytest.mark.django_db(transaction=True)
def test_a_delivery_rolled_back_in_a_batch_counts_once_when_it_applies(settings, database):
    settings.ONLOOKER_APPLIER = "external"
    registered = make_agent(name="Flaky")
    database.refuse("tasks_artifact", "INSERT")
    send(registered, finished("t1", costUsd=0.7, tokens=70))
    send(registered, artifact("report", "# Results", task="t2"))  # fails the batch whole
    send(registered, finished("t3", costUsd=0.05))

    with time_machine.travel(DAY, tick=False):
        batch = applier.apply_batch(seconds=60.0)
    assert (batch.applied, batch.failed) == (2, 1)
    database.allow_all()
    with time_machine.travel(DAY + timedelta(minutes=1), tick=False):
        assert applier.drain() == 1

    assert list(UsageDay.objects.values_list("date", "cost_nanos", "tokens")) == [
        (date(2026, 12, 2), 750_000_000, 70)
    ]


# -- the backfill --------------------------------------------------------------------------


def test_the_migration_counts_the_telemetry_tasks_reported_before_the_ledger(ops_agent):
    send(ops_agent, finished("t1", costUsd=0.1, tokens=5), when=DAY - timedelta(days=1))
    send(ops_agent, finished("t2", costUsd=0.2, steps=2))
    send(ops_agent, finished("t3", costUsd=0.3))
    Task.objects.filter(task_id="t3").update(
        telemetry={"costUsd": -3, "steps": True, "tokens": "9"}
    )
    UsageDay.objects.all().delete()  # as before the ledger existed

    importlib.import_module("tasks.migrations.0018_usage").backfill(apps, None)

    assert sorted(UsageDay.objects.values_list("date", "cost_nanos", "tokens", "steps")) == [
        (date(2026, 12, 1), 100_000_000, 5, 0),
        (date(2026, 12, 2), 200_000_000, 0, 2),
    ]


def test_sessions_still_sum_their_own_telemetry(alice, ops_agent):
    # The ledger is kept beside Task.telemetry, not instead of it.
    send(ops_agent, finished("t1", context="ctx-1", costUsd=0.1))
    send(ops_agent, finished("t2", context="ctx-1", at=2, costUsd=0.2))
    client = Client()
    client.force_login(alice)
    data = client.get(f"/api/sessions/{Session.objects.get().pk}").json()
    assert data["totals"]["costUsd"] == 0.3
