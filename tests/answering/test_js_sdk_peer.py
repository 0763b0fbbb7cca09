"""Onlooker against an agent on the official A2A JavaScript SDK (`@a2a-js/sdk`, tests/peers/js)
on loopback, through the real views: a session started from Onlooker, every push the SDK
sends accepted, and an answer that stays the one decision when the agent republishes its
task (as the SDK's executor contract requires on every follow-up) after the answer.
"""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from tasks.models import Delivery, Interaction, Refusal, Session, Task
from tests.answering.test_a2a_peer import add_agent, onlooker, wait_for  # noqa: F401 - a fixture
from tests.conftest import member
from tests.peers.js_peer import INTERACTIONS, JsPeer

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "Publish the release notes to the public site?"


@pytest.fixture(scope="module")
def js_peer():
    # Held: after republishing its task on a follow-up, the agent waits for `release()`.
    with JsPeer.start(hold=True) as peer:
        yield peer


def assert_one_approval(js_peer: JsPeer, task_id: str, interaction: Interaction, by: str) -> None:
    """The agent (released) completes the approved task, having received exactly one decision:
    the approval `by` made, which is what Onlooker keeps. Returns once its pushes are over."""
    wait_for(
        lambda: Task.objects.filter(task_id=task_id, state="TASK_STATE_COMPLETED").exists(),
        "the agent to complete the approved task",
        js_peer.log,
    )
    decisions = [message["answer"] for message in js_peer.received(task_id)]
    assert decisions == [{"interactionId": interaction.interaction_id, "approved": True}]
    interaction.refresh_from_db()
    assert (interaction.answer, interaction.answered_by.username) == ({"approved": True}, by)
    js_peer.wait_until_quiet(task_id)


def person(name: str, *groups) -> Client:
    client = Client()
    client.force_login(member(name, *groups))
    return client


def start_session(client: Client, registration: dict) -> Session:
    form = {
        "agent": str(registration["agent"]),
        "text": "Write the release notes for 2.4 and publish them",
        "message_id": uuid.uuid4().hex,
    }
    response = client.post("/sessions/new/", form, HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content
    return Session.objects.get(pk=response.json()["session"])


def waiting_approval(peer: JsPeer, session: Session) -> Interaction:
    def open_one() -> Interaction | None:
        return Interaction.objects.filter(
            task__session=session, state=Interaction.State.OPEN
        ).first()

    return wait_for(open_one, "the agent's approval to open", peer.log)


def answer(client: Client, interaction: Interaction, decision: str) -> tuple[int, dict]:
    response = client.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": decision},
        HTTP_ACCEPT="application/json",
    )
    return response.status_code, response.json()


def test_the_js_sdk_agents_pushes_are_accepted_and_its_session_asks_for_approval(
    onlooker,  # noqa: F811 - a fixture imported from test_a2a_peer
    js_peer,
    ops,
    approvers,
):
    registration = add_agent(js_peer.card_url, "--team", "ops")
    alice = person("alice", ops, approvers)
    session = start_session(alice, registration)

    interaction = waiting_approval(js_peer, session)
    assert (interaction.kind, interaction.prompt) == ("approval", PROMPT)
    task_id = interaction.task.task_id

    def answered() -> list[dict]:
        pushes = js_peer.pushes(task_id)
        return pushes if len(pushes) == 3 and all(p["status"] for p in pushes) else []

    pushes = wait_for(answered, "the agent's three pushes to be answered", js_peer.log)
    assert [(p["kind"], p["state"], p["status"]) for p in pushes] == [
        ("task", "TASK_STATE_SUBMITTED", 200),
        ("statusUpdate", "TASK_STATE_WORKING", 200),
        ("statusUpdate", "TASK_STATE_AUTH_REQUIRED", 200),
    ]
    assert not Refusal.objects.exists()
    stored = set(Delivery.objects.values_list("idempotency_key", flat=True))
    assert {p["key"] for p in pushes} <= stored

    session.refresh_from_db()
    assert INTERACTIONS in session.agent.extensions  # read from the SDK's agent card
    assert session.needs_human and session.state == "TASK_STATE_AUTH_REQUIRED"
    page = alice.get(f"/sessions/{session.pk}/").content.decode()
    assert PROMPT in page and 'value="approve"' in page


def test_an_approval_stays_the_one_decision_when_the_js_sdk_agent_republishes_its_task(
    onlooker,  # noqa: F811
    js_peer,
    ops,
    approvers,
):
    registration = add_agent(js_peer.card_url, "--team", "ops")
    alice, bob = person("alice", ops, approvers), person("bob", ops, approvers)
    interaction = waiting_approval(js_peer, start_session(alice, registration))
    task_id = interaction.task.task_id
    try:
        assert answer(alice, interaction, "approve")[0] == 200

        def republish_landed() -> bool:
            return any(
                p["kind"] == "task"
                and p["state"] == "TASK_STATE_AUTH_REQUIRED"
                and p["status"] == 200
                and Delivery.objects.filter(idempotency_key=p["key"]).exists()
                for p in js_peer.pushes(task_id)
            )

        wait_for(republish_landed, "the republished AUTH_REQUIRED task to land", js_peer.log)
        interaction.refresh_from_db()
        assert interaction.state == Interaction.State.ANSWERED
        code, data = answer(bob, interaction, "deny")
        assert code == 409, data
    finally:
        js_peer.release()
    assert_one_approval(js_peer, task_id, interaction, by="alice")
