"""Answering from Slack, with a person in a real browser: bob, not linked yet, presses
Approve in Slack and is shown (only him) a link; he follows it logged out, logs in, reads
which Slack member is about to be linked to which account and links it; his next press of
the same button approves as him.

Slack is a loopback server that takes the channel's messages and the replies to clicks;
the clicks are posted to the live server signed as Slack signs them; the agent is a
loopback stub that records what reached it.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.utils.crypto import get_random_string
from playwright.sync_api import Page, expect

from tasks.models import Decision, Interaction
from tasks.models.notify import SlackMember
from tasks.notify import formats
from tasks.wire import profile
from tests.answering.slack_side import (
    LoopbackSlack,
    button,
    buttons,
    click_payload,
    form,
    signed,
    slack_channel,
)
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http
from tests.peers.misbehaving_agent import MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "Restart the payments workers?"
PASSWORD = "a long passphrase for bob"
LINK = re.compile(r"<(http://127\.0\.0\.1:\d+/slack/link/[^/|>]+/)\|")


@pytest.fixture
def slack():
    with MisbehavingAgent() as peer:
        peer.answer(b"ok", content_type="text/plain")
        yield LoopbackSlack(peer)


def first_message(slack: LoopbackSlack) -> dict:
    """The channel's first message, which the server's own sender posts."""
    deadline = time.monotonic() + 15
    while not slack.messages():
        assert time.monotonic() < deadline, "the server never posted to Slack"
        time.sleep(0.05)
    return slack.messages()[0]


def click(server: LiveServer, channel, slack: LoopbackSlack, pressed: dict) -> httpx.Response:
    body = form(click_payload(pressed, slack.response_url, user="U0BOB", name="bob"))
    headers = {
        name.removeprefix("HTTP_").replace("_", "-"): value for name, value in signed(body).items()
    }
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    return httpx.post(
        f"{server.url}/slack/{channel.pk}/interactions", content=body, headers=headers, timeout=10
    )


def test_a_slack_member_links_their_account_in_the_browser_then_approves_as_themselves(
    page: Page, server: LiveServer, slack, agent_stub, ops, approvers
):
    bob = member("bob", ops, approvers)
    bob.password = PBKDF2PasswordHasher().encode(PASSWORD, get_random_string(12), iterations=1000)
    bob.save()
    channel = slack_channel(slack)
    registered = make_agent(team=ops, name="pay-bot")
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", PROMPT))
    assert push_http(server, registered, body).status_code == 200
    approve = button(first_message(slack), formats.APPROVE)

    # Not linked yet: the press is taken, decides nothing, and bob alone gets a link.
    assert click(server, channel, slack, approve).status_code == 200
    [offer] = slack.wait_for_replies(1)
    assert offer["response_type"] == "ephemeral" and agent_stub.requests == []
    link = LINK.search(offer["text"])[1]

    page.goto(link)
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/slack/link/"))
    page.get_by_label("Username").fill("bob")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Link Slack member @bob to your Onlooker account bob?"
    )
    assert not SlackMember.objects.exists()  # seeing the page links nothing
    page.get_by_role("button", name="Link @bob to bob").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("Linked")
    expect(page.locator("[data-slack-link-done]")).to_contain_text("is linked to your Onlooker")
    linked = SlackMember.objects.get()
    assert (linked.slack_team_id, linked.slack_user_id, linked.user) == ("T0001", "U0BOB", bob)

    # The same link again: used.
    page.goto(link)
    expect(page.locator("[data-slack-link-refused]")).to_contain_text("used already")

    # Back in Slack, the same button now approves as bob.
    assert click(server, channel, slack, approve).status_code == 200
    _, decided = slack.wait_for_replies(2)
    assert decided["replace_original"] is True and buttons(decided) == []
    assert "Approved by bob, " in str(decided["blocks"])
    [call] = agent_stub.calls("SendMessage")
    assert call["message"]["metadata"][profile.INTERACTIONS] == {
        "interactionId": "i-1",
        "approved": True,
    }
    interaction = Interaction.objects.get()
    assert (interaction.answered_by, interaction.answered_via) == (bob, "slack")
    [record] = Decision.objects.all()
    assert (record.by, record.via) == ("bob", "slack")
