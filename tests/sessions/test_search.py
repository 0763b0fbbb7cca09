"""Full-text search over sessions (tasks/sessions/search.py), through real pushes: what the write
path stores is what is found, on SQLite's FTS5 and PostgreSQL's tsvector alike."""

from __future__ import annotations

import pytest
from django.db import connection

from tasks.answering import agents
from tasks.models import Session
from tasks.sessions import search
from tests.builders import progress, status, ts
from tests.conftest import NOW, make_agent, push
from tests.migrating import old_agent, schema_at


def send(client, agent, body):
    assert push(client, agent, body).status_code == 200


def asked(client, agent, text, *, context, at=1, task=None):
    """A task snapshot whose history holds the person's request: the session's title."""
    user = {"messageId": f"u-{context}", "role": "ROLE_USER", "parts": [{"text": text}]}
    body = {
        "id": task or f"task-{context}",
        "contextId": context,
        "status": {"state": "TASK_STATE_WORKING", "timestamp": ts(at)},
        "history": [user],
    }
    send(client, agent, {"task": body})


def noted(client, agent, text, *, context, at, task=None):
    """The agent's status message: the card's note (the transcript keeps a receipt)."""
    send(
        client,
        agent,
        status("WORKING", context=context, task=task or f"t-{context}", at=at, text=text),
    )


_said = iter(range(1, 1_000_000))


def said(client, agent, text, *, context, at=None):
    """A message the agent sends: a line of the session's transcript. Sessions are updated
    in the order of these calls."""
    number = next(_said)
    body = {"messageId": f"m{number}", "role": "ROLE_AGENT", "contextId": context}
    send(client, agent, {"message": {**body, "parts": [{"text": text}]}})


def found(text, sessions=None, **page):
    sessions = Session.objects.all() if sessions is None else sessions
    return [
        Session.objects.get(pk=hit.session_id).context_id
        for hit in search.find(sessions, text, **page)
    ]


@pytest.fixture
def agent(db):
    return make_agent(name="Builder")


# -- each field ---------------------------------------------------------------------------


def test_finds_a_session_by_its_title(client, agent):
    asked(client, agent, "Rotate the staging certificates", context="certs")
    asked(client, agent, "Clean up old builds", context="builds")
    [hit] = search.find(Session.objects.all(), "certificates")
    assert Session.objects.get(pk=hit.session_id).context_id == "certs"
    assert hit.snippet.field == "title"
    assert hit.snippet.text == "Rotate the staging certificates"


def test_finds_sessions_by_agent_name_and_follows_a_rename(client, agent):
    other = make_agent(name="Quartermaster")
    said(client, agent, "working on it", context="a", at=1)
    said(client, other, "working on it", context="b", at=2)
    assert found("quartermaster") == ["b"]
    assert search.find(Session.objects.all(), "quarter")[0].snippet.field == "agent"
    other.agent.name = "Harbourmaster"
    other.agent.save()
    agents.changed(other.agent)
    assert found("quartermaster") == []
    assert found("harbourmaster") == ["b"]


def test_finds_a_session_by_its_plan_steps(client, agent):
    plan = progress(("Provision the database", "completed"), ("Backfill invoices", "in_progress"))
    send(client, agent, status("WORKING", context="plan", at=1, metadata=plan))
    said(client, agent, "nothing here", context="other", at=2)
    [hit] = search.find(Session.objects.all(), "invoices")
    assert hit.snippet.field == "plan"
    assert "Backfill invoices" in hit.snippet.text


def test_finds_a_session_by_its_card_note_and_its_transcript(client, agent):
    said(client, agent, "Copying the ledger tables", context="noted")
    noted(client, agent, "Now verifying checksums", context="noted", at=2)
    note_hit = search.find(Session.objects.all(), "checksums")[0]
    assert note_hit.snippet.field == "note"
    [transcript_hit] = search.find(Session.objects.all(), "ledger")
    assert transcript_hit.snippet.field == "transcript"
    assert transcript_hit.snippet.text == "Copying the ledger tables"


