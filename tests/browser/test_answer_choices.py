"""A question's choice buttons, pressed in a real browser: the agent receives exactly the
choice pressed, whether the text box is empty or holds a half-written answer."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.models import Interaction
from tasks.wire import profile
from tests.browser.test_answer_paths import TOOK_IT
from tests.browser.test_answering import open_as, sent_messages
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import push_http

pytestmark = pytest.mark.django_db(transaction=True)

CHOICES = {"choices": ["staging", "production"]}


@pytest.fixture
def question_page(browser, server, agent_stub, ops, approvers):
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    asks = approval("q-1", "Deploy where?", kind="question", detail=CHOICES)
    pushed = push_http(server, registered, status("INPUT_REQUIRED", at=1, metadata=asks))
    assert pushed.status_code == 200
    session = Interaction.objects.get().task.session_id
    page = open_as(browser, member("alice", ops, approvers), server, f"/sessions/{session}/")
    yield page
    page.context.close()


def received(stub) -> tuple[str, dict]:
    [message] = sent_messages(stub)
    text = "".join(part.get("text", "") for part in message["parts"])
    return text, message["metadata"][profile.INTERACTIONS]


def test_pressing_a_choice_sends_exactly_that_choice(question_page, agent_stub):
    question_page.locator("[data-answer-form] button", has_text="production").click()

    expect(question_page.locator(TOOK_IT).first).to_be_visible()
    text, typed = received(agent_stub)
    assert text == "production"
    assert typed == {"interactionId": "q-1", "value": "production"}


def test_a_pressed_choice_wins_over_text_typed_in_the_box(question_page, agent_stub):
    question_page.locator('[data-answer-form] textarea[name="value"]').fill("somewhere else, maybe")
    question_page.locator("[data-answer-form] button", has_text="staging").click()

    expect(question_page.locator(TOOK_IT).first).to_be_visible()
    text, typed = received(agent_stub)
    assert text == "staging"
    assert typed["value"] == "staging"
