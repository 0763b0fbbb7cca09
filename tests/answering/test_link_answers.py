"""Answer links against a real a2a-sdk agent (tests/peers/approval_agent.py, a subprocess on
loopback pushing to pytest-django's live server): following a link and confirming delivers
exactly one decision to the agent, and no second link can add another. What the agent
received is read back from its own GetTask history."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tasks.models import Decision, Interaction
from tasks.notify import answer_links
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    Peer,
    add_agent,
    onlooker,
    start_peer,
    wait_for_approval,
    wait_for_state,
)
from tests.conftest import member

pytestmark = pytest.mark.django_db(transaction=True)

BOTS = ("Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", "curl/8.5.0")


def decisions_received(peer: Peer, task_id: str) -> list[dict]:
    """The messages with an interactions/v1 answer the agent keeps in the task's history."""
    history = peer.get_task(task_id).get("history", [])
    return [
        message
        for message in history
        if message.get("role") == "ROLE_USER"
        and "https://docs.nylorun.com/a2a/interactions/v1" in message.get("metadata", {})
    ]


def waiting(peer: Peer, ops) -> tuple[dict, dict, Interaction]:
    registration = add_agent(peer.card_url, "--team", "ops")
    task = wait_for_approval(peer, registration)
    return registration, task, Interaction.objects.get(task__task_id=task["id"])


def link(interaction: Interaction, action: str) -> str:
    token = answer_links.token(interaction.pk, interaction.round, action)
    return reverse("answer-link", args=(token,))


def test_an_approve_link_confirmed_delivers_exactly_one_decision(
    onlooker,  # noqa: F811 - fixtures imported from test_a2a_peer
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer = start_peer()
    registration, task, interaction = waiting(peer, ops)
    alice = Client()
    alice.force_login(member("alice", ops, approvers))
    path = link(interaction, "approve")

    # Previews and the person's own look: nothing reaches the agent.
    for agent_header in BOTS:
        Client(HTTP_USER_AGENT=agent_header).get(path)
        alice.get(path, HTTP_USER_AGENT=agent_header)
    assert alice.get(path).status_code == 200
    assert decisions_received(peer, task["id"]) == []

    response = alice.post(path, {"decision": "approve"})

    assert response.status_code == 200, response.content.decode()
    assert "Approved by alice" in response.content.decode()
    wait_for_state(peer, registration, task, "TASK_STATE_COMPLETED")
    [received] = decisions_received(peer, task["id"])
    assert received["metadata"]["https://docs.nylorun.com/a2a/interactions/v1"] == {
        "interactionId": interaction.interaction_id,
        "approved": True,
    }
    assert received["parts"] == [{"text": "Approved by alice in Onlooker"}]
    [row] = Decision.objects.all()
    assert (row.decision, row.by, row.via) == ("approve", "alice", "link")


def test_approve_then_deny_links_the_second_is_refused(
    onlooker,  # noqa: F811
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer = start_peer()
    registration, task, interaction = waiting(peer, ops)
    alice, bob = Client(), Client()
    alice.force_login(member("alice", ops, approvers))
    bob.force_login(member("bob", ops, approvers))
    approve, deny = link(interaction, "approve"), link(interaction, "deny")
    # Both opened their links before either confirmed.
    assert alice.get(approve).status_code == bob.get(deny).status_code == 200

    assert alice.post(approve, {"decision": "approve"}).status_code == 200
    refused = bob.post(deny, {"decision": "deny", "reason": "Too late on a Friday"})

    assert refused.status_code == 409
    assert "Approved by alice" in refused.content.decode()
    wait_for_state(peer, registration, task, "TASK_STATE_COMPLETED")
    [received] = decisions_received(peer, task["id"])
    assert received["metadata"]["https://docs.nylorun.com/a2a/interactions/v1"]["approved"]
    assert list(Decision.objects.values_list("decision", "by")) == [("approve", "alice")]
