"""Answering from Slack against a real a2a-sdk agent (tests/peers/approval_agent.py, a
subprocess on loopback, pushing to Onlooker's live server): however often and wherever the
question is answered, the agent receives exactly one decision, and the record says who made
it and how.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tasks.models import Decision, DecisionConfirmation, Interaction
from tasks.models.notify import SlackMember
from tasks.notify import formats
from tests.answering.slack_side import LoopbackSlack, button, press, slack_channel
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    Peer,
    add_agent,
    onlooker,
    start_peer,
    wait_for_approval,
    wait_for_state,
)
from tests.conftest import member
from tests.peers import approval_agent
from tests.peers.misbehaving_agent import MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slack():
    with MisbehavingAgent() as peer:
        peer.answer(b"ok", content_type="text/plain")
        yield LoopbackSlack(peer)


@pytest.fixture
def alice(ops, approvers):
    user = member("alice", ops, approvers)
    SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0ALICE", user=user, linked_at="2026-12-01T10:00Z"
    )
    return user


def decisions_received(peer: Peer, task: dict) -> list[dict]:
    """Every interactions/v1 answer the agent has in its task's history: what reached it."""
    history = peer.get_task(task["id"]).get("history", [])
    return [
        message["metadata"][approval_agent.INTERACTIONS]
        for message in history
        if message.get("role") == "ROLE_USER"
        and approval_agent.INTERACTIONS in message.get("metadata", {})
    ]


def test_approve_pressed_twice_then_on_the_page_reaches_the_agent_once(
    onlooker,  # noqa: F811 - a fixture imported from test_a2a_peer
    start_peer,  # noqa: F811
    slack,
    alice,
    ops,
    approvers,
):
    peer = start_peer()
    registration = add_agent(peer.card_url, "--team", "ops")
    channel = slack_channel(slack)
    task = wait_for_approval(peer, registration)
    approve = button(slack.last_message(), formats.APPROVE)

    # Two clicks in a row (a double tap): both are taken at once, one decides.
    assert press(channel, slack, approve).status_code == 200
    assert press(channel, slack, approve).status_code == 200

    replies = slack.wait_for_replies(2)
    wait_for_state(peer, registration, task, "TASK_STATE_COMPLETED")
    decided = [r for r in replies if r.get("replace_original")]
    told = [r for r in replies if r.get("response_type") == "ephemeral"]
    assert len(decided) == 1 and len(told) == 1, replies
    assert "Approved by alice, " in str(decided[0]["blocks"])
    # The second click is told who decides: "Already decided: Approved by alice, …" once the
    # reply came, "Being answered by alice right now" during the call, or "Approve was sent
    # … by alice; the agent moved on" when the agent's push overtook its reply.
    said = told[0]["text"]
    assert "alice" in said and "Approve" in said, said

    # And then on the page, by someone else: refused, saying who decided.
    interaction = Interaction.objects.get(task__task_id=task["id"])
    bob = Client()
    bob.force_login(member("bob", ops, approvers))
    page = bob.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": "deny"},
        HTTP_ACCEPT="application/json",
    )
    assert page.status_code == 409 and "Approved by alice" in page.json()["detail"]

    received = decisions_received(peer, task)
    assert received == [{"interactionId": interaction.interaction_id, "approved": True}]
    [record] = Decision.objects.filter(interaction_pk=interaction.pk)
    assert (record.decision, record.by, record.via, record.sent) == (
        "approve",
        "alice",
        "slack",
        True,
    )
    assert DecisionConfirmation.objects.filter(interaction_pk=interaction.pk).count() == 1


def test_deny_pressed_after_the_page_approved_reaches_nothing(
    onlooker,  # noqa: F811
    start_peer,  # noqa: F811
    slack,
    alice,
    ops,
    approvers,
):
    peer = start_peer()
    registration = add_agent(peer.card_url, "--team", "ops")
    channel = slack_channel(slack)
    task = wait_for_approval(peer, registration)
    deny = button(slack.last_message(), formats.DENY)
    interaction = Interaction.objects.get(task__task_id=task["id"])
    bob = Client()
    bob.force_login(member("bob", ops, approvers))
    approved = bob.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": "approve"},
        HTTP_ACCEPT="application/json",
    )
    assert approved.status_code == 200

    press(channel, slack, deny)

    [reply] = slack.wait_for_replies()
    assert reply["text"].startswith("Already decided: Approved by bob, ")
    wait_for_state(peer, registration, task, "TASK_STATE_COMPLETED")
    assert decisions_received(peer, task) == [
        {"interactionId": interaction.interaction_id, "approved": True}
    ]
    [record] = Decision.objects.filter(interaction_pk=interaction.pk)
    assert (record.by, record.via) == ("bob", "page")
