"""The "needs a person" flag is true exactly while a question is open: answering clears it, the
agent's next status keeps it clear, and asking again sets it again. The screens sort and count
by it."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.apps import apps
from django.test import Client

from tasks.models import Interaction, Session
from tasks.sessions import progress_card
from tasks.wire import profile
from tests.answering.test_answers import answer, person
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, make_agent, push


@pytest.fixture
def waiting(agent_stub, ops) -> tuple[RegisteredAgent, Interaction]:
    """An ops agent (its JSON-RPC URL the stub's) waiting for an approval."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, body).status_code == 200
    return registered, Interaction.objects.get()


def board(client: Client) -> dict:
    return client.get("/live/board/").json()


def test_answering_clears_needs_you(waiting, ops, approvers):
    _, interaction = waiting
    alice = person("alice", ops, approvers)
    assert Session.objects.get().needs_human
    assert board(alice)["counts"]["waiting"] == 1
    assert "Needs approval" in board(alice)["sidebar"]

    assert answer(alice, interaction, decision="approve")[0] == 200

    assert not Session.objects.get().needs_human
    assert board(alice)["counts"]["waiting"] == 0
    assert "Needs approval" not in board(alice)["sidebar"]
    assert "Answer sent" in board(alice)["sidebar"]


def test_a_session_that_completes_after_an_answer_is_not_waiting(waiting, ops, approvers):
    registered, interaction = waiting
    alice = person("alice", ops, approvers)
    assert answer(alice, interaction, decision="approve")[0] == 200

    assert push(Client(), registered, status("COMPLETED", at=9, text="Shipped")).status_code == 200

    session = Session.objects.get()
    assert session.state == "TASK_STATE_COMPLETED"
    assert not session.needs_human
    assert board(alice)["counts"]["waiting"] == 0
    assert "Needs" not in board(alice)["sidebar"] and "Done" in board(alice)["sidebar"]


def test_asking_again_after_an_answer_needs_you_again(waiting, ops, approvers):
    registered, interaction = waiting
    alice = person("alice", ops, approvers)
    assert answer(alice, interaction, decision="deny")[0] == 200

    again = status("AUTH_REQUIRED", at=20, metadata=approval("i-2", "Ship v3?"))
    assert push(Client(), registered, again).status_code == 200

    assert Session.objects.get().needs_human
    assert board(alice)["counts"]["waiting"] == 1


def test_an_answered_question_still_shows_who_answered_until_the_agent_goes_on(
    waiting, ops, approvers
):
    registered, interaction = waiting
    alice = person("alice", ops, approvers)
    assert answer(alice, interaction, decision="approve")[0] == 200
    card = alice.get(f"/sessions/{Session.objects.get().pk}/card/").json()
    assert "Approved by alice" in card["html"]["card"]

    assert push(Client(), registered, status("COMPLETED", at=9, text="Shipped")).status_code == 200
    card = alice.get(f"/sessions/{Session.objects.get().pk}/card/").json()
    assert "Approved by alice" not in card["html"]["card"]


def test_sessions_stored_saying_needs_you_without_an_open_question_are_set_right(
    waiting, ops, approvers
):
    """What older versions left behind: the flag stayed set after an answer."""
    registered, interaction = waiting
    Interaction.objects.filter(pk=interaction.pk).update(state=Interaction.State.ANSWERED)
    stale = Session.objects.get()
    assert stale.needs_human
    other = make_agent(team=ops, name="Other")
    body = status("AUTH_REQUIRED", at=1, context="ctx-2", task="t-2", metadata=approval("x", "?"))
    assert push(Client(), other, body).status_code == 200
    Session.objects.filter(context_id="ctx-2").update(needs_human=False)  # and the reverse

    import_module("tasks.migrations.0008_derive_needs_human").derive(apps, None)

    assert not Session.objects.get(pk=stale.pk).needs_human
    assert Session.objects.get(context_id="ctx-2").needs_human


def test_a_question_in_a_turn_older_than_the_cards_newest_still_needs_you(ops):
    """The card reads only the newest turns; the open question is looked for in all of them."""
    registered = make_agent(team=ops)
    asking = status("AUTH_REQUIRED", task="t-asks", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, asking).status_code == 200
    for n in range(progress_card.RECENT_TASKS + 1):
        later = status("COMPLETED", task=f"t-{n}", at=10 + n, text=f"Turn {n} done")
        assert push(Client(), registered, later).status_code == 200

    session = Session.objects.get()
    assert (session.state, session.needs_human) == ("TASK_STATE_AUTH_REQUIRED", True)
    assert session.card.facts["question"] == {"kind": "approval", "prompt": "Ship v2?"}
