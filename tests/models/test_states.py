"""A session's state in the words people use, on every place that shows it: the card, the
sidebar row, the tile, the collapsed card, the session page, the live announcement and the
state filter; each with its tone, never colour alone. A finished session never says it
needs anyone, drops its waiting lines and marks the steps it did not do; uncertain effects
read as unconfirmed; the step count is the plan's; a tile stays bounded and offers more.
Everything through real pushes and the pages people load."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tasks.models import Interaction, ProgressCard, Session, SessionFragments
from tasks.wire import profile
from tests.answering.test_answers import answer
from tests.builders import approval, progress, status
from tests.conftest import make_agent, member, push
from tests.processes import ROOT


@pytest.fixture
def team(ops):
    return make_agent(team=ops)


@pytest.fixture
def viewer(ops) -> Client:
    client = Client()
    client.force_login(member("viewer", ops))
    return client


def send(registered, body) -> None:
    assert push(Client(), registered, body).status_code == 200


def places(client: Client) -> dict[str, str]:
    """Every place the session's state is shown, as the pages serve them."""
    session = Session.objects.get()
    board = client.get("/live/board/?tiles=1").json()
    fragments = client.get(f"/sessions/{session.pk}/card/").json()["html"]
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    state_line = re.search(r"<span>State .*?</span>", page, re.DOTALL)
    return {
        "sidebar": board["sidebar"],
        "tile": board["tiles"],
        "card": fragments["card"],
        "summary": fragments["summary"],
        "session page": state_line.group(0) if state_line else "",
    }


def pill(words: str, tone: str) -> re.Pattern:
    return re.compile(rf'class="pill pill-{tone}[^"]*"[^>]*>{re.escape(words)}<')


ASKING = {
    "approval": ("AUTH_REQUIRED", approval("i-1", "Ship v2?")),
    "connection": ("AUTH_REQUIRED", approval("i-1", "Connect GitHub", kind="connection")),
    "question": ("INPUT_REQUIRED", approval("i-1", "Which region?", kind="question")),
}


@pytest.mark.parametrize(
    ("state", "metadata", "words", "tone"),
    [
        ("SUBMITTED", None, "Queued", "neutral"),
        ("WORKING", None, "Working", "info"),
        ("COMPLETED", None, "Done", "ok"),
        ("FAILED", None, "Failed", "danger"),
        ("REJECTED", None, "Rejected", "danger"),
        ("CANCELED", None, "Cancelled", "neutral"),
        (*ASKING["approval"], "Needs approval", "warn"),
        (*ASKING["connection"], "Needs a connection", "warn"),
        (*ASKING["question"], "Needs an answer", "warn"),
        # A core agent's plain-text question, and an approval off the profile's state.
        ("INPUT_REQUIRED", None, "Needs an answer", "warn"),
        ("INPUT_REQUIRED", approval("i-1", "Ship v2?"), "Needs approval", "warn"),
        ("AUTH_REQUIRED", None, "Needs a connection", "warn"),
    ],
)
def test_each_state_reads_in_human_words_with_its_tone_everywhere(
    team, viewer, state, metadata, words, tone
):
    if metadata is not None:
        send(team, status(state, at=1, text="Asking", message_metadata=metadata))
    else:
        send(team, status(state, at=1, text="Asking" if "REQUIRED" in state else None))

    for place, html in places(viewer).items():
        assert pill(words, tone).search(html), f"{place}: {html}"
    # The JSON API keeps A2A's own values.
    [listed] = viewer.get("/api/sessions").json()["sessions"]
    assert listed["state"] == f"TASK_STATE_{state}"


def test_no_state_yet_reads_so(team, viewer):
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "Hello"}]}
    send(team, {"message": {**message, "contextId": "ctx-1"}})

    board = viewer.get("/live/board/?tiles=1").json()
    assert pill("No state yet", "neutral").search(board["sidebar"])
    assert pill("No state yet", "neutral").search(board["tiles"])


