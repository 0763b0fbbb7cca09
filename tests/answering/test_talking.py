"""Talking to agents from the session page: the composer (SendMessage with a push config that
points at Onlooker) and the cancel button (CancelTask), through the real views."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from tasks.models import PushEndpoint, Session, Task
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    add_agent,
    onlooker,
    start_peer,
    wait_for,
    wait_for_approval,
)
from tests.conftest import member


def person(name: str, *groups: Group) -> Client:
    client = Client()
    client.force_login(member(name, *groups))
    return client


def post(client: Client, url: str, **form) -> tuple[int, dict]:
    response = client.post(url, form, HTTP_ACCEPT="application/json")
    return response.status_code, response.json()


def task_json(task_id: str, state: str, context: str = "ctx-1") -> dict:
    return {
        "id": task_id,
        "contextId": context,
        "status": {"state": state, "timestamp": "2026-11-30T12:00:05Z"},
    }


# -- with a real a2a-sdk agent --------------------------------------------------------------


def test_a_message_starts_work_whose_updates_reach_onlooker_and_cancel_stops_it(
    onlooker,  # noqa: F811 - a fixture imported from test_a2a_peer
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer = start_peer()
    registration = add_agent(peer.card_url, "--team", "ops")
    first = wait_for_approval(peer, registration)
    session = Session.objects.get(context_id=first["contextId"])
    alice = person("alice", ops, approvers)

    code, data = post(
        alice, f"/sessions/{session.pk}/messages/", text="Also draft the changelog",
        message_id="a1b2c3d4e5f6",
    )  # fmt: skip
    assert code == 200, data

    def second_task_waiting() -> Task | None:
        return (
            Task.objects.filter(session=session, state="TASK_STATE_AUTH_REQUIRED")
            .exclude(task_id=first["id"])
            .first()
        )

    # The new task's own pushes (through the push config Onlooker attached) arrive.
    second = wait_for(second_task_waiting, "the new task's pushes", peer.diagnose)
    composer_endpoint = PushEndpoint.objects.filter(agent=session.agent).latest("created_at")
    assert any(p["url"] == composer_endpoint.push_url for p in peer.pushes("answered"))

    code, data = post(
        alice, f"/sessions/{session.pk}/cancel/", task_id=second.task_id, confirm="yes"
    )
    assert code == 200 and data["detail"] == "The agent says the task is now canceled."
    assert peer.get_task(second.task_id)["status"]["state"] == "TASK_STATE_CANCELED"
    second.refresh_from_db()
    assert second.state == "TASK_STATE_CANCELED"


# -- what reaches the agent -----------------------------------------------------------------


def test_a_message_carries_a_push_config_pointing_at_onlooker(stub_session, ops, approvers):
    stub, session, _ = stub_session
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_SUBMITTED")}})
    alice = person("alice", ops, approvers)
    code, data = post(
        alice, f"/sessions/{session.pk}/messages/", text="Go on", message_id="0123456789ab"
    )
    assert (code, data["state"]) == (200, "queued")  # task-1 is still working
    [params] = stub.calls("SendMessage")
    message, config = params["message"], params["configuration"]["taskPushNotificationConfig"]
    assert (message["contextId"], message["parts"]) == ("ctx-1", [{"text": "Go on"}])
    assert "taskId" not in message
    assert message["messageId"] == "onlooker-message-0123456789ab"
    endpoint = PushEndpoint.objects.get(public_id=config["id"])
    assert config["url"] == endpoint.push_url and endpoint.agent == session.agent
    assert Task.objects.filter(session=session, task_id="task-2").exists()  # shown at once


def test_a_repeated_submit_is_the_same_message_at_the_agent(stub_session, ops, approvers):
    stub, session, _ = stub_session
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_WORKING")}})
    alice = person("alice", ops, approvers)
    for _ in range(2):
        post(alice, f"/sessions/{session.pk}/messages/", text="Go", message_id="same-id-123")
    ids = {p["message"]["messageId"] for p in stub.calls("SendMessage")}
    assert ids == {"onlooker-message-same-id-123"}


def test_a_message_the_agent_refuses_leaves_no_push_config(stub_session, ops, approvers):
    stub, session, _ = stub_session
    stub.rpc_error(-32004, "busy", reason="CONTEXT_BUSY")
    before = PushEndpoint.objects.count()
    code, data = post(
        person("alice", ops, approvers), f"/sessions/{session.pk}/messages/", text="Hi",
        message_id="0123456789ab",
    )  # fmt: skip
    assert (code, data["detail"]) == (409, "The agent is busy; nothing was sent.")
    assert PushEndpoint.objects.count() == before


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({"text": "  ", "message_id": "0123456789ab"}, "must not be empty"),
        ({"text": "hi", "message_id": "short"}, "message_id must be 8 to 64"),
        ({"text": "hi", "message_id": "0123456789ab<script>"}, "only letters, digits"),
        ({"text": "x" * 4001, "message_id": "0123456789ab"}, "at most 4000"),
    ],
)
def test_a_bad_message_is_refused_and_sends_nothing(stub_session, ops, approvers, form, words):
    stub, session, _ = stub_session
    code, data = post(person("alice", ops, approvers), f"/sessions/{session.pk}/messages/", **form)
    assert code == 400 and words in data["detail"]
    assert stub.calls("SendMessage") == []


def test_cancel_reports_the_agents_answer_and_refuses_a_foreign_task(stub_session, ops, approvers):
    stub, session, _ = stub_session
    alice = person("alice", ops, approvers)
    stub.rpc_error(-32002, "Task cannot be canceled")
    code, data = post(alice, f"/sessions/{session.pk}/cancel/", task_id="task-1", confirm="yes")
    assert code == 502 and "cannot cancel this task" in data["detail"]
    code, data = post(
        alice, f"/sessions/{session.pk}/cancel/", task_id="someone-elses", confirm="yes"
    )
    assert code == 400 and "names no task of this session" in data["detail"]
    assert [p["id"] for p in stub.calls("CancelTask")] == ["task-1"]


def test_a_cancel_without_confirmation_changes_nothing_and_says_what_is_needed(
    stub_session, ops, approvers
):
    stub, session, _ = stub_session
    alice = person("alice", ops, approvers)
    page = alice.get(f"/sessions/{session.pk}/").content.decode()
    # Only the confirmation's form, behind "Cancel task…", carries confirm=yes.
    confirmation = page[page.index("Cancel task…") :]
    assert 'name="confirm" value="yes"' in confirmation and "Cancel this task?" in confirmation
    for unconfirmed in ({}, {"confirm": ""}, {"confirm": "no"}):
        code, data = post(alice, f"/sessions/{session.pk}/cancel/", task_id="task-1", **unconfirmed)
        assert code == 400 and "Nothing was cancelled" in data["detail"]
        assert "confirm" in data["detail"]
    # A plain form post (no script): back to the page, which says the same.
    response = alice.post(f"/sessions/{session.pk}/cancel/", {"task_id": "task-1"}, follow=True)
    assert "Nothing was cancelled" in response.content.decode()
    assert stub.calls("CancelTask") == []
    assert session.tasks.get().state == "TASK_STATE_WORKING"


def test_viewers_and_other_teams_cannot_message_or_cancel(stub_session, ops, approvers):
    stub, session, _ = stub_session
    viewer = person("viewer", ops)
    page = viewer.get(f"/sessions/{session.pk}/").content.decode()
    assert "messaging its agent needs the approver role" in page
    assert "Cancel task" not in page
    form = {"text": "hi", "message_id": "0123456789ab"}
    assert post(viewer, f"/sessions/{session.pk}/messages/", **form)[0] == 403
    assert (
        post(viewer, f"/sessions/{session.pk}/cancel/", task_id="task-1", confirm="yes")[0] == 403
    )
    outsider = person("mallory", approvers, Group.objects.create(name="finance"))
    assert post(outsider, f"/sessions/{session.pk}/messages/", **form)[0] == 404
    assert stub.requests == []


def test_new_session_starts_a_conversation_and_opens_its_page(stub_session, ops, approvers):
    stub, session, _ = stub_session
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("t-9", "TASK_STATE_SUBMITTED",
                                                                 context="ctx-new")}})  # fmt: skip
    alice = person("alice", ops, approvers)
    assert "New session" in alice.get("/").content.decode()
    response = alice.post(
        "/sessions/new/",
        {"agent": session.agent_id, "text": "Plan the launch", "message_id": "0123456789ab"},
    )
    opened = Session.objects.get(context_id="ctx-new")
    assert response.status_code == 302 and response["Location"] == f"/sessions/{opened.pk}/"
    [params] = stub.calls("SendMessage")
    assert "contextId" not in params["message"] and "taskPushNotificationConfig" in str(params)
    viewer = person("viewer", ops)
    assert "New session" not in viewer.get("/").content.decode()
    form = {"agent": session.agent_id, "text": "x", "message_id": "0123456789ab"}
    assert post(viewer, "/sessions/new/", **form)[0] == 403


@pytest.mark.django_db
@pytest.mark.parametrize("agent", ["²", "٣", "9" * 5000, "99999999999999999999"])
def test_new_session_for_an_agent_id_that_is_no_plain_number_is_refused_or_not_found(
    agent, ops, approvers
):
    """An id of "²" passed str.isdigit() and then raised in int(); 20 digits overflowed."""
    alice = person("alice", ops, approvers)
    form = {"agent": agent, "text": "Plan the launch", "message_id": "0123456789ab"}
    code, data = post(alice, "/sessions/new/", **form)
    assert code in (400, 404), data
    assert not Session.objects.exists()
