"""A stored session always renders: JSON an older Onlooker kept with lone surrogates in it
(before pushes were sanitized on the way in) reads back with U+FFFD instead, so no page
that shows it fails for every viewer, forever."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from tasks.models import (
    Agent,
    Artifact,
    Delivery,
    Interaction,
    Message,
    ProgressCard,
    Session,
    SessionFragments,
    Task,
)
from tests.builders import approval, artifact, progress, status
from tests.conftest import make_agent, push

LONE = "\ud800"

# PostgreSQL's jsonb refuses a lone surrogate escape, so no version of Onlooker could store
# one there: what these tests guard against exists only in SQLite databases.
pytestmark = pytest.mark.skipif(
    connection.vendor == "postgresql",
    reason="PostgreSQL refuses lone surrogates in jsonb: such rows cannot exist there",
)


def tainted(value: Any) -> Any:
    """`value` with a lone surrogate in each of its strings, as an agent could once store."""
    if isinstance(value, str):
        return f"{value} {LONE}"
    if isinstance(value, list):
        return [tainted(item) for item in value]
    if isinstance(value, dict):
        return {key: tainted(item) for key, item in value.items()}
    return value


def taint(model, pk: int, *fields: str) -> None:
    """Rewrite stored JSON the way an older version would have written it: JSONField escapes
    the lone surrogate, so the row is accepted."""
    row = model.objects.get(pk=pk)
    model.objects.filter(pk=pk).update(**{f: tainted(getattr(row, f)) for f in fields})


@pytest.fixture
def tainted_session(client, ops, approvers) -> Session:
    """A session with a plan, telemetry, an artifact with files/v1 data, an answered and an
    open question, whose stored JSON all holds lone surrogates."""
    team = make_agent(team=ops)
    telemetry = {"https://docs.nylorun.com/a2a/telemetry/v1": {"costUsd": 0.5, "traceId": "tr"}}
    files = {"kind": "report", "version": 2, "size": 20, "sha256": "ab" * 32, "path": "out/r.md"}
    bodies = [
        status("WORKING", at=1, text="Reading", metadata={**progress(("Build", "in_progress"))}),
        status("WORKING", at=2, metadata=telemetry),
        artifact("report", "Summary", files=files, name="Report"),
        status("INPUT_REQUIRED", at=3, metadata=approval("q-0", "Colour?", kind="question")),
        status("WORKING", at=4),
        status(
            "INPUT_REQUIRED",
            at=5,
            metadata=approval("q-1", "Which?", kind="question", detail={"choices": ["a", "b"]}),
        ),
    ]
    for body in bodies:
        assert push(client, team, body).status_code == 200
    session = Session.objects.get()
    Interaction.objects.filter(interaction_id="q-0").update(
        state=Interaction.State.ANSWERED, answer={"value": "red"}
    )

    taint(Agent, team.agent.pk, "extensions")
    task = Task.objects.get()
    taint(Task, task.pk, "plan", "telemetry", "uncertain_effects")
    for row in Artifact.objects.all():
        taint(Artifact, row.pk, "parts", "files")
    Artifact.objects.update(parts=[{"text": f"bad {LONE} part"}])
    for row in Interaction.objects.all():
        taint(Interaction, row.pk, "detail", "answer")
    # Telemetry and uncertain effects show on a card once the task ends: store them as if.
    card = ProgressCard.objects.get()
    extra = {"telemetry": {"costUsd": 0.5, "traceId": "tr"}, "uncertain": ["charged twice"]}
    ProgressCard.objects.filter(pk=card.pk).update(facts={**card.facts, **extra})
    taint(ProgressCard, card.pk, "plan", "facts")
    Delivery.objects.update(warnings=[f"bad {LONE} warning"])
    # Fragments stored before are plain text (a text column refuses surrogates); pages that
    # render them afresh read the card's JSON.
    SessionFragments.objects.all().delete()
    return session


def test_stored_json_with_lone_surrogates_reads_back_replaced(tainted_session):
    artifact_row = Artifact.objects.get()
    assert artifact_row.parts == [{"text": "bad \ufffd part"}]
    assert artifact_row.files["path"] == "out/r.md \ufffd"
    assert ProgressCard.objects.get().plan[0]["step"] == "Build \ufffd"
    # Surrogate pairs are characters, and a backslash before "ud800" is text, not damage:
    # they read back as they were. So do keys.
    kept = [{"text": "ok \U0001f600", "path": "C:\\ud800\\\\ud800"}]
    Artifact.objects.update(parts=kept)
    assert Artifact.objects.get().parts == kept
    Artifact.objects.update(parts=[{f"k{LONE}": [[f"deep \udfff{LONE}"]]}])
    assert Artifact.objects.get().parts == [{"k\ufffd": [["deep \ufffd\ufffd"]]}]


def test_every_page_showing_a_session_with_lone_surrogates_renders(
    client, alice, approvers, tainted_session
):
    alice.groups.add(approvers)  # the open question's answer form renders its choices
    client.force_login(alice)
    pk = tainted_session.pk
    pages = [
        f"/sessions/{pk}/",
        f"/sessions/{pk}/activity/",
        f"/sessions/{pk}/card/",
        f"/api/sessions/{pk}",
        "/",
        "/live/board/?tiles=1&waiting=1",
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        # Not even escaped in JSON: a client would only trip over it later.
        assert "\\ud800" not in response.content.decode(), url

    page = client.get(f"/sessions/{pk}/").content.decode()
    assert "bad \ufffd part" in page and "out/r.md \ufffd" in page
    assert "Build \ufffd" in page, "B"
    assert "Which? \ufffd" in page, "W"
    assert "tr \ufffd" in page, "T"
    assert "charged twice \ufffd" in page, "U"
    assert "red \ufffd" in page, "R"


def test_admin_pages_show_stored_rows_with_lone_surrogates(admin_client, tainted_session):
    rows = [
        ("delivery", Delivery.objects.first().pk),
        ("agent", Agent.objects.get().pk),
        ("task", Task.objects.get().pk),
        ("interaction", Interaction.objects.get(interaction_id="q-0").pk),
        ("artifact", Artifact.objects.get().pk),
        ("progresscard", ProgressCard.objects.get().pk),
        ("message", Message.objects.first().pk),
    ]
    for model, pk in rows:
        response = admin_client.get(f"/admin/tasks/{model}/{pk}/change/")
        assert response.status_code == 200, model
    page = admin_client.get(f"/admin/tasks/delivery/{rows[0][1]}/change/").content.decode()
    assert "bad \ufffd warning" in page
