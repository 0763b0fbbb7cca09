"""A person past the live-socket cap, in a real browser: the page says why it is not live
(too many pages open, not a lost connection) and tries again slowly; "Retry now" takes it
live once a place is free."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import remember_server
from tests.live_server import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)


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
        second.get_by_role("button", name="Retry now").click()
        expect(second.locator("[data-live-status]")).to_have_text("live")
        expect(second.locator("[data-live-banner]")).to_be_hidden()
