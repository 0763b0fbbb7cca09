"""Answering in a real browser: two approvers on one session page, a keyboard-only approver,
and an agent on loopback that counts what it receives."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import Browser, Page, expect

from tasks.models import Interaction
from tasks.wire import profile
from tests.browser.conftest import caught_up
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http, session_cookie
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_stub():
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED, delay=0.2)
        yield stub


def waiting_session(server: LiveServer, stub: MisbehavingAgent, ops: Group) -> int:
    registered = make_agent(team=ops)
    registered.agent.rpc_url = stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2 to production?"))
    assert push_http(server, registered, body).status_code == 200
    return Interaction.objects.get().task.session_id


def sent_messages(stub: MisbehavingAgent) -> list[dict]:
    return [params["message"] for params in stub.calls("SendMessage")]


def open_as(browser: Browser, user: User, server: LiveServer, path: str) -> Page:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_cookies([session_cookie(user, server.url)])
    page = context.new_page()
    page.goto(server.url + path)
    expect(page.locator("[data-live-status]")).to_have_text("live")
    caught_up(page)
    return page


def test_two_approvers_clicking_at_once_send_one_answer_and_both_see_who_answered(
    browser, server, agent_stub, ops, approvers
):
    session = waiting_session(server, agent_stub, ops)
    path = f"/sessions/{session}/"
    alice = open_as(browser, member("alice", ops, approvers), server, path)
    bob = open_as(browser, member("bob", ops, approvers), server, path)
    try:
        # Both press at the same moment: the slow agent keeps the first claim open meanwhile.
        alice.locator('button[value="approve"]').click(no_wait_after=True)
        bob.locator('button[value="deny"]').click(no_wait_after=True)

        for page in (alice, bob):
            # Whoever lost hears it in words, and the buttons go for everyone, live.
            expect(page.locator('[data-answer-form] button[value="approve"]')).to_have_count(
                0, timeout=10_000
            )
        assert len(sent_messages(agent_stub)) == 1
        winner = Interaction.objects.select_related("answered_by").get()
        verdict = "Approved" if winner.answer == {"approved": True} else "Denied"
        line = f"{verdict} by {winner.answered_by.username}, "
        for page in (alice, bob):
            expect(page.locator(".answers")).to_contain_text(line)
            expect(page.locator("[data-live-card]:visible .card-answer")).to_contain_text(line)
    finally:
        alice.context.close()
        bob.context.close()


def test_an_approver_answers_with_the_keyboard_only(browser, server, agent_stub, ops, approvers):
    session = waiting_session(server, agent_stub, ops)
    page = open_as(browser, member("alice", ops, approvers), server, f"/sessions/{session}/")
    try:
        page.keyboard.press("j")  # to the waiting approval
        expect(page.locator("[data-interaction]")).to_be_focused()
        page.keyboard.press("x")  # a stray key does nothing
        assert sent_messages(agent_stub) == []
        page.keyboard.press("a")  # presses Approve
        expect(page.locator(".answers")).to_contain_text("Approved by alice, ", timeout=10_000)
        [message] = sent_messages(agent_stub)
        assert message["metadata"][profile.INTERACTIONS]["approved"] is True
    finally:
        page.context.close()


def test_an_answer_the_agent_refused_is_shown_to_the_person_and_the_buttons_stay(
    browser, server, agent_stub, ops, approvers
):
    session = waiting_session(server, agent_stub, ops)
    agent_stub.rpc_error(-32001, "Task not found")  # refused: nothing was taken
    page = open_as(browser, member("alice", ops, approvers), server, f"/sessions/{session}/")
    try:
        page.locator('button[value="approve"]').click()
        expect(page.locator("[data-answer-error]:not([hidden])")).to_contain_text(
            "no longer knows this task"
        )
        expect(page.locator('button[value="deny"]')).to_be_enabled()
        assert Interaction.objects.get().state == Interaction.State.OPEN
    finally:
        page.context.close()


def test_a_half_written_answer_survives_a_live_refresh_and_the_composer_replies(
    browser, server, agent_stub, ops, approvers
):
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    question = approval("q-1", "Which region?", kind="question")
    body = status("INPUT_REQUIRED", at=1, metadata=question)
    assert push_http(server, registered, body).status_code == 200
    session = Interaction.objects.get().task.session_id
    page = open_as(browser, member("alice", ops, approvers), server, f"/sessions/{session}/")
    try:
        draft = page.locator('[data-interaction] textarea[name="value"]')
        draft.fill("eu-west, because the data")
        # Anything that changes the session re-renders its activity from the server.
        push_http(server, registered, status("INPUT_REQUIRED", at=2, metadata=question,
                                             text="Still waiting"))  # fmt: skip
        expect(page.locator(".transcript")).to_contain_text("Still waiting")
        expect(draft).to_have_value("eu-west, because the data")
        expect(draft).to_be_focused()

        # The task waits for input: the composer answers it (issue 11 §3), and says so.
        page.locator("#composer-text").fill("Also check the costs")
        page.locator(".composer button[type=submit]").click()
        expect(page.locator(".composer [data-action-status]")).to_have_text(
            "Sent as the reply to the agent's question."
        )
        expect(page.locator("#composer-text")).to_have_value("")
        [message] = sent_messages(agent_stub)
        assert message["parts"] == [{"text": "Also check the costs"}]
        assert message["taskId"] == Interaction.objects.get().task.task_id
    finally:
        page.context.close()


def test_an_answer_from_the_monitoring_screen_takes_the_buttons_from_everyone(
    browser, server, agent_stub, ops, approvers
):
    waiting_session(server, agent_stub, ops)
    alice = open_as(browser, member("alice", ops, approvers), server, "/")
    bob = open_as(browser, member("bob", ops, approvers), server, "/")
    try:
        expect(bob.locator("[data-waiting]")).to_contain_text("Ship v2 to production?")
        alice.locator('[data-waiting] button[value="approve"]').click()
        expect(bob.locator("[data-waiting] [data-answer-form]")).to_have_count(0)
        expect(bob.locator("[data-waiting]")).not_to_contain_text("Ship v2 to production?")
        assert len(sent_messages(agent_stub)) == 1
    finally:
        alice.context.close()
        bob.context.close()
