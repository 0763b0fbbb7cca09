"""Marking an uncertain effect checked (answering/checks.py), through the real view: once, by
someone who may answer and sees the agent's team, on the record as "checked", told to the
channels that heard it open, and never sent to the agent.

The agent is a real a2a-sdk agent on loopback that records every request it gets, so "nothing
reached the agent" is what it saw; a question asked beside the check is answered through a
scriptable loopback agent that takes every message.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.test import Client

from tasks.models import Decision, Interaction, Session
from tasks.models.notify import Notification
from tasks.models.timeline import TimelineEntry
from tasks.notify import channels
from tasks.sessions import board
from tasks.wire import profile
from tests.answering.test_agent_rpc_origin import MovableAgent, direct_connections  # noqa: F401
from tests.answering.test_answers import person, sent_messages
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, make_agent, member, push
from tests.peers.misbehaving_agent import ACCEPTED

EFFECT = "upload:report.pdf"
AT = datetime(2026, 12, 1, 10, 2, 0, tzinfo=UTC)  # when alice marks it
WEBHOOK_URL = "https://receiver.test/onlooker/hook"


@pytest.fixture(scope="module")
def served_agent() -> Iterator[MovableAgent]:
    agent = MovableAgent()
    yield agent
    agent.stop()


@pytest.fixture
def sdk_agent(served_agent: MovableAgent) -> MovableAgent:
    served_agent.seen.clear()
    return served_agent


@pytest.fixture
def agent(ops, sdk_agent) -> RegisteredAgent:
    """An agent of team ops whose JSON-RPC URL is the recording a2a-sdk agent's."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = sdk_agent.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def alice(ops, approvers) -> Client:
    return person("alice", ops, approvers)


@pytest.fixture
def bob(ops, approvers) -> Client:
    return person("bob", ops, approvers)


def uncertain(effect: str = EFFECT) -> dict:
    return {profile.EFFECTS: {"uncertain": effect}}


def pushed(agent: RegisteredAgent, body: dict) -> None:
    assert push(Client(), agent, body).status_code == 200


def opened_check(agent: RegisteredAgent) -> Interaction:
    """The agent reports an upload it cannot confirm, then finishes its turn."""
    pushed(agent, status("WORKING", at=1, text="Uploading", metadata=uncertain()))
    pushed(agent, status("COMPLETED", at=2, text="Done"))
    return Interaction.objects.get(kind=Interaction.Kind.CHECK)


def mark(client: Client, interaction: Interaction, **extra) -> tuple[int, dict]:
    response = client.post(
        f"/interactions/{interaction.pk}/check/", HTTP_ACCEPT="application/json", **extra
    )
    return response.status_code, response.json()


def test_mark_checked_closes_the_check_on_the_record_and_tells_the_channels_not_the_agent(
    alice, agent, sdk_agent
):
    channels.add("ops", "webhook", WEBHOOK_URL)
    check = opened_check(agent)

    with time_machine.travel(AT, tick=False):
        code, body = mark(alice, check)

    assert (code, body) == (200, {"state": "answered", "detail": "Checked by alice, 10:02."})
    check.refresh_from_db()
    assert (check.state, check.answered_by.username, check.answered_via) == (
        "answered",
        "alice",
        "page",
    )
    assert check.answered_at == AT
    row = Decision.objects.get()
    assert (row.decision, row.kind, row.by, row.via, row.sent) == (
        "checked",
        "check",
        "alice",
        "page",
        False,
    )
    assert (row.by_pk, row.at, row.interaction_pk, row.round) == (
        check.answered_by_id,
        AT,
        check.pk,
        1,
    )
    resolved = Notification.objects.get(kind=Notification.Kind.RESOLVED)
    assert (resolved.interaction_id, resolved.round) == (check.pk, 1)
    assert resolved.payload["resolution"]["by"] == "alice"
    # Nothing went to the agent, neither with the pushes nor with the mark.
    assert sdk_agent.seen == []


def test_a_checked_check_no_longer_needs_anyone(alice, agent, ops):
    check = opened_check(agent)
    viewer = member("vic", ops)
    assert board.counts(viewer)["waiting"] == 1
    waiting = alice.get("/api/waiting").json()["interactions"]
    assert [(i["kind"], i["prompt"]) for i in waiting] == [
        ("check", "Check: Upload of report.pdf unconfirmed")
    ]

    assert mark(alice, check)[0] == 200

    session = Session.objects.get()
    assert (session.needs_human, session.state) == (False, "TASK_STATE_COMPLETED")
    assert board.counts(viewer)["waiting"] == 0
    assert alice.get("/api/waiting").json()["interactions"] == []
    shown = alice.get(f"/api/sessions/{session.pk}").json()["interactions"]
    assert [(i["kind"], i["state"], i["answeredBy"]) for i in shown] == [
        ("check", "answered", "alice")
    ]


