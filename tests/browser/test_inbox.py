"""The monitoring screen as an inbox (issue 12), in a real browser: what waits for a person is
one list on top, one row per interaction with its answer actions; a waiting session is not a
tile as well, and moves between the list and the tiles live; the filters apply to the list and
the counts."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.browser.test_answering import open_as, sent_messages, waiting_session
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import push_http
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slow_agent():
    """An agent that takes a second to confirm, so "Sending…" can be seen."""
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED, delay=1.0)
        yield stub


def row_of(page, session: int):
    return page.locator(f'[data-inbox-row][data-waiting-session="{session}"]')


def tile_of(page, session: int):
    return page.locator(f'[data-tile-session="{session}"]')


def test_approving_from_a_row_shows_sending_then_the_row_leaves_and_the_tile_is_shown_once(
    browser, server, slow_agent, ops, approvers
):
    session = waiting_session(server, slow_agent, ops)
    page = open_as(browser, member("alice", ops, approvers), server, "/")
    try:
        row = row_of(page, session)
        expect(row).to_contain_text("Ship v2 to production?")
        expect(row).to_have_attribute("data-interaction", str(Interaction.objects.get().pk))
        expect(tile_of(page, session)).to_have_count(0)  # not shown twice
        expect(page.locator('[data-count="waiting"]')).to_have_text("1")

        row.locator('button[value="approve"]').click()  # the page's own button and script
        expect(row.locator("[data-answer-sending]")).to_have_text("Sending…")
        expect(row.locator('button[value="deny"]')).to_be_disabled()

        expect(row).to_have_count(0, timeout=10_000)
        expect(page.locator("[data-live-announce]")).to_contain_text("Approved by alice")
        expect(page.locator('[data-count="waiting"]')).to_have_text("0")
        expect(tile_of(page, session)).to_have_count(1)
        [message] = sent_messages(slow_agent)
        assert message["metadata"][profile.INTERACTIONS]["approved"] is True
    finally:
        page.context.close()


def test_an_answer_the_agent_did_not_confirm_stays_in_the_list_with_its_retry(
    browser, server, slow_agent, ops, approvers
):
    session = waiting_session(server, slow_agent, ops)
    slow_agent.hang_up(after=0.5)  # took the request, never replied
    page = open_as(browser, member("alice", ops, approvers), server, "/")
    try:
        row = row_of(page, session)
        row.locator('button[value="approve"]').click()
        expect(row.locator("[data-answer-sending]")).to_be_visible()
        expect(row.locator("button")).to_have_text(["Retry sending Approve"], timeout=10_000)
        expect(row).to_contain_text("the agent has not confirmed yet")
        expect(row.locator("[data-answer-sending]")).to_be_hidden()

        slow_agent.answer(ACCEPTED)
        row.locator("button").click()
        expect(row).to_have_count(0, timeout=10_000)
        first, second = sent_messages(slow_agent)
        assert first["messageId"] == second["messageId"]
    finally:
        page.context.close()


def test_a_viewer_who_may_not_answer_sees_needs_an_approver_and_no_buttons(
    browser, server, slow_agent, ops
):
    session = waiting_session(server, slow_agent, ops)
    page = open_as(browser, member("viewer", ops), server, "/")
    try:
        row = row_of(page, session)
        expect(row).to_contain_text("Ship v2 to production?")
        expect(row).to_contain_text("Needs an approver")
        expect(row.locator("button")).to_have_count(0)
    finally:
        page.context.close()


def test_a_session_moves_between_the_tiles_and_the_list_live(browser, server, ops, approvers):
    registered = make_agent(team=ops)
    assert push_http(server, registered, status("WORKING", at=1)).status_code == 200
    session = Session.objects.get().pk
    page = open_as(browser, member("alice", ops, approvers), server, "/")
    try:
        expect(tile_of(page, session)).to_have_count(1)
        expect(row_of(page, session)).to_have_count(0)

        ask = approval("i-1", "Ship v2 to production?")
        push_http(server, registered, status("AUTH_REQUIRED", at=2, metadata=ask))
        expect(row_of(page, session)).to_contain_text("Ship v2 to production?")
        expect(tile_of(page, session)).to_have_count(0)

        # The agent moves on (the question closes): the row goes, the tile comes back.
        push_http(server, registered, status("WORKING", at=3, text="Deploying"))
        expect(row_of(page, session)).to_have_count(0)
        expect(tile_of(page, session)).to_have_count(1)
        expect(tile_of(page, session)).to_contain_text("Deploying")
    finally:
        page.context.close()


def test_filters_apply_to_the_list_and_the_counts_live(browser, server, ops, approvers):
    first, second = make_agent(team=ops, name="First"), make_agent(team=ops, name="Second")
    assert push_http(server, second, status("WORKING", at=1, context="s0")).status_code == 200
    path = f"/?agent={first.agent.pk}"
    page = open_as(browser, member("alice", ops, approvers), server, path)
    try:
        expect(page.locator(".tiles-empty")).to_contain_text("No sessions match these filters")
        ask = approval("i-2", "Deploy the second?")
        push_http(server, second, status("AUTH_REQUIRED", at=1, context="s", metadata=ask))
        ask = approval("i-1", "Deploy the first?")
        push_http(server, first, status("AUTH_REQUIRED", at=1, context="f", metadata=ask))

        rows = page.locator("[data-inbox-row]")
        expect(rows).to_have_count(1)
        expect(rows).to_contain_text("Deploy the first?")
        expect(page.locator('[data-count="waiting"]')).to_have_text("1")
        expect(page.locator(".tiles-empty")).to_have_count(0)
        expect(page.locator("[data-waiting]")).not_to_contain_text("Deploy the second?")
    finally:
        page.context.close()


@pytest.mark.slow
def test_an_empty_filter_says_so_and_clearing_it_shows_everything(browser, server, ops):
    registered = make_agent(team=ops)
    assert push_http(server, registered, status("WORKING", at=1)).status_code == 200
    page = open_as(browser, member("viewer", ops), server, "/?state=TASK_STATE_FAILED")
    try:
        empty = page.locator(".tiles-empty")
        expect(empty).to_contain_text("No sessions match these filters")
        expect(empty).not_to_contain_text("Register an agent")
        empty.get_by_role("link", name="Clear filters").click()
        expect(page.locator("[data-tile-session]")).to_have_count(1)
        expect(page.locator(".tiles-empty")).to_have_count(0)
    finally:
        page.context.close()


def test_a_question_answered_in_its_row_with_a_reason_reaches_the_agent_as_typed(
    browser, server, ops, approvers
):
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED)
        registered = make_agent(team=ops)
        registered.agent.rpc_url = stub.rpc_url
        registered.agent.extensions = list(profile.EXTENSIONS)
        registered.agent.save()
        region = approval("q-1", "Which region?", kind="question")
        assert push_http(server, registered, status("INPUT_REQUIRED", at=1, metadata=region))
        session = Interaction.objects.get().task.session_id
        page = open_as(browser, member("alice", ops, approvers), server, "/")
        try:
            row = row_of(page, session)
            row.locator("textarea[name=value]").fill("eu-west")
            row.locator("summary", has_text="Reason").click()  # the disclosure in the row
            row.locator("textarea[name=reason]").fill("Data must stay in the EU.")
            row.locator("button", has_text="Send").click()

            expect(row).to_have_count(0, timeout=10_000)
            [message] = sent_messages(stub)
            assert message["metadata"][profile.INTERACTIONS] == {
                "interactionId": "q-1",
                "value": "eu-west",
            }
            assert message["parts"] == [{"text": "eu-west"}, {"text": "Data must stay in the EU."}]
        finally:
            page.context.close()
