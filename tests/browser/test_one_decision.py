"""One decision per interaction, as people see it: an answer the agent may have taken but did
not confirm leaves every approver only "Retry sending Approve", which sends the same message;
a tab that still shows Deny hears why it is refused."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.wire import profile
from tests.browser.test_answering import open_as, sent_messages, waiting_session
from tests.conftest import member
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_an_unconfirmed_approve_leaves_everyone_only_its_retry(browser, server, ops, approvers):
    with MisbehavingAgent() as agent:
        # Takes the answer and, a while later, hangs up: its reply never comes. The while is
        # long enough for every page to show "being answered" first.
        agent.hang_up(after=1.5)
        session = waiting_session(server, agent, ops)
        path = f"/sessions/{session}/"
        alice = open_as(browser, member("alice", ops, approvers), server, path)
        bob = open_as(browser, member("bob", ops, approvers), server, path)
        carol = open_as(browser, member("carol", ops, approvers), server, "/")
        try:
            # Bob's second tab misses live refreshes: it still offers Deny after Alice's click.
            stale = bob.context.new_page()
            stale.route("**/activity/**", lambda route: route.abort())
            stale.goto(server.url + path)

            alice.locator('button[value="approve"]').click()
            expect(alice.locator("[data-unconfirmed]")).to_contain_text(
                "by alice; the agent has not confirmed yet"
            )
            stale.locator('button[value="deny"]').click()
            expect(stale.locator("[data-answer-error]")).to_contain_text(
                "by alice; the agent has not confirmed yet — Retry sending Approve"
            )
            # Bob's page follows live: Deny is gone, only the same decision may go again.
            buttons = bob.locator("[data-interaction] button")
            expect(buttons).to_have_text(["Retry sending Approve"])
            # So does the monitoring screen's waiting list, past "being answered".
            expect(carol.locator("[data-waiting] [data-interaction] button")).to_have_text(
                ["Retry sending Approve"]
            )

            agent.answer(ACCEPTED)
            buttons.click()
            expect(bob.locator(".answers")).to_contain_text("Approved by alice, ")
            first, second = sent_messages(agent)
            assert first["messageId"] == second["messageId"]
            for message in (first, second):
                assert message["metadata"][profile.INTERACTIONS]["approved"] is True
        finally:
            for page in (alice, bob, carol):
                page.context.close()
