"""A person past the live-socket cap, in a real browser: the page says why it is not live
(too many pages open, not a lost connection) and tries again slowly; "Retry now" takes it
live once a place is free."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import remember_server
from tests.live_server import LiveServer

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_page_past_the_cap_says_too_many_pages_and_retry_now_takes_it_live(
    context, login, alice, request
):
    with LiveServer(environment={"ONLOOKER_LIVE_SOCKETS_PER_PERSON": "1"}) as server:
        remember_server(request, server)
        login(alice, server.url)
        first, second = context.new_page(), context.new_page()
        first.goto(server.url + "/")
        expect(first.locator("[data-live-status]")).to_have_text("live")

        second.goto(server.url + "/")
        too_many = second.locator("[data-live-banner] [data-live-too-many]")
        expect(too_many).to_be_visible()
        expect(second.locator("[data-live-banner] [data-live-lost]")).to_be_hidden()
        expect(second.locator("[data-live-status]")).to_have_text("reconnecting")

        first.close()
        # The server gives the place back when it hears the close, a moment after the tab
        # is gone; a click before then is refused again, and the person clicks once more.
        status = second.locator("[data-live-status]")
        for _ in range(10):
            second.get_by_role("button", name="Retry now").click()
            try:
                expect(status).to_have_text("live", timeout=1_000)
                break
            except AssertionError:
                continue
        expect(status).to_have_text("live")
        expect(second.locator("[data-live-banner]")).to_be_hidden()
