"""The session page's timeline in a real browser (issue 15): a bar per task coloured by
state with each state said on hover, the list beside it, both updated live when the agent
pushes, and a link to the task's raw deliveries."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_session_page import send
from tests.builders import status
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_timeline_shows_each_tasks_states_and_follows_a_push_live(
    server, page, login, open_live, alice, ops
):
    registered = make_agent(team=ops)
    session = send(server, registered, status("WORKING", at=1, text="Reading the logs"))
    login(alice)
    open_live(f"/sessions/{session.pk}/")

    bar = page.locator("[data-timeline-task='task-1'] svg.timeline-bar")
    expect(bar.locator("rect")).to_have_count(1)
    expect(bar.locator("rect title")).to_have_text(
        re.compile(r"^Working from \d\d:\d\d:\d\d, still going on$")
    )
    rows = page.locator("[data-timeline-list] tbody tr[data-timeline-entry='state']")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Working")
    expect(rows.first).to_contain_text("still going on")
    fill = bar.locator("rect").evaluate("rect => getComputedStyle(rect).fill")
    assert fill not in ("", "none", "rgb(0, 0, 0)")  # coloured by the state's tone

    # The agent goes on, and starts a second task: both bars and the list follow, live.
    send(server, registered, status("COMPLETED", at=5))
    send(server, registered, status("WORKING", task="task-2", at=6))
    expect(bar.locator("rect")).to_have_count(2)
    expect(bar.locator("rect.tl-ok")).to_have_count(1)
    expect(page.locator("[data-timeline-task='task-2'] rect.tl-info")).to_have_count(1)
    expect(rows).to_have_count(3)
    expect(rows.nth(1)).to_contain_text("Done")

    page.locator("[data-timeline-fold] > summary").click()
    page.locator("[data-timeline-task='task-1'] [data-deliveries-link]").click()
    expect(page.get_by_role("heading", name="Deliveries of task task-1")).to_be_visible()
    expect(page.locator("[data-delivery]")).to_have_count(2)
    expect(page.locator("[data-delivery-body]").first).to_contain_text('"TASK_STATE_COMPLETED"')
