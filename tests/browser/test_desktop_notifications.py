"""Desktop notifications (static/js/notify.js) in a real Chromium, with the notifications
permission granted to the live server's origin. A test-only init script replaces
window.Notification with a subclass that records every notification the page makes (the
page's code is unchanged), so a test can count them across tabs and press one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.browser.conftest import CONSOLE, CONTEXT, TIMEOUT_MS, VIEWPORT, caught_up
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http, session_cookie

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RECORDER = """
(() => {
  const Real = window.Notification;
  if (!Real) return;
  const shown = [];
  class Recording extends Real {
    constructor(title, options = {}) {
      super(title, options);
      shown.push({ title, body: options.body ?? "", tag: options.tag ?? "", notification: this });
    }
  }
  const property = { value: Recording, configurable: true, writable: true };
  Object.defineProperty(window, "Notification", property);
  window.__notifications = shown;
})();
"""
SETTLE_S = 0.8  # longer than notify.js's debounce plus a fetch: time for a wrong notification


@pytest.fixture
def alice(ops, approvers) -> User:
    return member("alice", ops, approvers)


@pytest.fixture
def bot(ops, agent_stub):
    """alice-bot, of team ops, on a loopback stub that takes every answer."""
    registered = make_agent(team=ops, name="alice-bot")
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def context(
    browser: Browser, server: LiveServer, alice: User, request: pytest.FixtureRequest
) -> Iterator[BrowserContext]:
    """alice's browser: notifications allowed for the server's origin, every one recorded."""
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(TIMEOUT_MS)
    ctx.grant_permissions(["notifications"], origin=server.url)
    ctx.add_init_script(RECORDER)
    ctx.add_cookies([session_cookie(alice, server.url)])
    console: list[str] = []
    request.node.stash[CONSOLE] = console
    request.node.stash[CONTEXT] = ctx
    ctx.on("page", lambda page: page.on("console", lambda m: console.append(m.text)))
    yield ctx
    ctx.close()


@pytest.fixture
def tab(context: BrowserContext, server: LiveServer) -> Callable[[str], Page]:
    """`tab(path)`: another tab of alice's browser on `path`, live and caught up."""

    def open_tab(path: str = "/") -> Page:
        page = context.new_page()
        page.goto(server.url + path)
        expect(page.locator("[data-live-status]")).to_have_text("live")
        caught_up(page)
        return page

    return open_tab


def ask(server: LiveServer, bot, context: str, prompt: str, *, at: int = 1) -> None:
    metadata = approval(f"i-{context}", prompt)
    body = status("AUTH_REQUIRED", task=f"t-{context}", context=context, at=at, metadata=metadata)
    assert push_http(server, bot, body).status_code == 200


def notifications(*pages: Page) -> list[dict]:
    shown = []
    for page in pages:
        shown += page.evaluate(
            "() => window.__notifications.map(({title, body, tag}) => ({title, body, tag}))"
        )
    return shown


def wait_for(count: int, *pages: Page) -> list[dict]:
    deadline = time.monotonic() + 5
    while len(notifications(*pages)) < count and time.monotonic() < deadline:
        pages[0].wait_for_timeout(50)
    time.sleep(SETTLE_S)  # any extra one would have come by now
    return notifications(*pages)


def turn_on(page: Page) -> None:
    toggle = page.locator("header [data-notify-toggle]")
    expect(toggle).to_have_text("Notifications: off")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    toggle.click()
    # "on" once what was open at that moment is marked as known.
    expect(toggle).to_have_text("Notifications: on")
    expect(toggle).to_have_attribute("aria-pressed", "true")


def test_an_approval_notifies_once_across_two_tabs_and_a_repeat_does_not_notify_again(
    server, tab, bot
):
    ask(server, bot, "earlier", "Asked before they were turned on?", at=1)
    first, second = tab("/"), tab("/")
    turn_on(first)
    expect(second.locator("header [data-notify-toggle]")).to_have_text("Notifications: on")

    ask(server, bot, "builds", "Delete 3 old builds?", at=2)
    shown = wait_for(1, first, second)

    interaction = Interaction.objects.get(interaction_id="i-builds")
    assert shown == [
        {
            "title": "alice-bot needs approval",
            "body": "Delete 3 old builds?",
            "tag": f"{interaction.pk}:1",
        }
    ]

    # The agent sends the same status again: the same round, already notified of.
    ask(server, bot, "builds", "Delete 3 old builds?", at=2)
    ask(server, bot, "deploy", "Deploy v2?", at=3)  # a new one, so the check surely ran
    # (Either tab may be the one that showed each.)
    assert sorted(n["body"] for n in wait_for(2, first, second)) == [
        "Delete 3 old builds?",
        "Deploy v2?",
    ]


