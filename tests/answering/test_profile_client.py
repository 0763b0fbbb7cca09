"""The profile's client side, through the session page's composer and a scriptable loopback
agent: the tier an agent echoes, "only if idle", queued tasks, an agent's Message answer, and
typing into a question the agent waits on (issue 11 §3)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tasks.models import Agent, Delivery, Interaction, Message, PushEndpoint, Session, Task
from tasks.wire import profile
from tests.answering.test_talking import person, post, task_json
from tests.builders import status

FORM = {"text": "Go on", "message_id": "0123456789ab"}


@pytest.fixture
def alice_approver(ops, approvers) -> Client:
    return person("alice", ops, approvers)


def send(client: Client, session: Session, **form) -> tuple[int, dict]:
    return post(client, f"/sessions/{session.pk}/messages/", **{**FORM, **form})


def page(client: Client, session: Session) -> str:
    return client.get(f"/sessions/{session.pk}/").content.decode()


def agent_page(client: Client, session: Session) -> str:
    """Where the protocol's words (the tier) are shown: the agent's page, not the session's."""
    return client.get(f"/agents/{session.agent_id}/").content.decode()


# -- extensions echo -------------------------------------------------------------------------


def test_the_extensions_an_agent_echoes_are_recorded_and_shown_as_its_tier(
    stub_session, alice_approver
):
    stub, session, _ = stub_session
    assert "<dd data-agent-tier>not known yet" in agent_page(alice_approver, session)
    echoed = f"{profile.PROGRESS}, {profile.INTERACTIONS},https://example.com/other/v1"
    stub.answer(
        {"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_WORKING")}},
        headers={"A2A-Extensions": echoed},
    )
    assert send(alice_approver, session)[0] == 200
    agent = Agent.objects.get(pk=session.agent_id)
    assert agent.activated_extensions == [profile.INTERACTIONS, profile.PROGRESS]
    assert agent.extensions_echoed_at is not None
    assert "<dd data-agent-tier>Profile v2: interactions, progress" in agent_page(
        alice_approver, session
    )
    admin = Client()
    admin.force_login(User.objects.create_superuser("root"))
    change = admin.get(f"/admin/tasks/agent/{agent.pk}/change/").content.decode()
    assert "Profile v2: interactions, progress (echoed" in change
    listing = admin.get("/admin/tasks/agent/").content.decode()
    assert "Profile v2: interactions, progress" in listing

    # An echo naming none of the profile's extensions: the agent speaks core A2A.
    stub.answer(
        {"jsonrpc": "2.0", "result": {"task": task_json("task-3", "TASK_STATE_WORKING")}},
        headers={"A2A-Extensions": "https://example.com/other/v1"},
    )
    assert send(alice_approver, session, message_id="another-id-123")[0] == 200
    assert Agent.objects.get(pk=agent.pk).activated_extensions == []
    assert "<dd data-agent-tier>Core A2A" in agent_page(alice_approver, session)


def test_an_agent_that_echoes_no_header_is_named_by_its_card_and_says_so(
    stub_session, alice_approver
):
    stub, session, _ = stub_session
    Agent.objects.filter(pk=session.agent_id).update(
        extensions=[profile.INTERACTIONS, profile.PROGRESS]
    )
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_WORKING")}})
    assert send(alice_approver, session)[0] == 200
    agent = Agent.objects.get(pk=session.agent_id)
    assert agent.activated_extensions is None and agent.extensions_echoed_at is not None
    assert (
        "<dd data-agent-tier>Profile v2 (declared by its card, not echoed): interactions, "
        "progress" in agent_page(alice_approver, session)
    )


def test_the_full_profile_is_named_in_reading_order(stub_session, alice_approver):
    stub, session, _ = stub_session
    stub.answer(
        {"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_WORKING")}},
        headers={"A2A-Extensions": ",".join(profile.EXTENSIONS)},
    )
    send(alice_approver, session)
    assert "Profile v2: interactions, progress, telemetry, files, effects" in agent_page(
        alice_approver, session
    )


# -- busy contexts ---------------------------------------------------------------------------


def test_only_if_idle_asks_the_agent_to_refuse_rather_than_queue(stub_session, alice_approver):
    stub, session, _ = stub_session
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_WORKING")}})
    send(alice_approver, session, only_if_idle="on")
    send(alice_approver, session, message_id="plain-message-1")
    first, second = stub.calls("SendMessage")
    assert first["message"]["metadata"] == {"delivery": "reject"}
    assert "metadata" not in second["message"]
    assert 'name="only_if_idle"' in page(alice_approver, session)
    assert "Send only if the agent is idle" in page(alice_approver, session)


def test_a_busy_agent_that_refuses_is_reported_and_nothing_is_kept(stub_session, alice_approver):
    stub, session, _ = stub_session
    stub.rpc_error(-32004, "context busy", reason="CONTEXT_BUSY")
    counts = [m.objects.count() for m in (Message, Task, Delivery, PushEndpoint)]
    code, data = send(alice_approver, session, only_if_idle="on")
    assert (code, data["detail"]) == (409, "The agent is busy; nothing was sent.")
    assert [m.objects.count() for m in (Message, Task, Delivery, PushEndpoint)] == counts
    # A plain form post hears the same, on the page it returns to.
    response = alice_approver.post(
        f"/sessions/{session.pk}/messages/", {**FORM, "only_if_idle": "on"}, follow=True
    )
    assert "The agent is busy; nothing was sent." in response.content.decode()


