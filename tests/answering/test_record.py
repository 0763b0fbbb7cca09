"""Every decision lands on the record (issue 31 §7) as it is made, through the page: who,
how, when, what was asked, and whether the agent confirmed it. A retry is the same decision,
a reply that comes late confirms it, and a decision that never left is not on the record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from tasks.answering import agent_http, record
from tasks.models import Decision, DecisionConfirmation, Interaction
from tests.answering.test_answers import answer, person
from tests.answering.test_one_decision import ask
from tests.peers.misbehaving_agent import ACCEPTED

OPENED = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


@pytest.fixture
def alice(ops, approvers) -> Client:
    return person("alice", ops, approvers)


@pytest.fixture
def bob(ops, approvers) -> Client:
    return person("bob", ops, approvers)


@pytest.fixture
def agent(team_agent):
    return team_agent


def confirmed(interaction: Interaction) -> bool:
    return DecisionConfirmation.objects.filter(
        interaction_pk=interaction.pk, round=interaction.round
    ).exists()


def test_an_approval_on_the_page_is_recorded_with_who_how_when_and_what_was_asked(
    alice, agent, agent_stub
):
    with time_machine.travel(OPENED, tick=False) as clock:
        interaction = ask(agent)
        clock.shift(timedelta(minutes=3))
        agent_stub.answer(ACCEPTED)
        code, _ = answer(alice, interaction, decision="approve", reason="looks right")
    assert code == 200
    row = Decision.objects.get()
    interaction.refresh_from_db()
    assert (row.decision, row.by, row.via, row.kind) == ("approve", "alice", "page", "approval")
    assert (row.reason, row.value, row.sent) == ("looks right", None, True)
    # When it was made; opened as the agent's status says (its own clock).
    assert row.at == OPENED + timedelta(minutes=3)
    assert row.opened_at == interaction.opened_at
    assert row.request_digest == record.request_digest(interaction.prompt, interaction.detail)
    assert (row.session_pk, row.agent_pk, row.agent_name) == (
        interaction.task.session_id,
        agent.agent.pk,
        agent.agent.name,
    )
    assert confirmed(interaction)


def test_an_answer_the_agent_did_not_confirm_is_recorded_and_its_retry_confirms_it(
    alice, bob, agent, agent_stub, monkeypatch
):
    interaction = ask(agent)
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)
    agent_stub.answer(ACCEPTED, delay=1.0)
    code, _ = answer(alice, interaction, decision="deny", reason="not today")
    assert code == 502
    row = Decision.objects.get()
    assert (row.decision, row.by, row.sent) == ("deny", "alice", True)
    assert not confirmed(interaction)

    agent_stub.answer(ACCEPTED)
    code, _ = answer(bob, interaction, decision="deny")
    assert code == 200
    # Bob's retry sent Alice's decision: still one row, hers, now confirmed.
    assert list(Decision.objects.values_list("decision", "by")) == [("deny", "alice")]
    assert confirmed(interaction)


def test_a_decision_that_never_reached_the_agent_is_not_on_the_record(alice, agent, agent_stub):
    interaction = ask(agent)
    agent_stub.answer({"error": {"code": -32603, "message": "busy"}})
    code, _ = answer(alice, interaction, decision="approve")
    assert code == 502
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN
    assert not Decision.objects.exists()


def test_the_record_cannot_be_changed_or_deleted(alice, agent, agent_stub):
    interaction = ask(agent)
    agent_stub.answer(ACCEPTED)
    answer(alice, interaction, decision="approve")
    row = Decision.objects.get()
    row.reason = "rewritten"
    with pytest.raises(Exception, match="append-only"):
        row.save()
    with pytest.raises(Exception, match="append-only"):
        Decision.objects.filter(pk=row.pk).update(reason="rewritten")
    with pytest.raises(Exception, match="append-only"):
        row.delete()
    assert Decision.objects.get().reason == ""
