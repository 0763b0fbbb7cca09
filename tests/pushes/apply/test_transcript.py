"""The transcript, the agent's side (pushes/apply/transcript.py): task snapshots' history and
message pushes, in order and without duplicates. All through the real view."""

from __future__ import annotations

from datetime import timedelta

import time_machine

from tasks.models import Artifact, Delivery, Message, Session
from tests.builders import artifact, status, ts
from tests.conftest import NOW
from tests.pushes.sending import send, task


def snapshot(state="SUBMITTED", at=None, history=(), artifacts=()):
    body = {
        "id": "task-1",
        "contextId": "ctx-1",
        "status": {"state": f"TASK_STATE_{state}"},
        "history": list(history),
        "artifacts": list(artifacts),
    }
    if at is not None:
        body["status"]["timestamp"] = ts(at)
    return {"task": body}


def test_task_snapshot_brings_the_users_message_into_the_transcript(client, token_agent):
    user = {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "Clean up old builds"}]}
    send(client, token_agent, snapshot(history=[user]))
    message = Message.objects.get()
    assert (message.role, message.text) == ("ROLE_USER", "Clean up old builds")
    assert Session.objects.get().title == "Clean up old builds"


def test_users_message_stays_before_agent_statuses_stamped_earlier_than_its_receipt(
    client, token_agent
):
    # The agent stamps WORKING before Onlooker receives the snapshot that carries the
    # user's message (pushes race the executor): the transcript still reads in order.
    user = {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "please"}]}
    with time_machine.travel(NOW + timedelta(seconds=2), tick=False):
        send(client, token_agent, snapshot(history=[user]))
        send(client, token_agent, status("WORKING", at=1, text="on it"))
    assert [m.text for m in Message.objects.all()] == ["please", "Progress card updated (rev 2)"]


def test_snapshot_repeats_known_messages_and_artifacts_without_duplicating(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, text="working", message_id="s1"))
    send(client, token_agent, artifact("a1", "c1"))
    send(client, token_agent, artifact("a1", "c2", append=True, last_chunk=True))
    again = snapshot(
        state="COMPLETED",
        at=3,
        history=[{"messageId": "s1", "role": "ROLE_AGENT", "parts": [{"text": "working"}]}],
        artifacts=[{"artifactId": "a1", "parts": [{"text": "c1"}, {"text": "c2"}]}],
    )
    send(client, token_agent, again)
    assert Message.objects.count() == 1
    assert Artifact.objects.count() == 1
    assert task().state == "TASK_STATE_COMPLETED"


def test_message_push_joins_the_transcript(client, token_agent):
    body = {
        "message": {
            "messageId": "m1",
            "role": "ROLE_AGENT",
            "contextId": "ctx-9",
            "parts": [{"text": "hello"}],
        }
    }
    send(client, token_agent, body)
    assert Session.objects.get().context_id == "ctx-9"
    assert Message.objects.get().text == "hello"


def test_message_with_no_task_or_context_is_logged_and_ignored(client, token_agent):
    body = {"message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}}
    assert send(client, token_agent, body) == "ignored"
    assert not Session.objects.exists()
    assert Delivery.objects.get().warnings
