"""One decision per interaction, ever (issue 11 §1): once a decision may have reached the
agent, only that decision is sent again — the same message, the same messageId, whoever
presses — until the agent's next status closes the question or really asks it again.

Through the real view, with a loopback agent that records every message it gets and can be
slow, hang up, or be down; time frozen where the page names it ("sent at 10:02").
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from tasks.answering import agent_http
from tasks.models import Delivery, Interaction
from tasks.wire import profile
from tests.answering.test_answers import answer, person, sent_messages
from tests.builders import approval, message, status, ts
from tests.conftest import RegisteredAgent, make_agent, push
from tests.peers.misbehaving_agent import ACCEPTED, Answer, MisbehavingAgent

TEN_OH_TWO = datetime(2026, 12, 1, 10, 2, 0, tzinfo=UTC)
ASK = approval("i-1", "Ship v2?")
NOT_CONFIRMED = (
    "Approve was sent at 10:02 by alice; the agent has not confirmed yet — Retry sending Approve"
)

MOVED_ON = "Approve was sent at 10:02 by alice; the agent moved on."


@pytest.fixture(autouse=True)
def at_ten_oh_two():
    with time_machine.travel(TEN_OH_TWO, tick=True) as traveller:
        yield traveller


@pytest.fixture
def alice(ops, approvers) -> Client:
    return person("alice", ops, approvers)


@pytest.fixture
def bob(ops, approvers) -> Client:
    return person("bob", ops, approvers)


@pytest.fixture
def agent(agent_stub, ops) -> RegisteredAgent:
    """A profile agent of ops' team whose JSON-RPC URL is the stub's."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


def ask(agent: RegisteredAgent, body: dict | None = None) -> Interaction:
    """The agent pushes a status (by default: it waits for approval of "Ship v2?", at 1 s,
    with a message), each push a delivery of its own (its own webhook id)."""
    body = body or status("AUTH_REQUIRED", at=1, text="Ship v2?", message_id="m-1", metadata=ASK)
    assert push(Client(), agent, body, msg_id=f"push-{uuid.uuid4().hex}").status_code == 200
    return Interaction.objects.select_related("answered_by").get()


def decisions(stub: MisbehavingAgent) -> list[tuple[str, dict]]:
    """Each message the agent received: its id and the typed answer it carried."""
    return [
        (message["messageId"], message["metadata"][profile.INTERACTIONS])
        for message in sent_messages(stub)
    ]


def late_reply(stub: MisbehavingAgent, monkeypatch) -> None:
    """The agent records the answer and replies after Onlooker stopped waiting."""
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)
    stub.answer(ACCEPTED, delay=1.0)


# -- bound while not confirmed --------------------------------------------------------------


def test_a_late_reply_binds_the_decision_and_the_other_button_is_refused(
    alice, bob, agent, agent_stub, monkeypatch
):
    interaction = ask(agent)
    late_reply(agent_stub, monkeypatch)

    code, data = answer(alice, interaction, decision="approve")
    assert code == 502 and data["detail"].startswith("Not confirmed: the agent did not answer")

    code, data = answer(bob, interaction, decision="deny")
    assert (code, data["detail"]) == (409, NOT_CONFIRMED)
    [(_, typed)] = decisions(agent_stub)  # exactly one decision, one messageId
    assert typed == {"interactionId": "i-1", "approved": True}
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == ("sent", {"approved": True})


def test_a_retry_by_anyone_sends_the_identical_message_again(
    alice, bob, agent, agent_stub, monkeypatch
):
    interaction = ask(agent)
    late_reply(agent_stub, monkeypatch)
    code, _ = answer(alice, interaction, decision="deny", reason="Not on a Friday")
    assert code == 502

    agent_stub.answer(ACCEPTED)
    # Bob retries, with another note: the decision is Alice's, and so is the message.
    code, data = answer(bob, interaction, decision="deny", reason="something else")
    assert code == 200 and data["detail"] == "Denied by alice, 10:02", data
    first, second = sent_messages(agent_stub)
    assert first == second
    assert first["parts"] == [{"text": "Denied by alice in Onlooker"}, {"text": "Not on a Friday"}]
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by.username) == ("answered", "alice")


