"""Answering what agents wait for, through the real view: typed, exactly once, attributable,
and safe when two people act at once or the agent misbehaves.

Against a real a2a-sdk agent (tests/peers/approval_agent.py) the answer decides the task's
fate; against a scriptable loopback agent (tests/peers/misbehaving_agent.py) we count what
reached the agent and make it fail in each way it can.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from tasks.answering import agent_http
from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    add_agent,
    onlooker,
    start_peer,
    wait_for_approval,
    wait_for_state,
)
from tests.builders import approval, status
from tests.conftest import make_agent, member, push
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent


def person(name: str, *groups: Group) -> Client:
    client = Client()
    client.force_login(member(name, *groups))
    return client


@pytest.fixture
def alice_approves(ops, approvers) -> Client:
    return person("alice", ops, approvers)


def waiting_interaction(agent_stub, ops, body=None) -> Interaction:
    """An agent (its JSON-RPC URL the stub's) waiting for an approval of ops' team."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    body = body or status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, body).status_code == 200
    return Interaction.objects.get()


def answer(client: Client, interaction: Interaction, **form) -> tuple[int, dict]:
    response = client.post(
        f"/interactions/{interaction.pk}/answer/", form, HTTP_ACCEPT="application/json"
    )
    return response.status_code, response.json()


def sent_messages(stub: MisbehavingAgent) -> list[dict]:
    return [params["message"] for params in stub.calls("SendMessage")]


# -- against a real a2a-sdk agent -----------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "final"), [("approve", "TASK_STATE_COMPLETED"), ("deny", "TASK_STATE_REJECTED")]
)
def test_a_typed_answer_decides_the_real_agents_task(
    onlooker,  # noqa: F811 - a fixture imported from test_a2a_peer
    start_peer,  # noqa: F811
    ops,
    approvers,
    decision,
    final,
):
    peer = start_peer()
    registration = add_agent(peer.card_url, "--team", "ops")
    task = wait_for_approval(peer, registration)
    interaction = Interaction.objects.get(task__task_id=task["id"])
    alice = person("alice", ops, approvers)

    code, data = answer(alice, interaction, decision=decision)

    assert code == 200, data
    assert data["detail"].startswith(("Approved by alice", "Denied by alice"))
    wait_for_state(peer, registration, task, final)
    assert peer.get_task(task["id"])["status"]["state"] == final
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.ANSWERED
    assert interaction.answered_by.username == "alice"
    assert interaction.answer == {"approved": decision == "approve"}


