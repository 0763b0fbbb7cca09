"""Every answer the session page offers, given through its own forms in a real browser, and
exactly what the agent (a loopback stub that records each call) received: the interactions/v1
answer in metadata with the extension named, or, for a core agent's plain-text question, the
text alone. Choice buttons are in test_answer_choices.py.

Also: how long a question has waited ticks on in the page without a reload."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from tasks.models import Interaction
from tasks.wire import profile
from tests.builders import EPOCH, approval, status
from tests.conftest import make_agent, member
from tests.live_server import push_http

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE_ID = re.compile(r"onlooker-answer-(\d+)-[0-9a-f]{24}")


def press(value: str) -> Callable[[Page], None]:
    return lambda page: page.locator(f'[data-answer-form] button[value="{value}"]').click()


def write(text: str) -> Callable[[Page], None]:
    def answer(page: Page) -> None:
        page.locator("[data-answer-form] textarea[name=value]").fill(text)
        page.locator("[data-answer-form] button", has_text="Send answer").click()

    return answer


@dataclass(frozen=True)
class AnswerPath:
    kind: str  # interactions/v1 kind; "text" for a core agent's plain-text question
    act: Callable[[Page], None]
    text: str  # the message's one text part
    typed: dict | None  # the interactions/v1 answer, without its interactionId


PATHS = {
    "approve": AnswerPath("approval", press("approve"), "Approved by alice in Onlooker",
                          {"approved": True}),
    "deny": AnswerPath("approval", press("deny"), "Denied by alice in Onlooker",
                       {"approved": False}),
    "free text": AnswerPath("question", write("  eu-west, because of the data  "),
                            "eu-west, because of the data",
                            {"value": "eu-west, because of the data"}),
    "connect": AnswerPath("connection", press("connected"), "Connected by alice in Onlooker",
                          {"approved": True}),
    "decline": AnswerPath("connection", press("cancel"),
                          "Cancelled the connection by alice in Onlooker", {"approved": False}),
    "plain-text reply": AnswerPath("text", write("eu-west"), "eu-west", None),
}  # fmt: skip


@pytest.fixture
def asking(server, agent_stub, ops):
    """`asking(kind)`: an agent on the stub waits for a person with a question of `kind`;
    returns its session's id. A "text" question comes from a core agent (no profile)."""

    def ask(kind: str, at: int = 1) -> int:
        registered = make_agent(team=ops)
        registered.agent.rpc_url = agent_stub.rpc_url
        registered.agent.extensions = [] if kind == "text" else list(profile.EXTENSIONS)
        registered.agent.save()
        if kind == "text":
            body = status("INPUT_REQUIRED", at=at, text="Which region should I use?")
        else:
            state = "INPUT_REQUIRED" if kind == "question" else "AUTH_REQUIRED"
            asks = approval("i-1", "Go ahead?", kind=kind, detail={"hosts": 6})
            body = status(state, at=at, metadata=asks)
        assert push_http(server, registered, body).status_code == 200
        return Interaction.objects.get().task.session_id

    return ask


@pytest.fixture
def approver(ops, approvers, login):
    user = member("alice", ops, approvers)
    login(user)
    return user


def answered(timeout: float = 10.0) -> Interaction:
    deadline = time.monotonic() + timeout
    while True:
        interaction = Interaction.objects.get()
        if interaction.state != Interaction.State.ANSWERING or time.monotonic() > deadline:
            return interaction
        time.sleep(0.05)


# The page took the answer: its own line in place of the form, or, once a live refresh has
# caught up (quick on an idle machine, later on a busy one), the answer in the session's list.
TOOK_IT = ".interactions .interaction-state, [data-answered-interaction]"


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_each_answer_the_page_offers_reaches_the_agent_as_exactly_that_answer(
    path, asking, approver, page, open_live, agent_stub
):
    session = asking(path.kind)
    open_live(f"/sessions/{session}/")

    path.act(page)

    expect(page.locator(TOOK_IT).first).to_be_visible()
    # The page shows "being answered" as soon as the claim commits; the agent's reply and the
    # recorded answer follow it.
    interaction = answered()
    [request] = [r for r in agent_stub.requests if r.json().get("method") == "SendMessage"]
    message = request.json()["params"]["message"]
    assert MESSAGE_ID.fullmatch(message.pop("messageId")).group(1) == str(interaction.pk)
    expected = {
        "role": "ROLE_USER",
        "parts": [{"text": path.text}],
        "taskId": "task-1",
        "contextId": "ctx-1",
    }
    if path.typed is None:  # a core agent: text, which can never approve anything
        assert message == expected
        assert "a2a-extensions" not in request.headers
    else:
        assert message == {
            **expected,
            "metadata": {profile.INTERACTIONS: {"interactionId": "i-1", **path.typed}},
            "extensions": [profile.INTERACTIONS],
        }
        assert profile.INTERACTIONS in request.headers["a2a-extensions"].split(",")
    assert interaction.state == Interaction.State.ANSWERED


def test_how_long_a_question_has_waited_ticks_on_without_a_reload(
    asking, approver, page, open_live
):
    asking("approval", at=1)
    opened = EPOCH + timedelta(seconds=1)
    page.clock.install(time=opened + timedelta(minutes=14))
    open_live("/")
    waited = page.locator("[data-waiting] time[data-waited-since]")
    expect(waited).to_have_attribute("datetime", opened.isoformat())
    expect(waited).to_have_text("waiting 14 min")

    page.clock.fast_forward("46:00")

    expect(waited).to_have_text("waiting 1 h")


def test_a_reason_typed_on_the_page_reaches_the_agent_beside_the_decision(
    asking, approver, page, open_live, agent_stub
):
    session = asking("approval")
    open_live(f"/sessions/{session}/")

    page.locator("[data-answer-form] textarea[name=reason]").fill("Not during the freeze.")
    press("deny")(page)

    expect(page.locator(TOOK_IT).first).to_be_visible()
    assert answered().state == Interaction.State.ANSWERED
    [request] = [r for r in agent_stub.requests if r.json().get("method") == "SendMessage"]
    message = request.json()["params"]["message"]
    assert message["parts"] == [
        {"text": "Denied by alice in Onlooker"},
        {"text": "Not during the freeze."},
    ]
    assert message["metadata"][profile.INTERACTIONS] == {"interactionId": "i-1", "approved": False}
