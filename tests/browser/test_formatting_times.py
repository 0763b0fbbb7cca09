"""One time format on every page (issue 33): the viewer's own locale, 24-hour where the locale
says so. A person in Britain reads "15:43" on the monitoring screen, a session page and the
wall alike; a person in the United States reads "3:43 PM" on all three, and never a bare
"15:43" beside it. Every time on a page is a <time> that static/js/times.js writes.

One browser context per locale (its language and time zone, as a person's browser has them),
the same three pages in each. The same loads check that no table breaks a word ("Token s")."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from tasks.models import Session
from tasks.wire import profile
from tests.browser.conftest import CONTEXT, caught_up
from tests.builders import EPOCH, message, progress, status
from tests.conftest import make_agent
from tests.live_server import LiveServer, push_http, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

# The browsers' clocks stand still at this moment (UTC): the wall's clock shows it.
THAT_DAY = datetime(2026, 1, 1, 15, 43, 31, tzinfo=UTC)
# A date before the time when it is not today ("5 Dec, 15:43", "Dec 5, 3:43 PM").
TWENTY_FOUR_HOURS = re.compile(r"^([^:]*, )?\d{2}:\d{2}(:\d{2})?$")
TWELVE_HOURS = re.compile(r"^([^:]*, )?\d{1,2}:\d{2}(:\d{2})?\s[AP]M$")
ANY_TIME = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AP]M)?")

# Each <time> a person reads as a moment (not "3 min ago"), and every time-like text on the
# page outside a <time>: the second list must be empty, whatever the locale.
TIMES = """() => {
  const shown = [...document.querySelectorAll("main time, header time")]
    .filter((t) => t.checkVisibility() && !t.matches("[data-ago], [data-waited-since]"))
    .map((t) => t.textContent.trim());
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const loose = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("time, script, style, code, pre, [hidden]")) continue;
    if (!node.parentElement.checkVisibility()) continue;
    if (/\\b\\d{1,2}:\\d{2}\\b/.test(node.textContent)) loose.push(node.textContent.trim());
  }
  // A word of a table cell drawn on two lines ("Token s"): its pieces' boxes differ in top.
  const broken = [];
  for (const cell of document.querySelectorAll("th, td")) {
    if (!cell.checkVisibility()) continue;
    const cells = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = cells.nextNode(); node; node = cells.nextNode()) {
      for (const word of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(word[0]);
      }
    }
  }
  return { shown, loose, broken };
}"""


def a_busy_session(server: LiveServer, ops) -> int:
    """A session with a transcript, a plan, a finished turn (the Turns table) and a second
    turn at work."""
    registered = make_agent(team=ops)
    said = message("Deploy the site", message_id="u-1", role="ROLE_USER")
    steps = progress(("Build", "completed"), ("Deploy", "in_progress"))
    telemetry = {profile.TELEMETRY: {"tokens": 9147, "steps": 12, "costUsd": 0.25}}
    for body in (
        {"message": {**said, "contextId": "ctx-1"}},
        status("WORKING", at=1, text="Building", metadata=steps),
        status("COMPLETED", at=2, metadata=telemetry),
        status("WORKING", task="task-2", at=3, text="Deploying to production"),
    ):
        assert push_http(server, registered, body).status_code == 200
    return Session.objects.get(agent=registered.agent).pk


def pages_in(browser: Browser, server: LiveServer, user, request, locale: str) -> Page:
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, locale=locale, timezone_id="UTC"
    )
    request.addfinalizer(context.close)
    request.node.stash[CONTEXT] = context
    context.add_cookies([session_cookie(user, server.url)])
    page = context.new_page()
    page.clock.install(time=THAT_DAY - timedelta(minutes=1))
    page.clock.pause_at(THAT_DAY)  # the wall's clock stands at 15:43 while the test reads it
    return page


def times_on(page: Page, url: str) -> dict:
    page.goto(url)
    expect(page.locator("[data-live-status]")).to_have_text("live")
    caught_up(page)
    return page.evaluate(TIMES)


@pytest.mark.parametrize(
    ("locale", "form", "clock"),
    [("en-GB", TWENTY_FOUR_HOURS, r"15:43"), ("en-US", TWELVE_HOURS, r"3:43\sPM")],
)
def test_every_page_shows_times_in_the_viewers_locale(
    browser, server, alice, ops, request, locale, form, clock
):
    session = a_busy_session(server, ops)
    page = pages_in(browser, server, alice, request, locale)
    seen: dict[str, list[str]] = {}
    for name, path in (
        ("monitoring screen", "/"),
        ("session page", f"/sessions/{session}/"),
        ("wall", "/?display=wall"),
    ):
        found = times_on(page, server.url + path)
        assert found["loose"] == [], f"{name}: a time outside <time>: {found['loose']}"
        assert found["broken"] == [], f"{name}: words broken in a table: {found['broken']}"
        odd = [text for text in found["shown"] if not form.match(text)]
        assert odd == [], f"{name} ({locale}): times not in the locale's format: {odd}"
        seen[name] = found["shown"]
    assert seen["session page"], "the session page showed no time at all"
    assert any(re.fullmatch(clock, text) for text in seen["wall"]), f"wall: {seen['wall']}"
    # The transcript's moment is the timeline's: the same words for the same minute.
    assert any(ANY_TIME.search(text) for text in seen["session page"])


def test_a_time_shown_alone_today_gets_its_date_when_the_day_turns(
    browser, server, alice, ops, request
):
    """Times that do not tick are written once each day (static/js/times.js), not on every
    live message: the next day's tick still gives the transcript's times their date."""
    session = a_busy_session(server, ops)
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, locale="en-GB", timezone_id="UTC"
    )
    request.addfinalizer(context.close)
    request.node.stash[CONTEXT] = context
    context.add_cookies([session_cookie(alice, server.url)])
    page = context.new_page()
    page.clock.install(time=EPOCH.replace(hour=23, minute=59, second=50))
    page.goto(f"{server.url}/sessions/{session}/")
    expect(page.locator("[data-live-status]")).to_have_text("live")
    caught_up(page)
    said = page.locator("li.message-receipt time").first  # the card's first change, today
    expect(said).to_have_text("12:00:01")

    page.clock.run_for(15_000)  # past midnight, and the page's tick every 5 s

    expect(said).to_have_text(re.compile(r"^30 Nov, 12:00$"))
