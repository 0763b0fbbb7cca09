"""Telemetry across turns: every turn (task) keeps its own telemetry/v1; the session page
shows the session's totals and each turn's cost and trace id, and the card keeps the last
finished turn's, while the next turn runs; /api/sessions/<id> sums them in `totals`."""

from __future__ import annotations

import pytest

from tasks.models import Session
from tasks.wire import profile
from tests.builders import status
from tests.conftest import make_agent, push


def send(client, registered, body) -> None:
    response = push(client, registered, body)
    assert response.status_code == 200, response.content


def turn(task: str, at: int, **telemetry) -> dict:
    return status("COMPLETED", task=task, at=at, metadata={profile.TELEMETRY: telemetry})


@pytest.fixture
def team_agent(ops):
    return make_agent(team=ops)


def api_detail(client, user) -> dict:
    client.force_login(user)
    return client.get(f"/api/sessions/{Session.objects.get().pk}").json()


def test_api_totals_sum_every_turns_telemetry(client, alice, team_agent):
    send(client, team_agent, turn("t1", 1, steps=3, tokens=1000, costUsd=0.1, traceId="tr-1"))
    send(client, team_agent, turn("t2", 2, steps=4, tokens=234, costUsd=0.2, traceId="tr-2"))
    send(client, team_agent, turn("t3", 3, traceId="tr-3"))  # reported no numbers
    send(client, team_agent, status("WORKING", task="t4", at=4))  # running: none yet

    data = api_detail(client, alice)
    assert data["totals"] == {"costUsd": 0.3, "tokens": 1234, "steps": 7}
    assert [(t["taskId"], t["telemetry"]) for t in data["tasks"]] == [
        ("t1", {"steps": 3, "tokens": 1000, "costUsd": 0.1, "traceId": "tr-1"}),
        ("t2", {"steps": 4, "tokens": 234, "costUsd": 0.2, "traceId": "tr-2"}),
        ("t3", {"traceId": "tr-3"}),
        ("t4", None),
    ]


def test_api_totals_are_zero_for_a_session_without_telemetry(client, alice, team_agent):
    send(client, team_agent, status("WORKING", at=1, text="on it"))
    assert api_detail(client, alice)["totals"] == {"costUsd": 0, "tokens": 0, "steps": 0}


def test_cost_and_trace_ids_stay_when_the_next_turn_starts(client, alice, team_agent):
    send(client, team_agent, turn("t1", 1, steps=3, tokens=1000, costUsd=0.25, traceId="tr-1"))
    send(client, team_agent, turn("t2", 2, steps=2, tokens=500, costUsd=0.5, traceId="tr-2"))
    send(client, team_agent, status("WORKING", task="t3", at=3, text="Next turn"))
    client.force_login(alice)
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()

    totals = page[page.index("data-session-totals") :]
    totals = totals[: totals.index("</span>\n")]
    assert "$0.75" in totals and "<strong>1,500</strong> tokens" in totals
    assert "<strong>5</strong> steps" in totals
    turns = page[page.index('<section class="turns"') :]
    turns = turns[: turns.index("</section>")]
    assert turns.index("tr-2") < turns.index("tr-1")  # newest turn first
    assert "$0.25" in turns and "$0.50" in turns
    # The card keeps the last finished turn's cost, steps and trace id while t3 runs.
    card = page[page.index('<aside class="session-rail"') :]
    assert "Cost $0.50 · 500 tokens · 2 steps · trace <code>tr-2</code>" in card
