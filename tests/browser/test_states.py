"""What a person sees of a session's state in a real browser: a tile with a long plan and a
long note stays bounded and offers "More", and the pills carry their words."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.wire import profile
from tests.browser.test_live_views import send
from tests.builders import status
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_tile_with_a_long_plan_and_note_stays_bounded_and_offers_more(
    server, page, login, open_live, alice, ops
):
    agent = make_agent(team=ops)
    steps = [{"label": f"Step number {n}", "state": "pending"} for n in range(1, 301)]
    steps[0]["state"] = "in_progress"
    note = "\n\n".join(f"Paragraph {n}: " + "words " * 60 for n in range(40))
    plan = {profile.PROGRESS: {"steps": steps}}
    session = send(server, agent, status("WORKING", at=1, text=note, metadata=plan))
    short = send(server, agent, status("WORKING", at=1, context="short", task="t2", text="Hi"))
    login(alice)
    open_live("/")

    tile = page.locator(f'section[data-tile-session="{session.pk}"]')
    expect(tile.locator(".pill")).to_have_text("Working")
    rem = page.evaluate("parseFloat(getComputedStyle(document.documentElement).fontSize)")
    height = tile.bounding_box()["height"]
    assert height < 40 * rem, f"tile is {height / rem:.1f}rem high"
    more = tile.locator("[data-tile-more]")
    expect(more).to_be_visible()
    more.click()
    expect(page).to_have_url(f"{server.url}/sessions/{session.pk}/")
    # A short tile is not stretched to the bound.
    page.go_back()
    small = page.locator(f'section[data-tile-session="{short.pk}"] .tile-body')
    assert small.bounding_box()["height"] < 10 * rem