def test_an_answered_question_reads_answer_sent_until_the_agent_goes_on(
    agent_stub, ops, approvers, viewer
):
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    send(registered, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?")))
    alice = Client()
    alice.force_login(member("alice", ops, approvers))

    assert answer(alice, Interaction.objects.get(), decision="approve")[0] == 200

    for place, html in places(viewer).items():
        assert pill("Answer sent", "info").search(html), place
        assert "Needs" not in html, place
    send(registered, status("WORKING", at=5, text="Deploying"))
    for place, html in places(viewer).items():
        assert pill("Working", "info").search(html), place


def test_the_state_filter_offers_human_words_and_filters_by_the_a2a_value(team, viewer):
    send(team, status("CANCELED", at=1))
    page = viewer.get("/").content.decode()
    assert '<option value="TASK_STATE_CANCELED">Cancelled</option>' in page
    assert '<option value="TASK_STATE_SUBMITTED">Queued</option>' in page
    assert "auth required" not in page and "input required" not in page
    filtered = viewer.get("/?state=TASK_STATE_CANCELED").content.decode()
    assert "data-tile-session" in filtered


def test_the_live_message_announces_the_state_in_the_same_words(team):
    from tasks.sessions.fragments import snapshot

    send(team, status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?")))
    session = Session.objects.select_related("card", "fragments", "agent").get()
    assert snapshot(session)["stateLabel"] == "Needs approval"
    assert snapshot(session)["state"] == "TASK_STATE_AUTH_REQUIRED"


# -- finished sessions ------------------------------------------------------------------------

WAITING_WORDS = ("needs you", "Needs", "waiting for the agent to go on", "Approval needed")


def assert_finished_and_quiet(client: Client, words: str, tone: str) -> None:
    for place, html in places(client).items():
        assert pill(words, tone).search(html), f"{place}: {html}"
        for waiting in WAITING_WORDS:
            assert waiting not in html, f"{place} says {waiting!r}: {html}"
    session = Session.objects.get()
    assert not session.needs_human


def test_a_session_whose_new_task_ends_while_an_approval_waits_is_not_shown_finished(team, viewer):
    """The bug: the session took its newest task's state, and its "needs you" from any
    task's open question, so a second task ending showed "completed" beside "needs you"."""
    asking = approval("i-1", "Ship v2?")
    send(team, status("AUTH_REQUIRED", task="t-1", at=1, metadata=asking))
    send(team, status("WORKING", task="t-2", at=5, text="Reading the logs"))
    send(team, status("COMPLETED", task="t-2", at=9, text="Logs read"))

    session = Session.objects.get()
    assert (session.state, session.needs_human) == ("TASK_STATE_AUTH_REQUIRED", True)
    for place, html in places(viewer).items():
        assert pill("Needs approval", "warn").search(html), f"{place}: {html}"
        assert "Done" not in html and "completed" not in html, f"{place}: {html}"

    # The agent ends the waiting task too: now the session is finished, and quiet.
    send(team, status("CANCELED", task="t-1", at=12, text="Not shipped"))
    assert_finished_and_quiet(viewer, "Cancelled", "neutral")


def test_sessions_stored_shown_finished_while_a_question_waits_are_set_right(team, viewer):
    """What older versions left behind: the newest turn's state beside an older turn's open
    question."""
    from importlib import import_module

    from tests.migrating import as_written

    asking = approval("i-1", "Ship v2?")
    send(team, status("AUTH_REQUIRED", task="t-1", at=1, metadata=asking))
    send(team, status("COMPLETED", task="t-2", at=9, text="Logs read"))
    Session.objects.update(state="TASK_STATE_COMPLETED")
    card = ProgressCard.objects.get()
    ProgressCard.objects.update(facts={**card.facts, "state": "TASK_STATE_COMPLETED"})

    import_module("tasks.migrations.0013_session_state_from_waiting_task").derive(as_written, None)

    assert Session.objects.get().state == "TASK_STATE_AUTH_REQUIRED"
    assert ProgressCard.objects.get().revision == card.revision + 1
    assert not SessionFragments.objects.exists()
    for place, html in places(viewer).items():
        assert pill("Needs approval", "warn").search(html), f"{place}: {html}"


def test_a_completed_session_after_an_answered_approval_never_says_needs_you_or_waiting(
    agent_stub, ops, approvers, viewer
):
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    plan = progress(("Build", "completed"), ("Deploy", "in_progress"))
    asking = approval("i-1", "Ship v2?")
    send(
        registered,
        status("AUTH_REQUIRED", at=1, text="Ship?", metadata=plan, message_metadata=asking),
    )
    alice = Client()
    alice.force_login(member("alice", ops, approvers))
    assert answer(alice, Interaction.objects.get(), decision="approve")[0] == 200
    assert "waiting for the agent to go on" in places(viewer)["card"]

    done = progress(("Build", "completed"), ("Deploy", "completed"))
    send(registered, status("COMPLETED", at=9, text="Shipped", metadata=done))

    assert_finished_and_quiet(viewer, "Done", "ok")


def test_a_finished_session_stored_by_an_older_version_no_longer_says_waiting(team, viewer):
    """What older versions left: the card's facts still held who answered and the open
    question (the flag stuck set while the card was derived), and the stored fragments
    said so. Nothing more arrives for a finished session, so the pages must not repeat it."""
    send(team, status("COMPLETED", at=9, text="Shipped"))
    card = ProgressCard.objects.get()
    card.facts = {
        **card.facts,
        "answer": {"kind": "approval", "text": "Approved by alice, 10:02"},
        "question": {"kind": "approval", "prompt": "Ship v2?"},
    }
    card.save()
    SessionFragments.objects.update(version="older")

    assert_finished_and_quiet(viewer, "Done", "ok")


def test_unfinished_steps_of_a_failed_session_are_marked_unfinished(team, viewer):
    plan = {
        profile.PROGRESS: {
            "steps": [
                {"label": "Build", "state": "completed"},
                {"label": "Deploy", "state": "in_progress", "note": "waiting for approval"},
                {"label": "Verify", "state": "pending"},
            ]
        }
    }
    send(team, status("WORKING", at=1, text="Deploying", metadata=plan))
    card = places(viewer)["card"]
    assert '<span class="step-status">in progress</span> Deploy' in card
    assert "waiting for approval" in card

    send(team, status("FAILED", at=5, text="The deploy broke", metadata=plan))

    card = places(viewer)["card"]
    steps = re.findall(
        r'<li class="step step-(\w+)"><span class="step-status">([^<]+)</span>', card
    )
    assert steps == [
        ("completed", "done"),
        ("unfinished", "unfinished"),
        ("unfinished", "unfinished"),
    ]
    assert "in progress" not in card and "waiting for approval" not in card
    assert "plan-finished" in card
    assert "1 of 3 steps done" in card
    assert '<span class="summary-step">1 of 3 steps done</span>' in places(viewer)["summary"]


# -- what the card says ------------------------------------------------------------------------


def test_an_uncertain_effect_reads_as_unconfirmed(team, viewer):
    effect = {profile.EFFECTS: {"uncertain": "upload:checkout-2.5.0.tar.gz"}}
    send(team, status("WORKING", at=1, text="Uploading", metadata=effect))

    card = places(viewer)["card"]
    assert "Upload of checkout-2.5.0.tar.gz unconfirmed." in card
    assert "was lost" not in card


def test_an_uncertain_effect_without_a_verb_is_named_as_the_agent_gave_it(team, viewer):
    effect = {profile.EFFECTS: {"uncertain": "step-3"}}
    send(team, status("WORKING", at=1, text="Going on", metadata=effect))

    assert "Outcome of “step-3” unconfirmed." in places(viewer)["card"]


def test_the_step_count_comes_from_the_plan_not_from_the_agents_note(team, viewer):
    # The example agent's note counts steps done ("1/5"); the plan says step 2 is going on.
    plan = progress(
        ("Collect", "completed"),
        ("Test", "in_progress"),
        ("Build", "pending"),
        ("Deploy", "pending"),
        ("Verify", "pending"),
    )
    note = '**Release**\n\nSteps <progress value="1" max="5"></progress> 1/5'
    send(team, status("WORKING", at=1, text=note, metadata=plan))

    shown = places(viewer)
    assert '<span class="card-steps" data-step-count>Step 2 of 5</span>' in shown["card"]
    assert "Step 2 of 5" in shown["tile"]
    assert "Step 2 of 5 · Test" in shown["summary"]


# -- bounded tiles -----------------------------------------------------------------------------


def test_a_300_step_plan_keeps_its_tile_bounded_with_a_link_to_more(team, viewer):
    steps = [{"label": f"Step number {n}", "state": "completed"} for n in range(1, 301)]
    steps[150]["state"] = "in_progress"
    for step in steps[151:]:
        step["state"] = "pending"
    long_note = "\n\n".join(f"Paragraph {n}: " + "words " * 40 for n in range(30))
    send(
        team, status("WORKING", at=1, text=long_note, metadata={profile.PROGRESS: {"steps": steps}})
    )
    session = Session.objects.get()
    plan = ProgressCard.objects.get().plan

    tile = places(viewer)["tile"]
    shown = re.findall(r'<li class="step step-\w+">', tile)
    assert 0 < len(shown) <= ProgressCard.TILE_STEPS < len(plan)
    assert f"{len(plan) - len(shown)} more steps on the session page" in tile
    more = re.search(r'<a href="([^"]+)" data-tile-more>More', tile)
    assert more and more.group(1) == f"/sessions/{session.pk}/"
    # The note can be long: the tile's body is what the stylesheet bounds.
    assert '<div class="tile-body">' in tile
    css = ROOT / "static/css/states.css"
    assert re.search(
        r"\.tile-body \{[^}]*max-height: \d+rem;[^}]*overflow: hidden", css.read_text()
    )
    # The session page's own card keeps every step the card holds.
    card = places(viewer)["card"]
    assert len(re.findall(r'<li class="step step-\w+">', card)) == len(plan)
