"""Losing the connection and getting it back, in a real browser against a real Daphne that the
test stops and starts: a banner that says so and offers "Retry now", a page that fades while
what it shows may be out of date, and a reconnection the moment the person asks for one or
comes back to the window.

Time is Playwright's clock, paused, so the page's backoff never fires by itself: whatever
reconnects the page here is what the test did."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from playwright.sync_api import Page, expect

from tasks.models import Session
from tests.browser.conftest import caught_up
from tests.browser.test_wall import open_wall, team_agent, wall_screen, working
from tests.builders import status
from tests.conftest import member, push
from tests.live_server import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

STATUS = "[data-live-status]"
BANNER = "[data-live-banner]"
NOON = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def paused(page: Page) -> Page:
    page.clock.install(time=NOON - timedelta(minutes=1))
    page.clock.pause_at(NOON)
    return page


@pytest.fixture
def agent(ops):
    return team_agent(ops)


@pytest.fixture
def wall(browser, server, alice, request) -> Page:
    return wall_screen(browser, server, alice, request)


@pytest.fixture
def restarts(server: LiveServer) -> Iterator[LiveServer]:
    """The package's server, which these tests stop: started again whatever happens."""
    yield server
    if not server.running:
        server.start()


def open_overview(page: Page, server: LiveServer, login, alice, registered) -> None:
    assert push(Client(), registered, status("WORKING", at=1, text="Halfway")).status_code == 200
    login(alice)
    page.goto(server.url + "/")
    expect(page.locator(STATUS)).to_have_text("live")
    caught_up(page)


def expect_live_again(page: Page) -> None:
    expect(page.locator(STATUS)).to_have_text("live")
    expect(page.locator(BANNER)).to_be_hidden()
    expect(page.locator("body")).to_have_attribute("data-live", "live")
    expect(page.locator("main")).to_have_css("opacity", "1")


@pytest.mark.slow  # the default run keeps its time budget; CI runs it with -m slow
def test_a_lost_connection_shows_a_banner_and_fades_the_page_until_retry_now(
    paused, restarts, login, alice, agent
):
    page = paused
    open_overview(page, restarts, login, alice, agent)
    banner = page.locator(BANNER)
    expect(banner).to_be_hidden()

    restarts.stop()
    expect(page.locator(STATUS)).to_have_text("reconnecting")
    # A blip says nothing beyond the quiet indicator...
    page.clock.run_for(1_000)
    expect(banner).to_be_hidden()
    expect(page.locator("main")).to_have_css("opacity", "1")
    # ...a loss of a few seconds says it across the page, and fades what may be out of date.
    page.clock.run_for(1_000)
    expect(banner).to_be_visible()
    expect(banner).to_have_attribute("role", "alert")
    expect(banner).to_contain_text("Connection lost — reconnecting…")
    expect(page.locator("body")).to_have_attribute("data-live", "stale")
    expect(page.locator("main")).to_have_css("opacity", "0.55")
    assert banner.bounding_box()["width"] >= page.viewport_size["width"] - 1

    restarts.start()
    # The clock stands still: the page's own retry cannot come, only the button.
    expect(page.locator(STATUS)).to_have_text("reconnecting")
    banner.get_by_role("button", name="Retry now").click()
    expect_live_again(page)


@pytest.mark.slow
def test_coming_back_to_the_window_reconnects_at_once(paused, restarts, login, alice, agent):
    page = paused
    open_overview(page, restarts, login, alice, agent)
    restarts.stop()
    page.clock.run_for(2_000)
    expect(page.locator(BANNER)).to_be_visible()

    restarts.start()
    expect(page.locator(STATUS)).to_have_text("reconnecting")
    page.evaluate("window.dispatchEvent(new FocusEvent('focus'))")
    expect_live_again(page)


@pytest.mark.slow
def test_the_wall_shows_the_banner_as_soon_as_its_connection_is_lost(wall, restarts, agent):
    working(agent, 1)
    open_wall(wall, restarts)
    restarts.stop()
    # At once: no one stands at a wall screen to notice a small dot turn amber.
    expect(wall.locator(BANNER)).to_be_visible()
    expect(wall.locator(BANNER).get_by_role("button", name="Retry now")).to_be_visible()
    wall.clock.run_for(1_500)
    expect(wall.locator("main")).to_have_css("opacity", "0.55")

    restarts.start()
    wall.locator(BANNER).get_by_role("button", name="Retry now").click()
    expect_live_again(wall)


@pytest.mark.slow
def test_the_connection_indicator_covers_nothing_on_a_phone(
    page, server, login, agent, ops, approvers
):
    assert push(Client(), agent, status("WORKING", at=1, text="Halfway")).status_code == 200
    login(member("ann", ops, approvers))
    # Short enough that the page scrolls and the composer sticks to the bottom of the screen.
    page.set_viewport_size({"width": 390, "height": 600})
    page.goto(f"{server.url}/sessions/{Session.objects.get().pk}/")
    expect(page.locator(STATUS)).to_have_text("live")
    expect(page.locator("[data-composer-send]")).to_be_visible()

    for scroll in ("0", "document.documentElement.scrollHeight"):
        page.evaluate(f"window.scrollTo(0, {scroll})")
        covered = page.evaluate(
            """() => {
                const mine = document.querySelector("[data-live-status]").getBoundingClientRect();
                return [...document.querySelectorAll("main *")]
                    .filter((element) => {
                        const box = element.getBoundingClientRect();
                        return box.width > 0 && box.height > 0
                            && box.left < mine.right && mine.left < box.right
                            && box.top < mine.bottom && mine.top < box.bottom;
                    })
                    .map((element) => element.outerHTML.slice(0, 80));
            }"""
        )
        assert covered == [], f"the indicator lies over {covered}"
