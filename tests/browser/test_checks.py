"""An uncertain effect as people see it, in a real browser: the inbox lists "Check: …" with
"Mark checked"; pressing it takes the row away live, and the card, on the monitoring screen
and on a colleague's session page, says who checked it. Nothing reaches the agent."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.models import Decision, Interaction, Session
from tasks.wire import profile
from tests.browser.test_answering import open_as
from tests.builders import status
from tests.conftest import make_agent, member
from tests.live_server import push_http
from tests.peers.misbehaving_agent import MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

UNCERTAIN = {profile.EFFECTS: {"uncertain": "upload:report.pdf"}}


def test_mark_checked_takes_the_row_away_live_and_the_card_says_who_checked_it(
    browser, server, ops, approvers
):
    with MisbehavingAgent() as agent:
        registered = make_agent(team=ops)
        registered.agent.rpc_url = agent.rpc_url
        registered.agent.extensions = list(profile.EXTENSIONS)
        registered.agent.save()
        body = status("COMPLETED", at=1, text="Uploaded, I think", metadata=UNCERTAIN)
        assert push_http(server, registered, body).status_code == 200
        session = Session.objects.get().pk

        alice = open_as(browser, member("alice", ops, approvers), server, "/")
        bob = open_as(browser, member("bob", ops), server, f"/sessions/{session}/")  # follows
        try:
            row = alice.locator(f'[data-inbox-row][data-waiting-session="{session}"]')
            expect(row).to_contain_text("Check: Upload of report.pdf unconfirmed")
            expect(alice.locator('[data-count="waiting"]')).to_have_text("1")
            expect(bob.locator("[data-needs-check]").first).to_have_text("Needs checking")

            # Every announcement, kept: a later one (the session's own) may replace it on
            # screen before the assertion looks.
            alice.evaluate(
                """() => {
                  const region = document.querySelector("[data-live-announce]");
                  window.announced = [];
                  new MutationObserver(() => window.announced.push(region.textContent))
                    .observe(region, {childList: true, characterData: true, subtree: true});
                }"""
            )
            row.get_by_role("button", name="Mark checked").click()

            expect(row).to_have_count(0)
            alice.wait_for_function(
                "() => window.announced.some((said) => said.includes('Checked by alice'))",
                timeout=5_000,
            )
            expect(alice.locator('[data-count="waiting"]')).to_have_text("0")
            tile = alice.locator(f'[data-tile-session="{session}"]')
            expect(tile.locator("[data-checked-by]")).to_contain_text("Checked by alice")
            # The colleague's page follows live: the card says who checked it, nothing waits.
            expect(bob.locator("[data-checked-by]").first).to_contain_text("Checked by alice")
            expect(bob.locator("[data-needs-check]")).to_have_count(0)
            expect(bob.locator("[data-interaction]")).to_have_count(0)

            assert Interaction.objects.get().state == Interaction.State.ANSWERED
            assert Decision.objects.get().decision == "checked"
            assert agent.requests == []
        finally:
            alice.context.close()
            bob.context.close()
