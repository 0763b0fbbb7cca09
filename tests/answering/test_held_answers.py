"""Held answers (issue 33): a page's answer waits ONLOOKER_UNDO_SECONDS on the server before
it goes, so Undo can withdraw it; it is sent exactly once however many processes look, and
it counts as taken meanwhile. Through the real views, against a loopback agent that records
every message; time moved with time-machine, never slept through.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasks.answering import held
from tasks.models import Interaction
from tasks.notify import answer_links
from tasks.wire import profile
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    add_agent,
    onlooker,
    start_peer,
    wait_for_approval,
    wait_for_state,
)
from tests.answering.test_answers import answer, person, sent_messages
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, make_agent, push
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

NOON = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
LATER = NOON + timedelta(seconds=6)


@pytest.fixture(autouse=True)
def five_second_hold(settings):
    settings.ONLOOKER_UNDO_SECONDS = 5


@pytest.fixture
def alice(ops, approvers) -> Client:
    return person("alice", ops, approvers)


@pytest.fixture
def bob(ops, approvers) -> Client:
    return person("bob", ops, approvers)


def waiting(stub, ops) -> tuple[RegisteredAgent, Interaction]:
    """A profile agent of ops' team (its JSON-RPC URL the stub's) waiting for approval."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, body).status_code == 200
    return registered, Interaction.objects.get()


def waiting_interaction(stub, ops) -> Interaction:
    return waiting(stub, ops)[1]


def undo(client: Client, interaction: Interaction) -> tuple[int, dict]:
    response = client.post(f"/interactions/{interaction.pk}/undo/", HTTP_ACCEPT="application/json")
    return response.status_code, response.json()


def state(interaction: Interaction) -> str:
    interaction.refresh_from_db()
    return interaction.state


