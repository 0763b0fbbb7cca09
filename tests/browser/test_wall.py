"""The wall display (`/?display=wall`) in a real Chromium at 1920×1080: large type read from
across a room, a dark theme, a clock and when it last heard anything, and pages that turn by
themselves with the waiting sessions on every one, never a scrollbar.

Time is Playwright's clock, paused: the pages turn when the test moves the clock, not when a
machine under load happens to get there."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from playwright.sync_api import Browser, Page, expect

from tasks.models import Session
from tasks.wire import profile
from tests.browser.conftest import CONTEXT, caught_up
from tests.builders import approval, progress, status
from tests.conftest import RegisteredAgent, make_agent, push
from tests.live_server import LiveServer, push_http, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

WALL = {"width": 1920, "height": 1080}
NINE_FORTY_ONE = datetime(2026, 12, 1, 9, 41, 0, tzinfo=UTC)
PAGE_EVERY_MS = 15_000


def team_agent(ops) -> RegisteredAgent:
    """An agent of the ops team that sends plans and questions (profile extensions)."""
    registered = make_agent(team=ops)
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def agent(ops) -> RegisteredAgent:
    return team_agent(ops)


def working(agent: RegisteredAgent, number: int) -> None:
    steps = progress(("Read the issue", "completed"), (f"Write fix {number}", "in_progress"))
    body = status("WORKING", task=f"t-{number}", context=f"c-{number}", at=number, metadata=steps)
    assert push(Client(), agent, body).status_code == 200


def waiting(agent: RegisteredAgent) -> int:
    question = approval("i-1", "Ship v2 to production?")
    body = status("AUTH_REQUIRED", task="t-wait", context="c-wait", at=0, metadata=question)
    assert push(Client(), agent, body).status_code == 200
    return Session.objects.get(context_id="c-wait").pk


def wall_screen(browser: Browser, server: LiveServer, user, request) -> Page:
    """A 1920×1080 screen in UTC, logged in as `user`, whose clock stands still at 09:41
    until the test moves it."""
    context = browser.new_context(viewport=WALL, timezone_id="UTC", locale="en-GB")
    request.addfinalizer(context.close)
    context.set_default_timeout(10_000)
    request.node.stash[CONTEXT] = context  # screenshots if the test fails
    context.add_cookies([session_cookie(user, server.url)])
    page = context.new_page()
    # Paused a minute on: pausing where it was installed may already be in its past.
    page.clock.install(time=NINE_FORTY_ONE - timedelta(minutes=1))
    page.clock.pause_at(NINE_FORTY_ONE)
    return page


@pytest.fixture
def wall(browser: Browser, server: LiveServer, alice, request) -> Page:
    return wall_screen(browser, server, alice, request)


def open_wall(page: Page, server: LiveServer) -> None:
    page.goto(f"{server.url}/?display=wall")
    expect(page.locator("[data-live-status]")).to_have_text("live")
    caught_up(page)


def keep_the_socket_through_clock_jumps(page: Page) -> None:
    """The paging tests jump the paused clock 15 s at a time. A keep-alive ping sent inside a
    jump has its pong deadline pass before the pong (real time, over loopback) can arrive, so
    the page would drop a healthy socket and show the wall's banner, which takes room from
    the tiles and changes the page count mid-test. Paging is the subject here (the reconnect
    tests cover the keep-alive): the page's own close() does nothing; a server that goes
    away still closes the socket."""
    page.evaluate("() => { WebSocket.prototype.close = function () {}; }")


def font_px(page: Page, selector: str) -> float:
    size = page.locator(selector).first.evaluate("e => getComputedStyle(e).fontSize")
    return float(size.removesuffix("px"))


def shown_tiles(page: Page) -> list[str]:
    return page.locator("[data-tile-session]:visible").evaluate_all(
        "tiles => tiles.map(t => t.dataset.tileSession)"
    )


def test_the_wall_reads_from_across_a_room_and_says_when_it_last_heard_anything(
    wall, server, agent
):
    """One wall, checked for what a room needs: large type, light on dark, a clock, and when
    it last heard from an agent (one page load for the three; each check says what failed)."""
    working(agent, 1)
    open_wall(wall, server)

    for selector, least in (
        ("main", 24),
        (".tile .step", 24),
        (".tile .card-head :is(.state, .pill)", 32),
        (".tile-meta", 24),
        ("html", 24),  # every rem grows, not only the body's own text
    ):
        size = font_px(wall, selector)
        assert size >= least, f"wall type too small to read across a room: {selector} {size}px"

    def luminance(selector: str, prop: str) -> float:
        colour = wall.locator(selector).first.evaluate(f"e => getComputedStyle(e).{prop}")
        red, green, blue = (int(v) for v in re.findall(r"\d+", colour)[:3])
        return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255

    assert luminance("body", "backgroundColor") < 0.1, "the wall's background is not dark"
    assert luminance("body", "color") > 0.9, "the wall's text is not light"
    assert luminance(".tile", "backgroundColor") < 0.15, "the wall's tiles are not dark"

    expect(wall.locator("[data-wall-clock]")).to_have_text("09:41")
    expect(wall.locator(".wall-updated")).to_have_text("updated 09:41")

    wall.clock.fast_forward("02:00")
    expect(wall.locator("[data-wall-clock]")).to_have_text("09:43")
    expect(wall.locator(".wall-updated")).to_have_text("updated 09:41")  # nothing heard yet

    steps = progress(("Read the issue", "completed"), ("Run the tests", "in_progress"))
    body = status("WORKING", task="t-1", context="c-1", at=50, metadata=steps)
    assert push_http(server, agent, body).status_code == 200
    expect(wall.locator(".tile .step:visible")).to_contain_text("Run the tests")
    expect(wall.locator(".wall-updated")).to_have_text("updated 09:43")


def test_many_sessions_page_by_themselves_with_the_waiting_one_on_every_page(wall, server, agent):
    for number in range(1, 41):
        working(agent, number)
    pinned = str(waiting(agent))
    open_wall(wall, server)
    keep_the_socket_through_clock_jumps(wall)

    label = wall.locator("[data-wall-page]")
    expect(label).to_have_text(re.compile(r"^Page 1 of [2-9]$"))
    pages = int(label.inner_text().rsplit(" ", 1)[1])
    first = shown_tiles(wall)
    assert first[0] == pinned
    assert 1 < len(first) < 41

    seen = set(first)
    for number in range(2, pages + 1):
        wall.clock.run_for(PAGE_EVERY_MS)
        expect(label).to_have_text(f"Page {number} of {pages}")
        shown = shown_tiles(wall)
        assert shown[0] == pinned, f"page {number} lost the waiting session"
        assert not (set(shown) - {pinned}) & seen, "a session shown on two pages"
        seen |= set(shown)
        assert_fits_without_scrolling(wall)
    # Every session had its turn, and the pages start over.
    assert len(seen) == 41
    wall.clock.run_for(PAGE_EVERY_MS)
    expect(label).to_have_text(f"Page 1 of {pages}")
    assert shown_tiles(wall) == first


def assert_fits_without_scrolling(page: Page) -> None:
    measures = page.evaluate(
        """() => ({
            scroll: document.documentElement.scrollHeight,
            height: innerHeight,
            bottoms: [...document.querySelectorAll("[data-tile-session]")]
                .filter(t => t.checkVisibility())
                .map(t => t.getBoundingClientRect().bottom),
        })"""
    )
    assert measures["scroll"] <= measures["height"]
    assert max(measures["bottoms"]) <= measures["height"]


@pytest.mark.slow
def test_many_sessions_never_need_a_scrollbar(wall, server, agent):
    for number in range(1, 41):
        working(agent, number)
    open_wall(wall, server)
    expect(wall.locator("[data-wall-page]")).to_have_text(re.compile(r"^Page 1 of \d+$"))
    assert_fits_without_scrolling(wall)
    # Not by hiding the overflow: a tile cut off by the bottom of the screen is not shown.
    assert all(
        bottom <= WALL["height"]
        for bottom in wall.locator("[data-tile-session]:visible").evaluate_all(
            "tiles => tiles.map(t => t.getBoundingClientRect().bottom)"
        )
    )


@pytest.mark.slow
def test_a_screen_that_fills_up_live_starts_turning_pages(wall, server, agent):
    working(agent, 1)
    pinned = str(waiting(agent))
    open_wall(wall, server)
    expect(wall.locator("[data-tile-session]:visible")).to_have_count(2)
    expect(wall.locator("[data-wall-page]")).to_be_hidden()

    for number in range(2, 41):
        steps = progress((f"Write fix {number}", "in_progress"))
        body = status(
            "WORKING", task=f"t-{number}", context=f"c-{number}", at=number, metadata=steps
        )
        assert push_http(server, agent, body).status_code == 200
    expect(wall.locator("[data-wall-page]")).to_have_text(re.compile(r"^Page 1 of [2-9]$"))
    assert shown_tiles(wall)[0] == pinned
    assert_fits_without_scrolling(wall)