def test_the_page_offers_only_a_retry_of_the_sent_decision(
    alice, bob, agent, agent_stub, monkeypatch, ops
):
    interaction = ask(agent)
    late_reply(agent_stub, monkeypatch)
    assert answer(alice, interaction, decision="approve")[0] == 502
    path = f"/sessions/{interaction.task.session_id}/"

    page = bob.get(path).content.decode()
    assert "Approve was sent at 10:02 by alice; the agent has not confirmed yet." in page
    assert ">Retry sending Approve</button>" in page
    assert 'value="deny"' not in page and 'name="reason"' not in page
    viewer = person("viewer", ops).get(path).content.decode()
    assert "the agent has not confirmed yet" in viewer and "Retry sending" not in viewer

    # A form posted without the page's script hears the same refusal.
    response = bob.post(f"/interactions/{interaction.pk}/answer/", {"decision": "deny"})
    assert response.status_code == 302
    assert NOT_CONFIRMED in bob.get(response.url).content.decode()
    assert len(sent_messages(agent_stub)) == 1


def test_a_question_sent_and_not_confirmed_is_named_by_its_answer(
    alice, bob, agent, agent_stub, monkeypatch
):
    question = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu"]})
    interaction = ask(agent, status("INPUT_REQUIRED", at=1, metadata=question))
    late_reply(agent_stub, monkeypatch)
    assert answer(alice, interaction, choice="eu")[0] == 502

    code, data = answer(bob, interaction, value="us, please")
    assert code == 409
    assert data["detail"] == (
        "The answer “eu” was sent at 10:02 by alice; the agent has not confirmed yet — "
        "Retry sending the answer “eu”"
    )
    page = bob.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert 'name="choice" value="eu" data-retry>Retry sending the answer “eu”' in page


def test_nothing_reached_the_agent_so_another_decision_may_be_sent(alice, bob, agent, agent_stub):
    interaction = ask(agent)
    agent_stub.close()  # connection refused

    code, data = answer(alice, interaction, decision="approve")
    assert code == 502 and data["detail"].startswith("Not sent: could not connect")
    assert data["detail"].endswith("you can answer again.")
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == ("open", None)

    with MisbehavingAgent() as back:
        back.answer(ACCEPTED)
        agent.agent.rpc_url = back.rpc_url
        agent.agent.save()
        assert answer(bob, interaction, decision="deny")[0] == 200
        [(_, typed)] = decisions(back)
        assert typed["approved"] is False


def test_a_refused_retry_keeps_the_binding(alice, bob, agent, agent_stub, monkeypatch):
    interaction = ask(agent)
    late_reply(agent_stub, monkeypatch)
    assert answer(alice, interaction, decision="approve")[0] == 502
    # The agent took the first and refuses the copy: still only Approve may go.
    agent_stub.rpc_error(-32004, "Task is not waiting for input")
    code, data = answer(bob, interaction, decision="approve")
    assert code == 502 and data["detail"].startswith("Not confirmed: ")
    refused = {"error": "AlreadyAnswered", "detail": NOT_CONFIRMED}
    assert answer(bob, interaction, decision="deny") == (409, refused)


