"""Bulk answers and Undo in a real browser (issue 33): x selects rows of the monitoring
screen's list, a/d answer them all after one confirmation; every answer made on the page is
said in a toast (role=status) with Undo while the server holds it; r and n; ? lists the keys.

A server of its own holds answers HOLD seconds (the suite's default sends at once); the agent
on loopback records every message, so "nothing sent" and "sent once" are counted there.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.browser.conftest import caught_up, remember_server
from tests.browser.test_accessibility import violations
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http, session_cookie
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

HOLD = 4  # seconds: ONLOOKER_UNDO_SECONDS of this module's server (a loaded CI core must
# see the toast and look at the agent well within it)
PROMPTS = ["Delete 3 old builds?", "Ship v2 to production?", "Rotate the API keys?"]


@pytest.fixture(scope="module")
def holding_server(django_db_setup) -> Iterator[LiveServer]:
    with LiveServer(environment={"ONLOOKER_UNDO_SECONDS": str(HOLD)}) as live:
        yield live


@pytest.fixture
def server(holding_server: LiveServer, request: pytest.FixtureRequest) -> LiveServer:
    if not holding_server.running:
        holding_server.start()
    remember_server(request, holding_server)
    return holding_server


@pytest.fixture
def stub() -> Iterator[MisbehavingAgent]:
    with MisbehavingAgent() as agent:
        agent.answer(ACCEPTED)
        yield agent


@pytest.fixture
def registered(stub, ops):
    """The team's agent, answering on the stub."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


def asking(n: int, prompt: str, *, at: int, text: str | None = None) -> dict:
    return status(
        "AUTH_REQUIRED",
        task=f"task-{n}",
        context=f"ctx-{n}",
        at=at,
        text=text,
        metadata=approval(f"i-{n}", prompt),
    )


@pytest.fixture
def waiting(server, registered) -> list[Interaction]:
    """Three approvals waiting, one per session, oldest first."""
    for n, prompt in enumerate(PROMPTS, start=1):
        assert push_http(server, registered, asking(n, prompt, at=n)).status_code == 200
    return list(Interaction.objects.order_by("opened_at", "id"))


def open_as(browser: Browser, user: User, server: LiveServer, path: str) -> Page:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_cookies([session_cookie(user, server.url)])
    page = context.new_page()
    page.goto(server.url + path)
    expect(page.locator("[data-live-status]")).to_have_text("live")
    caught_up(page)
    return page


def decisions(stub: MisbehavingAgent) -> list[tuple[str, bool]]:
    """(interaction id, approved) of every answer the agent received."""
    typed = [
        params["message"]["metadata"][profile.INTERACTIONS] for params in stub.calls("SendMessage")
    ]
    return [(one["interactionId"], one["approved"]) for one in typed]


def settle(stub: MisbehavingAgent, count: int) -> None:
    """Wait until the agent has `count` answers (the hold and the server's loop), then a
    little longer, so a second send would be seen."""
    deadline = time.monotonic() + HOLD + 10
    while len(decisions(stub)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)


def row(page: Page, interaction: Interaction):
    return page.locator(f'[data-waiting] [data-inbox-row][data-interaction="{interaction.pk}"]')


def test_x_x_a_enter_approves_exactly_the_two_selected_after_one_confirmation(
    browser, server, stub, registered, waiting, ops, approvers
):
    page = open_as(browser, member("alice", ops, approvers), server, "/")
    try:
        expect(page.locator("[data-waiting] [data-inbox-row]")).to_have_count(3)
        # ? lists the keys, x and r and n among them.
        page.keyboard.press("?")
        help_ = page.locator("[data-keys-help]")
        expect(help_).to_be_visible()
        for key in ("x", "r", "n"):
            expect(help_.locator("dt kbd", has_text=key).first).to_be_visible()
        page.keyboard.press("Escape")
        expect(help_).to_be_hidden()

        page.keyboard.press("j")
        page.keyboard.press("x")
        page.keyboard.press("j")
        page.keyboard.press("x")
        for interaction in waiting[:2]:
            box = row(page, interaction).get_by_role("checkbox")
            expect(box).to_be_checked()
            expect(row(page, interaction)).to_have_class(re.compile(r"\bis-selected\b"))
        expect(row(page, waiting[2]).get_by_role("checkbox")).to_have_count(0)
        # A live refresh of the list (the third session changed) keeps what was selected.
        replace_the_list(page, server, registered)
        for interaction in waiting[:2]:
            expect(row(page, interaction).get_by_role("checkbox")).to_be_checked()

        # d, then Escape: cancelled, nothing sent, still selected.
        page.keyboard.press("d")
        dialog = page.locator("[data-bulk-confirm]")
        expect(dialog).to_be_visible()
        expect(dialog.get_by_role("heading")).to_have_text("Deny 2 items?")
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()

        page.keyboard.press("a")
        expect(dialog).to_be_visible()
        expect(dialog.get_by_role("heading")).to_have_text("Approve 2 items?")
        expect(dialog.locator("[data-bulk-list] li")).to_have_text(
            [f"Approval: {prompt}" for prompt in PROMPTS[:2]]
        )
        page.emulate_media(color_scheme="dark")
        assert violations(page, "the bulk confirmation, dark") == []
        page.emulate_media(color_scheme="light")
        page.keyboard.press("Enter")
        expect(dialog).to_be_hidden()

        toast = page.get_by_role("status").filter(has_text="Approved 2:")
        expect(toast).to_have_text(f"Approved 2: {PROMPTS[0]}; {PROMPTS[1]}Undo")
        assert decisions(stub) == []  # held: nothing has gone yet
        expect(toast.get_by_role("button", name="Undo")).to_be_visible()
        expect(row(page, waiting[0])).to_have_count(0)
        expect(row(page, waiting[1])).to_have_count(0)
        assert violations(page, "the toast, two rows selected before") == []

        settle(stub, 2)
        assert sorted(decisions(stub)) == [("i-1", True), ("i-2", True)]
        expect(row(page, waiting[2])).to_have_count(1)
        assert Interaction.objects.get(pk=waiting[2].pk).state == Interaction.State.OPEN
    finally:
        page.context.close()


