"""Two writers, one card, and the transcript's receipts.

A session can be fed both by A2A pushes (the card derived from the agent's statuses) and by
the card API (`POST /api/progress-card` with the same agent's token and the session's
contextId as sessionKey). The latest write of plan and note wins and the card says which
writer it came from and when; a push that brings no new plan or note leaves a card-API
write in place; revisions only go up. Every card write leaves one transcript line, the
OpenClaw receipt, never a second copy of the note."""

from __future__ import annotations

import html
import json

import pytest

from tasks.answering.agents import new_api_token
from tasks.models import Message, ProgressCard, Session, digest
from tests.builders import artifact, progress, status
from tests.conftest import make_agent, push


@pytest.fixture
def both_ways(ops):
    """An agent that pushes A2A statuses and also writes its card through the card API."""
    registered = make_agent(team=ops)
    token = new_api_token()
    registered.agent.api_token_digest = digest(token)
    registered.agent.save()
    registered.api_token = token
    return registered


def send(client, registered, body) -> None:
    response = push(client, registered, body)
    assert response.status_code == 200, response.content


def write(client, registered, body: dict) -> dict:
    response = client.post(
        "/api/progress-card",
        json.dumps({"sessionKey": "ctx-1", **body}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {registered.api_token}",
    )
    assert response.status_code == 200, response.content
    return response.json()


def card() -> ProgressCard:
    return ProgressCard.objects.get()


def shown_card(client, user) -> str:
    client.force_login(user)
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()
    rail = page[page.index('<aside class="session-rail"') :]
    return html.unescape(rail[: rail.index("</aside>")])


def transcript() -> list[str]:
    return list(Message.objects.order_by("at", "id").values_list("text", flat=True))


def test_push_then_card_api_then_push_the_latest_write_wins_and_says_so(client, alice, both_ways):
    steps = progress(("Build", "completed"), ("Deploy", "in_progress"))
    send(client, both_ways, status("WORKING", at=1, text="From the agent", metadata=steps))
    first = card().revision
    assert "From the agent's status" in shown_card(client, alice)

    write(client, both_ways, {"markdown": "Written by the API"})
    after_write = card()
    assert after_write.revision == first + 1
    assert (after_write.markdown, after_write.plan) == ("Written by the API", None)
    shown = shown_card(client, alice)
    assert "Written by the API" in shown and "From the agent" not in shown
    assert "Written through the card API" in shown and "<time datetime=" in shown
    assert ">Working</span>" in shown  # the session's state stays beside the API's note

    # Pushes that bring no new plan or note leave the API's write in place.
    send(client, both_ways, artifact("log", "line", last_chunk=True))
    send(client, both_ways, status("WORKING", at=2, metadata=steps))  # the same plan again
    assert card().markdown == "Written by the API"
    assert "Written through the card API" in shown_card(client, alice)

    # A new note from the agent is the latest write: it wins.
    send(client, both_ways, status("WORKING", at=3, text="Agent again"))
    latest = card()
    assert latest.markdown == "Agent again" and latest.source == ProgressCard.Source.STATUS
    assert latest.revision > after_write.revision
    assert "From the agent's status" in shown_card(client, alice)

    # And the card API's next write wins again, one revision on.
    answer = write(client, both_ways, {"plan": [{"step": "Wrap up", "status": "in_progress"}]})
    assert answer["revision"] == card().revision == latest.revision + 1
    assert card().plan == [{"step": "Wrap up", "status": "in_progress"}]


def test_card_api_writes_leave_receipts_in_the_transcript(client, alice, both_ways):
    plan = [
        {"step": "a", "status": "completed"},
        {"step": "b", "status": "in_progress"},
        {"step": "c", "status": "pending"},
    ]
    write(client, both_ways, {"plan": plan, "markdown": "A long note"})
    write(client, both_ways, {"markdown": "Only a note"})
    write(client, both_ways, {})

    assert transcript() == [
        "Progress card updated (rev 1, 1/3 done)",
        "Progress card updated (rev 2)",
        "Progress card cleared",
    ]
    client.force_login(alice)
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()
    assert page.count('class="message message-receipt"') == 3
    assert "A long note" not in page


def test_a_status_note_is_one_receipt_line_not_a_copy_of_the_note(client, alice, both_ways):
    steps = progress(("Read", "completed"), ("Fix", "in_progress"), ("Test", "pending"))
    send(client, both_ways, status("WORKING", at=1, text="Reading the **logs**", metadata=steps))
    send(client, both_ways, status("WORKING", at=2, metadata=progress(("Read", "completed"))))

    assert transcript() == [
        "Progress card updated (rev 1, 1/3 done)",
        "Progress card updated (rev 2, 1/1 done)",  # a plan without a note: a receipt too
    ]
    client.force_login(alice)
    data = client.get(f"/api/sessions/{Session.objects.get().pk}").json()
    assert [m["text"] for m in data["messages"]] == transcript()
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()
    listed = page[page.index('<ol class="transcript"') : page.index('class="composer-area"')]
    # Two receipts in a row: one grouped line that opens to each receipt's one line.
    assert listed.count('data-receipts="2"') == 1 and listed.count("data-receipt>") == 2
    assert "logs" not in listed


def test_a_note_older_than_the_cards_is_kept_as_said(client, both_ways):
    send(client, both_ways, status("WORKING", at=5, text="Newer"))
    send(client, both_ways, status("WORKING", at=2, text="Older"))
    assert card().markdown == "Newer"
    assert transcript() == ["Older", "Progress card updated (rev 1)"]
    assert list(Message.objects.values_list("card_update", flat=True).order_by("at")) == [
        False,
        True,
    ]
