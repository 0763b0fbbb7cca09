"""A choice is sent to the agent only if the question offers it (issue 29 §6).

Every way a person answers (the session page's buttons, the monitoring screen's inbox row,
the a/d keys) posts one endpoint; a posted `choice` that is not among the question's own
choices is refused there with a 400 that says so, nothing reaches the agent, and the question
stays open for a real answer. Typed text (`value`) stays free, and the retry button, which
posts the bound answer as a choice, still works.

Through the real view with CSRF enforced, and a loopback agent that records every message.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from tasks.answering import agent_http
from tasks.models import Interaction
from tasks.wire import profile
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, make_agent, member, push
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

REGIONS = ["eu", "us"]
NOT_OFFERED = (
    "That choice is not one this question offers, so nothing was sent. Press one of its "
    "choices, or type your answer."
)


@pytest.fixture
def agent(agent_stub: MisbehavingAgent, ops: Group) -> RegisteredAgent:
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def alice(ops: Group, approvers: Group) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member("alice", ops, approvers))
    return client


def ask(agent: RegisteredAgent, detail=None, *, kind: str = "question"):
    """The agent asks; the interaction as stored."""
    state = "INPUT_REQUIRED" if kind == "question" else "AUTH_REQUIRED"
    metadata = approval("q-1", "Which region?", kind=kind, detail=detail)
    body = status(state, at=1, metadata=metadata)
    assert push(Client(), agent, body, msg_id=f"push-{uuid.uuid4().hex}").status_code == 200
    return Interaction.objects.get()


def page_form(client: Client, url: str, interaction: Interaction) -> tuple[str, str]:
    """The answer form's action and CSRF token, as the page (and so answers.js) has them."""
    page = client.get(url).content.decode()
    action = f"/interactions/{interaction.pk}/answer/"
    assert f'action="{action}"' in page, "the page has no answer form for the question"
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    return action, token


def press(client: Client, interaction: Interaction, *, url: str = "", **form):
    """Post `form` as answers.js does from the page at `url` (the session page by default)."""
    url = url or f"/sessions/{interaction.task.session_id}/"
    action, token = page_form(client, url, interaction)
    return client.post(
        action,
        {**form, "csrfmiddlewaretoken": token},
        HTTP_ACCEPT="application/json",
        HTTP_X_CSRFTOKEN=token,
    )


def sent(stub: MisbehavingAgent) -> list[dict]:
    return [params["message"] for params in stub.calls("SendMessage")]


def untouched(interaction: Interaction) -> bool:
    now = Interaction.objects.get(pk=interaction.pk)
    return (now.state, now.answer, now.answered_by, now.round) == (
        Interaction.State.OPEN,
        None,
        None,
        interaction.round,
    )


def test_a_choice_the_question_did_not_offer_is_refused_and_nothing_reaches_the_agent(
    alice, agent, agent_stub
):
    interaction = ask(agent, {"choices": REGIONS})
    response = press(alice, interaction, choice="cn", value="")
    assert response.status_code == 400
    assert response.json() == {"error": "NotOffered", "detail": NOT_OFFERED}
    assert sent(agent_stub) == []
    assert untouched(interaction)
    # The question still waits, with its own buttons.
    page = alice.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert 'name="choice" value="eu"' in page
    # Typed text beside the choices stays free: it goes as what it is, a typed answer.
    assert press(alice, interaction, value="cn, please").status_code == 200
    [message] = sent(agent_stub)
    assert message["metadata"][profile.INTERACTIONS]["value"] == "cn, please"


def test_a_forged_choice_from_the_monitoring_screens_row_is_refused_the_same_way(
    alice, agent, agent_stub
):
    interaction = ask(agent, {"choices": REGIONS})
    response = press(alice, interaction, url="/", choice="cn")
    assert (response.status_code, response.json()["error"]) == (400, "NotOffered")
    assert sent(agent_stub) == []
    assert untouched(interaction)


