"""Full-text search over sessions: their title, agent name, card note, plan steps and
transcript, in the database's own full-text index.

Two kinds of document are indexed (migration 0016 makes the indexes and keeps them):
- a session's own text, one `SessionText` row per session (title, agent name, plan step
  titles, note), written by `keep` from the one "session changed" step (changes.derive) and
  the card API, and by `agent_renamed`;
- every transcript message (`tasks_message.text`), indexed by the database itself as rows
  are written (SQLite: an FTS5 table kept by triggers; PostgreSQL: a stored generated
  tsvector column), so every writer of the transcript is covered without a call here.

Ranking: a session's rank is that of its best document. A match in the session's own text
ranks above any transcript match (rank in (0, 1] against (1, 2]); within each, the
database's relevance (SQLite bm25, PostgreSQL ts_rank_cd; title and agent name weigh most,
then the plan, then the note) orders them, and equal ranks go newest first.

People's text never reaches the index's query syntax: it is split into words (letters and
digits), at most MAX_WORDS of them, each at most MAX_WORD_CHARS long, all required, the
last one a prefix; each word is quoted.

Snippets are cut in Python from a bounded prefix of the matching field or message, the same
way on both databases, as plain text with the ranges of the matching words (templates
escape the text).
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from dataclasses import dataclass

from django.db import connection, connections, transaction
from django.db.models import QuerySet

from tasks.models import Agent, Card, Session

MAX_WORDS = 10
MAX_WORD_CHARS = 64
# A prefix shorter than this would expand to a large share of the vocabulary: the last word
# is a prefix only from this length on.
MIN_PREFIX_CHARS = 3
# Indexed (PostgreSQL) and read for snippets: the first this many characters of a message
# or note. A tsvector over a megabyte of text raises, and would fail the write path.
INDEXED_CHARS = 20_000
# The most documents of each kind ranked for one query: a word in a third of a million
# messages is ranked among the best CAP of them (best by the index's relevance on SQLite,
# the first found on PostgreSQL), so a query stays within its time budget however common
# its words are. `count` is bounded by the same caps.
SESSION_CAP = 5_000
MESSAGE_CAP = 5_000
SNIPPET_CHARS = 200
SNIPPET_BEFORE = 60  # characters of context kept before the first match
MAX_LIMIT = 500

_WORD = re.compile(r"[^\W_]+")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Snippet:
    field: str  # "title" | "agent" | "note" | "plan" | "transcript"
    text: str  # plain text, an excerpt around the match, "…" where cut
    ranges: tuple[tuple[int, int], ...]  # [start, end) of each highlighted match in text


@dataclass(frozen=True)
class Hit:
    session_id: int
    rank: float  # smaller is better; equal ranks are ordered newest first by find
    snippet: Snippet | None


class BadQuery(ValueError):
    """The search text holds no word to search for."""


@dataclass(frozen=True)
class Query:
    words: tuple[str, ...]  # folded, in order
    prefix: bool  # the last word matches as a prefix

    def matches(self, token: str) -> bool:
        folded = fold(token)
        if self.prefix and folded.startswith(self.words[-1]):
            return True
        return folded in self.words


def fold(word: str) -> str:
    """A word as the indexes compare it: case and diacritics ignored."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def parse(text: str) -> Query:
    """People's search text → the words searched for. Raises BadQuery if it has none."""
    if not isinstance(text, str):
        raise BadQuery("the search text must be a string")
    # Lone surrogates, NUL and the like are not word characters: they are dropped here.
    text = unicodedata.normalize("NFC", text[: MAX_WORDS * (MAX_WORD_CHARS + 1) * 20])
    words: list[str] = []
    prefix = False
    for found in _WORD.finditer(text):
        word = fold(found.group())
        cut = len(word) > MAX_WORD_CHARS
        word = word[:MAX_WORD_CHARS]
        # A word folding to nothing, or to characters that are no longer word characters,
        # would be no word to the index.
        if not _WORD.fullmatch(word):
            continue
        if word not in words:
            words.append(word)
        if len(words) == MAX_WORDS:
            prefix = cut
            break
        prefix = cut
    if not words:
        raise BadQuery("the search text holds no word to search for (letters or digits)")
    prefix = prefix or len(words[-1]) >= MIN_PREFIX_CHARS
    return Query(tuple(words), prefix)


# -- the write path ---------------------------------------------------------------------------

# One statement, with the agent's name read in it, that writes nothing (and so reindexes
# nothing) when the text is unchanged.
_UPSERT = """
INSERT INTO tasks_sessiontext (session_id, title, agent, plan, note)
SELECT %s, %s, tasks_agent.name, %s, %s FROM tasks_agent WHERE tasks_agent.id = %s
ON CONFLICT (session_id) DO UPDATE SET
    title = excluded.title, agent = excluded.agent, plan = excluded.plan, note = excluded.note
WHERE (tasks_sessiontext.title, tasks_sessiontext.agent, tasks_sessiontext.plan,
       tasks_sessiontext.note) <> (excluded.title, excluded.agent, excluded.plan, excluded.note)
"""