def test_a_claim_left_by_a_process_that_died_binds_its_decision(
    alice, bob, agent, agent_stub, at_ten_oh_two
):
    interaction = ask(agent)
    # Alice's request claimed it and its process died mid-call (the call may have gone out).
    Interaction.objects.filter(pk=interaction.pk).update(
        state=Interaction.State.ANSWERING,
        answered_by=User.objects.get(username="alice"),
        answered_at=TEN_OH_TWO,
        answer={"approved": True},
    )
    code, data = answer(bob, interaction, decision="deny")
    assert code == 409 and data["detail"] == "Being answered by alice right now: Approve."

    at_ten_oh_two.shift(Interaction.STALE_CLAIM + timedelta(seconds=1))
    code, data = answer(bob, interaction, decision="deny")
    assert (code, data["detail"]) == (409, NOT_CONFIRMED)
    assert sent_messages(agent_stub) == []
    assert answer(bob, interaction, decision="approve")[0] == 200
    [(_, typed)] = decisions(agent_stub)
    assert typed["approved"] is True


# -- what the agent's next status does ------------------------------------------------------


def republished_task() -> dict:
    """The waiting task as @a2a-js/sdk republishes it on every follow-up: the whole task, its
    status (same timestamp, same message, the interactions/v1 metadata on the message)."""
    asking = message("Ship v2?", message_id="m-1", metadata=ASK)
    waiting = {"state": "TASK_STATE_AUTH_REQUIRED", "timestamp": ts(1), "message": asking}
    history = [message("Ship v2", message_id="u-1", role="ROLE_USER"), asking]
    return {"task": {"id": "task-1", "contextId": "ctx-1", "status": waiting, "history": history}}


@pytest.mark.parametrize("repeat", ["status update", "task snapshot"])
def test_a_repeated_status_does_not_reopen_an_answered_question(
    alice, bob, agent, agent_stub, repeat
):
    first = republished_task() if repeat == "task snapshot" else None
    interaction = ask(agent, first)
    assert answer(alice, interaction, decision="approve")[0] == 200

    # The agent republishes its task, as @a2a-js/sdk does on every follow-up: same status,
    # same timestamp, same message, same interactions/v1 metadata; a delivery of its own.
    again = ask(agent, first)

    assert (again.state, again.answer, again.answered_by.username, again.round) == (
        "answered", {"approved": True}, "alice", 1,
    )  # fmt: skip
    page = bob.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert 'value="deny"' not in page
    code, data = answer(bob, interaction, decision="deny")
    assert code == 409 and data["detail"] == "Already answered: Approved by alice, 10:02."
    assert len(sent_messages(agent_stub)) == 1


def test_a_repeated_status_does_not_reopen_a_question_sent_and_not_confirmed(
    alice, bob, agent, agent_stub, monkeypatch
):
    interaction = ask(agent)
    late_reply(agent_stub, monkeypatch)
    assert answer(alice, interaction, decision="approve")[0] == 502
    assert ask(agent).state == Interaction.State.SENT
    assert answer(bob, interaction, decision="deny")[0] == 409
    assert len(sent_messages(agent_stub)) == 1


def test_a_later_status_asks_again_and_its_answer_is_a_new_message(alice, bob, agent, agent_stub):
    interaction = ask(agent)
    assert answer(alice, interaction, decision="approve")[0] == 200

    later = status("AUTH_REQUIRED", at=5, text="Ship v2?", message_id="m-1", metadata=ASK)
    again = ask(agent, later)
    assert (again.state, again.round, again.answer) == ("open", 2, None)
    assert answer(bob, interaction, decision="approve")[0] == 200
    (first, _), (second, _) = decisions(agent_stub)
    assert first != second  # the agent must not take round 2's Approve for round 1's


def test_an_agent_without_timestamps_asks_again_only_with_another_message(
    alice, bob, agent, agent_stub
):
    def asked(message_id: str) -> Interaction:
        return ask(agent, status("AUTH_REQUIRED", text="Ship v2?", message_id=message_id,
                                 metadata=ASK))  # fmt: skip

    interaction = asked("m-1")
    assert answer(alice, interaction, decision="approve")[0] == 200
    assert asked("m-1").state == Interaction.State.ANSWERED
    assert answer(bob, interaction, decision="deny")[0] == 409
    assert asked("m-2").state == Interaction.State.OPEN
    assert answer(bob, interaction, decision="deny")[0] == 200
    assert [typed["approved"] for _, typed in decisions(agent_stub)] == [True, False]


