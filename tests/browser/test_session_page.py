"""The session page in a real browser (issue 12): cancelling asks first, times read in the
viewer's own zone, card receipts fold into one line, a refetched activity keeps the rows a
reader is in, a phone keeps the answer buttons and Send in reach, the sidebar is a drawer
there, and the open session's row says it is open."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
from playwright.sync_api import Locator, Page, expect

from tasks.models import Session
from tests.browser.conftest import caught_up
from tests.browser.test_answering import open_as, waiting_session
from tests.builders import progress, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}


def send(server: LiveServer, registered, body: dict) -> Session:
    response = push_http(server, registered, body)
    assert response.status_code == 200, (response.status_code, response.text)
    return Session.objects.get(agent=registered.agent, context_id=body["statusUpdate"]["contextId"])


def uncovered(page: Page, target: Locator) -> bool:
    """Whether a person pressing the middle of `target` presses it, not something on top."""
    return page.evaluate(
        """(element) => {
            const box = element.getBoundingClientRect();
            const x = box.left + box.width / 2, y = box.top + box.height / 2;
            if (y < 0 || y > innerHeight || x < 0 || x > innerWidth) return false;
            const hit = document.elementFromPoint(x, y);
            return hit === element || element.contains(hit);
        }""",
        target.element_handle(),
    )


# -- cancelling asks first -------------------------------------------------------------------


def test_cancel_asks_first_and_only_the_confirmation_reaches_the_agent(
    browser, server, agent_stub, ops, approvers
):
    session = waiting_session(server, agent_stub, ops)
    page = open_as(browser, member("alice", ops, approvers), server, f"/sessions/{session}/")
    try:
        opener = page.get_by_text("Cancel task…")
        confirm = page.get_by_role("button", name="Cancel task", exact=True)
        expect(confirm).to_be_hidden()
        opener.click()
        expect(page.get_by_text("Cancel this task? The agent stops working on it.")).to_be_visible()
        assert agent_stub.calls("CancelTask") == []  # the page's button alone sends nothing

        page.get_by_role("button", name="Keep it running").click()
        expect(confirm).to_be_hidden()
        expect(opener).to_be_focused()
        assert agent_stub.calls("CancelTask") == []

        opener.click()
        confirm.click()
        expect(page.locator(".session-cancel [data-action-status]")).not_to_have_text(
            re.compile(r"^$|Sending")
        )
        assert [call["id"] for call in agent_stub.calls("CancelTask")] == ["task-1"]
    finally:
        page.context.close()


# -- times in the viewer's zone ----------------------------------------------------------------


def test_transcript_times_read_in_the_viewers_zone_with_the_full_date_on_hover(
    browser, server, ops, alice
):
    registered = make_agent(team=ops)
    session = send(server, registered, status("WORKING", at=1, text="Reading the logs"))
    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US",
                                  timezone_id="America/New_York")  # fmt: skip
    try:
        context.add_cookies([session_cookie(alice, server.url)])
        page = context.new_page()
        # The same day in New York as the message (12:00:01 UTC is 7:00:01 there).
        page.clock.install(time=datetime(2026, 11, 30, 15, 0, tzinfo=UTC))
        page.goto(f"{server.url}/sessions/{session.pk}/")
        moment = page.locator(".transcript [data-receipt] time")
        expect(moment).to_have_text(re.compile(r"^7:00:01\sAM$"))
        expect(moment).to_have_attribute(
            "title", re.compile(r"Monday, November 30, 2026 at 7:00:01\sAM EST")
        )
        # A ticking time keeps ticking, with the full date on hover too.
        expect(page.locator(".session-meta time[data-ago]")).to_have_attribute(
            "title", re.compile(r"^\w+day, \w+ \d+, 20\d\d at \d+:\d\d:\d\d\s[AP]M E[SD]T$")
        )

        # Another day: the date comes with the time.
        page.clock.set_system_time(datetime(2026, 12, 2, 15, 0, tzinfo=UTC))
        page.evaluate("document.dispatchEvent(new CustomEvent('onlooker:refetched'))")
        expect(moment).to_have_text(re.compile(r"^Nov 30, 7:00\sAM$"))
    finally:
        context.close()


# -- receipts fold into one line ---------------------------------------------------------------


@pytest.mark.slow
def test_a_run_of_card_updates_is_one_line_that_opens_to_each_receipt(
    server, page, login, open_live, alice, ops
):
    registered = make_agent(team=ops)
    for second in range(1, 5):
        steps = progress(*[("Step", "completed")] * second, ("Next", "in_progress"))
        session = send(server, registered, status("WORKING", at=second, metadata=steps))
    login(alice)
    open_live(f"/sessions/{session.pk}/")

    run = page.locator(".transcript > [data-receipts]")
    expect(run).to_have_count(1)
    summary = run.locator("summary")
    expect(summary).to_have_text(re.compile(r"4 card updates, \S.*–\S"))
    receipts = run.locator("[data-receipt]")
    expect(receipts).to_have_count(4)
    expect(receipts.first).to_be_hidden()

    summary.click()
    expect(receipts.nth(3)).to_be_visible()
    expect(receipts.nth(3)).to_contain_text("Progress card updated (rev 4, 4/5 done)")

    # A fifth arrives live: the same line counts it, still open for the reader.
    steps = progress(*[("Step", "completed")] * 5, ("Next", "in_progress"))
    send(server, registered, status("WORKING", at=5, metadata=steps))
    expect(summary).to_contain_text("5 card updates")
    expect(receipts.nth(4)).to_be_visible()


@pytest.mark.slow  # the default run keeps its time budget; CI runs it with -m slow
def test_a_session_changing_fast_refetches_its_activity_at_most_once_a_second_then_the_last(
    server, page, login, open_live, alice, ops
):
    registered = make_agent(team=ops)
    steps = progress(("Step", "completed"), ("Next", "in_progress"))
    session = send(server, registered, status("WORKING", at=1, metadata=steps))
    login(alice)
    open_live(f"/sessions/{session.pk}/")
    summary = page.locator(".transcript > [data-receipts] summary")
    now = "performance.now()"  # the page's clock: its requests are timed on it

    started = page.evaluate(now)
    for second in range(2, 13):  # an agent streaming its statuses, several a second
        steps = progress(*[("Step", "completed")] * second, ("Next", "in_progress"))
        send(server, registered, status("WORKING", at=second, metadata=steps))
        time.sleep(0.15)
    ended = page.evaluate(now)

    # The last change shows (one refetch after it)...
    expect(summary).to_contain_text("12 card updates")
    # ...and meanwhile one refetch a second at most, the first one included: refetching
    # within 300 ms of every change would have been about three a second.
    fetched = page.evaluate(
        """() => performance.getEntriesByType("resource")
            .filter((entry) => entry.name.includes("/activity/"))
            .map((entry) => entry.startTime)"""
    )
    during = [at for at in fetched if started <= at <= ended]
    seconds = (ended - started) / 1000
    assert 1 <= len(during) <= seconds + 1, (len(during), round(seconds, 1))


def say(server: LiveServer, registered, text: str, number: int) -> None:
    body = {"messageId": f"said-{number}", "role": "ROLE_AGENT", "contextId": "ctx-1",
            "parts": [{"text": text}]}  # fmt: skip
    response = push_http(server, registered, {"message": body})
    assert response.status_code == 200, (response.status_code, response.text)


def test_a_refetch_keeps_the_rows_it_showed_and_the_readers_selection_in_them(
    server, page, login, open_live, alice, ops
):
    registered = make_agent(team=ops)
    session = send(server, registered, status("WORKING", at=1, text="Reading the logs"))
    say(server, registered, "First finding: the disk is full", 1)
    login(alice)
    open_live(f"/sessions/{session.pk}/")
    said = page.locator(".transcript > .message-agent")
    expect(said).to_have_count(1)
    # The reader selects the first finding to copy it; the row is marked to know it again.
    page.evaluate(
        """() => {
            const row = document.querySelector(".transcript > .message-agent");
            row.markedByTheTest = true;
            getSelection().selectAllChildren(row.querySelector("[data-message-markdown] p"));
        }"""
    )

    say(server, registered, "Second finding: logs rotate hourly", 2)
    expect(said).to_have_count(2)
    expect(said.nth(1)).to_contain_text("Second finding")
    assert page.evaluate(
        "() => document.querySelector('.transcript > .message-agent').markedByTheTest"
    )
    assert page.evaluate("() => getSelection().toString()") == "First finding: the disk is full"
    # Its time still reads in the reader's zone, as a row put in by the refetch does.
    times = page.locator(".transcript > .message-agent time")
    expect(times.first).to_have_attribute("title", re.compile(r"20\d\d"))
    expect(times.nth(1)).to_have_attribute("title", re.compile(r"20\d\d"))


def test_a_full_page_keeps_the_rows_it_showed_when_its_oldest_one_goes(
    server, page, login, open_live, alice, ops
):
    # Messages of 10,000 characters fill the page's budget with nine: each new one takes the
    # oldest off the page, and every row moves up one.
    registered = make_agent(team=ops)
    session = send(server, registered, status("WORKING", at=1))
    filler = " and the next shard" * 600
    for number in range(1, 12):
        say(server, registered, f"Finding {number}:{filler}"[:10_000], number)
    login(alice)
    open_live(f"/sessions/{session.pk}/")
    said = page.locator(".transcript > .message-agent")
    expect(said).to_have_count(9)
    expect(said.first).to_contain_text("Finding 3:")
    page.evaluate(
        """() => {
            const rows = document.querySelectorAll(".transcript > .message-agent");
            const newest = rows[rows.length - 1];
            newest.markedByTheTest = true;
            getSelection().selectAllChildren(newest.querySelector("[data-message-markdown] p"));
        }"""
    )
    chosen = page.evaluate("() => getSelection().toString()")
    assert chosen.startswith("Finding 11:")

    say(server, registered, f"Finding 12:{filler}"[:10_000], 12)
    expect(said.last).to_contain_text("Finding 12:")
    expect(said.first).to_contain_text("Finding 4:")
    rows = "[...document.querySelectorAll('.transcript > .message-agent')]"
    assert page.evaluate(f"() => {rows}.at(-2).markedByTheTest")
    assert page.evaluate("() => getSelection().toString()") == chosen


# -- a phone: answer buttons and Send in reach ----------------------------------------------------


def test_on_a_narrow_screen_the_card_bar_never_hides_approve_and_nothing_covers_send(
    browser, server, agent_stub, ops, approvers
):
    session = waiting_session(server, agent_stub, ops)
    page = open_as(browser, member("alice", ops, approvers), server, f"/sessions/{session}/")
    try:
        for width in (390, 700):  # a phone, a small tablet: one waiting session for both
            if width != 390:
                # As loaded at the desk width, then narrowed, with the card bar closed again.
                page.set_viewport_size({"width": 1280, "height": 800})
                page.reload()
                expect(page.locator("[data-live-status]")).to_have_text("live")
                caught_up(page)
            page.set_viewport_size({"width": width, "height": PHONE["height"]})
            approve = page.locator('button[value="approve"]')
            send_button = page.locator("[data-composer-send]")
            bar = page.locator("details.composer-card")
            expect(bar, f"no card bar at {width} px").to_be_visible()
            for opened in (False, True):
                if opened:
                    bar.locator("summary").click()
                    expect(bar).to_have_attribute("open", "")
                page.evaluate("window.scrollTo(0, 0)")
                where = f"at {width} px, card bar open: {opened}"
                expect(approve, f"Approve is hidden {where}").to_be_visible()
                assert uncovered(page, approve), f"Approve is covered {where}"
                send_button.scroll_into_view_if_needed()
                assert uncovered(page, send_button), f"Send is covered {where}"
    finally:
        page.context.close()


# -- the sidebar: a drawer on a phone, and the open row ---------------------------------------


def two_sessions(server: LiveServer, ops):
    registered = make_agent(team=ops)
    here = send(server, registered, status("WORKING", at=1, context="here", text="This one"))
    other = send(
        server, registered, status("WORKING", at=1, context="other", task="t2", text="Other")
    )
    return registered, here, other


@pytest.mark.slow
def test_on_a_phone_the_sidebar_is_a_drawer_that_takes_and_gives_back_focus(
    server, page, login, open_live, alice, ops
):
    _, here, other = two_sessions(server, ops)
    page.set_viewport_size(PHONE)
    login(alice)
    open_live(f"/sessions/{here.pk}/")
    drawer = page.locator("nav.sidebar")
    opener = page.get_by_role("button", name="Sessions", exact=True)
    expect(drawer).to_be_hidden()
    expect(opener).to_have_attribute("aria-expanded", "false")

    opener.click()
    expect(drawer).to_be_visible()
    expect(opener).to_have_attribute("aria-expanded", "true")
    assert page.evaluate("document.querySelector('nav.sidebar').contains(document.activeElement)")
    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()
    expect(opener).to_be_focused()

    opener.click()
    page.get_by_role("button", name="Close the sessions list").click()
    expect(drawer).to_be_hidden()
    expect(opener).to_be_focused()

    # A tap beside the drawer closes it and presses nothing behind it.
    opener.click()
    expect(drawer).to_be_visible()
    page.mouse.click(PHONE["width"] - 10, PHONE["height"] // 2)
    expect(drawer).to_be_hidden()
    expect(page).to_have_url(re.compile(rf"/sessions/{here.pk}/$"))

    opener.click()
    drawer.locator(f'li[data-sidebar-session="{other.pk}"] a').click()
    expect(page).to_have_url(re.compile(rf"/sessions/{other.pk}/$"))
    expect(page.locator("nav.sidebar")).to_be_hidden()


@pytest.mark.slow
def test_the_open_sessions_row_is_marked_current_and_stays_so_after_a_live_swap(
    server, page, login, open_live, alice, ops
):
    registered, here, other = two_sessions(server, ops)
    login(alice)
    open_live(f"/sessions/{here.pk}/")
    row = page.locator(f'li[data-sidebar-session="{here.pk}"]')
    expect(row.locator("a")).to_have_attribute("aria-current", "page")
    expect(page.locator(f'li[data-sidebar-session="{other.pk}"] a')).not_to_have_attribute(
        "aria-current", "page"
    )

    row.evaluate("row => { row.dataset.old = '1'; }")
    send(server, registered, status("WORKING", at=2, context="here", text="Further on"))
    expect(row).not_to_have_attribute("data-old", "1")  # the row was swapped for a new one
    expect(row.locator("a")).to_have_attribute("aria-current", "page")
    expect(page.locator("[aria-current]")).to_have_count(1)