def replace_the_list(page: Page, server: LiveServer, registered) -> None:
    """A push about the third session, and the wait until the page has refreshed its list."""
    page.evaluate("window.__replaced = 0")
    page.evaluate(
        "document.addEventListener('onlooker:waiting-replaced', () => window.__replaced++)"
    )
    push_http(server, registered, asking(3, PROMPTS[2], at=10, text="Still waiting"))
    deadline = time.monotonic() + 10
    while not page.evaluate("window.__replaced") and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # the page's CSP refuses wait_for_function's eval
    assert page.evaluate("window.__replaced"), "the list was not refreshed"


@pytest.mark.slow  # the README run's time budget: the page's keys, the same on either stack
def test_the_keys_stay_on_their_row_when_a_live_refresh_replaces_it(
    browser, server, registered, waiting, ops, approvers
):
    page = open_as(browser, member("alice", ops, approvers), server, "/")
    try:
        expect(page.locator("[data-waiting] [data-inbox-row]")).to_have_count(3)
        page.keyboard.press("j")
        expect(row(page, waiting[0])).to_have_class(re.compile(r"\bis-key-focus\b"))
        replace_the_list(page, server, registered)
        expect(row(page, waiting[0])).to_have_class(re.compile(r"\bis-key-focus\b"))
        page.keyboard.press("x")
        expect(row(page, waiting[0]).get_by_role("checkbox")).to_be_checked()
        page.keyboard.press("j")
        page.keyboard.press("x")
        expect(row(page, waiting[1]).get_by_role("checkbox")).to_be_checked()
    finally:
        page.context.close()


def test_undo_sends_nothing_and_a_closed_tab_still_sends_once_and_r_and_n(
    browser, server, stub, waiting, ops, approvers
):
    alice = member("alice", ops, approvers)
    sessions = [Session.objects.get(context_id=f"ctx-{n}") for n in (1, 2, 3)]
    page = open_as(browser, alice, server, f"/sessions/{sessions[0].pk}/")
    try:
        # r goes to the reason box; n to the next session waiting for a person.
        page.keyboard.press("r")
        expect(page.locator("[data-interaction] textarea[name=reason]").first).to_be_focused()
        page.keyboard.press("Escape")
        page.keyboard.press("n")
        page.wait_for_url(f"**/sessions/{sessions[1].pk}/")

        # On a session page: the toast, and Undo brings the buttons back (live).
        expect(page.locator("[data-live-status]")).to_have_text("live")
        caught_up(page)
        page.locator('[data-answer-form] button[value="approve"]').first.click()
        toast = page.get_by_role("status").filter(has_text=f"Approved: {PROMPTS[1]}")
        toast.get_by_role("button", name="Undo").click()
        expect(
            page.get_by_role("status").filter(has_text="Undone, nothing was sent")
        ).to_be_visible()
        expect(page.locator('[data-answer-form] button[value="approve"]').first).to_be_visible()

        page.goto(server.url + "/")
        expect(page.locator("[data-live-status]")).to_have_text("live")
        caught_up(page)
        row(page, waiting[0]).get_by_role("button", name="Approve").click()
        toast = page.get_by_role("status").filter(has_text=f"Approved: {PROMPTS[0]}")
        expect(toast).to_be_visible()
        toast.get_by_role("button", name="Undo").click()
        expect(
            page.get_by_role("status").filter(has_text="Undone, nothing was sent")
        ).to_be_visible()
        # The row comes back, open, for anyone to answer.
        expect(row(page, waiting[0]).get_by_role("button", name="Approve")).to_be_visible()

        # Answer another, and close the tab at once: the server sends it after the hold.
        row(page, waiting[1]).get_by_role("button", name="Deny").click()
        expect(page.get_by_role("status").filter(has_text=f"Denied: {PROMPTS[1]}")).to_be_visible()
    finally:
        page.context.close()
    settle(stub, 1)
    assert decisions(stub) == [("i-2", False)]  # once, and nothing of the undone one
    assert Interaction.objects.get(pk=waiting[0].pk).state == Interaction.State.OPEN
    assert Interaction.objects.get(pk=waiting[1].pk).state == Interaction.State.ANSWERED
