"""Searching from the monitoring screen in a real browser: a person types in the search box,
submits, sees the best matches with the words marked, and follows "Older" to the last page;
the live page's refetch leaves the results where they are."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from playwright.sync_api import expect

from tasks.models import Message, Session, TaskState
from tasks.sessions import board
from tests.browser.conftest import caught_up
from tests.conftest import NOW, make_agent, push

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def matches(ops):
    """One session titled by a person's request (with markup in it), and more that say the
    word in their transcript than one page shows, stored as a restored database holds them."""
    team = make_agent(team=ops, name="Ops agent")
    user = {
        "messageId": "u-1",
        "role": "ROLE_USER",
        "parts": [{"text": "<b>Rotate</b> the gateway keys"}],
    }
    body = {
        "id": "t-1",
        "contextId": "titled",
        "status": {"state": "TASK_STATE_WORKING"},
        "history": [user],
    }
    assert push(Client(), team, {"task": body}).status_code == 200
    stored = Session.objects.bulk_create(
        Session(
            agent=team.agent,
            context_id=f"s-{i}",
            state=TaskState.COMPLETED,
            updated_at=NOW - timedelta(minutes=i),
        )
        for i in range(board.SEARCH_PAGE + 5)
    )
    Message.objects.bulk_create(
        Message(session=s, role="ROLE_AGENT", text=f"line {i}: the gateway answered", at=NOW)
        for i, s in enumerate(stored)
    )
    return Session.objects.count()


def test_a_person_searches_sees_the_words_marked_and_reaches_the_last_page(
    page, login, open_live, alice, matches
):
    login(alice)
    open_live("/")
    box = page.get_by_role("searchbox", name="Search sessions")
    box.fill("gateway")
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]q=gateway"))
    caught_up(page)  # connected and refetched: the results are still what was found

    results = page.locator("[data-result-session]")
    expect(results).to_have_count(board.SEARCH_PAGE)
    expect(page.get_by_role("heading", name=f"{matches} sessions match “gateway”")).to_be_visible()
    first = results.first
    expect(first.get_by_role("link")).to_have_text("<b>Rotate</b> the gateway keys")  # as text
    expect(first.locator("mark")).to_have_text("gateway")
    expect(page.locator(".result-snippet b")).to_have_count(0)
    expect(results.nth(1).locator("mark")).to_have_text("gateway")
    expect(page.locator("[data-tile-session]")).to_have_count(0)

    # A refetch (the tab shown again) brings counts and sidebar, never the tiles, here.
    synced = page.evaluate("document.documentElement.dataset.synced")
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    expect(page.locator(f'html:not([data-synced="{synced}"])')).to_be_attached()
    expect(results).to_have_count(board.SEARCH_PAGE)

    page.get_by_role("link", name="Older").click()
    expect(results).to_have_count(matches - board.SEARCH_PAGE)
    expect(page.get_by_role("link", name="Older")).to_have_count(0)
    expect(page.get_by_role("searchbox", name="Search sessions")).to_have_value("gateway")
    expect(results.first.locator("mark")).to_have_text("gateway")
    page.get_by_role("link", name="Newest").click()
    expect(results).to_have_count(board.SEARCH_PAGE)