def test_a_page_answer_is_held_then_sent_once_when_the_hold_has_passed(alice, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    with time_machine.travel(NOON, tick=False) as clock:
        code, data = answer(alice, interaction, decision="approve", reason="old ones")
        assert code == 200, data
        assert data["state"] == "held"
        assert data["toast"] == "Approved: Ship v2?"
        assert data["undo"] == f"/interactions/{interaction.pk}/undo/"
        assert data["seconds"] == 5
        assert held.send_due() == 0  # not due yet: nothing goes
        assert sent_messages(agent_stub) == []
        interaction.refresh_from_db()
        assert interaction.held_until == NOON + timedelta(seconds=5)
        assert interaction.answered_by.username == "alice"

        clock.move_to(LATER)  # the tab was closed: the server sends it on its own
        assert held.send_due() == 1
        assert held.send_due() == 0
    [message] = sent_messages(agent_stub)
    assert message["parts"] == [{"text": "Approved by alice in Onlooker"}, {"text": "old ones"}]
    assert state(interaction) == Interaction.State.ANSWERED


def test_undo_within_the_hold_sends_nothing_and_opens_the_question_again(alice, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    with time_machine.travel(NOON, tick=False) as clock:
        assert answer(alice, interaction, decision="deny")[0] == 200
        clock.move_to(NOON + timedelta(seconds=4))
        code, data = undo(alice, interaction)
        assert code == 200, data
        assert data["detail"] == "Undone, nothing was sent: Denied: Ship v2?"
        clock.move_to(LATER)
        assert held.send_due() == 0
    assert sent_messages(agent_stub) == []
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer, interaction.answered_by) == ("open", None, None)
    # Open again: a new answer is a decision of its own.
    with time_machine.travel(LATER, tick=False):
        assert answer(alice, interaction, decision="approve")[1]["state"] == "held"


def test_undo_after_the_send_is_too_late(alice, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    with time_machine.travel(NOON, tick=False) as clock:
        answer(alice, interaction, decision="approve")
        clock.move_to(LATER)
        held.send_due()
        code, data = undo(alice, interaction)
    assert code == 409
    assert data["detail"].startswith("Too late to undo: it was sent. Approved by alice, ")
    assert len(sent_messages(agent_stub)) == 1
    assert state(interaction) == Interaction.State.ANSWERED


def test_only_the_person_who_answered_may_undo_and_nobody_else_may_answer_meanwhile(
    alice, bob, agent_stub, ops
):
    interaction = waiting_interaction(agent_stub, ops)
    with time_machine.travel(NOON, tick=False) as clock:
        answer(alice, interaction, decision="approve")
        code, data = undo(bob, interaction)
        assert (code, data["detail"]) == (403, "Only alice, who made this decision, can undo it.")
        code, data = answer(bob, interaction, decision="deny")
        assert code == 409
        assert data["detail"].startswith("alice has just answered this (Approve)")
        page = bob.get(f"/sessions/{interaction.task.session_id}/").content.decode()
        assert 'value="deny"' not in page
        clock.move_to(LATER)
        assert held.send_due() == 1
    [message] = sent_messages(agent_stub)
    assert message["parts"] == [{"text": "Approved by alice in Onlooker"}]


def test_an_agent_that_moved_on_during_the_hold_is_sent_nothing(alice, agent_stub, ops):
    registered, interaction = waiting(agent_stub, ops)
    with time_machine.travel(NOON, tick=False) as clock:
        answer(alice, interaction, decision="approve")
        # The agent went on without it (another person approved it elsewhere, say).
        assert push(Client(), registered, status("WORKING", at=2)).status_code == 200
        clock.move_to(LATER)
        assert held.send_due() == 0
    assert sent_messages(agent_stub) == []
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == ("closed", None)


@pytest.mark.django_db(transaction=True)
def test_two_processes_racing_to_send_one_held_decision_send_it_once(ops, approvers):
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED, delay=0.2)  # a slow agent widens the race
        interaction = waiting_interaction(stub, ops)
        alice = person("alice", ops, approvers)
        with time_machine.travel(NOON, tick=False):
            assert answer(alice, interaction, decision="approve")[1]["state"] == "held"
        start = threading.Barrier(4)
        sent: list[int] = []

        def look() -> None:
            try:
                start.wait()
                sent.append(held.send_due(now=LATER))
            finally:
                connection.close()  # this thread's: left open, it outlives the test database

        threads = [threading.Thread(target=look) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(sent) == [0, 0, 0, 1]
        assert len(sent_messages(stub)) == 1
        assert state(interaction) == Interaction.State.ANSWERED


def test_answering_several_answers_each_and_names_the_ones_that_failed(
    alice, agent_stub, ops, settings
):
    settings.ONLOOKER_UNDO_SECONDS = 0  # sent at once: the result is each one's outcome
    registered, first = waiting(agent_stub, ops)
    second_body = status(
        "AUTH_REQUIRED", at=1, metadata=approval("i-2", "Delete 3 old builds?"), task="task-2"
    )
    assert push(Client(), registered, second_body).status_code == 200
    second = Interaction.objects.get(interaction_id="i-2")
    assert answer(alice, second, decision="deny")[0] == 200  # taken already: this one fails

    response = alice.post(
        "/interactions/answer-many/",
        {"interaction": [first.pk, second.pk], "decision": "approve"},
        HTTP_ACCEPT="application/json",
    )
    data = response.json()
    assert response.status_code == 200, data
    assert [(one["id"], one["ok"]) for one in data["results"]] == [
        (first.pk, True),
        (second.pk, False),
    ]
    assert data["detail"].startswith(f"1 of 2 answered; not answered: #{second.pk}: Already")
    assert len(sent_messages(agent_stub)) == 2  # the deny, and one approval
    assert state(first) == Interaction.State.ANSWERED


def test_answering_several_refuses_bad_input_and_changes_nothing(alice, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    for form in (
        {},
        {"interaction": ["x"], "decision": "approve"},
        {"interaction": [interaction.pk], "decision": "maybe"},
        {"interaction": [interaction.pk] * 101, "decision": "approve"},
    ):
        response = alice.post("/interactions/answer-many/", form, HTTP_ACCEPT="application/json")
        assert response.status_code == 400, form
    assert state(interaction) == Interaction.State.OPEN
    assert sent_messages(agent_stub) == []


def test_a_held_approval_decides_a_real_agents_task_once_the_hold_has_passed(
    onlooker,  # noqa: F811 - fixtures imported from test_a2a_peer
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer = start_peer()
    registration = add_agent(peer.card_url, "--team", "ops")
    task = wait_for_approval(peer, registration)
    interaction = Interaction.objects.get(task__task_id=task["id"])
    alice = person("alice", ops, approvers)

    assert answer(alice, interaction, decision="approve")[1]["state"] == "held"
    assert held.send_due() == 0
    assert peer.get_task(task["id"])["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"  # waits
    assert held.send_due(now=timezone.now() + timedelta(seconds=6)) == 1

    wait_for_state(peer, registration, task, "TASK_STATE_COMPLETED")
    assert state(interaction) == Interaction.State.ANSWERED


def test_an_answer_link_is_never_held(alice, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    token = answer_links.token(interaction.pk, interaction.round, "approve")
    response = alice.post(reverse("answer-link", args=(token,)), {"decision": "approve"})
    assert response.status_code == 200, response.content.decode()
    assert len(sent_messages(agent_stub)) == 1  # at once: a link has no page to undo from
    assert state(interaction) == Interaction.State.ANSWERED
