"""A question the agent no longer knows, as people see it: the answer comes back "the agent
no longer knows this task", the page says so and offers Dismiss, and pressing it closes the
question for everyone, with a note in the transcript."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.models import Interaction, Session
from tests.browser.test_answering import open_as, sent_messages, waiting_session
from tests.conftest import member
from tests.peers.misbehaving_agent import MisbehavingAgent

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_pressing_dismiss_closes_a_question_the_agent_forgot_for_everyone(
    browser, server, ops, approvers
):
    with MisbehavingAgent() as agent:
        agent.rpc_error(-32001, "Task not found")  # restarted: it knows no task, GetTask too
        session = waiting_session(server, agent, ops)
        path = f"/sessions/{session}/"
        alice = open_as(browser, member("alice", ops, approvers), server, path)
        bob = open_as(browser, member("bob", ops), server, path)  # may only follow
        try:
            expect(alice.locator("[data-dismiss]")).to_have_count(0)
            alice.locator('button[value="approve"]').click()
            # The verdict, or the live refresh's "last try" line, whichever shows first.
            expect(alice.locator("[data-answer-error]").first).to_contain_text(
                "the agent no longer knows this task"
            )
            forgotten = "The agent no longer knows this task (it may have restarted)."
            expect(alice.locator("[data-forgotten]")).to_contain_text(forgotten)
            expect(bob.locator("[data-forgotten]")).to_contain_text(forgotten)
            expect(bob.locator("[data-dismiss]")).to_have_count(0)

            alice.locator("[data-dismiss]").click()

            note = "Dismissed by alice: the agent no longer knew this task."
            for page in (alice, bob):
                expect(page.locator("[data-onlooker-note]")).to_contain_text(note)
                expect(page.locator("[data-interaction]")).to_have_count(0)
            assert Interaction.objects.get().state == Interaction.State.DISMISSED
            assert Session.objects.get(pk=session).needs_human is False
            assert len(agent.calls("GetTask")) == 1
            assert len(sent_messages(agent)) == 1  # the one answer the agent refused
        finally:
            alice.context.close()
            bob.context.close()
