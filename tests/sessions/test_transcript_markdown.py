"""The transcript shows an agent's markdown as the card shows its note (rendered and sanitized
once, when the message is written), people's text as they typed it; search excerpts are
plain text; and every word an agent said in a session stays searchable after the card stops
showing it (earlier notes and plans, artifact names), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.urls import reverse

from tasks.models import Message, Session, SessionText
from tasks.sessions import progress_card, search
from tasks.sessions.search_writes import SAID_CHARS
from tests.builders import artifact, progress, status
from tests.conftest import NOW, make_agent, push

RELEASE = """**Release checkout 2.4 is live**

| Check | Result |
|---|---|
| Smoke tests | passed |

Rollout <progress value="3" max="4"></progress>"""

HOSTILE = """<script>alert("s")</script> before
<img src=x onerror="alert('i')"> [click](javascript:alert('j')) <a href="javascript:x">raw</a>
<iframe src="https://evil.test/"></iframe> after"""


def send(client, registered, body) -> None:
    assert push(client, registered, body).status_code == 200


def say(client, registered, text, *, number, role="ROLE_AGENT", context="ctx-1"):
    body = {
        "messageId": f"m{number}",
        "role": role,
        "contextId": context,
        "parts": [{"text": text}],
    }
    send(client, registered, {"message": body})


def note(client, registered, text, *, at, context="ctx-1", metadata=None):
    task = f"t-{context}"
    send(
        client,
        registered,
        status("WORKING", context=context, task=task, at=at, text=text, metadata=metadata),
    )


def transcript(client, session) -> str:
    response = client.get(reverse("session", args=[session.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    return page[
        page.index('<ol class="transcript"') : page.index("</ol>", page.index("transcript"))
    ]


def matches(client, text):
    response = client.get("/api/sessions", {"q": text})
    assert response.status_code == 200, response.content
    return response.json()["sessions"]


@pytest.fixture
def agent(ops):
    return make_agent(team=ops, name="Release bot")


def test_an_agent_message_shows_its_markdown_rendered_once_and_a_persons_text_as_typed(
    client, alice, agent, monkeypatch
):
    say(client, agent, RELEASE, number=1)
    say(client, agent, "**not bold**, <b>a tag</b>", number=2, role="ROLE_USER")
    told, asked = Message.objects.order_by("id")
    assert "<strong>Release checkout 2.4 is live</strong>" in told.html
    assert "<table>" in told.html and "<th>Check</th>" in told.html
    assert re.search(r'<progress max="4" value="3" aria-label="Rollout: 3 of 4">', told.html)
    assert asked.html == ""

    # Shown from what was stored: nothing is rendered when the page is read.
    def refuse(markdown):
        raise AssertionError("rendered on read")

    monkeypatch.setattr(progress_card, "render", refuse)
    client.force_login(alice)
    shown = transcript(client, Session.objects.get())
    assert told.html in shown
    assert "**Release" not in shown and "|---|" not in shown and "| Check |" not in shown
    assert "**not bold**, &lt;b&gt;a tag&lt;/b&gt;" in shown  # a person's text, as text


def test_hostile_markdown_in_a_message_is_sanitized_as_a_cards_note_is(client, alice, agent):
    say(client, agent, HOSTILE, number=1)
    stored = Message.objects.get().html
    client.force_login(alice)
    shown = transcript(client, Session.objects.get())
    for html in (stored, shown):
        assert not re.search(r"<script|<img|<iframe|onerror|alert\(.[si]", html, re.IGNORECASE)
        assert not re.search(r"href=.?javascript", html, re.IGNORECASE)
    # The script and frame go with what is in them; a javascript: link is text, no link.
    assert stored.startswith("before") and stored.endswith("after")
    assert "<a " not in stored and "[click](javascript:alert('j')) raw" in stored


def test_an_old_message_without_html_shows_its_text(client, alice, agent):
    say(client, agent, "first", number=1)
    session = Session.objects.get()
    Message.objects.create(
        session=session, role=Message.Role.AGENT, text="**stored** before\nrendering", at=NOW
    )
    client.force_login(alice)
    shown = transcript(client, session)
    assert "**stored** before<br>rendering" in shown


def test_a_word_from_a_replaced_note_is_found_and_its_excerpt_is_plain_text(client, alice, agent):
    note(client, agent, RELEASE.replace("checkout", "quasar"), at=1)
    note(client, agent, "Now **watching** the dashboards", at=2)
    assert "quasar" not in SessionText.objects.get().note
    client.force_login(alice)
    [found] = matches(client, "quasar")
    assert found["match"]["field"] == "said"
    excerpt = found["match"]["text"]
    assert "Release quasar 2.4 is live" in excerpt
    for markup in ("**", "|---|", "| Check", "<progress", "<"):
        assert markup not in excerpt
    [(start, end)] = found["match"]["highlights"]
    assert excerpt[start:end] == "quasar"
    # The search page shows the same plain excerpt, the word marked.
    page = client.get("/", {"q": "quasar"}).content.decode()
    snippet = page[page.index('class="result-snippet"') :]
    snippet = snippet[: snippet.index("</p>")]
    assert "<mark>quasar</mark>" in snippet and "**" not in snippet and "|---|" not in snippet


def test_a_transcript_excerpt_is_plain_text(client, alice, agent):
    say(client, agent, RELEASE, number=1)
    client.force_login(alice)
    [found] = matches(client, "smoke")
    assert found["match"]["field"] == "transcript"
    assert (
        found["match"]["text"]
        == "Release checkout 2.4 is live Check Result Smoke tests passed Rollout"
    )


def test_earlier_plans_and_artifact_names_are_searchable(client, agent):
    note(client, agent, "working", at=1, metadata=progress(("Compile the zeppelin", "in_progress")))
    note(client, agent, "working", at=2, metadata=progress(("Ship it", "in_progress")))
    assert [h.session_id for h in search.find(Session.objects.all(), "zeppelin")] == [
        Session.objects.get().pk
    ]
    session = Session.objects.get()
    search.also_said(session.pk, "Nightly\u202e  build\n report")
    search.also_said(session.pk, "Nightly build report")  # there already: not added again
    said = SessionText.objects.get().said
    assert said.startswith("Nightly build report\nCompile the zeppelin")
    assert said.count("Nightly") == 1
    [hit] = search.find(Session.objects.all(), "nightly")
    assert hit.snippet.field == "said"


def test_an_artifact_name_pushed_by_an_agent_is_searchable(client, agent):
    note(client, agent, "working", at=1)
    send(client, agent, artifact("a-1", "body", task="t-ctx-1", name="Flamingo report"))
    assert len(search.find(Session.objects.all(), "flamingo")) == 1


def test_said_is_bounded_newest_first_and_a_growing_note_is_not_copied(client, agent):
    # A note that grows a line at a time: each older one is in the newer, nothing is kept.
    lines = []
    for at in range(1, 4):
        lines.append(f"step {at} done")
        note(client, agent, "\n".join(lines), at=at)
    assert SessionText.objects.get().said == ""
    # Replaced notes, each different: the newest first, the oldest cut off at the bound.
    for at in range(4, 60):
        note(client, agent, f"{'aardvark' if at == 4 else f'note{at}'} " + "x" * 1000, at=at)
    said = SessionText.objects.get().said
    assert len(said) == SAID_CHARS
    assert said.startswith("note58 ")
    assert "aardvark" not in said
    assert len(search.find(Session.objects.all(), "note50")) == 1
    assert search.find(Session.objects.all(), "aardvark") == []  # dropped with the oldest


@pytest.mark.django_db(transaction=True)
def test_migrating_indexes_said_and_fills_it_with_artifact_names(client):
    from django.db.migrations.executor import MigrationExecutor

    before = [("tasks", "0026_screen_a_team_keeps_open")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        registered = make_agent(name="Migrator")
        note(client, registered, "working", at=1)
        send(client, registered, artifact("a-1", "x", task="t-ctx-1", name="Pelican summary"))
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert "Pelican summary" in SessionText.objects.get().said
    assert len(search.find(Session.objects.all(), "pelican")) == 1
    # Written from here on, `said` is indexed as it changes.
    note(client, registered, "replaced", at=2)
    assert len(search.find(Session.objects.all(), "working")) == 1
