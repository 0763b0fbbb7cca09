"""A retry of an unconfirmed answer goes out as the person who decided (answers._retry_caller):
the decision is theirs, so whoever presses "Retry", the agent hears it with the decider's
credential; if they no longer have one on an agent that requires it, the retry is refused
with nothing sent. Through the real view, against a loopback agent that records each
request's headers and can reply too late."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tasks.answering import agent_http
from tasks.models import Interaction, PersonalCredential
from tasks.wire import profile
from tests.answering.test_answers import answer
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, make_agent, member, push
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent


@pytest.fixture
def agent(agent_stub, ops) -> RegisteredAgent:
    registered = make_agent(team=ops, name="ops-bot")
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.credential = "Bearer shared-token"
    registered.agent.save()
    return registered


@pytest.fixture
def people(ops, approvers) -> dict[str, tuple[User, Client]]:
    found = {}
    for name in ("alice", "bob"):
        user = member(name, ops, approvers)
        client = Client()
        client.force_login(user)
        found[name] = (user, client)
    return found


def own_token(user: User, registered: RegisteredAgent, token: str) -> None:
    PersonalCredential.objects.create(
        user=user, agent=registered.agent, kind=PersonalCredential.Kind.TOKEN, secret=token
    )


def ask(registered: RegisteredAgent) -> Interaction:
    body = status("AUTH_REQUIRED", at=1, text="Ship v2?", metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, body, msg_id=f"push-{uuid.uuid4().hex}").status_code == 200
    return Interaction.objects.get()


def unconfirmed_by_alice(
    people, registered: RegisteredAgent, stub: MisbehavingAgent, monkeypatch
) -> Interaction:
    """alice approves; the agent replies after Onlooker stopped waiting: sent, not confirmed."""
    interaction = ask(registered)
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)
    stub.answer(ACCEPTED, delay=1.0)
    code, data = answer(people["alice"][1], interaction, decision="approve")
    assert code == 502 and data["detail"].startswith("Not confirmed"), data
    stub.answer(ACCEPTED)
    return interaction


def authorizations(stub: MisbehavingAgent) -> list[str]:
    return [
        r.headers.get("authorization", "")
        for r in stub.requests
        if r.method == "POST" and r.json().get("method") == "SendMessage"
    ]


def test_bobs_retry_of_alices_decision_goes_with_her_credential(
    people, agent, agent_stub, monkeypatch
):
    own_token(people["alice"][0], agent, "alice-token")
    own_token(people["bob"][0], agent, "bob-token")
    interaction = unconfirmed_by_alice(people, agent, agent_stub, monkeypatch)

    code, data = answer(people["bob"][1], interaction, decision="approve")
    assert code == 200, data
    assert authorizations(agent_stub) == ["Bearer alice-token", "Bearer alice-token"]
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by.username) == ("answered", "alice")


def test_a_retry_is_refused_when_the_decider_no_longer_has_the_credential_the_agent_needs(
    people, agent, agent_stub, monkeypatch
):
    own_token(people["alice"][0], agent, "alice-token")
    own_token(people["bob"][0], agent, "bob-token")
    interaction = unconfirmed_by_alice(people, agent, agent_stub, monkeypatch)
    PersonalCredential.objects.filter(user=people["alice"][0]).delete()
    agent.agent.per_person = True
    agent.agent.save()

    code, data = answer(people["bob"][1], interaction, decision="approve")
    assert code == 403, data
    assert data["detail"] == (
        "alice made this decision, so it is sent again with their own credential, and they "
        "have none for ops-bot now: ask them to connect theirs on the settings page, then "
        "retry. Nothing was sent."
    )
    assert authorizations(agent_stub) == ["Bearer alice-token"]  # only the first try
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by.username) == ("sent", "alice")


def test_without_a_credential_of_their_own_bob_may_not_press_retry_on_a_per_person_agent(
    people, agent, agent_stub, monkeypatch
):
    own_token(people["alice"][0], agent, "alice-token")
    interaction = unconfirmed_by_alice(people, agent, agent_stub, monkeypatch)
    agent.agent.per_person = True
    agent.agent.save()

    page = people["bob"][1].get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert f'href="/settings/#credential-{agent.agent.pk}"' in page
    assert "data-retry" not in page
    code, data = answer(people["bob"][1], interaction, decision="approve")
    assert code == 403 and "takes answers only with your own credential" in data["detail"]
    assert authorizations(agent_stub) == ["Bearer alice-token"]
    # alice herself may retry, with hers.
    code, data = answer(people["alice"][1], interaction, decision="approve")
    assert code == 200 and authorizations(agent_stub)[-1] == "Bearer alice-token"