def test_a_forged_choice_posted_without_the_pages_script_is_told_on_the_page(
    alice, agent, agent_stub
):
    interaction = ask(agent, {"choices": REGIONS})
    action, token = page_form(alice, f"/sessions/{interaction.task.session_id}/", interaction)
    response = alice.post(action, {"choice": "cn", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    page = alice.get(response.url).content.decode()
    assert NOT_OFFERED in page
    assert sent(agent_stub) == []
    assert untouched(interaction)


@pytest.mark.parametrize(
    "forged",
    [
        "EU",  # case
        "eu ",  # a space the agent did not offer
        " eu",
        "eu\u200b",  # an invisible character
        "ｅｕ",  # fullwidth: the same under NFKC, not the same string
        "eu" + "x" * 3_998,  # as long as a typed answer may be
    ],
    ids=["case", "trailing-space", "leading-space", "zero-width", "fullwidth", "long"],
)
def test_a_choice_that_only_resembles_an_offered_one_is_refused(alice, agent, agent_stub, forged):
    interaction = ask(agent, {"choices": REGIONS})
    response = press(alice, interaction, choice=forged)
    assert (response.status_code, response.json()["error"]) == (400, "NotOffered")
    assert sent(agent_stub) == []
    assert untouched(interaction)


def test_a_choice_in_another_unicode_form_is_refused_and_the_offered_form_is_sent_as_is(
    alice, agent, agent_stub
):
    offered = unicodedata.normalize("NFD", "Café")
    interaction = ask(agent, {"choices": [offered]})
    composed = unicodedata.normalize("NFC", offered)
    assert press(alice, interaction, choice=composed).status_code == 400
    assert sent(agent_stub) == []

    assert press(alice, interaction, choice=offered).status_code == 200
    [message] = sent(agent_stub)
    assert message["metadata"][profile.INTERACTIONS]["value"] == offered


def test_a_lone_surrogate_in_the_choice_is_refused_cleanly(alice, agent, agent_stub):
    interaction = ask(agent, {"choices": ["\ufffd"]})
    action, token = page_form(alice, f"/sessions/{interaction.task.session_id}/", interaction)
    # UTF-8 has no encoding of U+D800; these bytes are what a client can send instead.
    surrogate = quote(b"\xed\xa0\x80")
    body = f"choice={surrogate}&csrfmiddlewaretoken={token}"
    response = alice.post(
        action,
        body,
        content_type="application/x-www-form-urlencoded",
        HTTP_ACCEPT="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert (response.status_code, response.json()["error"]) == (400, "NotOffered")
    assert sent(agent_stub) == []
    assert untouched(interaction)


def test_an_offered_choice_with_a_line_break_is_taken_as_the_browser_sends_it(
    alice, agent, agent_stub
):
    offered = "ship it\nthen tell me"
    interaction = ask(agent, {"choices": [offered, "wait"]})
    # Browsers send a button's line breaks as CRLF.
    assert press(alice, interaction, choice="ship it\r\nthen tell me").status_code == 200
    [message] = sent(agent_stub)
    assert message["metadata"][profile.INTERACTIONS]["value"] == offered


def test_a_question_without_choices_takes_free_text_but_no_choice(alice, agent, agent_stub):
    interaction = ask(agent)
    response = press(alice, interaction, choice="anything")
    assert (response.status_code, response.json()["error"]) == (400, "NotOffered")
    assert sent(agent_stub) == []

    assert press(alice, interaction, value="eu, as usual").status_code == 200
    [message] = sent(agent_stub)
    assert message["metadata"][profile.INTERACTIONS]["value"] == "eu, as usual"


@pytest.mark.parametrize("kind", ["approval", "connection"])
def test_a_choice_posted_to_an_approval_is_refused(alice, agent, agent_stub, kind):
    interaction = ask(agent, kind=kind)
    decision = "approve" if kind == "approval" else "connected"
    response = press(alice, interaction, decision=decision, choice="approve")
    assert (response.status_code, response.json()["error"]) == (400, "NotOffered")
    assert sent(agent_stub) == []
    assert untouched(interaction)


def test_the_retry_of_a_typed_answer_still_sends_it(alice, agent, agent_stub, monkeypatch):
    # A guard for the check above: the retry button posts the bound answer as a `choice`,
    # typed or not, and must not be taken for a forged one.
    interaction = ask(agent, {"choices": REGIONS})
    # The agent takes the answer but replies after Onlooker stopped waiting.
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)
    agent_stub.answer(ACCEPTED, delay=1.0)
    assert press(alice, interaction, value="cn\r\nand hurry").status_code == 502

    agent_stub.answer(ACCEPTED)
    page = alice.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    # The retry button posts the typed answer as a choice.
    assert 'name="choice" value="cn\r\nand hurry" data-retry' in page
    assert press(alice, interaction, choice="cn\r\nand hurry").status_code == 200
    first, second = sent(agent_stub)
    assert first == second
    assert first["metadata"][profile.INTERACTIONS]["value"] == "cn\r\nand hurry"
