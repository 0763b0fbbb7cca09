"""Questions and approvals (pushes/apply/interactions.py): opened by an interrupted status,
typed by the profile or a core agent's plain text, closed when the task moves on. All through
the real view."""

from __future__ import annotations

import pytest

from tasks.models import Delivery, Interaction, Session
from tasks.wire import profile
from tests.builders import approval, status
from tests.pushes.sending import send


def test_interrupted_working_interrupted_cycle_reopens(client, token_agent):
    send(client, token_agent, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    send(client, token_agent, status("WORKING", at=2))
    send(
        client,
        token_agent,
        status("INPUT_REQUIRED", at=3, metadata=approval("i-2", "Which region?", kind="question")),
    )
    states = dict(Interaction.objects.values_list("interaction_id", "state"))
    assert states == {"i-1": "closed", "i-2": "open"}
    assert Session.objects.get().needs_human


@pytest.mark.parametrize(
    "state, kind",
    [
        ("AUTH_REQUIRED", "approval"),
        ("AUTH_REQUIRED", "connection"),
        ("INPUT_REQUIRED", "question"),
    ],
)
def test_typed_interaction_opens_and_session_needs_a_human(client, token_agent, state, kind):
    detail = {"url": "https://example.test/connect"} if kind == "connection" else None
    send(
        client,
        token_agent,
        status(
            state,
            at=1,
            text="prompt text",
            message_metadata=approval("i-1", "Go ahead?", kind, detail),
        ),
    )
    interaction = Interaction.objects.get()
    assert (interaction.interaction_id, interaction.kind, interaction.prompt) == (
        "i-1",
        kind,
        "Go ahead?",
    )
    assert interaction.state == "open"
    assert interaction.detail == detail
    assert Session.objects.get().needs_human
    assert not Delivery.objects.get().warnings


def test_interaction_data_may_ride_on_the_event_metadata(client, token_agent):
    send(client, token_agent, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    assert Interaction.objects.get().kind == "approval"


def test_interaction_closes_when_the_task_moves_on(client, token_agent):
    send(client, token_agent, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    send(client, token_agent, status("WORKING", at=2))
    assert Interaction.objects.get().state == "closed"
    assert not Session.objects.get().needs_human


def test_core_agents_plain_text_question_becomes_a_text_interaction(client, token_agent):
    send(
        client,
        token_agent,
        status("INPUT_REQUIRED", at=1, text="Delete 3 files? yes/no", message_id="q1"),
    )
    interaction = Interaction.objects.get()
    assert (interaction.kind, interaction.prompt) == ("text", "Delete 3 files? yes/no")
    assert interaction.interaction_id == "text:q1"
    assert Session.objects.get().needs_human


def test_approval_on_the_wrong_interrupted_state_is_kept_with_a_warning(client, token_agent):
    send(client, token_agent, status("INPUT_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    assert Interaction.objects.get().kind == "approval"
    assert "the profile uses TASK_STATE_AUTH_REQUIRED" in Delivery.objects.get().warnings[0]


@pytest.mark.parametrize(
    "data",
    [
        "not an object",
        {"kind": "approval"},
        {"interactionId": "i", "kind": "vote"},
        {"interactionId": "i" * 201, "kind": "approval"},
    ],
    ids=["not-object", "no-id", "bad-kind", "id-too-long"],
)
def test_bad_interaction_data_is_a_warning_and_a_text_question(client, token_agent, data):
    body = status("AUTH_REQUIRED", at=1, text="ok?", metadata={profile.INTERACTIONS: data})
    assert send(client, token_agent, body) == "applied"
    assert Interaction.objects.get().kind == "text"
    assert any("interactions/v1" in w for w in Delivery.objects.get().warnings)


def test_late_interrupted_status_records_its_interaction_as_closed(client, token_agent):
    send(client, token_agent, status("WORKING", at=5))
    send(client, token_agent, status("AUTH_REQUIRED", at=2, metadata=approval("i-1", "Deploy?")))
    assert Interaction.objects.get().state == "closed"
    assert not Session.objects.get().needs_human


def test_ids_at_their_length_limit_are_stored(client, token_agent):
    body = status(
        "INPUT_REQUIRED", task="t" * 200, context="c" * 200, at=1, text="?", message_id="m" * 200
    )
    send(client, token_agent, body)
    assert Interaction.objects.get().interaction_id == "text:" + "m" * 200
