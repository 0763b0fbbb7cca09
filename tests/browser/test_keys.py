"""The keyboard, in a real browser: j/k walk what waits for a person and then the sessions, a/d
answer the item they reached through the page's own form (the agent receives the decision),
Enter opens, / searches, ? lists the keys; nothing fires while a person types; key hints go
on touch screens; a skip link leads to the content."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, Page, expect

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.browser.test_answering import sent_messages
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, make_agent, member
from tests.live_server import LiveServer, push_http, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

# What j/k reached: the focused element's item, named as the page names it.
NAME = """(item) => item.dataset.interaction
    ? "waiting:" + item.dataset.interaction
    : "session:" + (item.dataset.tileSession ?? item.dataset.sidebarSession)"""
ITEMS = "[data-interaction], [data-tile-session], [data-sidebar-session]"
FOCUSED = f"""() => {{
    const item = document.activeElement?.closest('{ITEMS}');
    return item ? ({NAME})(item) : null;
}}"""
IN_PAGE_ORDER = f"selector => [...document.querySelectorAll(selector)].map({NAME})"
SHIP = approval("i-1", "Ship v2 to production?")


@pytest.fixture
def team(server: LiveServer, agent_stub, ops) -> RegisteredAgent:
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


def send(server: LiveServer, registered: RegisteredAgent, *bodies: dict) -> None:
    for body in bodies:
        assert push_http(server, registered, body).status_code == 200


@pytest.fixture
def waiting_and_working(server, team) -> dict[str, Session]:
    """An approval (ctx-1) and a question (ctx-2) waiting, and a session at work (ctx-3)."""
    region = approval("q-1", "Which region?", kind="question")
    send(
        server,
        team,
        status("AUTH_REQUIRED", at=1, metadata=SHIP),
        status("INPUT_REQUIRED", context="ctx-2", task="task-2", at=2, metadata=region),
        status("WORKING", context="ctx-3", task="task-3", at=3, text="Building"),
    )
    return {s.context_id: s for s in Session.objects.all()}


@pytest.fixture
def approver(ops, approvers):
    return member("alice", ops, approvers)


@pytest.fixture
def open_page(page: Page, login, open_live, approver) -> Callable[[str], Page]:
    def go(path: str) -> Page:
        login(approver)
        open_live(path)
        return page

    return go


def focused(page: Page) -> str | None:
    return page.evaluate(FOCUSED)


def walk(page: Page, key: str, times: int) -> list[str | None]:
    reached = []
    for _ in range(times):
        page.keyboard.press(key)
        reached.append(focused(page))
    return reached


def test_the_keys_on_the_monitoring_screen_walk_list_and_open_its_items(
    open_page, server, waiting_and_working
):
    """One page load for three behaviours of the keys there: j/k walk the waiting items then
    the tiles in page order, ? lists the keys and gives the focus back, Enter opens the
    session of the focused item."""
    page = open_page("/")
    expect(page.locator("[data-waiting] [data-interaction]")).to_have_count(2)
    expect(page.locator("[data-tile-session]")).to_have_count(1)  # waiting ones are rows
    waiting = page.evaluate(IN_PAGE_ORDER, "[data-waiting] [data-interaction]")
    tiles = page.evaluate(IN_PAGE_ORDER, "[data-tiles] [data-tile-session]")
    order = waiting + tiles

    assert walk(page, "j", len(order)) == order, "j does not walk the items in page order"
    # The item reached is marked, and scrolled to.
    last = page.locator(f'[data-tile-session="{tiles[-1].split(":")[1]}"]')
    expect(last).to_have_class(re.compile(r"\bis-key-focus\b"))
    expect(last).to_be_in_viewport()
    assert walk(page, "j", 1) == [order[-1]], "j does not stop at the last item"
    assert walk(page, "k", len(order) - 1) == order[-2::-1], "k does not walk back in order"
    assert walk(page, "k", 1) == [order[0]], "k does not stop at the first item"
    expect(page.locator(".is-key-focus")).to_have_count(1)

    # ? lists the keys; Esc or Close gives the focus back to the item it was on.
    help_ = page.locator("[data-keys-help]")
    item = focused(page)
    page.keyboard.press("?")
    expect(help_).to_be_visible()
    expect(help_.get_by_role("heading")).to_have_text("Keyboard shortcuts")
    for key in ("j", "k", "a", "d", "Enter", "/", "?", "Esc"):
        expect(help_.locator("kbd", has_text=key).first).to_be_visible()
    page.keyboard.press("j")  # behind the dialog nothing moves
    page.keyboard.press("Escape")
    expect(help_).to_be_hidden()
    assert focused(page) == item, "Esc on the keys dialog did not give the focus back"
    expect(page.locator(".is-key-focus")).to_have_count(1)  # still marked

    page.keyboard.press("?")
    help_.get_by_role("button", name="Close").click()
    expect(help_).to_be_hidden()
    assert focused(page) == item, "Close on the keys dialog did not give the focus back"

    # Enter opens the session of the focused waiting item, and of the focused tile.
    first = Interaction.objects.get(pk=waiting[0].split(":")[1])
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}/sessions/{first.task.session_id}/")

    open_page("/")
    walk(page, "j", len(waiting) + 1)
    assert focused(page) == tiles[0]
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}/sessions/{tiles[0].split(':')[1]}/")


@pytest.mark.slow
def test_on_a_session_page_j_goes_from_its_waiting_item_to_the_sidebar_sessions(
    open_page, waiting_and_working
):
    session = waiting_and_working["ctx-1"]
    page = open_page(f"/sessions/{session.pk}/")
    rows = page.evaluate(IN_PAGE_ORDER, "[data-sidebar-session]")
    assert len(rows) == 3
    interaction = Interaction.objects.get(interaction_id="i-1")
    assert walk(page, "j", 4) == [f"waiting:{interaction.pk}", *rows]


def test_modified_keys_and_keys_typed_in_a_field_do_nothing(
    open_page, waiting_and_working, agent_stub
):
    page = open_page(f"/sessions/{waiting_and_working['ctx-2'].pk}/")  # the question
    page.keyboard.press("Control+j")
    page.keyboard.press("Alt+j")
    assert focused(page) is None

    fields = {
        "composer": page.locator("#composer-text"),
        "answer": page.locator('[data-interaction] textarea[name="value"]'),
        "reason": page.locator('[data-interaction] textarea[name="reason"]'),
    }
    for field in fields.values():
        field.click()
        page.keyboard.type("jkad/?")
        expect(field).to_have_value("jkad/?")
        expect(field).to_be_focused()
    expect(page.locator("[data-keys-help]")).to_be_hidden()
    assert sent_messages(agent_stub) == []
    assert Interaction.objects.get(interaction_id="q-1").state == Interaction.State.OPEN
    # Esc leaves the field; then the keys work again.
    page.keyboard.press("Escape")
    expect(fields["reason"]).not_to_be_focused()
    page.keyboard.press("j")
    assert focused(page) == f"waiting:{Interaction.objects.get(interaction_id='q-1').pk}"


def answer_with(page: Page, key: str, stub) -> dict:
    page.keyboard.press("j")
    assert (focused(page) or "").startswith("waiting:")
    page.keyboard.press(key)
    expect(page.locator("[data-waiting]")).not_to_contain_text("Ship v2 to production?")
    [message] = sent_messages(stub)
    return message["metadata"][profile.INTERACTIONS]


def test_a_on_the_focused_approval_approves_it_and_the_agent_receives_it(
    open_page, server, team, agent_stub
):
    send(server, team, status("AUTH_REQUIRED", at=1, metadata=SHIP))
    page = open_page("/")
    assert answer_with(page, "a", agent_stub)["approved"] is True
    assert Interaction.objects.get().answered_by.username == "alice"


def test_d_on_the_focused_approval_denies_it(open_page, server, team, agent_stub):
    send(server, team, status("AUTH_REQUIRED", at=1, metadata=SHIP))
    page = open_page("/")
    assert answer_with(page, "d", agent_stub)["approved"] is False


def test_after_an_answered_item_leaves_the_list_the_next_one_has_the_focus(
    open_page, server, team, agent_stub
):
    for n in (1, 2, 3):
        asks = approval(f"i-{n}", f"Ship part {n}?")
        where = {"context": f"ctx-{n}", "task": f"task-{n}"}
        send(server, team, status("AUTH_REQUIRED", at=n, metadata=asks, **where))
    page = open_page("/")
    waiting = page.locator("[data-waiting] [data-interaction]")
    expect(waiting).to_have_count(3)
    first, second, third = page.evaluate(IN_PAGE_ORDER, "[data-waiting] [data-interaction]")

    assert walk(page, "j", 2) == [first, second]
    page.keyboard.press("a")
    expect(waiting).to_have_count(2)  # answered, and gone from the list
    assert focused(page) == third  # ready for the next a or d
    assert walk(page, "k", 1) == [first]
    assert len(sent_messages(agent_stub)) == 1


@pytest.mark.slow
def test_a_asks_the_buttons_confirmation_first_and_a_no_sends_nothing(
    open_page, server, team, agent_stub
):
    send(server, team, status("AUTH_REQUIRED", at=1, metadata=SHIP))
    page = open_page("/")
    page.locator('[data-shortcut="a"]').evaluate("b => b.dataset.confirm = 'Really ship?'")
    asked = []

    def say_no(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", say_no)
    page.keyboard.press("j")
    page.keyboard.press("a")
    assert asked == ["Really ship?"]
    expect(page.locator('[data-waiting] button[value="approve"]')).to_be_enabled()
    assert sent_messages(agent_stub) == []

    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("a")
    expect(page.locator("[data-waiting]")).not_to_contain_text("Ship v2 to production?")
    [message] = sent_messages(agent_stub)
    assert message["metadata"][profile.INTERACTIONS]["approved"] is True


@pytest.mark.slow
def test_slash_goes_to_the_search_box_where_there_is_one(open_page, waiting_and_working):
    page = open_page(f"/sessions/{waiting_and_working['ctx-3'].pk}/")
    page.keyboard.press("/")  # no search box on a session page: nothing happens
    assert page.evaluate("document.activeElement === document.body")
    open_page("/")  # the monitoring screen's search box (marked data-search)
    page.keyboard.press("/")
    search = page.get_by_role("searchbox", name="Search sessions")
    expect(search).to_be_focused()
    expect(search).to_have_value("")  # the "/" itself is not typed


@pytest.mark.slow
def test_the_skip_link_is_first_and_leads_to_the_content(open_page, waiting_and_working):
    page = open_page("/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()
    page.keyboard.press("Tab")
    assert page.evaluate("document.querySelector('main').contains(document.activeElement)")


def hints(page: Page):
    return page.locator("[data-interaction] kbd, [data-interaction] .shortcut-hint")


def test_key_hints_show_with_a_keyboard_and_hide_on_a_touch_screen(
    browser: Browser, server, waiting_and_working, approver
):
    for touch, shown in ((False, True), (True, False)):
        context = browser.new_context(
            viewport={"width": 390, "height": 844}, has_touch=touch, is_mobile=touch
        )
        try:
            context.add_cookies([session_cookie(approver, server.url)])
            page = context.new_page()
            page.goto(f"{server.url}/sessions/{waiting_and_working['ctx-1'].pk}/")
            expect(hints(page)).not_to_have_count(0)
            for hint in hints(page).all():
                if shown:
                    expect(hint).to_be_visible()
                else:
                    expect(hint).to_be_hidden()
            # The buttons themselves stay, with their words.
            expect(page.get_by_role("button", name="Approve")).to_be_visible()
        finally:
            context.close()
