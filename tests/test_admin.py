"""The admin: registering an agent from its card (secrets shown once, never again), rotating
and retiring signing secrets, and the refusal counts; plus the login pages."""

from __future__ import annotations

import html
import json
import re
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Group

from tasks.models import Agent, PushEndpoint, matches_digest
from tests.answering.test_add_agent import WORKING, running_card_server
from tests.conftest import sign_headers

ADD_URL = "/admin/tasks/agent/add/"
CHANGELIST_URL = "/admin/tasks/agent/"


@pytest.fixture
def card_server(monkeypatch):
    with running_card_server(monkeypatch) as server:
        yield server


def change_url(agent: Agent) -> str:
    return f"/admin/tasks/agent/{agent.pk}/change/"


def save_change_page(admin_client, agent: Agent, *, name: str) -> None:
    """The agent's change form saved as a person would: its one endpoint kept active."""
    endpoint = agent.endpoints.get()
    response = admin_client.post(
        change_url(agent),
        {
            "name": name,
            "team": str(agent.team_id or ""),
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
        },
    )
    assert response.status_code == 302, response.content.decode()[-2000:]


def shown_secrets(response) -> dict[str, str]:
    """The name → value rows of the secrets-once page."""
    rows = re.findall(
        r"<th>(\w+)</th>\s*<td><code>(.*?)</code></td>", response.content.decode(), re.S
    )
    return {name: html.unescape(value) for name, value in rows}


def signed_push(client, path: str, secret: str, body=WORKING):
    raw = json.dumps(body).encode()
    headers = {
        "HTTP_" + name.upper().replace("-", "_"): value
        for name, value in sign_headers(secret, raw).items()
    }
    return client.post(path, raw, content_type="application/json", **headers)


def register(admin_client, card_server, **fields):
    card_server.serve_card()
    data = {"card_url": card_server.base_url, "name": "", "credential": ""}
    data.update(fields)
    return admin_client.post(ADD_URL, data)


# --- registering --------------------------------------------------------------------------


def test_add_page_shows_the_registration_form(admin_client):
    response = admin_client.get(ADD_URL)
    assert response.status_code == 200
    content = response.content.decode()
    assert 'name="card_url"' in content
    assert 'name="generate_signing_secret"' in content


def test_admin_registers_an_agent_and_shows_its_secrets_once(admin_client, card_server):
    team = Group.objects.create(name="ops")
    response = register(
        admin_client,
        card_server,
        name="From the admin",
        team=str(team.pk),
        generate_signing_secret="on",
        credential="Bearer call-me",
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]

    agent = Agent.objects.get()
    endpoint = agent.endpoints.get()
    assert agent.name == "From the admin"
    assert agent.team == team
    assert agent.rpc_url == f"{card_server.base_url}/a2a/jsonrpc"
    assert agent.protocol_version == "1.0"
    assert agent.credential == "Bearer call-me"

    secrets = shown_secrets(response)
    assert secrets["push_url"] == endpoint.push_url
    assert secrets["signing_secret"] == agent.signing_secret
    assert secrets["signing_secret"].startswith("whsec_")
    # The shown token and bearer are the real ones: they match the stored digests.
    assert matches_digest(secrets["push_token"], endpoint.token_digest)
    assert matches_digest(secrets["push_bearer"], endpoint.bearer_digest)


def test_change_page_never_shows_the_secrets_again(admin_client, card_server):
    response = register(
        admin_client, card_server, generate_signing_secret="on", credential="Bearer call-me"
    )
    secrets = shown_secrets(response)
    agent = Agent.objects.get()

    for url in (change_url(agent), CHANGELIST_URL):
        page = admin_client.get(url)
        assert page.status_code == 200
        content = page.content.decode()
        assert agent.name in content
        for name in ("push_token", "push_bearer", "signing_secret"):
            assert secrets[name] not in content, f"{name} shown again on {url}"
        assert "call-me" not in content, f"the agent's credential shown on {url}"


def test_secrets_shown_by_the_admin_authenticate_pushes(admin_client, client, card_server):
    response = register(admin_client, card_server)  # no signing secret: token pushes
    secrets = shown_secrets(response)
    assert secrets["signing_secret"] == "—"
    path = urlsplit(secrets["push_url"]).path
    assert path == f"/a2a/push/{PushEndpoint.objects.get().public_id}/"

    refused = client.post(
        path, WORKING, content_type="application/json", HTTP_AUTHORIZATION="Bearer wrong"
    )
    assert refused.status_code == 401
    accepted = client.post(
        path,
        WORKING,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secrets['push_bearer']}",
    )
    assert accepted.status_code == 200, accepted.content


def test_admin_refuses_a_card_without_jsonrpc_1x(admin_client, card_server):
    card_server.serve_card(
        supportedInterfaces=[
            {
                "url": "http://127.0.0.1:9/a2a",
                "protocolBinding": "JSONRPC",
                "protocolVersion": "0.3",
            }
        ]
    )
    response = admin_client.post(
        ADD_URL, {"card_url": card_server.base_url, "generate_signing_secret": "on"}
    )
    assert response.status_code == 200
    assert "no JSON-RPC interface with protocol version 1.x" in response.content.decode()
    assert Agent.objects.count() == 0
    assert PushEndpoint.objects.count() == 0