def plan_text(plan: list[dict] | None) -> str:
    """A plan's step titles, one a line."""
    return "\n".join(str(step.get("step", "")) for step in plan or [])


def keep(session: Session, card: Card | None) -> None:
    """Index the session's own text as it is now: call under its lock, in the transaction
    that changed it (changes.derive, the card API). Writes only if the text changed."""
    plan = plan_text(card.plan) if card is not None else ""
    note = card.markdown if card is not None else ""
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT, [session.pk, session.title, plan, note, session.agent_id])


def agent_renamed(agent: Agent) -> None:
    """Index the agent's new name in all of its sessions' text (one statement; none of them
    change when the name did not)."""
    from tasks.models import SessionText

    with transaction.atomic(savepoint=False):
        SessionText.objects.filter(session__agent=agent).exclude(agent=agent.name).update(
            agent=agent.name
        )


# -- the read path ----------------------------------------------------------------------------


def find(sessions: QuerySet[Session], text: str, *, offset: int = 0, limit: int = 50) -> list[Hit]:
    """Sessions among `sessions` (a filtered queryset: visibility, agent, state, dates, …)
    matching `text`, best first, newest (updated_at desc, id desc) first on equal rank; the
    page [offset, offset + limit). Raises BadQuery if `text` holds no word.

    Bounded: of a word found in more than SESSION_CAP sessions' own text or MESSAGE_CAP
    messages, only that many of each are ranked (module docstring)."""
    query = parse(text)
    offset = max(0, min(int(offset), SESSION_CAP + MESSAGE_CAP))
    limit = max(0, min(int(limit), MAX_LIMIT))
    if limit == 0:
        return []
    visible, visible_params = _visible(sessions)
    db = connections[sessions.db]
    with db.cursor() as cursor:
        if db.vendor == "postgresql":
            sql = _PG_HITS.format(visible=visible) + _PG_PAGE
            cursor.execute(sql, [_tsquery(query), *visible_params, limit, offset])
        else:
            sql = _SQLITE_HITS.format(visible=visible) + _SQLITE_PAGE
            match = _fts5_query(query)
            cursor.execute(sql, [match, match, *visible_params, limit, offset])
        rows = cursor.fetchall()
    snippets = _snippets(
        db, query, [(session_id, message_id) for session_id, _, message_id in rows]
    )
    return [Hit(session_id, float(rank), snippets.get(session_id)) for session_id, rank, _ in rows]


def count(sessions: QuerySet[Session], text: str) -> int:
    """How many sessions among `sessions` `find` would give for `text` over all its pages.
    Capped as find is: at most SESSION_CAP + MESSAGE_CAP (a screen says "5,000+" or the
    like when it reaches SESSION_CAP). Raises BadQuery if `text` holds no word."""
    query = parse(text)
    visible, visible_params = _visible(sessions)
    db = connections[sessions.db]
    with db.cursor() as cursor:
        if db.vendor == "postgresql":
            cursor.execute(
                _PG_HITS.format(visible=visible) + _COUNT, [_tsquery(query), *visible_params]
            )
        else:
            match = _fts5_query(query)
            cursor.execute(
                _SQLITE_HITS.format(visible=visible) + _COUNT, [match, match, *visible_params]
            )
        return cursor.fetchone()[0]


def _visible(sessions: QuerySet[Session]) -> tuple[str, tuple]:
    """The SQL (and its parameters) selecting the ids of `sessions`."""
    return sessions.order_by().values("pk").query.sql_with_params()


def _fts5_query(query: Query) -> str:
    """FTS5 syntax: each word a quoted string (no operator can be spelled inside quotes; the
    words hold only letters and digits anyway), all required, the last a prefix."""
    terms = [f'"{word}"' for word in query.words]
    if query.prefix:
        terms[-1] += "*"
    return " ".join(terms)


def _tsquery(query: Query) -> str:
    """to_tsquery syntax: the words (letters and digits only, so no operator) ANDed, the
    last a prefix."""
    terms = list(query.words)
    if query.prefix:
        terms[-1] += ":*"
    return " & ".join(terms)


# Each kind of document gives (session, rank, message or NULL); a session's best wins.
# SQLite: the FTS5 tables' `rank` is bm25 with the weights the migration configured, ≤ 0.
# Built from constants; {visible} is the ORM's SQL for the sessions searched.
_SQLITE_HITS = f"""
WITH hits(session_id, rank, message_id) AS (
    SELECT * FROM (
        SELECT rowid, 1.0 / (1.0 - rank), NULL FROM search_session
        WHERE search_session MATCH %s ORDER BY rank LIMIT {SESSION_CAP}
    )
    UNION ALL
    SELECT m.session_id, 1.0 + 1.0 / (1.0 - f.rank), m.id FROM (
        SELECT rowid AS id, rank FROM search_message
        WHERE search_message MATCH %s ORDER BY rank LIMIT {MESSAGE_CAP}
    ) AS f JOIN tasks_message AS m ON m.id = f.id
),
best(session_id, rank, message_id) AS (
    -- SQLite takes the bare column message_id from the row holding the minimum.
    SELECT session_id, MIN(rank), message_id FROM hits
    WHERE session_id IN ({{visible}}) GROUP BY session_id
)
"""  # noqa: S608
_SQLITE_PAGE = """
SELECT b.session_id, b.rank, b.message_id FROM best AS b
JOIN tasks_session AS s ON s.id = b.session_id
ORDER BY b.rank, s.updated_at DESC, s.id DESC LIMIT %s OFFSET %s
"""

