"""Every place the answer buttons are drawn (the monitoring screen's list, its live refetch,
the session page and its live activity) shows a person without their own credential for a
per-person agent the link to connect one instead (duties.mark_needs_credential), and the
buttons to someone who has one. Through the real views."""

from __future__ import annotations

import pytest
from django.test import Client

from tasks.models import Interaction, PersonalCredential
from tests.builders import approval, status
from tests.conftest import member, push

APPROVE = 'value="approve"'


@pytest.fixture
def waiting(team_agent) -> Interaction:
    team_agent.agent.per_person = True
    team_agent.agent.save()
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), team_agent, body, msg_id="ask-1").status_code == 200
    return Interaction.objects.get()


def pages(client: Client, interaction: Interaction) -> dict[str, str]:
    session = interaction.task.session_id
    return {
        "overview": client.get("/").content.decode(),
        "live board": client.get("/live/board/?waiting=1").json()["waiting"],
        "session": client.get(f"/sessions/{session}/").content.decode(),
        "activity": client.get(f"/sessions/{session}/activity/").content.decode(),
    }


def logged_in(name: str, *groups) -> Client:
    client = Client()
    client.force_login(member(name, *groups))
    return client


def test_a_person_without_a_credential_sees_the_link_everywhere_not_the_buttons(
    waiting, ops, approvers
):
    agent = waiting.task.session.agent
    link = f'<a href="/settings/#credential-{agent.pk}">Connect your credential for {agent.name}'
    for where, html in pages(logged_in("bob", ops, approvers), waiting).items():
        assert link in html, where
        assert APPROVE not in html, where


def test_a_person_with_a_credential_sees_the_buttons(waiting, ops, approvers):
    alice = member("alice", ops, approvers)
    PersonalCredential.objects.create(
        user=alice, agent=waiting.task.session.agent, kind="token", secret="alice-token"
    )
    client = Client()
    client.force_login(alice)
    for where, html in pages(client, waiting).items():
        assert APPROVE in html, where
        assert "Connect your credential" not in html, where


def test_a_shared_credential_agent_needs_no_link(waiting, ops, approvers):
    agent = waiting.task.session.agent
    agent.per_person = False
    agent.save()
    for where, html in pages(logged_in("bob", ops, approvers), waiting).items():
        assert APPROVE in html and "Connect your credential" not in html, where


def test_the_composer_offers_the_link_instead_of_a_message_form_to_a_person_without_one(
    waiting, ops, approvers
):
    agent = waiting.task.session.agent
    session = waiting.task.session_id
    html = logged_in("bob", ops, approvers).get(f"/sessions/{session}/").content.decode()
    assert f'<a href="/settings/#credential-{agent.pk}">Connect your credential for' in html
    assert 'aria-label="Message the agent"' not in html

    alice = member("alice", ops, approvers)
    PersonalCredential.objects.create(user=alice, agent=agent, kind="token", secret="a-token")
    client = Client()
    client.force_login(alice)
    html = client.get(f"/sessions/{session}/").content.decode()
    assert 'aria-label="Message the agent"' in html
    assert "Connect your credential" not in html