def test_words_are_all_required_and_the_last_is_a_prefix(client, agent):
    said(client, agent, "Deploying the payments service", context="pay", at=1)
    said(client, agent, "Deploying the search service", context="search", at=2)
    assert found("deploying payments") == ["pay"]
    assert found("payments deploy") == ["pay"]  # in any order
    assert found("payment deploying") == []  # only the last word is a prefix
    assert sorted(found("service depl")) == ["pay", "search"]
    assert found("DEPLOYING PAYMENTS") == ["pay"]


def test_diacritics_and_case_are_ignored_where_the_index_folds_them(client, agent):
    noted(client, agent, "Résumé of the Zürich move", context="zurich", at=1)
    assert found("résumé") == ["zurich"]
    assert found("RÉSUMÉ") == ["zurich"]
    if connection.vendor == "sqlite":  # PostgreSQL's 'simple' configuration keeps accents
        assert found("zurich") == ["zurich"]


def test_words_inside_hosts_paths_and_versions_are_found(client, agent):
    said(client, agent, "See wiki.example.com/runbooks/billing for v2.5", context="w", at=1)
    assert found("example") == ["w"]
    assert found("runbooks") == ["w"]
    assert found("v2 5") == ["w"]


# -- ranking and paging ------------------------------------------------------------------


def test_a_title_match_ranks_above_a_newer_transcript_match(client, agent):
    asked(client, agent, "Migrate the warehouse", context="titled", at=1)
    said(client, agent, "the warehouse is slow today", context="mentioned", at=5)
    assert found("warehouse") == ["titled", "mentioned"]
    hits = search.find(Session.objects.all(), "warehouse")
    assert hits[0].rank < hits[1].rank


def test_equal_ranks_come_newest_first(client, agent):
    for context in ("old", "middle", "newest"):
        said(client, agent, "compacting segments", context=context)
    assert found("compacting") == ["newest", "middle", "old"]


def test_pages_by_offset_and_limit(client, agent):
    for at in range(1, 6):
        said(client, agent, "reindexing shards", context=f"s{at}", at=at)
    everything = found("reindexing")
    assert everything == ["s5", "s4", "s3", "s2", "s1"]
    assert found("reindexing", offset=1, limit=2) == ["s4", "s3"]
    assert found("reindexing", offset=4, limit=10) == ["s1"]
    assert found("reindexing", offset=10) == []
    assert found("reindexing", limit=0) == []
    assert search.count(Session.objects.all(), "reindexing") == 5


def test_a_session_found_by_several_messages_appears_once(client, agent):
    said(client, agent, "retrying the upload", context="one", at=1)
    said(client, agent, "retrying the upload again", context="one", at=2)
    said(client, agent, "still retrying", context="one", at=3)
    assert found("retrying") == ["one"]
    assert search.count(Session.objects.all(), "retrying") == 1


# -- the write path keeps the index ----------------------------------------------------------


def test_a_message_written_by_the_write_path_is_found_and_goes_with_its_session(client, agent):
    said(client, agent, "first status", context="gone", at=1)
    said(client, agent, "quarantined the flaky runner", context="gone", at=2)
    said(client, agent, "newer unrelated status", context="gone", at=3)
    assert found("flaky") == ["gone"]
    Session.objects.get(context_id="gone").delete()
    assert found("flaky") == []
    assert search.count(Session.objects.all(), "runner") == 0


def test_a_card_api_write_is_found(client, agent):
    response = client.post(
        "/api/progress-card",
        {"sessionKey": "api", "markdown": "Vacuuming the archive"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agents.replace_api_token(agent.agent)}",
    )
    assert response.status_code == 200, response.content
    assert found("vacuuming") == ["api"]


# -- visibility ---------------------------------------------------------------------------


