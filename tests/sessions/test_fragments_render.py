"""A session's fragments (tasks/sessions/fragments.py) for the kinds of card agents send: no card, a
short and a long plan, a note, an open question, an answer sent, a finished session with
cost and unconfirmed effects. Each card, tile, collapsed line and sidebar row shows what a
person needs; a tile shows a plan that fits on it exactly as the card does, and a long one
around its current step; and rendering them, as the applier does after each batch for
every session it changed, asks the database for nothing more."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks.models import ProgressCard, Session
from tasks.sessions import fragments, progress_card
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
WORKING, ASKING, FAILED = "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_FAILED"


def plan(size: int, current: int) -> list[dict]:
    steps = []
    for index in range(size):
        status = "completed" if index < current else "pending"
        steps.append({"step": f"Copy <group> {index + 1}", "status": status})
    if current < size:
        steps[current].update(status="in_progress", note="about 4 min left")
    return steps


def rendered(
    state: str, *, plan=None, markdown=None, facts=None, needs_human=False
) -> dict[str, str]:
    """The session's fragments as the applier renders them: the session row with the agent
    its batch loaded, the card read afresh."""
    agent = make_agent(name="Billing & Co").agent
    session = Session.objects.create(
        agent=agent,
        context_id="ctx-1",
        title="Billing <migration>",
        state=state,
        needs_human=needs_human,
        updated_at=AT,
    )
    if plan is not None or markdown is not None or facts:
        progress_card.store(session, plan, markdown, facts, only_if_changed=False)
    session = Session.objects.get(pk=session.pk)
    session.agent = agent
    card = ProgressCard.objects.filter(session=session).first()
    with CaptureQueriesContext(connection) as queries:
        html = fragments.render(session, card)
    assert [q["sql"] for q in queries] == []
    assert set(html) == {"card", "tile", "summary", "sidebar"}
    return html


def steps_shown(html: str) -> list[str]:
    return re.findall(
        r'<li class="step step-\w+"><span class="step-status">([^<]+)</span> ([^<]+)<', html
    )


def tile_card(tile: str) -> str:
    return re.search(
        r'<div class="tile-body">(.*)</div>\n  <p class="tile-more">', tile, re.S
    ).group(1)


def test_a_session_without_a_card_says_so_everywhere_with_its_state_and_agent():
    html = rendered(WORKING)

    assert "No progress card yet." in html["card"]
    assert tile_card(html["tile"]) == html["card"]
    for place in ("tile", "summary", "sidebar"):
        assert "data-state-words>Working</span>" in html[place], place
    assert "Billing &amp; Co" in html["tile"]
    assert (
        "Billing &lt;migration&gt;" in html["tile"]
        and "Billing &lt;migration&gt;" in html["sidebar"]
    )
    assert 'data-has-card="false"' in html["sidebar"]
    assert 'datetime="2026-12-01T09:30:00+00:00"' in html["tile"]


def test_a_plan_that_fits_on_a_tile_shows_there_exactly_as_on_the_card():
    html = rendered(WORKING, plan=plan(5, 2), facts={"state": WORKING})

    assert steps_shown(html["card"]) == [
        ("done", "Copy &lt;group&gt; 1"),
        ("done", "Copy &lt;group&gt; 2"),
        ("in progress", "Copy &lt;group&gt; 3"),
        ("to do", "Copy &lt;group&gt; 4"),
        ("to do", "Copy &lt;group&gt; 5"),
    ]
    assert '<span class="step-note">about 4 min left</span>' in html["card"]
    assert "Step 3 of 5" in html["card"]
    assert tile_card(html["tile"]) == html["card"]
    assert "more step" not in html["tile"]
    assert "Step 3 of 5 · Copy &lt;group&gt; 3" in html["summary"]
    assert 'data-has-card="true"' in html["sidebar"]


def test_a_long_plan_shows_on_a_tile_around_its_current_step_and_says_how_many_more():
    html = rendered(WORKING, plan=plan(20, 11), facts={"state": WORKING})

    assert len(steps_shown(html["card"])) == 20
    tile = steps_shown(html["tile"])
    assert [text for _, text in tile] == [f"Copy &lt;group&gt; {n}" for n in range(10, 15)]
    assert '<ol class="plan" start="10">' in html["tile"]
    assert "15 more steps on the session page" in html["tile"]
    assert "more step" not in html["card"]
    assert "Step 12 of 20" in html["tile"] and "Step 12 of 20" in html["summary"]


def test_a_note_shows_on_the_card_and_the_tile_with_who_wrote_it():
    html = rendered(WORKING, markdown="**Copying** tables", facts={"state": WORKING})

    for place in ("card", "tile"):
        assert '<div class="note"><p><strong>Copying</strong> tables</p></div>' in html[place]
        assert 'data-card-source="status">From the agent&#x27;s status' in html[place]
        assert "<time datetime=" in html[place]


def test_an_open_question_shows_what_it_asks_and_the_session_needs_a_person():
    question = {"kind": "approval", "prompt": "Cut over <now>?"}
    html = rendered(
        ASKING,
        plan=plan(5, 3),
        facts={"state": ASKING, "question": question},
        needs_human=True,
    )

    assert "<strong>Approval needed:</strong> Cut over &lt;now&gt;?" in html["card"]
    assert "Cut over &lt;now&gt;?" in html["tile"]
    for place in ("card", "summary", "sidebar"):
        assert "data-state-words>Needs approval</span>" in html[place], place
    assert "tile-bounded needs-human" in html["tile"]
    assert 'class="sidebar-row needs-human"' in html["sidebar"]


def test_an_answer_sent_says_who_answered_until_the_agent_goes_on():
    answer = {"kind": "approval", "text": "Approved by Alice"}
    html = rendered(ASKING, plan=plan(5, 3), facts={"state": ASKING, "answer": answer})

    assert "Approved by Alice; waiting for the agent to go on." in html["card"]
    assert "data-state-words>Answer sent</span>" in html["sidebar"]
    assert 'data-needs-human="false"' in html["sidebar"]
    assert 'class="sidebar-row needs-human"' not in html["sidebar"]


def test_a_finished_session_shows_its_cost_unconfirmed_effects_and_unfinished_steps():
    telemetry = {"costUsd": 0.4231, "tokens": 18342, "steps": 12, "traceId": "4bf92f35"}
    facts = {"state": FAILED, "uncertain": ["upload:report.pdf"], "telemetry": telemetry}
    html = rendered(FAILED, plan=plan(20, 14), facts=facts)

    for place in ("card", "tile"):
        assert "Cost $0.42 · 18,342 tokens · 12 steps · trace <code>4bf92f35</code>" in html[place]
        assert '<p class="card-warning">Upload of report.pdf unconfirmed.</p>' in html[place]
        assert '<ol class="plan plan-finished"' in html[place]
    assert "14 of 20 steps done" in html["card"] and "14 of 20 steps done" in html["summary"]
    statuses = [status for status, _ in steps_shown(html["card"])]
    assert statuses == ["done"] * 14 + ["unfinished"] * 6
    assert "about 4 min left" not in html["card"]
    for place in ("tile", "summary", "sidebar"):
        assert "pill-danger" in html[place] and "Failed</span>" in html[place], place
