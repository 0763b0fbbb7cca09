"""Applying a task's status (pushes/apply/status.py, and the task and session it goes to):
ordered by the agent's timestamps under duplicates, reordering and terminal states, with the
profile's extensions it carries (progress, effects, telemetry). All through the real view."""

from __future__ import annotations

import pytest

from tasks.models import Artifact, Delivery, Message, Session, Task
from tasks.wire import profile
from tests.builders import artifact, progress, status
from tests.pushes.sending import FILES, send, task


def test_first_push_creates_session_and_task(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, text="Looking at the logs"))
    session = Session.objects.get()
    assert (session.agent, session.context_id) == (token_agent.agent, "ctx-1")
    assert session.state == "TASK_STATE_WORKING"
    assert not session.needs_human
    assert task().session == session
    assert task().status_message == "Looking at the logs"


def test_known_task_keeps_its_session_when_a_push_names_another_context(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, context="ctx-1"))
    send(client, token_agent, status("COMPLETED", at=2, context="ctx-other"))
    assert Session.objects.count() == 1
    assert task().state == "TASK_STATE_COMPLETED"
    assert "differs" in Delivery.objects.latest("id").warnings[0]


def test_session_state_follows_its_newest_task(client, token_agent):
    send(client, token_agent, status("COMPLETED", task="turn-1", at=1))
    send(client, token_agent, status("WORKING", task="turn-2", at=5))
    send(client, token_agent, status("COMPLETED", task="turn-1", at=2))
    assert Session.objects.get().state == "TASK_STATE_WORKING"


# -- ordering: current, history, after a terminal state ------------------------


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
