"""The session page says every decision whole (issue 33 §1, §6): what it was, who made it,
when, how and the words sent with it, in its Decisions list and its timeline alike; a cancel
says who asked for it; the timeline folds runs of card revisions into one line and shows task
ids short; the header speaks people's words (the protocol's are on the agent's page) and the
timeline names a state as the header does. Through the real receiver, views and applier."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from tasks.models import Interaction, Session
from tasks.models.timeline import TimelineEntry
from tasks.sessions import decision_words
from tasks.wire import profile
from tests.answering.test_answers import answer, waiting_interaction
from tests.answering.test_talking import person, post, task_json
from tests.builders import approval, progress, status
from tests.conftest import make_agent, push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def page_of(client: Client, session_pk: int) -> str:
    response = client.get(f"/sessions/{session_pk}/")
    assert response.status_code == 200
    return response.content.decode()


def head_of(html: str) -> str:
    start = html.index('class="session-head"')
    return html[start : html.index("</p>", start)]


def section(html: str, marker: str) -> str:
    """The part of the page from `marker` to the end of its <section>."""
    start = html.index(marker)
    return html[start : html.index("</section>", start)]


def plain(html: str) -> str:
    """The text a person reads (a <q> is drawn in quotation marks)."""
    html = html.replace("<q>", "“").replace("</q>", "”")
    return " ".join(re.sub(r"<[^>]+>", "", html).split())


def test_a_deny_says_what_who_when_how_and_its_reason_in_decisions_and_timeline(
    agent_stub, ops, approvers
):
    with time_machine.travel(at(0), tick=False):
        interaction = waiting_interaction(agent_stub, ops)
    bob = person("bob", ops, approvers)
    with time_machine.travel(at(42), tick=False):
        code, _ = answer(bob, interaction, decision="deny", reason="Not on a Friday")
    assert code == 200

    html = page_of(bob, interaction.task.session_id)
    decisions = plain(section(html, "data-decisions"))
    assert "Denied by bob, 09:00, on the page. Reason: “Not on a Friday”" in decisions
    assert "Ship v2?" in decisions  # what it was about
    timeline = plain(section(html, "data-timeline"))
    assert "Denied by bob, 09:00, on the page. Reason: “Not on a Friday”" in timeline


def test_an_answer_to_a_question_shows_the_answer_given(agent_stub, ops, approvers):
    body = status("INPUT_REQUIRED", at=1, metadata=approval("q-1", "Which region?", "question"))
    interaction = waiting_interaction(agent_stub, ops, body)
    alice = person("alice", ops, approvers)
    assert answer(alice, interaction, value="eu-west")[0] == 200
    decisions = plain(section(page_of(alice, interaction.task.session_id), "data-decisions"))
    assert re.search(r"Answered by alice, \d\d:\d\d, on the page: “eu-west”", decisions)


def test_a_cancel_says_who_asked_for_it_on_the_timeline_and_in_the_header(
    stub_session, ops, approvers
):
    stub, session, _ = stub_session
    alice = person("alice", ops, approvers)
    stub.answer({"jsonrpc": "2.0", "result": task_json("task-1", "TASK_STATE_CANCELED")})
    code, data = post(alice, f"/sessions/{session.pk}/cancel/", task_id="task-1", confirm="yes")
    assert code == 200, data

    [entry] = TimelineEntry.objects.filter(kind=TimelineEntry.Kind.CANCEL)
    assert (entry.actor.username, entry.task.task_id) == ("alice", "task-1")
    html = page_of(alice, session.pk)
    assert "Cancelled by alice" in plain(head_of(html))
    assert "Cancelled by alice" in plain(section(html, "data-timeline"))


def test_a_refused_cancel_writes_nothing_on_the_timeline(stub_session, ops, approvers):
    stub, session, _ = stub_session
    stub.rpc_error(-32002, "Task cannot be canceled")
    code, _ = post(person("alice", ops, approvers), f"/sessions/{session.pk}/cancel/",
                   task_id="task-1", confirm="yes")  # fmt: skip
    assert code == 502
    assert not TimelineEntry.objects.filter(kind=TimelineEntry.Kind.CANCEL).exists()


def test_the_timeline_folds_card_revisions_into_one_line_and_shows_task_ids_short(alice, ops):
    registered = make_agent(team=ops)
    long_id = "9b2f6c1e-4d3a-4f5b-8c7d-0e1f2a3b4c5d"
    for second in range(1, 6):
        steps = progress(*[("Step", "completed")] * second, ("Next", "in_progress"))
        body = status("WORKING", at=second, task=long_id, metadata=steps)
        assert push(Client(), registered, body).status_code == 200
    client = Client()
    client.force_login(alice)
    html = page_of(client, Session.objects.get().pk)
    timeline = section(html, "data-timeline")
    assert "<details" in timeline and "<details open" not in timeline  # folded away
    assert 'data-card-run="5"' in timeline
    assert "Card updated 5 times (revisions 1–5)" in plain(timeline)
    assert timeline.count('data-timeline-entry="card"') == 0
    # The id: its first 8 characters, whole in the title and behind Copy, never whole as text.
    assert f'<code title="{long_id}" data-short-id>9b2f6c1e…</code>' in timeline
    assert f'data-copy="{long_id}"' in timeline
    assert long_id not in plain(timeline)


def test_the_header_speaks_no_protocol_and_the_agent_page_does(alice, ops):
    registered = make_agent(team=ops)
    assert push(Client(), registered, status("WORKING", at=1)).status_code == 200
    client = Client()
    client.force_login(alice)
    html = page_of(client, Session.objects.get().pk)
    head = head_of(html)
    assert "Agent" in head and "State" in head
    for jargon in ("Tier", "Profile v2", "extension", "data-agent-tier"):
        assert jargon not in head
    agent = client.get(f"/agents/{registered.agent.pk}/").content.decode()
    assert "data-agent-tier" in agent and "Declared extensions" in agent


def test_the_timeline_and_the_turns_name_an_approval_as_the_header_does(agent_stub, ops, approvers):
    metadata = {
        **approval("i-1", "Ship v2?"),
        profile.TELEMETRY: {"tokens": 9147, "steps": 3, "costUsd": 0.02},
    }
    body = status("AUTH_REQUIRED", at=1, metadata=metadata)
    interaction = waiting_interaction(agent_stub, ops, body)
    html = page_of(person("alice", ops, approvers), interaction.task.session_id)
    header = re.search(r"data-session-state>([^<]+)<", html).group(1)
    assert header == "Needs approval"  # an approval waits in auth-required: not "a connection"
    assert re.findall(r"data-timeline-state>([^<]+)<", html) == [header]
    turn = plain(section(html, 'class="turns"'))
    assert header in turn and "Needs a connection" not in turn


def test_a_decision_in_plain_words_says_the_same_as_the_page(agent_stub, ops, approvers):
    with time_machine.travel(at(0), tick=False):
        interaction = waiting_interaction(agent_stub, ops)
    with time_machine.travel(at(42), tick=False):
        answer(person("bob", ops, approvers), interaction, decision="deny", reason="Not today")
    interaction = Interaction.objects.select_related("answered_by").get()
    assert decision_words.of_interaction(interaction).sentence == (
        "Denied by bob, 09:00, on the page. Reason: “Not today”"
    )