def test_text_never_approves_a_typed_approval(alice_approves, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    code, data = answer(alice_approves, interaction, value="yes, approved")
    assert code == 400 and "decision must be 'approve' or 'deny'" in data["detail"]
    assert sent_messages(agent_stub) == []
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN


# -- what reaches the agent -----------------------------------------------------------------


def test_an_approval_is_one_typed_message_on_the_task_with_a_derived_id(
    alice_approves, agent_stub, ops
):
    interaction = waiting_interaction(agent_stub, ops)
    assert answer(alice_approves, interaction, decision="approve")[0] == 200
    [message] = sent_messages(agent_stub)
    assert (message["taskId"], message["contextId"]) == ("task-1", "ctx-1")
    assert message["metadata"] == {profile.INTERACTIONS: {"interactionId": "i-1", "approved": True}}
    assert message["extensions"] == [profile.INTERACTIONS]
    assert message["messageId"].startswith(f"onlooker-answer-{interaction.pk}-")
    assert message["parts"] == [{"text": "Approved by alice in Onlooker"}]
    # Every card (so every browser) says who answered until the agent goes on.
    card = Session.objects.get().card
    assert card.question is None and card.answer["text"].startswith("Approved by alice, ")


def test_a_core_agents_question_gets_plain_text_that_cannot_approve(
    alice_approves, agent_stub, ops
):
    plain = status("AUTH_REQUIRED", at=1, text="May I delete the old branch?")
    interaction = waiting_interaction(agent_stub, ops, plain)
    assert interaction.kind == Interaction.Kind.TEXT
    page = alice_approves.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "a reply cannot approve anything" in page

    assert answer(alice_approves, interaction, value="Yes, go ahead")[0] == 200
    [message] = sent_messages(agent_stub)
    assert message["parts"] == [{"text": "Yes, go ahead"}]
    assert "metadata" not in message and "extensions" not in message


def test_a_question_is_answered_with_its_text(alice_approves, agent_stub, ops):
    question = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu", "us"]})
    interaction = waiting_interaction(
        agent_stub, ops, status("INPUT_REQUIRED", at=1, metadata=question)
    )
    page = alice_approves.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert 'name="choice" value="eu"' in page and 'name="choice" value="us"' in page
    assert answer(alice_approves, interaction, choice="eu", value="")[0] == 200
    [message] = sent_messages(agent_stub)
    assert message["metadata"][profile.INTERACTIONS] == {"interactionId": "q-1", "value": "eu"}


def test_a_choice_reaches_the_agent_exactly_as_it_offered_it(alice_approves, agent_stub, ops):
    offered = " production "
    question = approval("q-1", "Where?", kind="question", detail={"choices": [offered, "dev"]})
    interaction = waiting_interaction(
        agent_stub, ops, status("INPUT_REQUIRED", at=1, metadata=question)
    )
    assert answer(alice_approves, interaction, choice=offered, value="")[0] == 200
    [message] = sent_messages(agent_stub)
    assert message["metadata"][profile.INTERACTIONS]["value"] == offered


# -- exactly once ---------------------------------------------------------------------------


def test_a_second_answer_is_refused_and_says_who_answered(
    alice_approves, agent_stub, ops, approvers
):
    interaction = waiting_interaction(agent_stub, ops)
    bob = person("bob", ops, approvers)
    assert answer(alice_approves, interaction, decision="approve")[0] == 200
    code, data = answer(bob, interaction, decision="deny")
    assert code == 409
    assert data["detail"].startswith("Already answered: Approved by alice, ")
    assert len(sent_messages(agent_stub)) == 1
    page = bob.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "Approved by alice, " in page and 'value="approve"' not in page


@pytest.mark.django_db(transaction=True)
def test_concurrent_answers_send_exactly_one_message(ops, approvers):
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED, delay=0.3)  # a slow agent widens the race
        interaction = waiting_interaction(stub, ops)
        people = [person(f"approver{n}", ops, approvers) for n in range(6)]
        results: list[tuple[int, dict]] = []
        start = threading.Barrier(len(people))

        def click(client: Client, n: int) -> None:
            try:
                start.wait()
                decision = "approve" if n % 2 else "deny"
                results.append(answer(client, interaction, decision=decision))
            finally:
                connection.close()  # this thread's: left open, it outlives the test database

        threads = [threading.Thread(target=click, args=(c, n)) for n, c in enumerate(people)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        codes = sorted(code for code, _ in results)
        assert codes == [200, 409, 409, 409, 409, 409], results
        assert len(sent_messages(stub)) == 1


# -- when the agent fails -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("misbehave", "words"),
    [
        pytest.param(lambda s: s.answer(b"<h1>oops</h1>", content_type="text/html"),
                     "not JSON", id="html"),
        pytest.param(lambda s: s.answer(b"bad gateway", status=502, content_type="text/plain"),
                     "HTTP 502", id="http-error"),
        pytest.param(lambda s: s.answer(ACCEPTED, delay=1.0),
                     "did not answer within", id="slow"),
        pytest.param(lambda s: s.hang_up(), "RemoteProtocolError", id="hung-up"),
    ],
)  # fmt: skip
def test_an_agent_that_may_have_the_answer_binds_it_and_only_a_retry_of_it_is_sent(
    alice_approves, agent_stub, ops, approvers, monkeypatch, misbehave, words
):
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)
    interaction = waiting_interaction(agent_stub, ops)
    misbehave(agent_stub)

    code, data = answer(alice_approves, interaction, decision="approve")

    # The outcome is unknown: never "not sent", never the buttons back.
    assert code == 502 and words in data["detail"], data
    assert data["detail"].startswith("Not confirmed: ") and "not sent" not in data["detail"]
    assert "Retry sending Approve" in data["detail"]
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.SENT
    assert (interaction.answered_by.username, interaction.answer) == ("alice", {"approved": True})
    assert words in interaction.last_error
    bob = person("bob", ops, approvers)
    page = bob.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "Approve was sent at " in page and "by alice; the agent has not confirmed yet" in page
    assert "Retry sending Approve" in page and 'value="deny"' not in page

    agent_stub.answer(ACCEPTED)
    code, data = answer(bob, interaction, decision="approve")
    assert code == 200 and data["detail"].startswith("Approved by alice, "), data
    first, *_, last = sent_messages(agent_stub)
    assert first == last  # a retry is the same message, not another