def test_the_second_mark_says_who_checked_it_and_when(alice, bob, agent):
    check = opened_check(agent)
    with time_machine.travel(AT, tick=False):
        assert mark(alice, check)[0] == 200
    with time_machine.travel(AT + timedelta(minutes=5), tick=False):
        code, body = mark(bob, check)

    assert code == 409
    assert body["detail"] == "Already checked by alice, 10:02."
    assert Decision.objects.count() == 1
    check.refresh_from_db()
    assert check.answered_by.username == "alice"


def test_someone_who_may_not_answer_is_refused_and_nothing_changes(agent, ops, sdk_agent):
    check = opened_check(agent)
    code, body = mark(person("vic", ops), check)
    assert code == 403
    assert "approver" in body["detail"]
    check.refresh_from_db()
    assert check.state == Interaction.State.OPEN
    assert not Decision.objects.exists()


def test_another_teams_check_is_not_found(agent, approvers):
    check = opened_check(agent)
    outsider = person("olga", Group.objects.create(name="billing"), approvers)
    code, _ = mark(outsider, check)
    assert code == 404
    check.refresh_from_db()
    assert check.state == Interaction.State.OPEN


def test_a_post_without_the_csrf_token_is_refused(agent, ops, approvers):
    check = opened_check(agent)
    client = Client(enforce_csrf_checks=True)
    client.force_login(member("alice", ops, approvers))
    response = client.post(f"/interactions/{check.pk}/check/", HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    check.refresh_from_db()
    assert check.state == Interaction.State.OPEN


def test_a_check_is_neither_dismissed_nor_answered_and_a_question_is_not_marked_checked(
    alice, agent, sdk_agent
):
    check = opened_check(agent)
    dismissed = alice.post(f"/interactions/{check.pk}/dismiss/", HTTP_ACCEPT="application/json")
    answered = alice.post(
        f"/interactions/{check.pk}/answer/", {"value": "ok"}, HTTP_ACCEPT="application/json"
    )
    assert (dismissed.status_code, answered.status_code) == (400, 400)
    assert "mark it checked" in dismissed.json()["detail"]
    check.refresh_from_db()
    assert check.state == Interaction.State.OPEN
    assert sdk_agent.seen == []  # not even asked whether it still waits

    pushed(agent, status("AUTH_REQUIRED", task="t-2", at=3, metadata=approval("i-1", "Ship?")))
    question = Interaction.objects.get(kind=Interaction.Kind.APPROVAL)
    code, body = mark(alice, question)
    assert code == 400 and "answer this with its own buttons" in body["detail"]
    question.refresh_from_db()
    assert question.state == Interaction.State.OPEN


def test_the_timeline_and_the_card_say_who_checked_it(alice, agent):
    check = opened_check(agent)
    session = Session.objects.select_related("card").get()
    assert session.card.facts["unchecked"] == [EFFECT]
    assert "Needs checking" in session.fragments.card

    with time_machine.travel(AT, tick=False):
        mark(alice, check)

    entry = TimelineEntry.objects.get(kind=TimelineEntry.Kind.ANSWER)
    assert entry.data["by"] == "alice"
    assert entry.data["answer"] == "checked (Upload of report.pdf unconfirmed)"
    session = Session.objects.select_related("card", "fragments").get()
    assert "unchecked" not in session.card.facts
    assert session.card.facts["checked"] == {EFFECT: "Checked by alice, 10:02"}
    assert "Needs checking" not in session.fragments.card
    assert "Checked by alice, 10:02" in session.fragments.card


def test_a_reply_from_the_composer_answers_the_question_never_the_check(
    alice, team_agent, agent_stub
):
    asking = approval("q-1", "Which bucket?", kind="question")
    pushed(team_agent, status("INPUT_REQUIRED", at=1, text="Which bucket?", metadata=asking))
    # The agent says it again, now with an upload it lost track of: the check is the newest.
    again = {**asking, **uncertain()}
    pushed(team_agent, status("INPUT_REQUIRED", at=2, text="Which bucket?", metadata=again))
    session = Session.objects.get()
    agent_stub.answer(ACCEPTED)

    response = alice.post(
        f"/sessions/{session.pk}/messages/",
        {"text": "the public one", "message_id": "reply-0001", "reply_to": "task-1"},
        HTTP_ACCEPT="application/json",
    )

    assert response.status_code == 200, response.content
    question = Interaction.objects.get(kind=Interaction.Kind.QUESTION)
    check = Interaction.objects.get(kind=Interaction.Kind.CHECK)
    assert (question.state, question.answer) == ("answered", {"value": "the public one"})
    assert (check.state, check.answer) == ("open", None)
    typed = sent_messages(agent_stub)[0]["metadata"][profile.INTERACTIONS]
    assert typed == {"interactionId": "q-1", "value": "the public one"}
    # The agent goes on: its question closes, the check stays for a person.
    pushed(team_agent, status("WORKING", at=3, text="Uploading to the public bucket"))
    check.refresh_from_db()
    assert check.state == Interaction.State.OPEN
    assert Session.objects.get().needs_human