def test_what_was_answered_or_closed_before_the_tab_asked_does_not_notify(server, tab, bot):
    page = tab("/")
    turn_on(page)
    # The page's questions to the server wait until both are settled: what it then hears is
    # what is open by then.
    held, releasing = [], []

    def hold(route) -> None:
        if releasing:
            route.continue_()
        else:
            held.append(route)

    page.route("**/api/waiting", hold)
    ask(server, bot, "answered", "Answered by alice?", at=1)
    row = page.locator("[data-inbox-row]")
    row.locator('button[value="approve"]').click()  # alice answers it herself
    expect(row).to_have_count(0)
    ask(server, bot, "closed", "Closed by the agent?", at=1)
    moved_on = status("WORKING", task="t-closed", context="closed", at=2, text="Going on")
    assert push_http(server, bot, moved_on).status_code == 200
    expect(page.locator('[data-count="waiting"]')).to_have_text("0")
    assert held  # the page did ask meanwhile
    releasing.append(True)
    for route in held:
        route.continue_()

    ask(server, bot, "later", "Asked later?", at=3)
    assert [n["body"] for n in wait_for(1, page)] == ["Asked later?"]


def test_clicking_a_notification_opens_its_session_page(server, tab, bot):
    page = tab("/")
    turn_on(page)
    ask(server, bot, "builds", "Delete 3 old builds?", at=1)
    wait_for(1, page)
    session = Session.objects.get(context_id="builds")

    page.evaluate("() => window.__notifications[0].notification.onclick()")

    expect(page).to_have_url(f"{server.url}/sessions/{session.pk}/")


def test_with_the_toggle_off_nothing_shows(server, tab, bot):
    page = tab("/")
    turn_on(page)
    toggle = page.locator("header [data-notify-toggle]")
    toggle.click()
    expect(toggle).to_have_text("Notifications: off")
    expect(toggle).to_have_attribute("aria-pressed", "false")

    checks = int(page.evaluate("() => document.documentElement.dataset.notifyChecks || 0"))
    ask(server, bot, "builds", "Delete 3 old builds?", at=1)
    expect(page.locator("[data-inbox-row]")).to_have_count(1)  # the page heard it
    checked = f"() => Number(document.documentElement.dataset.notifyChecks) > {checks}"
    page.wait_for_function(checked)

    assert wait_for(0, page) == []


def test_the_session_being_looked_at_does_not_notify(server, tab, bot):
    assert push_http(server, bot, status("WORKING", task="t-here", context="here", at=1)).is_success
    here = Session.objects.get(context_id="here")
    page = tab(f"/sessions/{here.pk}/")  # visible and focused (Playwright focuses every page)
    turn_on(page)

    ask(server, bot, "here", "Asked where alice is looking?", at=2)
    ask(server, bot, "elsewhere", "Asked elsewhere?", at=3)

    assert [n["body"] for n in wait_for(1, page)] == ["Asked elsewhere?"]


def test_the_settings_page_says_what_the_browser_allows_and_its_toggle_is_the_headers(tab):
    page = tab("/settings/")
    expect(page.locator("[data-notify-permission]")).to_have_text(
        "Your browser allows Onlooker's notifications."
    )
    page.locator("main [data-notify-toggle]").click()
    for toggle in (
        page.locator("main [data-notify-toggle]"),
        page.locator("header [data-notify-toggle]"),
    ):
        expect(toggle).to_have_text("Notifications: on")
        expect(toggle).to_have_attribute("aria-pressed", "true")


def test_a_browser_that_blocks_notifications_says_so(browser, server, alice):
    context = browser.new_context(viewport=VIEWPORT)
    try:
        context.add_cookies([session_cookie(alice, server.url)])
        page = context.new_page()
        # The person refused them in the browser's site settings.
        cdp = context.new_cdp_session(page)
        own = cdp.send("Target.getTargetInfo")["targetInfo"]["browserContextId"]
        denied = {"permission": {"name": "notifications"}, "setting": "denied"}
        cdp.send("Browser.setPermission", {**denied, "origin": server.url, "browserContextId": own})
        page.goto(server.url + "/settings/")
        assert page.evaluate("() => Notification.permission") == "denied"
        toggle = page.locator("header [data-notify-toggle]")
        expect(toggle).to_have_text("Notifications: blocked by the browser")
        expect(toggle).to_have_attribute("aria-pressed", "false")
        expect(page.locator("[data-notify-permission]")).to_contain_text("blocks")
        toggle.click()  # asks nothing: the browser has answered already
        expect(toggle).to_have_text("Notifications: blocked by the browser")
    finally:
        context.close()