# --- rotating signing secrets -------------------------------------------------------------


def run_action(admin_client, action: str, agent: Agent):
    return admin_client.post(CHANGELIST_URL, {"action": action, "_selected_action": [agent.pk]})


def test_rotation_keeps_the_old_secret_valid_until_it_is_retired(
    admin_client,
    client,
    signed_agent,
):
    old = signed_agent.secret
    path = signed_agent.path

    response = run_action(admin_client, "rotate_signing_secret", signed_agent.agent)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    new = shown_secrets(response)["signing_secret"]
    assert new.startswith("whsec_")
    assert new != old

    assert signed_push(client, path, old).status_code == 200
    assert signed_push(client, path, new).status_code == 200

    response = run_action(admin_client, "retire_previous_signing_secret", signed_agent.agent)
    assert response.status_code == 302

    refused = signed_push(client, path, old)
    assert refused.status_code == 401
    assert refused.json()["error"] == "bad signature"
    assert signed_push(client, path, new).status_code == 200


def test_rotated_secret_is_not_shown_on_the_change_page(admin_client, signed_agent):
    response = run_action(admin_client, "rotate_signing_secret", signed_agent.agent)
    new = shown_secrets(response)["signing_secret"]
    content = admin_client.get(change_url(signed_agent.agent)).content.decode()
    assert new not in content
    assert signed_agent.secret not in content
    assert "2 (rotating)" in content


def test_rotating_several_agents_at_once_is_refused(admin_client, signed_agent):
    other = Agent.objects.create(
        name="Other",
        card_url="http://other.test/.well-known/agent-card.json",
        rpc_url="http://other.test/a2a",
        protocol_version="1.0",
    )
    response = admin_client.post(
        CHANGELIST_URL,
        {"action": "rotate_signing_secret", "_selected_action": [signed_agent.agent.pk, other.pk]},
        follow=True,
    )
    assert "Rotate one agent at a time." in response.content.decode()
    signed_agent.agent.refresh_from_db()
    assert signed_agent.agent.signing_secrets == [signed_agent.secret]
    assert Agent.objects.get(pk=other.pk).signing_secrets == []


def test_saving_the_change_page_keeps_the_secrets(admin_client, client, signed_agent):
    agent = signed_agent.agent
    save_change_page(admin_client, agent, name="Renamed")
    agent.refresh_from_db()
    assert agent.name == "Renamed"
    assert agent.signing_secret == signed_agent.secret
    assert signed_push(client, signed_agent.path, signed_agent.secret).status_code == 200


# --- refusals -----------------------------------------------------------------------------


def refusal_counts(content: str) -> dict[str, int]:
    """reason → count from the Refusal inline of an agent's change page."""
    rows = re.findall(
        r'<td class="field-reason">\s*<p>(\w+)</p>\s*</td>\s*'
        r'<td class="field-count">\s*<p>(\d+)</p>\s*</td>',
        content,
    )
    return {reason: int(count) for reason, count in rows}


def test_change_page_lists_refusal_counts(admin_client, client, token_agent):
    page = admin_client.get(change_url(token_agent.agent)).content.decode()
    assert refusal_counts(page) == {}

    for _ in range(2):
        response = client.post(
            token_agent.path,
            WORKING,
            content_type="application/json",
            HTTP_AUTHORIZATION="Bearer not-the-bearer",
        )
        assert response.status_code == 401
    response = client.post(
        token_agent.path,
        b"{not json",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token_agent.bearer}",
    )
    assert response.status_code == 400

    page = admin_client.get(change_url(token_agent.agent)).content.decode()
    assert refusal_counts(page) == {"unauthenticated": 2, "malformed": 1}
    assert "not-the-bearer" not in page


# --- logging in -------------------------------------------------------------------------


def test_login_page_renders(client, db):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    content = response.content.decode()
    assert 'name="username"' in content
    assert 'name="password"' in content


def test_login_with_a_real_account_signs_in(client, django_user_model):
    django_user_model.objects.create_user("viewer", password="a long passphrase")
    response = client.post(
        "/accounts/login/", {"username": "viewer", "password": "a long passphrase"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_login_with_a_wrong_password_is_refused(client, django_user_model):
    django_user_model.objects.create_user("viewer", password="a long passphrase")
    response = client.post("/accounts/login/", {"username": "viewer", "password": "wrong"})
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_admin_requires_login(client, db):
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert client.get(ADD_URL).status_code == 302


def test_admin_refuses_users_who_are_not_staff(client, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="a long passphrase")
    client.force_login(user)
    response = client.get(ADD_URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert Agent.objects.count() == 0


def test_admin_index_renders_for_a_superuser(admin_client):
    response = admin_client.get("/admin/")
    assert response.status_code == 200
    assert "/admin/tasks/agent/" in response.content.decode()