def test_an_agent_that_refuses_the_answer_leaves_the_question_open_for_any_decision(
    alice_approves, agent_stub, ops
):
    interaction = waiting_interaction(agent_stub, ops)
    agent_stub.rpc_error(-32001, "Task not found")

    code, data = answer(alice_approves, interaction, decision="approve")

    assert code == 502 and data["detail"].startswith("Not sent: ")
    assert "no longer knows this task" in data["detail"] and "answer again" in data["detail"]
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by) == (Interaction.State.OPEN, None)
    page = alice_approves.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "Last try failed" in page and 'value="approve"' in page and 'value="deny"' in page

    agent_stub.answer(ACCEPTED)
    assert answer(alice_approves, interaction, decision="deny")[0] == 200


def test_an_agent_that_is_down_gives_a_clear_message(alice_approves, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    agent_stub.close()
    code, data = answer(alice_approves, interaction, decision="deny")
    assert code == 502 and data["detail"].startswith("Not sent: could not connect to the agent")
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN


# -- who may answer -------------------------------------------------------------------------


def test_a_viewer_sees_the_question_without_buttons_and_a_forged_post_is_refused(agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    viewer = person("viewer", ops)
    page = viewer.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "Ship v2?" in page and "Waiting for an approver" in page
    assert "data-answer-form" not in page
    code, data = answer(viewer, interaction, decision="approve")
    assert code == 403 and "not answer" in data["detail"]
    assert sent_messages(agent_stub) == []


def test_an_approver_of_another_team_cannot_see_or_answer(agent_stub, ops, approvers):
    interaction = waiting_interaction(agent_stub, ops)
    outsider = person("mallory", approvers, Group.objects.create(name="finance"))
    assert answer(outsider, interaction, decision="approve")[0] == 404
    assert Client().post(f"/interactions/{interaction.pk}/answer/").status_code == 401
    assert sent_messages(agent_stub) == []


def test_an_answer_needs_the_csrf_token(agent_stub, ops, approvers):
    interaction = waiting_interaction(agent_stub, ops)
    client = Client(enforce_csrf_checks=True)
    user = User.objects.create_user("carol")
    user.groups.add(ops, approvers)
    client.force_login(user)
    response = client.post(f"/interactions/{interaction.pk}/answer/", {"decision": "approve"})
    assert response.status_code == 403
    assert sent_messages(agent_stub) == []


def test_a_plain_form_post_redirects_back_with_the_outcome(alice_approves, agent_stub, ops):
    interaction = waiting_interaction(agent_stub, ops)
    response = alice_approves.post(
        f"/interactions/{interaction.pk}/answer/", {"decision": "approve"}, follow=True
    )
    assert response.redirect_chain[-1][0] == f"/sessions/{interaction.task.session_id}/"
    assert "Approved by alice" in response.content.decode()
    assert Session.objects.get().card.question is None  # the card shows only open questions


def test_the_admin_lists_who_answered_what(alice_approves, agent_stub, ops, admin_client):
    interaction = waiting_interaction(agent_stub, ops)
    assert answer(alice_approves, interaction, decision="deny")[0] == 200
    page = admin_client.get("/admin/tasks/interaction/?state__exact=answered").content.decode()
    assert "i-1" in page and "alice" in page and "{&quot;approved&quot;: false}" in page


def test_the_monitoring_screen_lists_open_questions_with_forms_for_approvers_only(
    alice_approves, agent_stub, ops
):
    interaction = waiting_interaction(agent_stub, ops)
    page = alice_approves.get("/").content.decode()
    waiting = page[page.index("data-waiting") :]
    assert "Ship v2?" in waiting and f'action="/interactions/{interaction.pk}/answer/"' in waiting
    viewer = person("viewer", ops)
    board = viewer.get("/live/board/?waiting=1").json()
    assert "Ship v2?" in board["waiting"] and "data-answer-form" not in board["waiting"]
    assert answer(alice_approves, interaction, decision="approve")[0] == 200
    assert "Ship v2?" not in alice_approves.get("/live/board/?waiting=1").json()["waiting"]


def test_a_question_asked_again_after_its_answer_is_open_again(alice_approves, agent_stub, ops):
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.save()
    ask = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, ask).status_code == 200
    interaction = Interaction.objects.get()
    assert answer(alice_approves, interaction, decision="approve")[0] == 200
    page = f"/sessions/{interaction.task.session_id}/"
    assert 'value="approve"' not in alice_approves.get(page).content.decode()

    # The agent did not take the answer and asks again, later: a person must decide again.
    again = status("AUTH_REQUIRED", at=10**9, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, again).status_code == 200
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN
    assert 'value="approve"' in alice_approves.get(page).content.decode()
