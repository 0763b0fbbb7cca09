"""One decision per interaction against an agent on the official A2A JavaScript SDK
(`@a2a-js/sdk`, tests/peers/js), through the page's own forms in a real browser.

The SDK's executor contract makes the agent republish its task, unchanged, at the start of
every follow-up: the same AUTH_REQUIRED status, timestamp, message and interactions/v1
metadata. With push latency that republish lands after Onlooker has recorded the answer; it
is not news and must not give the question back to anyone.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tasks.models import Delivery, Interaction
from tests.answering.test_a2a_peer import add_agent, wait_for
from tests.answering.test_js_sdk_peer import assert_one_approval
from tests.browser.test_answering import open_as
from tests.conftest import member
from tests.peers.js_peer import JsPeer

pytestmark = pytest.mark.django_db(transaction=True)

APPROVE = '[data-answer-form] button[value="approve"]'
DENY = '[data-answer-form] button[value="deny"]'


@pytest.fixture(scope="module")
def js_peer():
    # Held: after republishing its task the agent waits for the test's word, so what the
    # page shows then is what the republish left, not what the agent did next.
    with JsPeer.start(hold=True) as peer:
        yield peer


def landed(peer: JsPeer, push: dict) -> bool:
    """Onlooker answered this push 200 and has it stored (applied or found a duplicate)."""
    return push["status"] == 200 and Delivery.objects.filter(idempotency_key=push["key"]).exists()


# The longest browser test (about 8 s): CI runs it with the long checks; the same guarantee
# without a browser (tests/answering/test_js_sdk_peer.py) runs with every test command.
@pytest.mark.slow
def test_a_js_sdk_agents_republished_question_does_not_reopen_an_approval(
    browser, server, js_peer, ops, approvers
):
    registration = add_agent(js_peer.card_url, "--team", "ops")
    alice = open_as(browser, member("alice", ops, approvers), server, "/")
    bob = None
    try:
        # Alice starts the work with the monitoring screen's "New session" form.
        alice.locator(".new-session summary").click()
        alice.locator("#new-agent").select_option(str(registration["agent"]))
        alice.locator("#new-text").fill("Write the release notes for 2.4 and publish them")
        alice.locator(".new-session-form button[type=submit]").click()
        alice.wait_for_url(re.compile(r"/sessions/\d+/$"))
        expect(alice.locator(APPROVE)).to_be_visible(timeout=10_000)
        interaction = Interaction.objects.get()
        task_id = interaction.task.task_id

        alice.locator(APPROVE).click()
        expect(alice.locator(".answers")).to_contain_text("Approved by alice, ")

        # The agent's first event for the follow-up is its task, republished as it stood.
        def republish_landed() -> list[dict]:
            return [
                push
                for push in js_peer.pushes()
                if push["kind"] == "task"
                and push["state"] == "TASK_STATE_AUTH_REQUIRED"
                and landed(js_peer, push)
            ]

        wait_for(republish_landed, "the republished AUTH_REQUIRED task to land", js_peer.log)

        bob = open_as(browser, member("bob", ops, approvers), server, alice.url[len(server.url) :])
        expect(bob.locator(APPROVE)).to_have_count(0)
        expect(bob.locator(DENY)).to_have_count(0)
        expect(bob.locator(".answers")).to_contain_text("Approved by alice, ")
        token = bob.locator("input[name=csrfmiddlewaretoken]").first.input_value()
        refused = bob.request.post(
            f"{server.url}/interactions/{interaction.pk}/answer/",
            form={"decision": "deny", "csrfmiddlewaretoken": token},
            headers={"Accept": "application/json"},
        )
        assert refused.status == 409, refused.text()

        js_peer.release()
        assert_one_approval(js_peer, task_id, interaction, by="alice")
    finally:
        js_peer.release()
        alice.context.close()
        if bob is not None:
            bob.context.close()
