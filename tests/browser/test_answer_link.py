"""An answer link in a real browser: followed while logged out, it goes through the login page
to the confirm page (never to a decision); there the person reads the question, writes a
reason and denies; the agent (a loopback stub that records what it gets) receives that deny
with the reason, and no page of the link sends its URL (the token) on as a Referer."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, User
from django.urls import reverse
from django.utils.crypto import get_random_string
from playwright.sync_api import Page, expect

from tasks.models import Decision, Interaction
from tasks.notify import answer_links
from tasks.wire import profile
from tests.browser.conftest import VIEWPORT
from tests.browser.test_accessibility import audit
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http, session_cookie
from tests.peers.misbehaving_agent import MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "Roll back the payments service to 2.3?"
DETAIL = {"service": "payments", "from": "2.4.1", "to": "2.3.9"}
PASSWORD = "a long passphrase for bob"


def waiting(server: LiveServer, stub: MisbehavingAgent, ops: Group) -> Interaction:
    registered = make_agent(team=ops, name="deploy-bot")
    registered.agent.rpc_url = stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", PROMPT, detail=DETAIL))
    assert push_http(server, registered, body).status_code == 200
    return Interaction.objects.get()


def bob(ops: Group, approvers: Group) -> User:
    """bob, who may answer, with a password the server can check: hashed as its settings
    hash them (the test settings' MD5 hasher is not one of them)."""
    user = member("bob", ops, approvers)
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, get_random_string(12), iterations=1000)
    user.save()
    return user


def test_a_deny_link_followed_logged_out_logs_in_confirms_and_denies_with_a_reason(
    page: Page, server: LiveServer, agent_stub, ops, approvers
):
    interaction = waiting(server, agent_stub, ops)
    bob(ops, approvers)
    token = answer_links.token(interaction.pk, interaction.round, "deny")
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))

    page.goto(server.url + reverse("answer-link", args=(token,)))

    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
    page.get_by_label("Username").fill("bob")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("Deny this?")
    question = page.locator(".answer-link-question")
    expect(question).to_contain_text(PROMPT)
    for key, value in DETAIL.items():
        expect(question.get_by_role("row", name=f"{key} {value}")).to_be_visible()
    expect(page.get_by_text("deploy-bot asks, in")).to_be_visible()
    assert agent_stub.requests == [] and Decision.objects.count() == 0

    page.get_by_label("Reason (optional, sent to the agent with your Deny)").fill(
        "Not during the sale"
    )
    page.get_by_role("button", name="Deny").click()

    expect(page.get_by_role("heading", level=1)).to_have_text(re.compile(r"^Denied by bob, "))
    expect(page.locator("[data-answer-link-outcome]")).to_contain_text(
        "The agent has your decision"
    )
    expect(page.get_by_role("button", name="Deny")).to_have_count(0)
    [call] = agent_stub.calls("SendMessage")
    message = call["message"]
    assert message["metadata"][profile.INTERACTIONS] == {"interactionId": "i-1", "approved": False}
    assert message["parts"] == [
        {"text": "Denied by bob in Onlooker"},
        {"text": "Not during the sale"},
    ]
    [row] = Decision.objects.all()
    assert (row.by, row.via, row.reason) == ("bob", "link", "Not during the sale")

    # The link's token never leaves in a Referer, not even to Onlooker's own pages: they
    # hear the origin only.
    page.get_by_role("link", name="Open the session").click()
    expect(page).to_have_url(re.compile(r"/sessions/\d+/$"))
    assert page.evaluate("document.referrer") == server.url + "/"
    assert errors == []  # nothing the strict CSP refused, no script error


@pytest.mark.slow  # with the other pages' audits (test_accessibility.py), in the long checks
def test_the_confirm_and_refusal_pages_pass_axe(
    browser, server: LiveServer, agent_stub, ops, approvers
):
    """axe-core (tests/browser/test_accessibility.py's audit: both schemes, desk and phone
    widths) on an approve, a deny and an answer link's confirm page and on a refusal."""
    interaction = waiting(server, agent_stub, ops)
    registered = make_agent(team=ops, name="region-bot")
    question = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu", "us"]})
    body = status("INPUT_REQUIRED", context="ctx-2", task="task-2", at=2, metadata=question)
    assert push_http(server, registered, body).status_code == 200
    asked = Interaction.objects.get(interaction_id="q-1")
    # A context of its own that lets the test inject axe past the page's CSP (tests only).
    context = browser.new_context(viewport=VIEWPORT, bypass_csp=True)
    context.add_cookies([session_cookie(bob(ops, approvers), server.url)])
    try:
        page = context.new_page()
        for label, shown, action in (
            ("approve link", interaction, "approve"),
            ("deny link", interaction, "deny"),
            ("answer link", asked, "answer"),
            ("link not ours", asked, "approve"),
        ):
            token = answer_links.token(shown.pk, shown.round, action)
            page.goto(server.url + reverse("answer-link", args=(token,)))
            expect(page.get_by_role("heading", level=1)).to_be_visible()
            audit(page, label)
    finally:
        context.close()
