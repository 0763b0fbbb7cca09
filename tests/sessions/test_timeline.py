"""A session's timeline (issue 15): every state each task entered, in the order Onlooker
received them and for how long, the decisions people made, the card's revisions and the
artifact versions, through the real receiver, applier, answer view and `/api/sessions/<id>`."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.serializers.json import DjangoJSONEncoder
from django.test import Client

from tasks.models import Session, Task
from tasks.models.timeline import TimelineEntry
from tasks.pushes import applier
from tasks.sessions import timeline
from tests.answering.test_answers import answer, waiting_interaction
from tests.answering.test_dismiss import asking, dismiss, forgets
from tests.builders import artifact, progress, status
from tests.conftest import make_agent, member, push
from tests.migrating import as_written
from tests.sessions.test_progress_card_writers import both_ways, write  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    """`at(seconds)` as the JSON API writes times."""
    return DjangoJSONEncoder().default(at(seconds))


def pushed(registered, body, when: float) -> None:
    with time_machine.travel(at(when), tick=False):
        response = push(Client(), registered, body)
    assert response.status_code == 200, response.content


def detail(client: Client, session: Session, when: float) -> dict:
    with time_machine.travel(at(when), tick=False):
        response = client.get(f"/api/sessions/{session.pk}")
    assert response.status_code == 200, response.content
    return response.json()


def of_kind(data: dict, kind: str) -> list[dict]:
    return [entry for entry in data["timeline"] if entry["kind"] == kind]


@pytest.fixture
def reader(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def registered(ops):
    return make_agent(team=ops)


def test_states_of_every_task_come_in_received_order_each_with_how_long_it_lasted(
    registered, reader
):
    # The agent's clock says task-2 started before task-1 went on: Onlooker's clock orders.
    pushed(registered, status("WORKING", task="task-1", at=100), 0)
    pushed(registered, status("WORKING", task="task-2", at=50), 5)
    pushed(registered, status("INPUT_REQUIRED", task="task-1", at=101, text="Which?"), 12)
    pushed(registered, status("COMPLETED", task="task-2", at=60), 20.5)
    session = Session.objects.get()

    data = detail(reader, session, 30)

    states = [
        (e["taskId"], e["state"], e["durationSeconds"], e["ongoing"])
        for e in of_kind(data, "state")
    ]
    assert states == [
        ("task-1", "TASK_STATE_WORKING", 12.0, False),
        ("task-2", "TASK_STATE_WORKING", 15.5, False),
        ("task-1", "TASK_STATE_INPUT_REQUIRED", 18.0, True),  # still waiting: up to now
        ("task-2", "TASK_STATE_COMPLETED", None, False),  # final: it has no end
    ]
    assert [e["at"] for e in of_kind(data, "state")] == [
        iso(0),
        iso(5),
        iso(12),
        iso(20.5),
    ]
    assert of_kind(data, "state")[1]["agentTimestamp"] == "2026-11-30T12:00:50Z"
    # The whole list is in time order, whatever the kind.
    moments = [e["at"] for e in data["timeline"]]
    assert moments == sorted(moments)
    assert data["timelineTruncated"] is False


def test_a_repeated_state_an_older_status_and_a_status_after_the_end_add_no_state(
    registered, reader
):
    pushed(registered, status("WORKING", at=10, text="one"), 0)
    pushed(registered, status("WORKING", at=11, text="two"), 1)  # same state again
    pushed(registered, status("INPUT_REQUIRED", at=5, text="old"), 2)  # older: history
    pushed(registered, status("COMPLETED", at=20), 3)
    pushed(registered, status("FAILED", at=30), 4)  # after the end: logged only

    data = detail(reader, Session.objects.get(), 10)

    assert [(e["state"], e["durationSeconds"]) for e in of_kind(data, "state")] == [
        ("TASK_STATE_WORKING", 3.0),
        ("TASK_STATE_COMPLETED", None),
    ]


def test_a_tasks_first_status_is_an_entry_even_in_the_state_it_was_created_in(registered, reader):
    pushed(registered, status("SUBMITTED", at=1), 0)
    pushed(registered, status("WORKING", at=2), 4)

    data = detail(reader, Session.objects.get(), 6)

    assert [(e["state"], e["durationSeconds"]) for e in of_kind(data, "state")] == [
        ("TASK_STATE_SUBMITTED", 4.0),
        ("TASK_STATE_WORKING", 2.0),
    ]


def test_each_card_revision_is_one_entry_and_a_batch_of_pushes_derives_one(
    registered, reader, settings
):
    pushed(registered, status("WORKING", at=1, text="Starting"), 0)
    pushed(registered, status("WORKING", at=2, metadata=progress(("Build", "in_progress"))), 1)
    settings.ONLOOKER_APPLIER = "external"  # these three wait, and are applied as one batch
    for second in (3, 4, 5):
        pushed(registered, status("WORKING", at=second, text=f"step {second}"), second)
    with time_machine.travel(at(6), tick=False):
        assert applier.drain() == 3
    session = Session.objects.get()

    cards = of_kind(detail(reader, session, 7), "card")

    assert [(e["revision"], e["at"], e["taskId"]) for e in cards] == [
        (1, iso(0), None),
        (2, iso(1), None),
        (3, iso(6), None),
    ]
    assert session.card.revision == 3


def test_each_new_artifact_version_is_an_entry_and_its_chunks_are_not(registered, reader):
    pushed(registered, status("WORKING", at=1), 0)
    pushed(registered, artifact("report", "part one", name="Report", last_chunk=False), 1)
    pushed(registered, artifact("report", " part two", append=True, last_chunk=True), 2)
    pushed(registered, artifact("report", "rewritten", name="Report"), 3)

    entries = of_kind(detail(reader, Session.objects.get(), 4), "artifact")

    assert [(e["artifactId"], e["name"], e["version"], e["taskId"]) for e in entries] == [
        ("report", "Report", 1, "task-1"),
        ("report", "Report", 2, "task-1"),
    ]
    assert [e["at"] for e in entries] == [
        iso(1),
        iso(3),
    ]


def test_an_answer_says_who_decided_what_and_when(agent_stub, ops, approvers, reader):
    with time_machine.travel(at(0), tick=False):
        interaction = waiting_interaction(agent_stub, ops)
    client = Client()
    client.force_login(member("bob", ops, approvers))
    with time_machine.travel(at(42), tick=False):
        assert answer(client, interaction, decision="approve")[0] == 200

    data = detail(reader, interaction.task.session, 50)

    assert of_kind(data, "answer") == [
        {
            "at": iso(42),
            "kind": "answer",
            "taskId": "task-1",
            "by": "bob",
            "answer": "Approve",
            "interaction": interaction.pk,
            "interactionId": "i-1",
            "dismissed": False,
        }
    ]
    # The task still waits (the agent has not gone on): its state is ongoing since it asked.
    assert of_kind(data, "state")[-1]["durationSeconds"] == 50.0


def test_a_dismissed_question_says_who_dismissed_it_and_why(
    team_agent, agent_stub, ops, approvers, reader
):
    with time_machine.travel(at(0), tick=False):
        interaction = asking(team_agent)
    forgets(agent_stub)
    client = Client()
    client.force_login(member("bob", ops, approvers))
    with time_machine.travel(at(7), tick=False):
        assert dismiss(client, interaction)[0] == 200

    entries = of_kind(detail(reader, interaction.task.session, 8), "answer")

    assert [(e["at"], e["by"], e["answer"], e["dismissed"]) for e in entries] == [
        (iso(7), "bob", "dismissed: the agent no longer knew this task", True)
    ]


def test_a_card_api_write_is_a_card_revision_entry(both_ways, reader):  # noqa: F811
    pushed(both_ways, status("WORKING", at=1), 0)
    with time_machine.travel(at(3), tick=False):
        written = write(Client(), both_ways, {"markdown": "Half way"})

    cards = of_kind(detail(reader, Session.objects.get(), 4), "card")

    assert (cards[-1]["revision"], cards[-1]["at"]) == (written["revision"], iso(3))
    assert len(cards) == written["revision"]  # one entry per revision, none missing


def test_a_timeline_longer_than_the_limit_gives_the_newest_and_says_so(
    registered, reader, monkeypatch
):
    for second, state in enumerate(["SUBMITTED", "WORKING", "INPUT_REQUIRED", "WORKING"]):
        pushed(registered, status(state, at=second + 1), second)
    whole = detail(reader, Session.objects.get(), 10)["timeline"]
    monkeypatch.setattr(timeline, "LIMIT", 3)

    data = detail(reader, Session.objects.get(), 10)

    assert len(whole) > 3
    assert data["timeline"] == whole[-3:]
    assert data["timelineTruncated"] is True


def test_another_teams_user_gets_no_timeline(registered, db):
    pushed(registered, status("WORKING", at=1), 0)
    outsider = Client()
    outsider.force_login(member("mallory"))

    response = outsider.get(f"/api/sessions/{Session.objects.get().pk}")

    assert response.status_code == 404
    assert "timeline" not in response.json()


def test_the_session_page_draws_a_bar_per_task_and_lists_each_change(registered, reader):
    pushed(registered, status("WORKING", task="task-1", at=1), 0)
    pushed(registered, status("COMPLETED", task="task-1", at=2), 30)
    pushed(registered, status("WORKING", task="<b>task-2</b>", at=3), 40)
    session = Session.objects.get()

    with time_machine.travel(at(60), tick=False):
        page = reader.get(f"/sessions/{session.pk}/").content.decode()

    assert page.count("data-timeline-task=") == 2
    # The bars span the entries (0 to 40 s): task-1 worked 30 of them, then was done.
    assert '<rect class="tl-info" x="0.00" y="0" width="750.00"' in page
    assert '<rect class="tl-ok" x="750.00" y="0" width="2.00"' in page
    assert "<title>Working from" in page and ", 30 s</title>" in page
    assert ", still going on</title>" in page  # task-2, whose bar reaches the right end
    assert "&lt;b&gt;task-2&lt;/b&gt;" in page and "<b>task-2</b>" not in page
    task = Task.objects.get(task_id="task-1")
    assert f'href="/sessions/{session.pk}/tasks/{task.pk}/deliveries/"' in page
    assert page.count("data-timeline-entry=") == len(timeline.of_session(session).items)
    # The activity a live refresh fetches carries it too.
    activity = reader.get(f"/sessions/{session.pk}/activity/").content.decode()
    assert "data-timeline-list" in activity


def test_the_migration_gives_older_sessions_a_timeline_from_what_is_stored(
    agent_stub, ops, approvers
):
    with time_machine.travel(at(0), tick=False):
        interaction = waiting_interaction(agent_stub, ops)
    client = Client()
    client.force_login(member("bob", ops, approvers))
    with time_machine.travel(at(5), tick=False):
        assert answer(client, interaction, decision="deny")[0] == 200
    TimelineEntry.objects.all().delete()  # as before the timeline existed

    importlib.import_module("tasks.migrations.0017_timeline").backfill(as_written, None)

    data = timeline.of_session(interaction.task.session, now=at(10)).as_json()
    assert sorted((e["kind"], e.get("state"), e.get("by"), e.get("answer")) for e in data) == [
        ("answer", None, "bob", "denied"),
        ("card", None, None, None),
        ("state", "TASK_STATE_AUTH_REQUIRED", None, None),
    ]
    assert data[0]["kind"] == "state" and data[0]["durationSeconds"] == 10.0
    assert all(e["backfilled"] for e in data)
