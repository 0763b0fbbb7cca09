"""`GET /api/decisions/summary?days=N`: how fast people answer, per agent and per person, over
the N UTC days ending today: decisions, approved and denied, time to decision p50/p90
(nearest rank), escalations and expiries. Time is frozen with time-machine."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from tasks.models import Notification, NotificationChannel
from tasks.sessions.decisions_summary import duration_text, percentile
from tests.api.recorded import OPENED, ask, bearer, on_record, reader, token_for
from tests.conftest import make_agent, member

TODAY = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)  # three days after OPENED
ROUNDS = itertools.count(1)


def summary(user: User, query: str = "", *, when: datetime = TODAY) -> dict:
    with time_machine.travel(when, tick=False):
        response = reader(user).get(f"/api/decisions/summary{query}")
    assert response.status_code == 200, response.content
    return response.json()


def waited(interaction, seconds: int, made: str = "approve", **more):
    """A row made `seconds` after the question opened (rows differ by round)."""
    more.setdefault("round_", next(ROUNDS))
    return on_record(interaction, made, at=OPENED + timedelta(seconds=seconds), **more)


@pytest.fixture
def ops_agent(ops):
    return make_agent(team=ops, name="Ops bot")


@pytest.fixture
def carol(ops) -> User:
    return member("carol", ops)


def escalated(interaction, channel, *, at: datetime, state="sent", round_: int = 1) -> None:
    Notification.objects.create(
        channel=channel,
        interaction=interaction,
        round=round_,
        kind=Notification.Kind.ESCALATED,
        payload={},
        created_at=at,
        due_at=at,
        next_attempt_at=at,
        state=state,
        sent_at=at if state == "sent" else None,
    )


def channel_of(team, name: str) -> NotificationChannel:
    return NotificationChannel.objects.create(
        team=team,
        kind=NotificationChannel.Kind.WEBHOOK,
        target=f"https://hooks.test/{name}",
        escalate_after=timedelta(minutes=30),
    )


# -- the figures ------------------------------------------------------------------------------


def test_time_to_decision_is_the_nearest_rank_p50_and_p90_per_person_and_per_agent(
    ops_agent, alice, carol
):
    interaction = ask(ops_agent)
    for seconds in (100, 10, 90, 20, 80, 30, 70, 40, 60, 50):  # alice: 10…100 s
        waited(interaction, seconds, "approve" if seconds <= 70 else "deny", by=alice)
    waited(interaction, 5, "deny", by=carol)
    waited(interaction, 3600, "answer", by=carol)

    data = summary(alice)

    assert data["days"] == 30 and data["since"] == "2026-11-04T00:00:00Z"
    assert data["byPerson"] == [
        {
            "by": "alice",
            "decisions": 10,
            "approved": 7,
            "denied": 3,
            "p50Seconds": 50,
            "p90Seconds": 90,
        },  # noqa: E501
        {
            "by": "carol",
            "decisions": 2,
            "approved": 0,
            "denied": 1,
            "p50Seconds": 5,
            "p90Seconds": 3600,
        },  # noqa: E501
    ]
    [agent] = data["byAgent"]
    assert agent == {
        "agent": {"id": ops_agent.agent.pk, "name": "Ops bot"},
        "decisions": 12,
        "approved": 7,
        "denied": 4,
        "p50Seconds": 50,  # 12 waits: the 6th, 5 10 20 30 40 [50]
        "p90Seconds": 100,  # the 11th
        "escalations": 0,
        "expiries": 0,
    }


def test_expiries_count_apart_and_dismissals_are_decisions_with_no_time_to_decision(
    ops_agent, alice
):
    interaction = ask(ops_agent)
    waited(interaction, 60, "approve", by=alice)
    waited(interaction, 4 * 3600, "deny", via="expiry")  # the policy's deny: no person
    waited(interaction, 4 * 3600 + 1, "expired", via="expiry", sent=False)  # 'leave'
    waited(interaction, 9000, "dismiss", by=alice, sent=False)

    data = summary(alice)

    [agent] = data["byAgent"]
    assert (agent["decisions"], agent["approved"], agent["denied"]) == (2, 1, 0)
    assert (agent["expiries"], agent["p50Seconds"], agent["p90Seconds"]) == (2, 60, 60)
    assert data["byPerson"] == [
        {
            "by": "alice",
            "decisions": 2,
            "approved": 1,
            "denied": 0,
            "p50Seconds": 60,
            "p90Seconds": 60,
        },  # noqa: E501
    ]


def test_escalations_count_each_question_round_once_sent_in_the_range(ops_agent, alice, ops):
    first, second = ask(ops_agent), ask(ops_agent, task="task-2", interaction_id="i-2")
    loud, louder = channel_of(ops, "a"), channel_of(ops, "b")
    inside = TODAY - timedelta(days=1)
    escalated(first, loud, at=inside)
    escalated(first, louder, at=inside)  # the same round, told twice: one escalation
    escalated(first, loud, at=inside, round_=2)
    escalated(second, loud, at=inside, state="pending")  # not sent (yet)
    escalated(second, louder, at=TODAY - timedelta(days=40))  # before the range

    [agent] = summary(alice)["byAgent"]

    assert (agent["agent"]["name"], agent["decisions"], agent["escalations"]) == ("Ops bot", 0, 2)


def test_the_range_is_whole_utc_days_ending_today(ops_agent, alice):
    interaction = ask(ops_agent)  # opened Nov 30, 12:00:01
    on_record(interaction, by=alice, at=datetime(2026, 12, 2, 23, 59, tzinfo=UTC), round_=1)
    on_record(interaction, by=alice, at=datetime(2026, 12, 3, 0, 0, tzinfo=UTC), round_=2)

    assert summary(alice, "?days=1")["byPerson"][0]["decisions"] == 1
    assert summary(alice, "?days=2")["byPerson"][0]["decisions"] == 2
    assert (
        summary(alice, "?days=2", when=TODAY + timedelta(days=1))["byPerson"][0]["decisions"] == 1
    )
    assert summary(alice, "?days=1", when=TODAY + timedelta(days=1))["byPerson"] == []


def test_a_person_sums_only_what_they_may_read(ops_agent, alice, bob, dev):
    interaction = ask(ops_agent)
    waited(interaction, 10, by=alice)
    dev_agent = make_agent(team=dev, name="Dev bot")
    waited(ask(dev_agent), 20, by=bob)

    assert [a["agent"]["name"] for a in summary(alice)["byAgent"]] == ["Ops bot"]
    assert [p["by"] for p in summary(alice)["byPerson"]] == ["alice"]
    assert [a["agent"]["name"] for a in summary(bob)["byAgent"]] == ["Dev bot"]


def test_another_teams_escalations_are_not_counted(ops_agent, alice, ops, dev):
    dev_agent = make_agent(team=dev, name="Dev bot")
    escalated(ask(dev_agent), channel_of(dev, "dev"), at=TODAY - timedelta(hours=1))
    assert summary(alice)["byAgent"] == []


def test_a_token_reads_the_summary_and_nothing_reads_it_without_one(ops_agent, bob):
    made = token_for("bob")
    with time_machine.travel(TODAY, tick=False):
        assert Client().get("/api/decisions/summary", **bearer(made["token"])).status_code == 200
        assert Client().get("/api/decisions/summary").status_code == 401


@pytest.mark.parametrize("days", ["0", "367", "seven", "-1", "", "1000"])
def test_days_out_of_range_is_a_400(alice, days):
    response = reader(alice).get("/api/decisions/summary", {"days": days})
    assert response.status_code == 400
    assert response.json() == {
        "error": "bad days",
        "detail": "days is a whole number from 1 to 366",
    }


# -- the arithmetic -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waits", "p", "expected"),
    [([], 50, None), ([7], 90, 7), ([1, 2], 50, 1), ([1, 2], 90, 2), (list(range(1, 101)), 90, 90)],
)
def test_percentiles_are_nearest_rank(waits, p, expected):
    assert percentile(waits, p) == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "–"), (0, "0 s"), (59, "59 s"), (60, "1 min"), (185, "3 min 5 s"), (7800, "2 h 10 min"),
     (3600, "1 h"), (86400 * 3 + 3600 * 4, "3 d 4 h"), (86400, "1 d")],
)  # fmt: skip
def test_a_wait_reads_as_people_say_it(seconds, text):
    assert duration_text(seconds) == text
