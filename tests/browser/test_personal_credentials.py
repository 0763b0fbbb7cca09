"""A person's own credential in a real browser: saved, replaced and removed on /settings/
(never shown again), and on an agent that takes answers only with the person's own
credential, the link to connect one instead of the buttons; once saved, the approval reaches
a real a2a-sdk agent that knows who calls (tests/peers/subject_agent.py) as that person."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from playwright.sync_api import expect

from tasks.models import Agent, Interaction, PersonalCredential
from tests.answering.test_a2a_peer import A2A_HEADERS, add_agent, wait_for
from tests.conftest import make_agent, member
from tests.peers.subject_agent import Call, SubjectAgent
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)

APPROVE = '[data-answer-form] button[value="approve"]'


def secrets_of(user, agent: Agent) -> list[str]:
    return list(
        PersonalCredential.objects.filter(user=user, agent=agent).values_list("secret", flat=True)
    )


def test_a_credential_is_saved_replaced_and_removed_on_the_settings_page(
    server, login, page, ops, approvers
):
    agent = make_agent(team=ops, name="ops-bot").agent
    alice = member("alice", ops, approvers)
    login(alice)
    page.goto(f"{server.url}/settings/")
    row = page.locator(f"#credential-{agent.pk}")
    expect(row.locator("[data-credential-state]")).to_have_text("None saved")
    expect(row.locator("[data-credential-remove]")).to_have_count(0)

    row.get_by_label("Your token for ops-bot").fill("first-token")
    row.get_by_role("button", name="Save").click()
    expect(page.locator(".flash")).to_have_text(
        "Saved your credential for ops-bot. It is not shown again."
    )
    expect(row.locator("[data-credential-state]")).to_have_text(re.compile(r"^Saved "))
    assert row.get_by_label("Replace your token for ops-bot").input_value() == ""
    assert "first-token" not in page.content()
    assert secrets_of(alice, agent) == ["first-token"]

    row.get_by_label("Replace your token for ops-bot").fill("second-token")
    row.get_by_role("button", name="Replace").click()
    expect(page.locator(".flash")).to_contain_text("Saved your credential for ops-bot.")
    assert secrets_of(alice, agent) == ["second-token"]

    row.get_by_role("button", name="Remove").click()
    expect(page.locator(".flash")).to_have_text("Removed your credential for ops-bot.")
    expect(row.locator("[data-credential-state]")).to_have_text("None saved")
    assert secrets_of(alice, agent) == []


def start_task_as(peer: SubjectAgent, token: str, registration: dict) -> dict:
    """What alice did elsewhere: she started a task at the agent with her own token, its
    updates pushed to Onlooker. The agent knows it under her subject only."""
    config = {
        "id": f"alice-{uuid.uuid4().hex[:12]}",
        "url": registration["push_url"],
        "token": registration["push_token"],
        "authentication": {"scheme": "Bearer", "credentials": registration["push_bearer"]},
    }
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "Write the release notes for 2.4 and publish them"}],
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": message,
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": config},
        },
    }
    headers = {**A2A_HEADERS, "Authorization": f"Bearer {token}"}
    answered = httpx.post(peer.rpc_url, json=body, headers=headers, timeout=10).json()
    return answered["result"]["task"]


def test_without_her_credential_she_is_sent_to_connect_it_then_approves_as_herself(
    server, login, page, ops, approvers, settings
):
    settings.ONLOOKER_PUBLIC_URL = server.url  # the push URL the agent is given
    peer = SubjectAgent(free_port(), tokens={"alice-token": "alice", "shared": "onlooker"})
    try:
        registration = add_agent(peer.card_url, "--team", "ops", "--credential", "Bearer shared")
        agent = Agent.objects.get(pk=registration["agent"])
        Agent.objects.filter(pk=agent.pk).update(per_person=True)
        task = start_task_as(peer, "alice-token", registration)
        interaction = wait_for(
            lambda: Interaction.objects.filter(task__task_id=task["id"], state="open").first(),
            "the agent's approval to reach Onlooker",
            lambda: repr(peer.calls),
        )
        login(member("alice", ops, approvers))
        page.goto(f"{server.url}/sessions/{interaction.task.session_id}/")

        connect = page.get_by_role(
            "link", name=f"Connect your credential for {agent.name} to answer"
        )
        expect(connect).to_be_visible()
        # The composer offers the same link instead of a form the server would refuse.
        expect(page.locator(".composer[data-needs-credential] a")).to_have_attribute(
            "href", f"/settings/#credential-{agent.pk}"
        )
        expect(page.locator(APPROVE)).to_have_count(0)
        expect(page.locator(".interactions")).to_contain_text("Publish the release notes")
        calls = len(peer.calls)
        connect.click()
        page.wait_for_url(f"**/settings/#credential-{agent.pk}")
        row = page.locator(f"#credential-{agent.pk}")
        expect(row).to_contain_text("Required: answers need your own credential")
        row.locator("input[name=token]").fill("alice-token")
        row.get_by_role("button", name="Save").click()
        expect(page.locator(".flash")).to_contain_text(f"Saved your credential for {agent.name}.")

        page.goto(f"{server.url}/sessions/{interaction.task.session_id}/")
        page.locator(APPROVE).click()
        expect(page.locator(".answers")).to_contain_text("Approved by alice, ")
        assert peer.calls[calls:][0] == Call("SendMessage", "Bearer alice-token", "alice")
        assert {call.subject for call in peer.calls} == {"alice"}
    finally:
        peer.stop()
