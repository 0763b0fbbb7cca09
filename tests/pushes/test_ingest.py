"""Applying pushes: sessions, tasks, transcript, interactions, artifacts and the profile's
extensions, under duplicates, reordering and terminal states. All through the real view."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine

from tasks.models import Artifact, Delivery, Interaction, Message, Session, Task
from tasks.wire import profile
from tests.builders import approval, artifact, progress, status, ts
from tests.conftest import NOW, push


def send(client, agent, body, **kwargs):
    """Push, and say what became of it: "duplicate", or the outcome the applier recorded."""
    response = push(client, agent, body, **kwargs)
    assert response.status_code == 200, response.content
    answer = response.json()
    if answer["outcome"] == "duplicate":
        return "duplicate"
    assert answer["outcome"] == "accepted", answer
    return Delivery.objects.get(pk=answer["delivery"]).outcome


def task() -> Task:
    return Task.objects.get(task_id="task-1")


def test_first_push_creates_session_and_task(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, text="Looking at the logs"))
    session = Session.objects.get()
    assert (session.agent, session.context_id) == (token_agent.agent, "ctx-1")
    assert session.state == "TASK_STATE_WORKING"
    assert not session.needs_human
    assert task().session == session
    assert task().status_message == "Looking at the logs"


def test_duplicate_delivery_changes_nothing(client, token_agent):
    body = status("WORKING", at=1, text="once")
    assert send(client, token_agent, body, msg_id="m-1") == "applied"
    assert send(client, token_agent, body, msg_id="m-1") == "duplicate"
    assert Delivery.objects.count() == 1
    assert Message.objects.count() == 1


def test_same_body_without_webhook_id_is_deduplicated_by_content(client, token_agent):
    body = status("WORKING", at=1, text="once")
    assert send(client, token_agent, body) == "applied"
    assert send(client, token_agent, body) == "duplicate"
    assert Delivery.objects.get().idempotency_key.startswith("sha256:")


def test_same_webhook_id_from_two_agents_are_two_deliveries(client, token_agent, signed_agent):
    send(client, token_agent, status("WORKING", at=1), msg_id="shared")
    send(client, signed_agent, status("WORKING", at=1), msg_id="shared")
    assert Delivery.objects.count() == 2


def test_ids_at_their_length_limit_are_stored(client, token_agent):
    body = status(
        "INPUT_REQUIRED", task="t" * 200, context="c" * 200, at=1, text="?", message_id="m" * 200
    )
    send(client, token_agent, body)
    assert Interaction.objects.get().interaction_id == "text:" + "m" * 200


def test_very_long_webhook_id_is_accepted_and_still_deduplicated(client, token_agent):
    long_id = "x" * 500
    assert send(client, token_agent, status("WORKING", at=1), msg_id=long_id) == "applied"
    assert send(client, token_agent, status("WORKING", at=2), msg_id=long_id) == "duplicate"


def test_delivery_keeps_the_raw_body(client, token_agent):
    raw = json.dumps(status("WORKING", at=1)).encode()
    send(client, token_agent, raw)
    assert Delivery.objects.get().body == raw.decode()


def test_older_status_is_logged_not_applied_but_its_message_is_kept(client, token_agent):
    send(client, token_agent, status("WORKING", at=5, text="step two"))
    assert send(client, token_agent, status("SUBMITTED", at=2, text="step one")) == "stale"
    assert task().state == "TASK_STATE_WORKING"
    # The newer text became the card's note: the transcript keeps its receipt; the older one
    # never reached the card and is kept as said.
    assert [m.text for m in Message.objects.all()] == ["step one", "Progress card updated (rev 1)"]


def test_terminal_state_is_final(client, token_agent):
    send(client, token_agent, status("COMPLETED", at=5, text="done"))
    outcome = send(client, token_agent, status("WORKING", at=9, text="again?"))
    assert outcome == "after_terminal"
    assert task().state == "TASK_STATE_COMPLETED"
    assert Delivery.objects.get(outcome="after_terminal").warnings
    assert not Message.objects.filter(text="again?").exists()


def test_terminal_state_wins_over_a_later_stamped_working(client, token_agent):
    send(client, token_agent, status("WORKING", at=9))
    send(client, token_agent, status("FAILED", at=5))
    assert task().state == "TASK_STATE_FAILED"


def test_statuses_without_timestamps_apply_in_arrival_order(client, token_agent):
    send(client, token_agent, status("WORKING", text="a"))
    send(client, token_agent, status("INPUT_REQUIRED", text="which branch?"))
    assert task().state == "TASK_STATE_INPUT_REQUIRED"


def test_untimed_status_does_not_override_a_timestamped_one(client, token_agent):
    send(client, token_agent, status("WORKING", at=3))
    assert send(client, token_agent, status("SUBMITTED")) == "stale"
    assert task().state == "TASK_STATE_WORKING"


def test_interrupted_working_interrupted_cycle_reopens(client, token_agent):
    send(client, token_agent, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    send(client, token_agent, status("WORKING", at=2))
    send(
        client,
        token_agent,
        status("INPUT_REQUIRED", at=3, metadata=approval("i-2", "Which region?", kind="question")),
    )
    states = dict(Interaction.objects.values_list("interaction_id", "state"))
    assert states == {"i-1": "closed", "i-2": "open"}
    assert Session.objects.get().needs_human


# -- interactions -------------------------------------------------------------------


@pytest.mark.parametrize(
    "state, kind",
    [
        ("AUTH_REQUIRED", "approval"),
        ("AUTH_REQUIRED", "connection"),
        ("INPUT_REQUIRED", "question"),
    ],
)
def test_typed_interaction_opens_and_session_needs_a_human(client, token_agent, state, kind):
    detail = {"url": "https://example.test/connect"} if kind == "connection" else None
    send(
        client,
        token_agent,
        status(
            state,
            at=1,
            text="prompt text",
            message_metadata=approval("i-1", "Go ahead?", kind, detail),
        ),
    )
    interaction = Interaction.objects.get()
    assert (interaction.interaction_id, interaction.kind, interaction.prompt) == (
        "i-1",
        kind,
        "Go ahead?",
    )
    assert interaction.state == "open"
    assert interaction.detail == detail
    assert Session.objects.get().needs_human
    assert not Delivery.objects.get().warnings


def test_interaction_data_may_ride_on_the_event_metadata(client, token_agent):
    send(client, token_agent, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    assert Interaction.objects.get().kind == "approval"


def test_interaction_closes_when_the_task_moves_on(client, token_agent):
    send(client, token_agent, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    send(client, token_agent, status("WORKING", at=2))
    assert Interaction.objects.get().state == "closed"
    assert not Session.objects.get().needs_human


def test_core_agents_plain_text_question_becomes_a_text_interaction(client, token_agent):
    send(
        client,
        token_agent,
        status("INPUT_REQUIRED", at=1, text="Delete 3 files? yes/no", message_id="q1"),
    )
    interaction = Interaction.objects.get()
    assert (interaction.kind, interaction.prompt) == ("text", "Delete 3 files? yes/no")
    assert interaction.interaction_id == "text:q1"
    assert Session.objects.get().needs_human


def test_approval_on_the_wrong_interrupted_state_is_kept_with_a_warning(client, token_agent):
    send(client, token_agent, status("INPUT_REQUIRED", at=1, metadata=approval("i-1", "Deploy?")))
    assert Interaction.objects.get().kind == "approval"
    assert "the profile uses TASK_STATE_AUTH_REQUIRED" in Delivery.objects.get().warnings[0]


@pytest.mark.parametrize(
    "data",
    [
        "not an object",
        {"kind": "approval"},
        {"interactionId": "i", "kind": "vote"},
        {"interactionId": "i" * 201, "kind": "approval"},
    ],
    ids=["not-object", "no-id", "bad-kind", "id-too-long"],
)
def test_bad_interaction_data_is_a_warning_and_a_text_question(client, token_agent, data):
    body = status("AUTH_REQUIRED", at=1, text="ok?", metadata={profile.INTERACTIONS: data})
    assert send(client, token_agent, body) == "applied"
    assert Interaction.objects.get().kind == "text"
    assert any("interactions/v1" in w for w in Delivery.objects.get().warnings)


def test_late_interrupted_status_records_its_interaction_as_closed(client, token_agent):
    send(client, token_agent, status("WORKING", at=5))
    send(client, token_agent, status("AUTH_REQUIRED", at=2, metadata=approval("i-1", "Deploy?")))
    assert Interaction.objects.get().state == "closed"
    assert not Session.objects.get().needs_human


# -- profile extensions ---------------------------------------------------------------


def test_progress_steps_are_stored_for_the_card(client, token_agent):
    plan = progress(("Read the logs", "completed"), ("Fix it", "in_progress"))
    send(client, token_agent, status("WORKING", at=1, metadata=plan))
    assert task().plan == [
        {"label": "Read the logs", "state": "completed"},
        {"label": "Fix it", "state": "in_progress"},
    ]


def test_newer_plan_replaces_older_and_late_older_plan_does_not(client, token_agent):
    send(client, token_agent, status("WORKING", at=5, metadata=progress(("new", "in_progress"))))
    send(client, token_agent, status("WORKING", at=2, metadata=progress(("old", "pending"))))
    assert task().plan == [{"label": "new", "state": "in_progress"}]


def test_plan_from_an_older_status_survives_a_newer_status_without_plan(client, token_agent):
    send(client, token_agent, status("WORKING", at=5))
    send(client, token_agent, status("WORKING", at=2, metadata=progress(("a", "completed"))))
    assert task().plan == [{"label": "a", "state": "completed"}]


def test_progress_with_more_than_20_steps_keeps_20_and_warns(client, token_agent):
    steps = [(f"step {i}", "pending") for i in range(25)]
    send(client, token_agent, status("WORKING", at=1, metadata=progress(*steps)))
    assert len(task().plan) == 20
    assert "at most 20" in Delivery.objects.get().warnings[0]


def test_unknown_step_state_shows_as_pending_with_a_warning(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, metadata=progress(("a", "blocked"))))
    assert task().plan == [{"label": "a", "state": "pending"}]
    assert "shown as pending" in Delivery.objects.get().warnings[0]


def test_step_note_is_kept(client, token_agent):
    data = {profile.PROGRESS: {"steps": [{"label": "a", "state": "failed", "note": "timed out"}]}}
    send(client, token_agent, status("WORKING", at=1, metadata=data))
    assert task().plan == [{"label": "a", "state": "failed", "note": "timed out"}]


@pytest.mark.parametrize(
    "data",
    [["a"], {"steps": "a"}, {"steps": [{"state": "pending"}]}],
    ids=["list", "str", "no-label"],
)
def test_bad_progress_data_is_a_warning_not_a_failure(client, token_agent, data):
    body = status("WORKING", at=1, text="still working", metadata={profile.PROGRESS: data})
    assert send(client, token_agent, body) == "applied"
    assert task().state == "TASK_STATE_WORKING"
    assert Delivery.objects.get().warnings


def test_uncertain_effect_is_recorded_once_and_task_stays_working(client, token_agent):
    effect = {profile.EFFECTS: {"uncertain": "deploy-42"}}
    send(client, token_agent, status("WORKING", at=1, metadata=effect))
    send(client, token_agent, status("WORKING", at=2, metadata=effect))
    assert task().uncertain_effects == ["deploy-42"]
    assert task().state == "TASK_STATE_WORKING"


def test_bad_effects_data_is_a_warning(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, metadata={profile.EFFECTS: {"uncertain": 3}}))
    assert task().uncertain_effects == []
    assert "effects/v1" in Delivery.objects.get().warnings[0]


def test_telemetry_on_the_terminal_status_is_stored(client, token_agent):
    data = {profile.TELEMETRY: {"steps": 7, "tokens": 12000, "costUsd": 0.42, "traceId": "tr-1"}}
    send(client, token_agent, status("COMPLETED", at=1, metadata=data))
    assert task().telemetry == {"steps": 7, "tokens": 12000, "costUsd": 0.42, "traceId": "tr-1"}


def test_whole_numbers_sent_as_floats_are_counts(client, token_agent):
    # Python a2a-sdk agents carry metadata in protobuf Structs: every number is a double.
    data = {profile.TELEMETRY: {"steps": 3.0, "tokens": 1234.0, "costUsd": 0.5, "traceId": "t"}}
    send(client, token_agent, artifact("a1", "x", files={**FILES, "version": 2.0, "size": 12.0}))
    send(client, token_agent, status("COMPLETED", at=1, metadata=data))
    assert task().telemetry == {"steps": 3, "tokens": 1234, "costUsd": 0.5, "traceId": "t"}
    assert (Artifact.objects.get().files["version"], Artifact.objects.get().files["size"]) == (
        2,
        12,
    )
    assert not any(d.warnings for d in Delivery.objects.all())
    send(
        client,
        token_agent,
        status("COMPLETED", at=2, task="t2", metadata={profile.TELEMETRY: {"steps": 2.5}}),
    )
    assert Task.objects.get(task_id="t2").telemetry is None


def test_bad_telemetry_fields_are_dropped_with_a_warning(client, token_agent):
    data = {profile.TELEMETRY: {"steps": -1, "tokens": "many", "costUsd": 0.5, "traceId": "t"}}
    send(client, token_agent, status("COMPLETED", at=1, metadata=data))
    assert task().telemetry == {"costUsd": 0.5, "traceId": "t"}
    assert len(Delivery.objects.get().warnings) == 2


# -- artifacts ------------------------------------------------------------------------

FILES = {"kind": "report", "version": 1, "size": 12, "sha256": "a" * 64, "path": "out/r.md"}


def test_chunked_artifact_is_assembled_in_one_version(client, token_agent):
    send(client, token_agent, artifact("a1", "chunk1", files=FILES, name="report"))
    send(client, token_agent, artifact("a1", "chunk2", append=True, last_chunk=True))
    version = Artifact.objects.get()
    assert [p["text"] for p in version.parts] == ["chunk1", "chunk2"]
    assert (version.name, version.files) == ("report", FILES)


def test_every_artifact_version_is_kept(client, token_agent):
    send(client, token_agent, artifact("a1", "first", files=FILES))
    send(client, token_agent, artifact("a1", "second", files={**FILES, "version": 2}))
    versions = list(Artifact.objects.values_list("sequence", "parts"))
    assert versions == [(1, [{"text": "first"}]), (2, [{"text": "second"}])]


def test_resent_identical_artifact_is_not_a_new_version(client, token_agent):
    send(client, token_agent, artifact("a1", "same"), msg_id="x1")
    send(client, token_agent, artifact("a1", "same"), msg_id="x2")
    assert Artifact.objects.count() == 1


def test_append_for_an_unseen_artifact_starts_it_with_a_warning(client, token_agent):
    send(client, token_agent, artifact("a9", "tail", append=True))
    assert Artifact.objects.get().parts == [{"text": "tail"}]
    assert "not seen before" in Delivery.objects.get().warnings[0]


def test_bad_files_data_is_dropped_with_a_warning(client, token_agent):
    send(
        client,
        token_agent,
        artifact("a1", "x", files={"kind": "r", "sha256": "nothex", "size": -3}),
    )
    assert Artifact.objects.get().files == {"kind": "r"}
    assert len(Delivery.objects.get().warnings) == 2


def test_artifact_for_an_unknown_task_creates_it(client, token_agent):
    send(client, token_agent, artifact("a1", "x", task="new-task"))
    assert Task.objects.get(task_id="new-task").state == "TASK_STATE_SUBMITTED"


# -- task snapshots and messages ------------------------------------------------------


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


def test_known_task_keeps_its_session_when_a_push_names_another_context(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, context="ctx-1"))
    send(client, token_agent, status("COMPLETED", at=2, context="ctx-other"))
    assert Session.objects.count() == 1
    assert task().state == "TASK_STATE_COMPLETED"
    assert "differs" in Delivery.objects.latest("id").warnings[0]


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


def test_session_state_follows_its_newest_task(client, token_agent):
    send(client, token_agent, status("COMPLETED", task="turn-1", at=1))
    send(client, token_agent, status("WORKING", task="turn-2", at=5))
    send(client, token_agent, status("COMPLETED", task="turn-1", at=2))
    assert Session.objects.get().state == "TASK_STATE_WORKING"
