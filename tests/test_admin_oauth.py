"""The admin's side of personal credentials and OAuth 2.0 (issue 32): registering an agent
with per-person credentials and its OAuth client, changing them on the agent's page with the
client secret write-only (typed to replace, ticked to remove, never rendered back), how its
card says callers authenticate, and its live push configurations (never a token). Through
the Django test client as a superuser."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection

from tasks.answering import agents
from tasks.answering.agents import new_endpoint
from tasks.models import Agent, PushEndpoint
from tests.answering.test_add_agent import running_card_server
from tests.conftest import make_agent

ADD_URL = "/admin/tasks/agent/add/"
SECRET = "client-secret-never-shown"
OAUTH_CARD = {
    "securitySchemes": {
        "oauth": {
            "oauth2SecurityScheme": {
                "flows": {
                    "authorizationCode": {
                        "authorizationUrl": "https://auth.example/authorize",
                        "tokenUrl": "https://auth.example/token",
                        "scopes": {"agent": "act for you"},
                    }
                }
            }
        }
    }
}


@pytest.fixture
def card_server(monkeypatch):
    with running_card_server(monkeypatch) as server:
        yield server


def change_url(agent: Agent) -> str:
    return f"/admin/tasks/agent/{agent.pk}/change/"


def change(admin_client, agent: Agent, **fields):
    """Post the agent's change page as a person would: what it shows, with `fields` changed."""
    data = {
        "name": agent.name,
        "team": "",
        "expire_after": "",
        "on_expiry": agent.on_expiry,
        "oauth_client_id": agent.oauth_client_id,
        "new_oauth_client_secret": "",
        "endpoints-TOTAL_FORMS": "0",
        "endpoints-INITIAL_FORMS": "0",
        "endpoints-MIN_NUM_FORMS": "0",
        "endpoints-MAX_NUM_FORMS": "1000",
        "refusals-TOTAL_FORMS": "0",
        "refusals-INITIAL_FORMS": "0",
        "refusals-MIN_NUM_FORMS": "0",
        "refusals-MAX_NUM_FORMS": "1000",
    }
    if agent.per_person:
        data["per_person"] = "on"
    data.update(fields)
    return admin_client.post(change_url(agent), {k: v for k, v in data.items() if v is not None})


def errors(response) -> str:
    return " ".join(
        re.findall(r'class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S)
    )


def test_the_admin_registers_a_per_person_oauth_agent(admin_client, card_server):
    card_server.serve_card(**OAUTH_CARD)
    response = admin_client.post(
        ADD_URL,
        {
            "card_url": card_server.base_url,
            "per_person": "on",
            "oauth_client_id": "onlooker",
            "oauth_client_secret": SECRET,
        },
    )
    assert response.status_code == 200, errors(response)
    agent = Agent.objects.get()
    assert agent.per_person and agent.oauth_client_id == "onlooker"
    assert agent.oauth_client_secret == SECRET
    assert agent.auth_scheme["kind"] == "oauth2"
    assert SECRET not in response.content.decode()
    with connection.cursor() as cursor:
        cursor.execute("SELECT oauth_client_secret FROM tasks_agent WHERE id = %s", [agent.pk])
        assert SECRET not in cursor.fetchone()[0]  # sealed at rest


def test_a_client_secret_without_its_id_is_refused_and_nothing_registered(
    admin_client, card_server
):
    card_server.serve_card(**OAUTH_CARD)
    response = admin_client.post(
        ADD_URL, {"card_url": card_server.base_url, "oauth_client_secret": SECRET}
    )
    assert response.status_code == 200
    assert "needs its client id" in response.content.decode()
    assert not Agent.objects.exists()
    with pytest.raises(agents.RegistrationError, match="needs its client id"):
        agents.register(card_server.base_url, oauth_client_secret=SECRET)
    assert not Agent.objects.exists()


def test_the_change_page_sets_the_secret_write_only_and_shows_the_scheme(admin_client, db):
    agent = make_agent().agent
    agent.auth_scheme = {
        "kind": "oauth2",
        "authorization_url": "https://auth.example/authorize",
        "token_url": "https://auth.example/token",
        "revocation_url": "https://auth.example/revoke",
        "scopes": ["agent"],
    }
    agent.save()

    saved = change(
        admin_client, agent, per_person="on", oauth_client_id="onlooker",
        new_oauth_client_secret=SECRET,
    )  # fmt: skip
    assert saved.status_code == 302, errors(saved)
    agent.refresh_from_db()
    assert agent.per_person and agent.oauth_client_id == "onlooker"
    assert agent.oauth_client_secret == SECRET

    page = admin_client.get(change_url(agent)).content.decode()
    assert SECRET not in page
    assert "set (never shown)" in page
    assert "OAuth 2.0 authorization code at https://auth.example/token" in page
    assert "revokes at https://auth.example/revoke" in page
    assert 'name="per_person"' in page and 'name="new_oauth_client_secret"' in page

    # Saved again without typing it: the secret stays.
    assert change(admin_client, agent).status_code == 302
    agent.refresh_from_db()
    assert agent.oauth_client_secret == SECRET


def test_the_secret_is_removed_not_both_set_and_removed(admin_client, db):
    agent = make_agent().agent
    agent.oauth_client_id, agent.oauth_client_secret = "onlooker", SECRET
    agent.save()

    both = change(
        admin_client, agent, new_oauth_client_secret="other", remove_oauth_client_secret="on"
    )
    assert both.status_code == 200 and "not both" in both.content.decode()
    agent.refresh_from_db()
    assert agent.oauth_client_secret == SECRET

    without_id = change(admin_client, agent, oauth_client_id="")
    assert without_id.status_code == 200
    assert "needs its client id" in without_id.content.decode()
    agent.refresh_from_db()
    assert agent.oauth_client_id == "onlooker"

    assert change(admin_client, agent, remove_oauth_client_secret="on").status_code == 302
    agent.refresh_from_db()
    assert agent.oauth_client_secret == "" and agent.oauth_client_id == "onlooker"


def test_a_secret_with_spaces_is_refused(admin_client, db):
    agent = make_agent().agent
    agent.oauth_client_id = "onlooker"
    agent.save()
    refused = change(admin_client, agent, new_oauth_client_secret="two words")
    assert refused.status_code == 200 and "has no spaces" in refused.content.decode()
    agent.refresh_from_db()
    assert agent.oauth_client_secret == ""


def test_the_change_page_lists_live_push_configurations_without_tokens(admin_client, db):
    registered = make_agent()
    agent = registered.agent
    alice = User.objects.create_user("alice")
    followed, followed_token, followed_bearer = new_endpoint(agent)
    PushEndpoint.objects.filter(pk=followed.pk).update(
        task_id="task-followed", followed=True, created_for=alice
    )
    deleted, _, _ = new_endpoint(agent)
    PushEndpoint.objects.filter(pk=deleted.pk).update(
        task_id="task-gone",
        ended_at="2026-01-01T00:00:00Z",
        config_deleted_at="2026-01-01T00:00:00Z",
    )

    page = admin_client.get(change_url(agent)).content.decode()

    table = page[page.index("data-live-push-configs") :]
    table = table[: table.index("</table>")]
    assert "task-followed" in table and "alice" in table and "in use" in table
    assert "the agent&#x27;s own" in table
    assert "task-gone" not in table  # its config is deleted: no longer live
    for token in (registered.token, registered.bearer, followed_token, followed_bearer):
        assert token not in page