def test_only_sessions_in_the_given_queryset_are_found(client, alice, charlie, ops):
    secret = make_agent(team=ops, name="Ops agent")
    public = make_agent(name="Open agent")
    said(client, secret, "rotating the root keys", context="secret", at=1)
    said(client, public, "rotating the log files", context="public", at=2)
    assert found("rotating", Session.objects.visible_to(charlie)) == ["public"]
    assert search.count(Session.objects.visible_to(charlie), "rotating") == 1
    assert found("root keys", Session.objects.visible_to(charlie)) == []
    assert found("rotating", Session.objects.visible_to(alice)) == ["public", "secret"]


# -- hostile text ------------------------------------------------------------------------


HOSTILE = [
    '"',
    '"unbalanced',
    "*",
    "status*",
    "NEAR(status running, 2)",
    "-status",
    "status AND",
    "OR",
    "NOT status",
    "^status",
    "status:*",
    "st&atus | !x",
    "title:status",
    "{title agent}: status",
    "status\x00running",
    "\ud800status",
    "status\ud800",
    "x" * 10_000,
    " ".join(["status"] * 5000),
    " ".join(f"w{i}" for i in range(5000)),
    "'; DROP TABLE tasks_session; --",
    "\\",
    "'",
    "%s %(x)s",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_never_raises(client, agent, text):
    said(client, agent, "status running smoothly", context="c", at=1)
    try:
        hits = search.find(Session.objects.all(), text)
        total = search.count(Session.objects.all(), text)
    except search.BadQuery as error:
        assert "no word" in str(error)
        return
    assert len(hits) == total <= 1
    assert Session.objects.count() == 1


@pytest.mark.parametrize("text", ["", "   ", "***", '"" -- ()', "\x00", "\ud800", "_"])
def test_text_without_a_word_is_a_bad_query(db, text):
    with pytest.raises(search.BadQuery, match="no word"):
        search.find(Session.objects.all(), text)
    with pytest.raises(search.BadQuery):
        search.count(Session.objects.all(), text)


def test_words_are_capped(db):
    query = search.parse(" ".join(f"word{i}" for i in range(50)) + " " + "y" * 500)
    assert len(query.words) == search.MAX_WORDS
    assert all(len(word) <= search.MAX_WORD_CHARS for word in query.words)


def test_a_long_word_is_found_by_its_first_characters(client, agent):
    long_word = "a" + "b" * 100
    said(client, agent, f"token {long_word} seen", context="long", at=1)
    assert found(long_word) == ["long"]


# -- snippets ---------------------------------------------------------------------------


def test_snippet_ranges_point_at_the_matching_words(client, agent):
    text = ("Preparing the environment. " * 6) + "Now Compiling the compiler, then compile tests."
    said(client, agent, text, context="long", at=1)
    said(client, agent, "later", context="long", at=2)
    [hit] = search.find(Session.objects.all(), "compil")
    snippet = hit.snippet
    assert snippet.field == "transcript"
    assert snippet.text.startswith("…")
    assert [snippet.text[a:b] for a, b in snippet.ranges] == ["Compiling", "compiler", "compile"]
    assert len(snippet.text) <= search.SNIPPET_CHARS + 2


def test_snippet_is_plain_text_with_whitespace_collapsed(client, agent):
    said(client, agent, "<b>bold</b>\n\n  and   <script>x</script> markup", context="m", at=1)
    [hit] = search.find(Session.objects.all(), "markup")
    assert hit.snippet.text == "bold and x markup"
    start, end = hit.snippet.ranges[0]
    assert hit.snippet.text[start:end] == "markup"


def test_a_long_message_is_indexed_up_to_a_bound_and_its_snippet_cut(client, agent):
    filler = "filler " * 2000  # 14,000 characters
    said(client, agent, f"{filler}needle {filler}{filler}haystack", context="big")
    [hit] = search.find(Session.objects.all(), "needle")
    assert hit.snippet.text.startswith("…") and hit.snippet.text.endswith("…")
    assert "needle" in hit.snippet.text
    # Past the first INDEXED_CHARS characters a message is not indexed, on either database.
    assert found("haystack") == []


# -- common words: read in batches, newest first ----------------------------------------------


def test_matches_beyond_one_batch_are_read_in_further_batches(client, agent, monkeypatch):
    monkeypatch.setattr(search, "BATCH", 2)  # 5 sessions, 2 documents of each kind a batch
    for number in range(5):
        said(client, agent, "common chatter", context=f"c{number}")
    assert found("chatter") == ["c4", "c3", "c2", "c1", "c0"]
    assert found("chatter", offset=3, limit=2) == ["c1", "c0"]
    assert search.count(Session.objects.all(), "chatter") == 5


def test_a_word_in_more_messages_than_it_reads_is_ranked_among_the_newest(
    client, agent, monkeypatch
):
    monkeypatch.setattr(search, "BATCH", 2)
    monkeypatch.setattr(search, "ROUNDS", 1)
    for number in range(5):
        said(client, agent, "common chatter", context=f"c{number}")
    assert found("chatter") == ["c4", "c3"]
    assert search.count(Session.objects.all(), "chatter") == 2  # capped, as documented


# -- the index's upkeep -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow  # migrates the schema back and forth: .ci/run runs it on both databases
def test_migrating_fills_the_index_from_what_is_stored(client):
    with schema_at(("tasks", "0015_notification_channels")) as old:
        agent = old_agent(old, "Backfiller")
        session = old.get_model("tasks", "Session").objects.create(
            agent=agent, context_id="old", title="Archived cleanup", updated_at=NOW
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO tasks_message (session_id, message_id, role, text, at, "
                "estimated_time, card_update, parts, files) VALUES "
                "(%s, '', 'ROLE_AGENT', 'removed stale artifacts', %s, false, false, '[]', '[]')",
                [session.pk, NOW],
            )
    assert found("archived") == ["old"]
    assert found("backfiller") == ["old"]
    assert found("artifacts") == ["old"]


def test_the_triggers_are_made_again_after_a_migrate_dropped_them(client, agent):
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL keeps the index in generated columns, not triggers")
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER search_message_insert")
    search.ensure_triggers(using="default")
    said(client, agent, "reattached the volume", context="v")
    assert found("reattached") == ["v"]


def test_a_word_too_common_to_rank_keeps_own_text_first_and_the_rest_newest_first(
    client, agent, monkeypatch
):
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL's relevance costs nothing global: it always ranks by it")
    asked(client, agent, "Routine maintenance", context="titled")
    said(client, agent, "routine routine routine", context="older")
    said(client, agent, "routine check", context="newer")
    assert found("routine") == ["titled", "older", "newer"]  # by relevance
    monkeypatch.setattr(search, "RANKED_BELOW", 0)  # every word is "common"
    assert found("routine") == ["titled", "newer", "older"]


def test_a_typed_word_too_common_to_merge_as_a_prefix_is_searched_as_the_whole_word(
    client, agent, monkeypatch
):
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL reads a prefix from its index; FTS5 merges it in memory")
    said(client, agent, "deploy started", context="whole")
    said(client, agent, "deploy again", context="again")
    said(client, agent, "deployment done", context="longer")
    assert found("deploy") == ["longer", "again", "whole"]  # a prefix: all three
    monkeypatch.setattr(search, "RANKED_BELOW", 1)  # "deploy" is now in too many messages
    assert found("deploy") == ["again", "whole"]
    assert found("deplo") == ["longer", "again", "whole"]  # "deplo" alone is in none


def test_out_of_range_paging_is_clamped(client, agent):
    said(client, agent, "paging probe", context="p")
    assert found("probe", offset=-5, limit=10**12) == ["p"]
    assert found("probe", offset=10**30) == []
    assert found("probe", limit=-1) == []
