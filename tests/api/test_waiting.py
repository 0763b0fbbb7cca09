"""`GET /api/waiting`: what is open for this person to answer right now, which their browser
turns into desktop notifications (static/js/notify.js). Only open interactions, only in
sessions they may see, none without the answer permission, bounded, in a constant number of
queries; agents make everything in it by real pushes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, reset_queries
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tasks.api import sessions as read_api
from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.builders import approval, status
from tests.conftest import make_agent, member, push


def ask(registered, context: str, prompt: str, *, at: int = 1, kind: str = "approval") -> None:
    body = status(
        "AUTH_REQUIRED" if kind == "approval" else "INPUT_REQUIRED",
        task=f"task-{context}",
        context=context,
        at=at,
        metadata=approval(f"i-{context}", prompt, kind=kind),
    )
    assert push(Client(), registered, body).status_code == 200


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def waiting(client: Client) -> list[dict]:
    response = client.get("/api/waiting")
    assert response.status_code == 200, response.content
    return response.json()["interactions"]


@pytest.fixture
def ops_agent(ops, agent_stub):
    """alice-bot, of team ops, on the loopback stub (it takes every answer)."""
    registered = make_agent(team=ops, name="alice-bot")
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def alice(ops, approvers) -> User:
    """On ops, and may answer."""
    return member("alice", ops, approvers)


def test_lists_each_open_interaction_with_its_agent_prompt_and_session_page(alice, ops_agent):
    ask(ops_agent, "builds", "Delete 3 old builds?")
    interaction = Interaction.objects.get()
    session = Session.objects.get()

    [item] = waiting(logged_in(alice))

    assert item == {
        "key": f"{interaction.pk}:1",
        "id": interaction.pk,
        "round": 1,
        "kind": "approval",
        "prompt": "Delete 3 old builds?",
        "agent": {"id": ops_agent.agent.pk, "name": "alice-bot"},
        "session": {"id": session.pk, "title": "builds", "url": f"/sessions/{session.pk}/"},
        "openedAt": "2026-11-30T12:00:01Z",
    }


def test_answered_unconfirmed_and_closed_interactions_are_not_listed(alice, ops_agent, agent_stub):
    ask(ops_agent, "open", "Still waiting?")
    ask(ops_agent, "answered", "Answered by alice?")
    ask(ops_agent, "unconfirmed", "Sent, not confirmed?")
    ask(ops_agent, "closed", "Closed by the agent?")
    client = logged_in(alice)
    answered = Interaction.objects.get(interaction_id="i-answered")
    client.post(f"/interactions/{answered.pk}/answer/", {"decision": "approve"})
    assert Interaction.objects.get(pk=answered.pk).state == Interaction.State.ANSWERED
    agent_stub.hang_up()  # takes the answer, never replies: it may have reached the agent
    unconfirmed = Interaction.objects.get(interaction_id="i-unconfirmed")
    client.post(f"/interactions/{unconfirmed.pk}/answer/", {"decision": "approve"})
    assert Interaction.objects.get(pk=unconfirmed.pk).state == Interaction.State.SENT
    moved_on = status("WORKING", task="task-closed", context="closed", at=2, text="Going on")
    assert push(Client(), ops_agent, moved_on).status_code == 200

    assert [item["prompt"] for item in waiting(client)] == ["Still waiting?"]


def test_another_teams_agent_is_left_out_and_everyones_agent_is_in(alice, ops_agent):
    theirs = make_agent(team=Group.objects.create(name="data"), name="data-bot")
    everyones = make_agent(name="open-bot")
    ask(ops_agent, "ours", "Ours?", at=1)
    ask(theirs, "theirs", "Theirs?", at=2)
    ask(everyones, "everyones", "Everyone's?", at=3)

    names = {item["agent"]["name"] for item in waiting(logged_in(alice))}

    assert names == {"alice-bot", "open-bot"}


def test_a_person_who_may_see_but_not_answer_gets_nothing(ops, ops_agent):
    ask(ops_agent, "builds", "Delete 3 old builds?")
    viewer = member("viewer", ops)  # sees the session on the page, may not answer it

    assert waiting(logged_in(viewer)) == []


def test_anonymous_is_refused_with_json(ops_agent):
    ask(ops_agent, "builds", "Delete 3 old builds?")
    response = Client().get("/api/waiting")
    assert response.status_code == 401
    assert response.json()["error"] == "authentication required"


def test_only_the_newest_are_listed(alice, ops_agent, monkeypatch):
    monkeypatch.setattr(read_api, "WAITING_LIMIT", 3)
    for at, context in enumerate(["a", "b", "c", "d", "e"], start=1):
        ask(ops_agent, context, f"Question {context}?", at=at)

    prompts = [item["prompt"] for item in waiting(logged_in(alice))]

    assert prompts == ["Question e?", "Question d?", "Question c?"]


def test_a_new_round_of_the_same_interaction_is_a_new_key(alice, ops_agent):
    ask(ops_agent, "builds", "Delete 3 old builds?", at=1)
    client = logged_in(alice)
    [first] = waiting(client)
    interaction = Interaction.objects.get()
    # Answered, then asked again by a later status: a second round, open again.
    client.post(f"/interactions/{interaction.pk}/answer/", {"decision": "deny"})
    ask(ops_agent, "builds", "Delete 3 old builds?", at=5)

    [second] = waiting(client)

    assert (first["key"], second["key"]) == (f"{interaction.pk}:1", f"{interaction.pk}:2")
    assert second["openedAt"] == "2026-11-30T12:00:05Z"


def test_prompts_are_plain_visible_text_and_short(alice, ops_agent):
    ask(ops_agent, "bidi", "Pay \u202eeulav\u202c now\u200b?" + "x" * 2_000)

    [item] = waiting(logged_in(alice))

    assert item["prompt"].startswith("Pay eulav now?xxx")
    assert len(item["prompt"]) <= read_api.WAITING_PROMPT_CHARS
    assert item["prompt"].endswith("…")


def test_the_number_of_queries_does_not_grow_with_what_waits(
    alice, ops_agent, django_assert_max_num_queries
):
    ask(ops_agent, "first", "First?", at=1)
    client = logged_in(alice)
    client.get("/api/waiting")  # the session's first request may store what it loads
    # A request clears the query log when it starts (Django's request_started): start empty.
    reset_queries()
    with CaptureQueriesContext(connection) as one:
        assert len(waiting(client)) == 1
    queries = len(one)  # now: the log it reads is cleared by the next request
    for at, context in enumerate(["b", "c", "d", "e", "f", "g"], start=2):
        ask(ops_agent, context, f"{context}?", at=at)
    reset_queries()
    with django_assert_max_num_queries(queries):
        assert len(waiting(client)) == 7
    assert queries <= 5  # the session, the user, their permissions, the rows
