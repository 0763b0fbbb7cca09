"""Redis restarts under an open page (a real redis-server of the test's own, stopped and
started again on its port): the page says it is reconnecting while the server's listener has
no channel layer, catches up on what it missed once the layer is back, and hears the next
push live. Before, the listener joined its group again only on a 30 s timer, the socket
stayed open and the page said "live" while it heard nothing."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import remember_server
from tests.browser.test_live_views import live_card, send
from tests.builders import status
from tests.conftest import make_agent
from tests.live_server import LiveServer
from tests.redis_server import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

STATUS = "[data-live-status]"
# The listener tries to join again every 0.25-1 s; a page refetches as soon as it has.
BACK_WITHIN_MS = 5_000


# A long reliability check (Redis stopped and started under a live page): -m slow.
@pytest.mark.slow
def test_a_page_is_told_redis_went_away_and_catches_up_when_it_is_back(
    page: Page, login, alice, ops, request
):
    agent = make_agent(team=ops, signing=True)
    with RedisServer() as redis, LiveServer(redis_url=redis.url) as server:
        remember_server(request, server)
        session = send(server, agent, status("WORKING", at=1, text="Reading the logs"))
        login(alice, server.url)
        page.goto(f"{server.url}/sessions/{session.pk}/")
        expect(page.locator(STATUS)).to_have_text("live")
        expect(live_card(page, session)).to_contain_text("Reading the logs")

        redis.stop()
        expect(page.locator(STATUS)).to_have_text("reconnecting")
        # Kept while the layer is away; its hint is lost with it.
        send(server, agent, status("WORKING", at=2, text="Writing the fix"))
        redis.start()

        expect(page.locator(STATUS)).to_have_text("live", timeout=BACK_WITHIN_MS)
        expect(live_card(page, session)).to_contain_text("Writing the fix")
        send(server, agent, status("WORKING", at=3, text="Running the tests"))
        expect(live_card(page, session)).to_contain_text("Running the tests")