def test_a_task_the_agent_queues_is_shown_as_queued(stub_session, alice_approver):
    stub, session, _ = stub_session
    assert "data-queued-tasks" not in page(alice_approver, session)
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_SUBMITTED")}})
    code, data = send(alice_approver, session)
    assert (code, data["state"]) == (200, "queued")
    shown = page(alice_approver, session)
    assert "Queued: 1 message waits for the agent to finish its current task" in shown
    assert "<code>task-2</code>" in shown
    # Cancel stops the task at work, not the newer one queued behind it.
    assert '<input type="hidden" name="task_id" value="task-1">' in shown


def test_a_message_the_agent_answers_with_is_in_the_transcript(stub_session, alice_approver):
    stub, session, registered = stub_session
    reply = {
        "messageId": "reply-1",
        "role": "ROLE_AGENT",
        "parts": [{"text": "Nothing to do: the changelog is already drafted."}],
    }
    stub.answer({"jsonrpc": "2.0", "result": {"message": reply}})
    code, data = send(alice_approver, session)
    assert (code, data["state"]) == (200, "replied")
    assert data["detail"] == "The agent replied: see the transcript."
    kept = Message.objects.get(message_id="reply-1")
    assert (kept.session, kept.role) == (session, "ROLE_AGENT")
    # No task brings the person's message back: it is kept with the reply, before it.
    asked = Message.objects.get(message_id="onlooker-message-0123456789ab")
    assert (asked.session, asked.role, asked.text) == (session, "ROLE_USER", "Go on")
    assert (asked.at, asked.pk) < (kept.at, kept.pk)
    # Kept by ingest, the transcript's one writer, with the delivery log as for a push.
    assert Delivery.objects.filter(kind="message", agent=registered.agent).count() == 2
    assert "Nothing to do: the changelog is already drafted." in page(alice_approver, session)
    # The same answer again (a retried submit) is the same transcript line.
    send(alice_approver, session)
    assert Message.objects.filter(message_id="reply-1").count() == 1


# -- typing into a waiting question ----------------------------------------------------------


def _reply_to(html: str) -> str:
    return re.search(r'name="reply_to" value="([^"]*)"', html).group(1)


def test_the_composer_answers_the_task_that_waits_for_input(stub_session, alice_approver):
    stub, session, registered = stub_session
    assert _reply_to(page(alice_approver, session)) == ""
    assert ">Send</button>" in page(alice_approver, session)
    asked = status("INPUT_REQUIRED", at=2, text="Which branch?", message_id="ask-1")
    assert registered.push(asked).status_code == 200
    shown = page(alice_approver, session)
    assert _reply_to(shown) == "task-1"
    assert ">Reply to the agent's question</button>" in shown
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-1", "TASK_STATE_WORKING")}})

    code, data = send(alice_approver, session, text="main", reply_to="task-1")
    assert (code, data["detail"]) == (200, "Sent as the reply to the agent's question.")
    [params] = stub.calls("SendMessage")
    message = params["message"]
    assert (message["taskId"], message["contextId"]) == ("task-1", "ctx-1")
    assert message["parts"] == [{"text": "main"}]
    # The task already reports to Onlooker: no second push config for it.
    assert "taskPushNotificationConfig" not in params["configuration"]
    # It answered the agent's question, once: its form and the composer cannot answer again.
    question = Interaction.objects.get(task__task_id="task-1")
    assert (question.state, question.answer) == ("answered", {"value": "main"})
    code, data = send(alice_approver, session, text="develop", reply_to="task-1")
    assert code == 409 and "Already answered" in data["detail"]
    assert len(stub.calls("SendMessage")) == 1


def test_a_reply_to_a_question_carries_no_links(stub_session, alice_approver):
    stub, session, registered = stub_session
    registered.push(status("INPUT_REQUIRED", at=2, text="Which branch?", message_id="ask-1"))
    code, data = send(alice_approver, session, reply_to="task-1", links="https://example.com/")
    assert code == 400 and "links cannot go with an answer" in data["detail"]
    assert stub.calls("SendMessage") == []


def test_a_new_session_the_agent_answers_with_a_message_opens_on_its_reply(
    stub_session, alice_approver
):
    stub, session, _ = stub_session
    reply = {"messageId": "r-9", "role": "ROLE_AGENT", "contextId": "ctx-new",
             "parts": [{"text": "Hello! What should we plan?"}]}  # fmt: skip
    stub.answer({"jsonrpc": "2.0", "result": {"message": reply}})
    response = alice_approver.post(
        "/sessions/new/", {"agent": session.agent_id, **FORM, "text": "Plan the launch"}
    )
    opened = Session.objects.get(context_id="ctx-new")
    assert response.status_code == 302 and response["Location"] == f"/sessions/{opened.pk}/"
    assert opened.title == "Plan the launch"
    shown = page(alice_approver, opened)
    assert "Plan the launch" in shown and "Hello! What should we plan?" in shown


def test_a_reply_to_a_question_no_longer_asked_is_refused(stub_session, alice_approver):
    stub, session, registered = stub_session
    registered.push(status("INPUT_REQUIRED", at=2, text="Which branch?", message_id="ask-1"))
    # Another task of another session, and a task of this one that is not waiting.
    code, data = send(alice_approver, session, reply_to="someone-elses-task")
    assert code == 409 and "no longer waits for that reply" in data["detail"]
    # A page that did not show the question cannot answer it by accident.
    code, data = send(alice_approver, session)
    assert (code, data["detail"]) == (
        409,
        "The agent now waits for an answer to its question; nothing was sent. Read it, then "
        "send your message again as the reply.",
    )
    registered.push(status("WORKING", at=3))  # the agent moved on
    code, data = send(alice_approver, session, reply_to="task-1")
    assert code == 409 and "nothing was sent" in data["detail"]
    assert stub.calls("SendMessage") == []
    assert _reply_to(page(alice_approver, session)) == ""
