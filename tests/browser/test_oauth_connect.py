"""Connecting an agent over OAuth 2.0 in a real browser: alice presses Connect on /settings/,
the browser goes to a real authorization server on loopback (tests/peers/oauth_server.py,
which approves her without a login page) and back to Onlooker's callback on the live Daphne
(whose ONLOOKER_PUBLIC_URL is its own address), which exchanges the code; the settings page
then says she is connected, and the agent accepts the token that was issued. Disconnect
forgets it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.answering import agents
from tasks.models import PersonalCredential
from tests.conftest import member
from tests.peers.oauth_server import OAuthServer
from tests.peers.subject_agent import SubjectAgent
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def oauth_agent(server, ops):
    tokens: dict[str, str] = {}
    authorization = OAuthServer(
        free_port(),
        subjects=tokens,
        client_id="onlooker",
        client_secret="onlooker-secret",
        redirect_uri=f"{server.url}/oauth/callback/",
    )
    peer = SubjectAgent(free_port(), tokens=tokens, scheme="oauth2", oauth_urls=authorization.urls)
    authorization.serve_card(peer.card_url)  # the card, naming a revocation URL
    agent = agents.register(
        authorization.card_url,
        team="ops",
        per_person=True,
        allow_other_rpc_origin=True,
        oauth_client_id="onlooker",
        oauth_client_secret="onlooker-secret",
    ).agent
    yield authorization, peer, agent
    peer.stop()
    authorization.stop()


def test_alice_connects_in_her_browser_and_disconnects(
    page, login, server, oauth_agent, ops, approvers
):
    authorization, peer, agent = oauth_agent
    alice = member("alice", ops, approvers)
    login(alice)
    page.goto(server.url + "/settings/")
    row = page.locator(f"[data-credential='{agent.pk}']")
    expect(row.locator("[data-oauth-connected]")).to_have_count(0)

    row.get_by_role("button", name="Connect").click()

    expect(page).to_have_url(server.url + "/settings/")
    expect(page.locator(".flash")).to_contain_text(f"Connected to {agent.name}.")
    expect(row.locator("[data-oauth-connected]")).to_contain_text("Connected since")
    [issued] = authorization.live_access_tokens()
    assert peer.tokens == {issued: "alice"}
    assert PersonalCredential.objects.get(user=alice, agent=agent).secret == issued
    assert issued not in page.content()

    row.get_by_role("button", name="Disconnect").click()

    expect(page.locator(".flash")).to_contain_text(f"Disconnected from {agent.name}")
    expect(row.get_by_role("button", name="Connect")).to_be_visible()
    assert issued in authorization.revoked and peer.tokens == {}
    assert not PersonalCredential.objects.exists()