def test_a_closing_status_ends_the_binding_and_keeps_what_was_sent(
    alice, bob, agent, agent_stub, monkeypatch
):
    interaction = ask(agent)
    late_reply(agent_stub, monkeypatch)
    assert answer(alice, interaction, decision="approve")[0] == 502

    ask(agent, status("WORKING", at=2, text="Shipping"))

    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == ("closed", {"approved": True})
    assert interaction.answered_by.username == "alice"
    for decision in ("approve", "deny"):
        code, data = answer(bob, interaction, decision=decision)
        assert code == 409
        assert data["detail"] == MOVED_ON
    page = bob.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "Retry sending" not in page
    # The decision stays on the page, in the Answers list: who sent what, and that the agent
    # moved on without confirming it.
    answered = re.search(r'<li data-answered-interaction="\d+">(.*?)</li>', page, re.S)
    assert answered, page
    words = re.sub(r"<[^>]+>", "", answered[1])
    assert words.startswith("Approved by alice, 10:02, on the page")
    assert "(sent; the agent moved on without confirming)" in words
    assert len(sent_messages(agent_stub)) == 1


# -- a reason beside the answer -------------------------------------------------------------


def test_a_reason_reaches_the_agent_as_text_beside_the_typed_answer(alice, agent, agent_stub):
    interaction = ask(agent)
    page = alice.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "Reason (optional)" in page and 'name="reason"' in page

    code, _ = answer(alice, interaction, decision="deny", reason="  Not during the freeze.  ")

    assert code == 200
    [message] = sent_messages(agent_stub)
    assert message["parts"] == [
        {"text": "Denied by alice in Onlooker"},
        {"text": "Not during the freeze."},
    ]
    typed = {"interactionId": "i-1", "approved": False}
    assert message["metadata"] == {profile.INTERACTIONS: typed}
    interaction.refresh_from_db()
    assert interaction.reason == "Not during the freeze."


@pytest.mark.parametrize(
    ("reason", "words"),
    [("a\x00b", "reason must not contain NUL"), ("x" * 4001, "reason must be at most 4000")],
)
def test_a_bad_reason_is_refused_and_nothing_is_sent(alice, agent, agent_stub, reason, words):
    interaction = ask(agent)
    code, data = answer(alice, interaction, decision="approve", reason=reason)
    assert code == 400 and words in data["detail"]
    assert sent_messages(agent_stub) == []
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN


@pytest.mark.django_db(transaction=True)
def test_an_agent_that_moves_on_before_its_late_reply_keeps_what_was_sent(
    alice, bob, agent, agent_stub, monkeypatch
):
    interaction = ask(agent)
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)

    def takes_it_and_moves_on(received) -> Answer:
        # It acts on the answer at once (its next status arrives first); its reply is late.
        if received.method == "POST":
            ask(agent, status("WORKING", at=2, text="Shipping"))
        return Answer(body=ACCEPTED, delay=1.0)

    agent_stub.answer_each(takes_it_and_moves_on)
    code, data = answer(alice, interaction, decision="approve")

    assert code == 502 and data["detail"].startswith("Not confirmed: ")
    # The agent's next status was pushed while the answer was in flight; on a loaded machine
    # it may still be applying when the answer's timeout returns.
    deadline = time.monotonic() + 10
    while Delivery.objects.exclude(outcome=Delivery.Outcome.APPLIED).exists() or (
        Delivery.objects.count() < 2
    ):
        assert time.monotonic() < deadline, "the agent's next status was never applied"
        time.sleep(0.01)
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == ("closed", {"approved": True})
    code, data = answer(bob, interaction, decision="deny")
    assert (code, data["detail"]) == (409, MOVED_ON)
    assert len(sent_messages(agent_stub)) == 1
