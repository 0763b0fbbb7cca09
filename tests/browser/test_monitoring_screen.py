"""The monitoring screen as a screen a team keeps open all day (issue 33), in a real browser at
a desk (1440×900) and on a phone (390×844), light and dark: the filters on one line (behind
"Filters" on a phone), "New session" a button that opens its form, finished sessions as one
line each that open the session, a "Recently decided" strip, a denied deploy that does not end
green, no "$0.0000", the whole question in the list on a phone, and cost on a page of its own
with its axes named and its values written."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.api.recorded import on_record
from tests.browser.conftest import CONTEXT, caught_up
from tests.browser.test_accessibility import audit
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

DESK = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
ONE_LINE_PX = 48
QUESTION = (
    "Deploy checkout 2.4 to production in eu-west and us-east, after the database migration "
    "has finished and the error budget is back above 99.9 percent?"
)


def pushed(server: LiveServer, registered, *bodies: dict) -> None:
    for body in bodies:
        response = push_http(server, registered, body)
        assert response.status_code == 200, response.text


def denied_deploy(server: LiveServer, registered, person) -> Session:
    """A deploy a person denied, with a reason; the agent then completed its task (as the demo
    agent does: the build stands, production untouched)."""
    ask = approval("deploy", "Deploy release 2.3?", detail={"hosts": 6})
    pushed(server, registered, status("AUTH_REQUIRED", task="t-d", context="denied", metadata=ask))
    interaction = Interaction.objects.select_related("task__session__agent").get(
        interaction_id="deploy"
    )
    now = timezone.now()
    Interaction.objects.filter(pk=interaction.pk).update(
        state=Interaction.State.ANSWERED,
        answer={"approved": False},
        answered_at=now,
        answered_by=person,
        reason="Not during the sale",
    )
    on_record(interaction, "deny", by=person, at=now, reason="Not during the sale")
    pushed(server, registered, status("COMPLETED", task="t-d", context="denied", text="Kept"))
    return interaction.task.session


def open_screen(page: Page, server: LiveServer, path: str = "/") -> None:
    page.goto(server.url + path)
    expect(page.locator("[data-live-status]")).to_have_text("live")
    caught_up(page)


def height(locator) -> float:
    return locator.bounding_box()["height"]


def colour(locator) -> str:
    return locator.evaluate("element => getComputedStyle(element).color")


def ok_colour(page: Page) -> str:
    """What the theme draws a success in (a pill-ok's colour), for the page's scheme now."""
    return page.evaluate(
        """() => {
            const probe = document.createElement("span");
            probe.className = "pill pill-ok";
            document.body.append(probe);
            const found = getComputedStyle(probe).color;
            probe.remove();
            return found;
        }"""
    )


def whole_on_screen(locator) -> bool:
    """The element's text is all laid out inside it: nothing scrolled away or ellipsized."""
    return locator.evaluate(
        """element => element.scrollWidth <= element.clientWidth + 1
            && getComputedStyle(element).textOverflow !== "ellipsis"
            && element.getBoundingClientRect().right <= window.innerWidth"""
    )


@pytest.fixture
def team(server: LiveServer, ops):
    registered = make_agent(team=ops, name="Release bot")
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


def test_the_screen_is_compact_at_a_desk_and_on_a_phone_and_says_how_things_ended(
    server, page, login, team, ops, approvers
):
    alice = member("alice", ops, approvers)
    denied = denied_deploy(server, team, alice)
    pushed(
        server,
        team,
        status("WORKING", task="t-w", context="working", text="Compiling"),
        status("FAILED", task="t-f", context="failed", text="Out of memory"),
        status(
            "AUTH_REQUIRED",
            task="t-a",
            context="asking",
            metadata=approval("a", QUESTION, detail={"hosts": 6}),
        ),
    )
    working = Session.objects.get(context_id="working")
    login(alice)
    page.set_viewport_size(DESK)
    open_screen(page, server)

    # The filters: one line at a desk.
    filters = page.locator("form.filters")
    assert height(filters) <= ONE_LINE_PX, f"the filter bar is {height(filters)} px high"
    expect(page.locator("#filter-agent")).to_be_visible()
    expect(page.locator(".filters-more > summary")).to_be_hidden()

    # "New session": its form shows only once the button is pressed.
    form = page.locator(".new-session-form")
    expect(form).to_be_hidden()
    page.locator(".new-session > summary", has_text="New session").click()
    expect(form).to_be_visible()
    expect(form.locator("#new-text")).to_be_focused()  # ready to type the first message
    page.keyboard.press("Escape")
    expect(form).to_be_hidden()
    expect(page.locator(".new-session > summary")).to_be_focused()

    # Working sessions are tiles; finished ones are one line each, in their own list.
    expect(page.locator(f'.tiles [data-tile-session="{working.pk}"]')).to_have_count(1)
    rows = page.locator(".finished-rows [data-tile-session]")
    expect(rows).to_have_count(2)
    for index in range(2):
        assert height(rows.nth(index)) <= ONE_LINE_PX, "a finished session is not one line"
    row = page.locator(f'.finished-rows [data-tile-session="{denied.pk}"]')
    expect(row.locator(".tile-body")).to_be_hidden()  # no card, no orange "unconfirmed"
    ended = row.locator("[data-state-words]:visible")
    expect(ended).to_have_text("Denied")
    assert colour(ended) != ok_colour(page), "a denied deploy ends in the colour of success"
    failed = Session.objects.get(context_id="failed")
    failed_row = page.locator(f'.finished-rows [data-tile-session="{failed.pk}"]')
    expect(failed_row.locator("[data-state-words]:visible")).to_have_text("Failed")

    # Recently decided: what, what was made, by whom, with the reason.
    decided = page.locator("[data-decided-item]")
    expect(decided).to_have_count(1)
    expect(decided.locator("[data-decided-made]")).to_have_text("Denied")
    expect(decided).to_contain_text("Deploy release 2.3?")
    expect(decided.locator("[data-decided-by]")).to_have_text("alice")
    expect(decided.locator("[data-decided-reason]")).to_have_text("Not during the sale")
    assert colour(decided.locator("[data-decided-made]")) != ok_colour(page)
    assert "$0.0000" not in page.content()
    expect(page.locator("[data-usage]")).to_have_count(0)  # usage has its own page now

    # Dark: the denial is still not drawn in the success colour.
    page.emulate_media(color_scheme="dark")
    assert colour(ended) != ok_colour(page)
    page.emulate_media(color_scheme="light")

    # On a phone: the search and "Filters", which opens the rest.
    page.set_viewport_size(PHONE)
    expect(page.locator("#filter-agent")).to_be_hidden()
    toggle = page.locator(".filters-more > summary", has_text="Filters")
    expect(toggle).to_be_visible()
    toggle.click()
    expect(page.locator("#filter-agent")).to_be_visible()
    toggle.click()
    expect(page.locator("#filter-agent")).to_be_hidden()
    assert height(filters) <= ONE_LINE_PX + 4

    # The whole question, wrapping, with Details closed and open, in both schemes.
    prompt = page.locator("[data-inbox-row] .inbox-prompt")
    expect(prompt).to_contain_text(QUESTION)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        assert whole_on_screen(prompt), f"the question is cut on a phone ({scheme})"
    page.locator("[data-inbox-row] .inbox-detail summary").click()
    assert whole_on_screen(prompt), "the question is cut with Details open"
    assert height(prompt) > 2 * 16, "the long question did not wrap"
    page.emulate_media(color_scheme="light")
    assert height(row) <= ONE_LINE_PX, "a finished session is not one line on a phone"

    # A finished row opens its session wherever it is clicked, not only on its title.
    box = row.bounding_box()
    row.click(position={"x": box["width"] - 8, "y": box["height"] / 2})
    expect(page).to_have_url(f"{server.url}/sessions/{denied.pk}/")


def test_a_session_that_finishes_moves_live_from_the_tiles_to_the_finished_rows(
    server, page, login, team, alice
):
    pushed(server, team, status("WORKING", task="t-w", context="moving", text="Compiling"))
    session = Session.objects.get(context_id="moving")
    login(alice)
    page.set_viewport_size(DESK)
    open_screen(page, server)
    tile = page.locator(f'.tiles [data-tile-session="{session.pk}"]')
    expect(tile).to_contain_text("Compiling")
    expect(page.locator("[data-finished]")).to_be_hidden()  # no heading over nothing

    pushed(server, team, status("COMPLETED", task="t-w", context="moving", text="Shipped"))

    row = page.locator(f'.finished-rows [data-tile-session="{session.pk}"]')
    expect(row).to_have_count(1)
    expect(tile).to_have_count(0)
    expect(row.locator("[data-state-words]:visible")).to_have_text("Done")
    expect(page.locator("[data-finished]")).to_be_visible()
    assert height(row) <= ONE_LINE_PX

    # And back to a tile when it works again (a new turn of the conversation).
    pushed(server, team, status("WORKING", task="t-2", context="moving", text="Again"))
    expect(page.locator(f'.tiles [data-tile-session="{session.pk}"]')).to_contain_text("Again")
    expect(row).to_have_count(0)


def test_the_usage_page_draws_its_chart_with_named_axes_and_values(
    server, page, login, team, alice
):
    cost = {profile.TELEMETRY: {"costUsd": 0.3, "tokens": 9147, "steps": 7}}
    pushed(server, team, status("COMPLETED", task="t-c", context="costly", at=1, metadata=cost))
    free = {profile.TELEMETRY: {"costUsd": 0, "tokens": 10}}
    pushed(server, team, status("COMPLETED", task="t-z", context="free", at=1, metadata=free))
    login(alice)
    page.set_viewport_size(DESK)
    page.goto(f"{server.url}/")
    page.get_by_role("link", name="Cost and usage").first.click()
    expect(page).to_have_url(f"{server.url}/usage/")

    chart = page.locator("svg[data-usage-chart]")
    expect(chart).to_be_visible()
    names = chart.locator("[data-usage-axis-name]")
    expect(names).to_have_text(["Cost (USD)", "Day (UTC)"])
    expect(chart.locator('[data-usage-axis="cost"] [data-usage-tick]')).to_have_text(
        ["$0", "$0.15", "$0.30"]
    )
    expect(chart.locator('[data-usage-axis="days"] [data-usage-tick]')).to_have_count(3)
    expect(chart.locator("[data-usage-value]")).to_have_text(["$0.30"])
    expect(page.locator("[data-usage-total]")).to_contain_text("$0.30")
    expect(page.locator("[data-usage-total]")).to_contain_text("9,157 tokens")
    assert "$0.0000" not in page.content()

    page.set_viewport_size(PHONE)
    page.emulate_media(color_scheme="dark")
    box = chart.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], "the chart overflows"
    expect(names.first).to_be_visible()


@pytest.fixture
def axe_context(browser, request):
    """A context bypassing CSP, so axe can be injected (tests only; as test_accessibility)."""
    context = browser.new_context(viewport=DESK, bypass_csp=True)
    request.node.stash[CONTEXT] = context
    yield context
    context.close()


@pytest.mark.slow
def test_the_new_parts_have_no_axe_violations(server, axe_context, team, ops, approvers):
    """The strip, the finished rows, the filters' disclosure and the usage page, in both
    schemes, at a desk and on a phone, with every <details> open too."""
    alice = member("alice", ops, approvers)
    denied_deploy(server, team, alice)
    cost = {profile.TELEMETRY: {"costUsd": 0.3, "tokens": 9147, "steps": 7}}
    pushed(server, team, status("COMPLETED", task="t-c", context="costly", metadata=cost))
    axe_context.add_cookies([session_cookie(alice, server.url)])
    page = axe_context.new_page()
    open_screen(page, server)
    expect(page.locator("[data-decided-item]")).to_have_count(1)
    audit(page, "monitoring screen with finished rows and decisions")
    open_screen(page, server, "/usage/")
    expect(page.locator("svg[data-usage-chart]")).to_be_visible()
    audit(page, "usage page")
