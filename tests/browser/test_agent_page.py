"""The agent page in a real browser, with a real a2a-sdk agent on loopback: the agent's name
on a session leads there; "Refresh from the agent" pulls what its lost pushes said, "Follow
this task" makes its later pushes reach Onlooker; a viewer sees neither button."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tasks.answering import agents
from tasks.models import Task
from tests.answering.test_a2a_peer import wait_for
from tests.browser.test_answering import open_as
from tests.conftest import member
from tests.web.test_agent_page import CardAgent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sdk_agent() -> Iterator[CardAgent]:
    agent = CardAgent()
    yield agent
    agent.stop()


@pytest.mark.slow  # the default run keeps its time budget; CI runs it with -m slow
def test_refresh_and_follow_from_the_agent_page(browser, server, sdk_agent, ops, approvers):
    agent = agents.register(sdk_agent.card_url).agent
    agent.team = ops
    agent.save(update_fields=["team"])
    lost = sdk_agent.start_task()  # its pushes never reach Onlooker
    page = open_as(browser, member("alice", ops, approvers), server, f"/agents/{agent.pk}/")

    expect(page.locator("[data-agent-name]")).to_have_text("Approval peer")
    expect(page.locator("[data-agent-description]")).to_contain_text("Drafts release notes")
    expect(page.locator("[data-agent-sessions]")).to_have_count(0)
    sdk_agent.card = {"description": "Now also writes changelogs"}

    page.get_by_role("button", name="Refresh from the agent").click()

    expect(page.locator(".flash")).to_contain_text(
        "Refreshed: card re-read, 1 task listed, 1 fetched, 1 applied"
    )
    expect(page.locator("[data-agent-description]")).to_have_text("Now also writes changelogs")
    expect(page.locator("[data-agent-sessions] li")).to_have_count(1)

    # A second task, followed by its id: what the agent does next reaches Onlooker by push.
    followed = sdk_agent.start_task()
    page.get_by_label("Task id").fill(followed["id"])
    page.get_by_role("button", name="Follow this task").click()

    expect(page.locator(".flash")).to_contain_text(f"Following task “{followed['id']}”: fetched")
    expect(page.locator("[data-agent-followed]")).to_contain_text(followed["id"])
    sdk_agent.approve(followed)
    wait_for(
        lambda: Task.objects.filter(task_id=followed["id"], state="TASK_STATE_COMPLETED").exists(),
        "the followed task's push to be applied",
    )
    session = Task.objects.get(task_id=followed["id"]).session
    page.goto(f"{server.url}/sessions/{session.pk}/")
    expect(page.locator("[data-session-state]")).to_have_text("Done")

    # Its name on the session leads back to the agent's page.
    page.locator("[data-agent-link]").click()
    expect(page).to_have_url(f"{server.url}/agents/{agent.pk}/")
    assert Task.objects.get(task_id=lost["id"]).state == "TASK_STATE_AUTH_REQUIRED"


def test_a_viewer_sees_the_agent_but_no_buttons(browser, server, sdk_agent, ops):
    agent = agents.register(sdk_agent.card_url).agent
    agent.team = ops
    agent.save(update_fields=["team"])
    page = open_as(browser, member("bob", ops), server, f"/agents/{agent.pk}/")

    expect(page.locator("[data-agent-skills]")).to_contain_text("Publish release notes")
    expect(page.get_by_role("button", name="Refresh from the agent")).to_have_count(0)
    expect(page.get_by_role("button", name="Follow this task")).to_have_count(0)
