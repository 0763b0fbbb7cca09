"""A question the agent no longer knows (it restarted and lost its tasks) can be dismissed by
a person who may answer, with a note in the transcript; before, it waited forever.

Against a real a2a-sdk agent (tests/peers/approval_agent.py) restarted so it forgets its
in-memory tasks; against a scriptable loopback agent for the answers a real one will not give
on demand (down, moved on, slow).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import connection
from django.test import Client

from tasks.answering import agent_http
from tasks.models import Interaction, Message, ProgressCard, Session
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    add_agent,
    onlooker,
    start_peer,
    wait_for_approval,
)
from tests.answering.test_answers import answer, person, sent_messages
from tests.builders import approval, status
from tests.conftest import make_agent, member, push
from tests.peers.misbehaving_agent import ACCEPTED, Answer, MisbehavingAgent, Received
from tests.processes import free_port

FORGOTTEN = "The agent no longer knows this task (it may have restarted)."
NOT_FOUND = {"jsonrpc": "2.0", "error": {"code": -32001, "message": "Task not found"}}
TEN_OH_FIVE = datetime(2026, 12, 1, 10, 5, 0, tzinfo=UTC)


def dismiss(client: Client, interaction: Interaction) -> tuple[int, dict]:
    response = client.post(
        f"/interactions/{interaction.pk}/dismiss/", HTTP_ACCEPT="application/json"
    )
    return response.status_code, response.json()


def page_of(client: Client, interaction: Interaction) -> str:
    return client.get(f"/sessions/{interaction.task.session_id}/").content.decode()


def notes(interaction: Interaction) -> list[str]:
    return list(
        Message.objects.filter(
            session=interaction.task.session, role=Message.Role.ONLOOKER
        ).values_list("text", flat=True)
    )


def revision(interaction: Interaction) -> int:
    return ProgressCard.objects.get(session=interaction.task.session_id).revision


def asking_peer(start):
    """A real a2a-sdk agent registered for team ops, waiting for an approval: (the peer, the
    open interaction). `start` is the start_peer fixture."""
    peer = start()
    registration = add_agent(peer.card_url, "--team", "ops")
    task = wait_for_approval(peer, registration)
    return peer, Interaction.objects.get(task__task_id=task["id"])


# -- against a real a2a-sdk agent that restarts -----------------------------------------------


def test_a_question_the_restarted_agent_forgot_is_dismissed_with_a_note(
    onlooker,  # noqa: F811 - fixtures imported from test_a2a_peer
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer, interaction = asking_peer(start_peer)
    alice = person("alice", ops, approvers)
    # The agent restarts on the same address and keeps its tasks in memory only.
    peer.stop()
    start_peer(port=peer.port)

    code, data = answer(alice, interaction, decision="approve")

    assert code == 502
    assert data["detail"] == (
        "Not sent: the agent no longer knows this task (it may have restarted). "
        "You can answer again, or dismiss it if it is no longer needed."
    )
    interaction.refresh_from_db()
    assert (interaction.state, interaction.forgotten) == ("open", True)
    page = page_of(alice, interaction)
    assert FORGOTTEN in page and ">Dismiss</button>" in page
    before = revision(interaction)

    code, data = dismiss(alice, interaction)

    assert code == 200, data
    assert data == {
        "state": "dismissed",
        "detail": "Dismissed by alice: the agent no longer knew this task.",
    }
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.DISMISSED
    assert interaction.dismissed_by.username == "alice"
    assert Session.objects.get(pk=interaction.task.session_id).needs_human is False
    assert notes(interaction) == [
        "Dismissed by alice: the agent no longer knew this task. "
        "(Approval: Publish the release notes to the public site?)"
    ]
    card = ProgressCard.objects.get(session=interaction.task.session_id)
    assert card.revision > before and card.question is None
    page = page_of(alice, interaction)
    assert "data-onlooker-note" in page
    assert "Dismissed by alice: the agent no longer knew this task." in page
    assert FORGOTTEN not in page and 'value="approve"' not in page


def test_dismissing_a_question_the_agent_still_waits_for_is_refused_and_changes_nothing(
    onlooker,  # noqa: F811
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer, interaction = asking_peer(start_peer)
    before = revision(interaction)

    code, data = dismiss(person("alice", ops, approvers), interaction)

    assert code == 409
    assert data["detail"] == (
        "The agent still knows this task and waits for an answer: answer it instead. "
        "Nothing was dismissed."
    )
    interaction.refresh_from_db()
    assert (interaction.state, interaction.dismissed_by) == ("open", None)
    assert Session.objects.get(pk=interaction.task.session_id).needs_human is True
    assert notes(interaction) == []
    assert revision(interaction) == before
    assert peer.get_task(interaction.task.task_id)["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"


# -- against a scriptable agent ---------------------------------------------------------------


def asking(team_agent) -> Interaction:
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), team_agent, body).status_code == 200
    return Interaction.objects.get()


def forgets(stub: MisbehavingAgent, send: Answer | None = None) -> None:
    """The agent knows no task: GetTask answers -32001, and so does SendMessage unless
    `send` says otherwise."""

    def choose(received: Received) -> Answer:
        if received.method == "POST" and received.json().get("method") == "SendMessage":
            return send or Answer(body=NOT_FOUND)
        return Answer(body=NOT_FOUND)

    stub.answer_each(choose)


def test_a_viewer_may_not_dismiss(team_agent, agent_stub, ops):
    interaction = asking(team_agent)
    forgets(agent_stub)
    code, data = dismiss(person("viewer", ops), interaction)
    assert code == 403
    assert data["detail"] == "You may see this, but not dismiss it: ask for the approver role."
    assert agent_stub.calls("GetTask") == []
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN


def test_the_page_offers_dismiss_only_to_those_who_may_answer(
    team_agent, agent_stub, ops, approver
):
    interaction = asking(team_agent)
    assert FORGOTTEN not in page_of(approver, interaction)  # not before the agent says so
    forgets(agent_stub)
    assert answer(approver, interaction, decision="approve")[0] == 502
    assert ">Dismiss</button>" in page_of(approver, interaction)
    viewer = page_of(person("viewer", ops), interaction)
    assert FORGOTTEN in viewer and ">Dismiss</button>" not in viewer


def test_a_second_dismiss_says_it_is_already_dismissed(team_agent, agent_stub, ops, approvers):
    interaction = asking(team_agent)
    forgets(agent_stub)
    alice, bob = person("alice", ops, approvers), person("bob", ops, approvers)
    with time_machine.travel(TEN_OH_FIVE, tick=False):
        assert dismiss(alice, interaction)[0] == 200
        code, data = dismiss(bob, interaction)
    assert code == 409
    assert data["detail"] == (
        "Already dismissed: Dismissed by alice, 10:05: the agent no longer knew this task."
    )
    assert len(agent_stub.calls("GetTask")) == 1  # the second never asked the agent
    assert len(notes(interaction)) == 1
    # Nor can it be answered once dismissed.
    code, data = answer(bob, interaction, decision="approve")
    assert code == 409 and data["detail"].startswith("Already dismissed: Dismissed by alice")
    assert sent_messages(agent_stub) == []


def test_an_agent_that_cannot_be_reached_dismisses_nothing(team_agent, agent_stub, approver):
    interaction = asking(team_agent)
    forgets(agent_stub)
    assert answer(approver, interaction, decision="approve")[0] == 502
    # The agent is down: nothing listens where it was.
    team_agent.agent.rpc_url = f"http://127.0.0.1:{free_port()}/a2a/jsonrpc"
    team_agent.agent.save()

    code, data = dismiss(approver, interaction)

    assert code == 502
    assert data["detail"].startswith(
        "Nothing was dismissed: Onlooker could not ask the agent whether it still waits for "
        "this (could not connect to the agent at "
    )
    interaction.refresh_from_db()
    assert (interaction.state, interaction.forgotten) == ("open", True)
    assert Session.objects.get().needs_human is True
    assert notes(interaction) == []


def test_a_question_being_answered_is_not_dismissed(team_agent, agent_stub, ops, approvers):
    interaction = asking(team_agent)
    forgets(agent_stub)
    bob = member("bob", ops, approvers)
    Interaction.objects.filter(pk=interaction.pk).update(
        state=Interaction.State.ANSWERING, answered_by=bob, answer={"approved": True}
    )
    code, data = dismiss(person("alice", ops, approvers), interaction)
    assert (code, data["detail"]) == (409, "Being answered by bob right now: Approve.")
    assert agent_stub.calls("GetTask") == []
    assert notes(interaction) == []


def test_an_answer_sent_and_then_refused_as_unknown_can_be_dismissed(
    team_agent, agent_stub, ops, approvers, monkeypatch
):
    interaction = asking(team_agent)
    alice = person("alice", ops, approvers)
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)
    agent_stub.answer(ACCEPTED, delay=1.0)  # took it, perhaps, and never said so
    assert answer(alice, interaction, decision="approve")[0] == 502
    forgets(agent_stub)  # then restarted

    code, data = answer(alice, interaction, decision="approve")

    assert code == 502
    assert data["detail"].startswith("Approve was sent at ")
    assert data["detail"].endswith(
        "by alice, but the agent no longer knows this task (it may have restarted). "
        "Retry sending Approve, or dismiss it if it is no longer needed."
    )
    interaction.refresh_from_db()
    assert (interaction.state, interaction.forgotten) == ("sent", True)
    assert dismiss(alice, interaction)[0] == 200
    interaction.refresh_from_db()
    # What was sent before the agent forgot stays on record beside the dismissal.
    assert (interaction.state, interaction.answer) == ("dismissed", {"approved": True})


def test_an_agent_whose_task_went_on_unheard_closes_the_question(team_agent, agent_stub, approver):
    interaction = asking(team_agent)
    done = {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-30T12:00:05Z"}
    agent_stub.rpc_result({"id": "task-1", "contextId": "ctx-1", "status": done})

    code, data = dismiss(approver, interaction)

    assert (code, data) == (200, {"state": "closed", "detail": "Closed: the agent had moved on."})
    session = Session.objects.get()
    assert (session.state, session.needs_human) == ("TASK_STATE_COMPLETED", False)
    assert notes(interaction) == []


def test_a_refused_answer_asks_the_agent_whether_it_still_knows_the_task(
    team_agent, agent_stub, approver
):
    interaction = asking(team_agent)
    refused = {"jsonrpc": "2.0", "error": {"code": -32004, "message": "Unsupported operation"}}
    forgets(agent_stub, send=Answer(body=refused))

    code, data = answer(approver, interaction, decision="approve")

    assert code == 502
    assert data["detail"].startswith(
        "Not sent: the agent no longer knows this task (it may have restarted)."
    )
    assert len(agent_stub.calls("GetTask")) == 1
    interaction.refresh_from_db()
    assert (interaction.state, interaction.forgotten) == ("open", True)
    assert ">Dismiss</button>" in page_of(approver, interaction)


def test_a_refused_answer_to_a_task_that_ended_unheard_closes_the_question(
    team_agent, agent_stub, approver
):
    interaction = asking(team_agent)
    ended = {"jsonrpc": "2.0", "error": {"code": -32004, "message": "Task is in terminal state"}}
    done = {"state": "TASK_STATE_FAILED", "timestamp": "2026-11-30T12:00:05Z"}

    def choose(received: Received) -> Answer:
        if received.json().get("method") == "GetTask":
            return Answer(
                body={
                    "jsonrpc": "2.0",
                    "result": {"id": "task-1", "contextId": "ctx-1", "status": done},
                }
            )
        return Answer(body=ended)

    agent_stub.answer_each(choose)

    code, data = answer(approver, interaction, decision="approve")

    assert (code, data["detail"]) == (
        502,
        "The agent did not take it: the agent does not support this operation (Task is in "
        "terminal state). It has moved on from this.",
    )
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == ("closed", None)
    session = Session.objects.get()
    assert (session.state, session.needs_human) == ("TASK_STATE_FAILED", False)


@pytest.mark.django_db(transaction=True)
def test_a_dismiss_racing_an_answer_never_lets_both_happen(ops, approvers):
    with MisbehavingAgent() as stub:
        # The agent forgot the task (GetTask: not found) yet takes a message, slowly: the
        # worst case, where an answer that is sent must not also be dismissed.
        forgets(stub, send=Answer(body=ACCEPTED, delay=0.3))
        registered = make_agent(team=ops)
        registered.agent.rpc_url = stub.rpc_url
        registered.agent.save()
        interaction = asking(registered)
        alice, bob = person("alice", ops, approvers), person("bob", ops, approvers)
        results: dict[str, tuple[int, dict]] = {}
        start = threading.Barrier(2)

        def press(name: str, act) -> None:
            try:
                start.wait()
                results[name] = act()
            finally:
                connection.close()  # this thread's: left open, it outlives the test database

        threads = [
            threading.Thread(target=press, args=("answer", lambda: answer(alice, interaction,
                                                                          decision="approve"))),
            threading.Thread(target=press, args=("dismiss", lambda: dismiss(bob, interaction))),
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        codes = {name: code for name, (code, _) in results.items()}
        interaction.refresh_from_db()
        if codes["answer"] == 200:
            assert codes["dismiss"] == 409
            assert interaction.state == Interaction.State.ANSWERED
            assert notes(interaction) == []
        else:
            assert (codes["answer"], codes["dismiss"]) == (409, 200)
            assert interaction.state == Interaction.State.DISMISSED
            assert sent_messages(stub) == []
