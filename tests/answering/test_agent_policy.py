"""The team's policy for what an agent asks (issue 31 §4, §5), as people set it: `add_agent
--expire-after 4h --on-expiry deny|leave --no-self-approval`, changed later with
`set_agent_policy` or in the admin, and `expire_questions --once`. Bad input is refused with
what was wrong, changing nothing."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from tasks.models import Agent, Interaction
from tests.answering.test_add_agent import add_agent, add_agent_json, running_card_server
from tests.builders import approval, status
from tests.conftest import make_agent, push

pytestmark = pytest.mark.django_db


@pytest.fixture
def card_server(monkeypatch):
    with running_card_server(monkeypatch) as server:
        yield server


def set_policy(*args: str) -> str:
    out = io.StringIO()
    call_command("set_agent_policy", *args, stdout=out)
    return out.getvalue()


def refused(command: str, *args: str) -> str:
    with pytest.raises(CommandError) as raised:
        call_command(command, *args, stdout=io.StringIO(), stderr=io.StringIO())
    return str(raised.value)


def test_add_agent_registers_the_policy_and_prints_it(card_server):
    card_server.serve_card()
    result = add_agent_json(
        card_server.base_url, "--expire-after", "4h", "--on-expiry", "leave", "--no-self-approval"
    )
    assert (result["expire_after"], result["on_expiry"], result["no_self_approval"]) == (
        "4h",
        "leave",
        True,
    )
    agent = Agent.objects.get()
    assert agent.expire_after == timedelta(hours=4)
    assert (agent.on_expiry, agent.no_self_approval) == ("leave", True)

    printed = add_agent(card_server.base_url, "--again", "--expire-after", "1d2h")
    assert "after 1 d 2 h an open approval or connection is denied" in printed
    assert "Self-approval:   allowed" in printed


@pytest.mark.parametrize(
    ("value", "words"),
    [("4 hours", "is not a duration"), ("31d", "between 1 minute and 30 days"), ("0m", "between")],
)
def test_add_agent_refuses_an_expiry_that_is_not_one_and_registers_nothing(
    card_server, value, words
):
    card_server.serve_card()
    message = refused("add_agent", card_server.base_url, "--expire-after", value)
    assert message.startswith("--expire-after:") and words in message
    assert not Agent.objects.exists()


def test_add_agent_refuses_an_unknown_on_expiry(card_server):
    card_server.serve_card()
    with pytest.raises(CommandError, match="invalid choice: 'approve'"):
        call_command("add_agent", card_server.base_url, "--on-expiry", "approve")
    assert not Agent.objects.exists()


def test_set_agent_policy_changes_only_what_it_is_given(db):
    agent = make_agent().agent
    printed = set_policy(str(agent.pk), "--expire-after", "30m", "--on-expiry", "leave")
    assert "Changed" in printed and "after 30 min an open question is marked expired" in printed
    agent.refresh_from_db()
    assert (agent.expire_after, agent.on_expiry, agent.no_self_approval) == (
        timedelta(minutes=30),
        "leave",
        False,
    )

    shown = json.loads(set_policy(str(agent.pk), "--no-self-approval", "--json"))
    assert shown == {
        "agent": agent.pk,
        "expire_after": "30m",
        "on_expiry": "leave",
        "no_self_approval": True,
        "per_person": False,
    }
    set_policy(str(agent.pk), "--no-expiry", "--allow-self-approval")
    agent.refresh_from_db()
    assert (agent.expire_after, agent.on_expiry, agent.no_self_approval) == (None, "leave", False)
    assert "Unchanged" in set_policy(str(agent.pk), "--no-expiry")


def test_set_agent_policy_refuses_bad_input_changing_nothing(db):
    agent = make_agent().agent
    assert "nothing to change" in refused("set_agent_policy", str(agent.pk))
    assert "no agent 999" in refused("set_agent_policy", "999", "--no-expiry")
    assert "not an agent's number" in refused("set_agent_policy", "two", "--no-expiry")
    assert "is not a duration" in refused("set_agent_policy", str(agent.pk), "--expire-after", "x")
    with pytest.raises(CommandError, match="not allowed with argument"):
        call_command("set_agent_policy", str(agent.pk), "--expire-after", "4h", "--no-expiry")
    with pytest.raises(CommandError, match="not allowed with argument"):
        call_command(
            "set_agent_policy", str(agent.pk), "--no-self-approval", "--allow-self-approval"
        )
    agent.refresh_from_db()
    assert (agent.expire_after, agent.on_expiry, agent.no_self_approval) == (None, "deny", False)


def test_the_admin_changes_the_policy_in_the_commands_words(admin_client, db):
    registered = make_agent()
    agent, endpoint = registered.agent, registered.endpoint
    form = {
        "name": agent.name,
        "team": "",
        "expire_after": "4h",
        "on_expiry": "leave",
        "no_self_approval": "on",
        "endpoints-TOTAL_FORMS": "1",
        "endpoints-INITIAL_FORMS": "1",
        "endpoints-MIN_NUM_FORMS": "0",
        "endpoints-MAX_NUM_FORMS": "1000",
        "endpoints-0-id": str(endpoint.pk),
        "endpoints-0-agent": str(agent.pk),
        "endpoints-0-active": "on",
        "refusals-TOTAL_FORMS": "0",
        "refusals-INITIAL_FORMS": "0",
        "refusals-MIN_NUM_FORMS": "0",
        "refusals-MAX_NUM_FORMS": "1000",
    }
    url = f"/admin/tasks/agent/{agent.pk}/change/"
    assert admin_client.post(url, form).status_code == 302
    agent.refresh_from_db()
    assert (agent.expire_after, agent.on_expiry, agent.no_self_approval) == (
        timedelta(hours=4),
        "leave",
        True,
    )
    assert 'value="4h"' in admin_client.get(url).content.decode()

    response = admin_client.post(url, {**form, "expire_after": "5 weeks"})
    assert response.status_code == 200
    assert "is not a duration" in response.content.decode()
    agent.refresh_from_db()
    assert agent.expire_after == timedelta(hours=4)


def test_expire_questions_once_expires_what_is_due(db, ops, agent_stub, time_machine):
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.save()
    set_policy(str(registered.agent.pk), "--expire-after", "1h", "--on-expiry", "leave")
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship?"))
    assert push(Client(), registered, body).status_code == 200
    # The agent's timestamp says it asked days ago (the builders' noon); Onlooker heard it
    # now: its own clock decides, so an agent whose clock is behind expires nothing early.
    assert Interaction.objects.get().opened_at < timezone.now() - timedelta(days=1)
    out = io.StringIO()
    call_command("expire_questions", "--once", stdout=out)
    assert out.getvalue().strip() == "Expired 0 questions."
    time_machine.move_to(timezone.now() + timedelta(hours=1, seconds=1))
    call_command("expire_questions", "--once", stdout=out)
    assert out.getvalue().strip().endswith("Expired 1 question.")
    assert Interaction.objects.get().expired_at is not None
    assert "--poll must be more than 0" in refused("expire_questions", "--poll", "0")