# PostgreSQL: ts_rank_cd ≥ 0, weights {D, C, B, A}: A title and agent, B plan, C note.
_PG_HITS = f"""
WITH q AS (SELECT to_tsquery('simple', %s) AS q),
hits AS (
    (SELECT t.session_id, 1.0 / (1.0 + ts_rank_cd('{{{{0.05, 0.2, 0.4, 1.0}}}}', t.search, q.q))
        AS rank, NULL::bigint AS message_id
     FROM tasks_sessiontext AS t, q WHERE t.search @@ q.q LIMIT {SESSION_CAP})
    UNION ALL
    (SELECT m.session_id, 1.0 + 1.0 / (1.0 + ts_rank_cd(m.search, q.q)), m.id
     FROM tasks_message AS m, q WHERE m.search @@ q.q LIMIT {MESSAGE_CAP})
),
best AS (
    SELECT DISTINCT ON (session_id) session_id, rank, message_id FROM hits
    WHERE session_id IN ({{visible}}) ORDER BY session_id, rank
)
"""  # noqa: S608
_PG_PAGE = _SQLITE_PAGE
_COUNT = "SELECT COUNT(*) FROM best"


# -- snippets -------------------------------------------------------------------------------


def _snippets(db, query: Query, rows: list[tuple[int, int | None]]) -> dict[int, Snippet]:
    """The page's snippets: from the best message of a session found by its transcript, else
    from the first of its title, agent, plan and note that holds a word searched for."""
    from tasks.models import SessionText

    if not rows:
        return {}
    message_ids = [message_id for _, message_id in rows if message_id is not None]
    texts: dict[int, str] = {}
    if message_ids:
        with db.cursor() as cursor:
            marks = ", ".join(["%s"] * len(message_ids))
            cursor.execute(
                f"SELECT id, substr(text, 1, {INDEXED_CHARS}) FROM tasks_message "  # noqa: S608
                f"WHERE id IN ({marks})",
                message_ids,
            )
            texts = dict(cursor.fetchall())
    own = {
        row["session_id"]: row
        for row in SessionText.objects.using(db.alias)
        .filter(session_id__in=[s for s, m in rows if m is None])
        .values("session_id", "title", "agent", "plan", "note")
    }
    snippets = {}
    for session_id, message_id in rows:
        found = None
        if message_id is not None:
            found = snippet("transcript", texts.get(message_id, ""), query)
        elif session_id in own:
            row = own[session_id]
            for field in ("title", "agent", "plan", "note"):
                found = snippet(field, row[field][:INDEXED_CHARS], query)
                if found is not None:
                    break
        if found is not None:
            snippets[session_id] = found
    return snippets


def snippet(field: str, text: str, query: Query) -> Snippet | None:
    """An excerpt of `text` around its first word matching `query`, whitespace collapsed,
    with the ranges of every matching word in it; None if no word matches."""
    first = next((m for m in _WORD.finditer(text) if query.matches(m.group())), None)
    if first is None:
        return None
    start = max(0, first.start() - SNIPPET_BEFORE)
    if start > 0:
        # Start at a word, not inside one.
        space = text.rfind(" ", start, first.start())
        start = space + 1 if space >= 0 else first.start()
    window = _SPACES.sub(" ", text[start : start + SNIPPET_CHARS * 2]).strip()
    lead = "…" if start > 0 else ""
    cut = len(window) > SNIPPET_CHARS or start + SNIPPET_CHARS * 2 < len(text)
    if len(window) > SNIPPET_CHARS:
        window = window[:SNIPPET_CHARS]
        space = window.rfind(" ")
        if space > SNIPPET_CHARS // 2:
            window = window[:space]
    shown = lead + window + ("…" if cut else "")
    ranges = tuple((m.start(), m.end()) for m in _WORD.finditer(shown) if query.matches(m.group()))
    return Snippet(field, shown, ranges)


# -- the index's upkeep -----------------------------------------------------------------------


def ensure_triggers(*, using: str = "default", **_: object) -> None:
    """After a migrate (post_migrate): re-create the SQLite triggers that keep the indexes, if
    a migration rebuilt a table and so dropped them (SQLite alters most columns by copying
    the table). Rows keep their ids in such a copy, so the index still holds them."""
    db = connections[using]
    if db.vendor != "sqlite":
        return
    with db.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' "
            "AND name IN ('search_session', 'search_message')"
        )
        if cursor.fetchone()[0] != 2:
            return  # not migrated this far (or migrated back)
        for statement in importlib.import_module("tasks.migrations.0016_search").SQLITE_TRIGGERS:
            cursor.execute(statement)
