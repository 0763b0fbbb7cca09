"""The transcript shows an agent's markdown as the card shows its note (rendered and sanitized
once, when the message is written), people's text as they typed it; search excerpts are
plain text; and every word an agent said in a session stays searchable after the card stops
showing it (earlier notes and plans, artifact names), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import importlib
import re

import pytest
from django.db import connection
from django.urls import reverse

from tasks.answering.agents import new_endpoint
from tasks.models import Agent, Message, Session, SessionText
from tasks.sessions import progress_card, search
from tasks.sessions.search_writes import SAID_CHARS, SAID_ROOM
from tests.builders import artifact, progress, status
from tests.conftest import NOW, RegisteredAgent, make_agent, push
from tests.migrating import old_agent, schema_at

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
    assert SAID_CHARS <= len(said) <= SAID_ROOM  # grown since it was last cut back
    assert said.startswith("note58 ")
    assert "aardvark" not in said
    assert len(search.find(Session.objects.all(), "note50")) == 1
    assert search.find(Session.objects.all(), "aardvark") == []  # dropped with the oldest


@pytest.mark.django_db(transaction=True)
def test_migrating_indexes_said_and_fills_it_with_artifact_names(client):
    # Rows as that schema's code wrote them (today's writes need the columns made since).
    with schema_at(("tasks", "0026_screen_a_team_keeps_open")) as old:
        agent = old_agent(old, "Migrator")
        session = old.get_model("tasks", "Session").objects.create(
            agent=agent, context_id="ctx-1", updated_at=NOW
        )
        task = old.get_model("tasks", "Task").objects.create(
            agent=agent,
            session=session,
            task_id="t-ctx-1",
            state="TASK_STATE_WORKING",
            status_received_at=NOW,
        )
        old.get_model("tasks", "Artifact").objects.create(
            task=task, artifact_id="a-1", sequence=1, name="Pelican summary", received_at=NOW
        )
        old.get_model("tasks", "SessionText").objects.create(
            session=session, agent="Migrator", note="working"
        )
    assert "Pelican summary" in SessionText.objects.get().said
    assert len(search.find(Session.objects.all(), "pelican")) == 1
    # Written from here on, `said` is indexed as it changes, after what the migration kept.
    migrated = Agent.objects.get()
    registered = RegisteredAgent(migrated, *new_endpoint(migrated), None)
    note(client, registered, "replaced", at=2)
    assert SessionText.objects.get().said.startswith("working\nPelican summary")
    for word in ("working", "pelican", "replaced"):
        assert len(search.find(Session.objects.all(), word)) == 1, word


# What PostgreSQL's index would hold if it read the whole text again (migration 0028).
_0028 = importlib.import_module("tasks.migrations.0028_said_vector_kept")
SAID_VECTOR = _0028.SAID_VECTOR
# A vector's words, each with its weights.
_WORDS = (
    "(SELECT array_agg(lexeme || array_to_string(weights, '') ORDER BY lexeme) FROM unnest({}))"
)
SEARCH = (
    _0028.FORWARD[4]
    .split("AS (", 1)[1]
    .rsplit(") STORED", 1)[0]
    .replace("said_search", SAID_VECTOR)
)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite's FTS5 reads the whole row at each write"
)
def test_the_kept_vector_of_said_is_the_one_its_text_would_make(client, agent):
    # Notes replaced one by one, past SAID_ROOM twice (cut back each time), and an artifact
    # name between them: the vector kept along the way holds the words (and their weights)
    # of the one made from the text. Not every position: a vector keeps 256 of a word's, and
    # which ones differ (what it is ranked by, in the run of a common word, not what it finds).
    for at in range(1, 60):
        note(client, agent, f"note{at} about the turbine " + "word " * 150, at=at)
        if at == 30:
            search.also_said(Session.objects.get().pk, "Quarterly turbine report")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT length(said), strip(said_search) = strip({SAID_VECTOR}), "
            f"{_WORDS.format('search')} = {_WORDS.format(SEARCH)} FROM tasks_sessiontext"
        )
        [(length, said_same, search_same)] = cursor.fetchall()
    assert SAID_CHARS <= length <= SAID_ROOM
    assert (said_same, search_same) == (True, True)
