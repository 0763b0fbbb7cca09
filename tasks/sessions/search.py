"""Full-text search over sessions: their title, agent name, card note, plan steps, what their
agents said before (earlier notes and plans, artifact names) and transcript, in the
database's own full-text index.

Two kinds of document are indexed (migration 0016 makes the indexes and keeps them, 0027
adds `said` to them, and 0028 keeps the vector of `said` on PostgreSQL: search_writes.py):
- a session's own text, one `SessionText` row per session (title, agent name, plan step
  titles, note, and `said`: the notes and plans the card showed before, newest first, and
  the session's artifact names), written by `keep` from the one "session changed" step
  (changes.derive) and the card API, by `also_said` for artifacts, and by `agent_renamed`;
- every transcript message (`tasks_message.text`), indexed by the database itself as rows
  are written (SQLite: an FTS5 table kept by triggers; PostgreSQL: a stored generated
  tsvector column), so every writer of the transcript is covered without a call here.

Ranking: a session's rank is that of its best document. A match in the session's own text
ranks above any transcript match (rank in (0, 1] against (1, 2]); within each, the
database's relevance (SQLite bm25, PostgreSQL ts_rank_cd; title and agent name weigh most,
then the plan, then the note) orders them, and equal ranks go newest first.

Bounds, so that a query answers in tens of milliseconds over a million messages however
common its words: matches are read newest first (by id, the indexes' own order), BATCH of
each kind, then (if a page is not filled yet) up to ROUNDS × BATCH in all, and ranked. A word
found in fewer than BATCH messages and BATCH sessions' own text (nearly every word people
search for) is ranked in full; a commoner one is ranked among its newest matches only, and
`count` then says how many of those match (a lower bound). Only the first INDEXED_CHARS
characters of a message or note are indexed.

People's text never reaches the index's query syntax: it is split into words (letters and
digits), at most MAX_WORDS of them, each at most MAX_WORD_CHARS long, all required, the
last one a prefix; each word is quoted.

Snippets are cut in Python from a bounded prefix of the matching field or message, the same
way on both databases, as plain text with the ranges of the matching words (templates
escape the text). Agents write markdown: a snippet of a note, of `said` or of a message is
cut from that text with its markup taken out (no `**`, table rules or tags).
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from dataclasses import dataclass

from django.db import connection, connections, transaction
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from tasks.models import Agent, ProgressCard, Session
from tasks.sessions import artifact_markdown
from tasks.sessions.progress_card import strip_invisible
from tasks.sessions.search_writes import ALSO, SAID_ROOM, UPSERT, UPSERT_ROWS, upsert_rows

MAX_WORDS = 10
MAX_WORD_CHARS = 64
# A prefix shorter than this would expand to a large share of the vocabulary: the last word
# is a prefix only from this length on.
MIN_PREFIX_CHARS = 3
# Indexed, on both databases, and read for snippets: the first this many characters of a
# message or note (migration 0016). A tsvector over a megabyte of text raises, and would
# fail the write path; FTS5 would index it, at a cost every push of it would pay.
INDEXED_CHARS = 20_000
# Matches are read newest first: BATCH of each kind (messages, session texts), then, if a
# page is not filled, up to ROUNDS × BATCH in all (module docstring).
BATCH = 500
ROUNDS = 4
# SQLite ranks a kind of document by relevance only while each query word is in at most
# this many of them (_SQLiteReader says why).
RANKED_BELOW = 2_000
SNIPPET_CHARS = 200
SNIPPET_BEFORE = 60  # characters of context kept before the first match
MAX_SAID_LINE = 300  # of a line `also_said` keeps (an artifact's name is at most 300)
MAX_LIMIT = 500
# Of a markdown text, read before the match for its snippet: the match's line, from its start
# (where its markup starts) if that is this close.
MARKDOWN_BEFORE = 1_000

_WORD = re.compile(r"[^\W_]+")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Snippet:
    field: str  # "title" | "agent" | "note" | "plan" | "said" | "transcript"
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
    words: tuple[str, ...]  # folded (case and diacritics dropped), in order
    prefix: bool  # the last word matches as a prefix
    # The same words as typed (NFC): PostgreSQL's index lowercases but keeps diacritics.
    typed: tuple[str, ...] = ()

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
    typed: list[str] = []
    prefix = False
    for found in _WORD.finditer(text):
        cut = len(found.group()) > MAX_WORD_CHARS
        as_typed = found.group()[:MAX_WORD_CHARS]
        word = fold(as_typed)[:MAX_WORD_CHARS]
        # A word folding to nothing, or to characters that are no longer word characters,
        # would be no word to the index.
        if not _WORD.fullmatch(word) or word in words:
            continue
        words.append(word)
        typed.append(as_typed)
        prefix = cut
        if len(words) == MAX_WORDS:
            break
    if not words:
        raise BadQuery("the search text holds no word to search for (letters or digits)")
    prefix = prefix or len(words[-1]) >= MIN_PREFIX_CHARS
    return Query(tuple(words), prefix, tuple(typed))


# -- the write path ---------------------------------------------------------------------------


def plan_text(plan: list[dict] | None) -> str:
    """A plan's step titles, one a line."""
    return "\n".join(str(step.get("step", "")) for step in plan or [])


def keep(session: Session, card: ProgressCard | None) -> None:
    """Index the session's own text as it is now: call under its lock, in the transaction
    that changed it (changes.derive, the card API). Writes only if the text changed; the
    note and plan it replaces stay searchable, in `said`."""
    with connection.cursor() as cursor:
        cursor.execute(UPSERT[connection.vendor], _text(session, card))


def keep_all(texts: list[tuple[Session, ProgressCard | None]]) -> None:
    """`keep` for several sessions (each once): one statement for each UPSERT_ROWS of them
    on PostgreSQL, where each is a round trip; one each on SQLite."""
    if connection.vendor != "postgresql" or len(texts) == 1:
        for session, card in texts:
            keep(session, card)
        return
    for start in range(0, len(texts), UPSERT_ROWS):
        chunk = texts[start : start + UPSERT_ROWS]
        params = []
        for session, card in chunk:
            params += _text(session, card)
        with connection.cursor() as cursor:
            cursor.execute(upsert_rows(len(chunk)), params)


def _text(session: Session, card: ProgressCard | None) -> list:
    """UPSERT's parameters for one session: id, title, plan, note, agent."""
    plan = plan_text(card.plan) if card is not None else ""
    note = card.markdown if card is not None else ""
    return [session.pk, session.title, plan, note, session.agent_id]


def also_said(session_id: int, text: str) -> None:
    """Keep `text` (an artifact's name) searchable in the session's `said`, as one line: call
    under the session's lock, in the transaction that stored it. Nothing is written when the
    line is there already."""
    line = _SPACES.sub(" ", strip_invisible(text).replace("\x00", "")).strip()[:MAX_SAID_LINE]
    if not line:
        return
    with connection.cursor() as cursor:
        cursor.execute(ALSO[connection.vendor], [session_id, line])


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

    Bounded for common words: matches are read newest first, BATCH documents of each kind,
    then up to ROUNDS × BATCH if the page needs more, and ranked among those read (module
    docstring). A word in fewer than BATCH messages and BATCH sessions' own text is ranked
    in full."""
    query = parse(text)
    offset = max(0, min(int(offset), ROUNDS * BATCH * 2))
    limit = max(0, min(int(limit), MAX_LIMIT))
    if limit == 0:
        return []
    found = _search(sessions, query, wanted=offset + limit)
    page = found[offset : offset + limit]
    snippets = _snippets(
        connections[sessions.db], query, [(f.session_id, f.message_id) for f in page]
    )
    return [Hit(f.session_id, f.rank, snippets.get(f.session_id)) for f in page]


def count(sessions: QuerySet[Session], text: str) -> int:
    """How many sessions among `sessions` match `text`. Exact for words in fewer than BATCH
    messages and BATCH sessions' own text; for commoner words, capped: the sessions of the
    newest ROUNDS × BATCH matching messages and session texts (at most 2 × ROUNDS × BATCH,
    and never fewer than `find` pages through). Raises BadQuery if `text` holds no word."""
    return len(_search(sessions, parse(text), wanted=None))


@dataclass(frozen=True)
class _Found:
    session_id: int
    rank: float
    message_id: int | None  # the best matching message, if the best match is one
    updated_at: object


def _search(sessions: QuerySet[Session], query: Query, *, wanted: int | None) -> list[_Found]:
    """The matching sessions among `sessions`, ranked: BATCH documents of each kind read
    newest first, then the rest of ROUNDS × BATCH unless `wanted` sessions are found
    (None: all ROUNDS × BATCH at once)."""
    db = connections[sessions.db]
    reader = _PostgresReader(query) if db.vendor == "postgresql" else _SQLiteReader(query)
    best: dict[int, tuple[float, int | None]] = {}
    visible: dict[int, object] = {}
    checked: set[int] = set()
    # A first batch fills most pages; what more is read is read at once (on PostgreSQL each
    # read of a word's matches costs about the same however few of them it keeps).
    sizes = [BATCH, BATCH * (ROUNDS - 1)] if wanted is not None else [BATCH * ROUNDS]
    sizes = [size for size in sizes if size > 0]
    with db.cursor() as cursor:
        for size in sizes:
            for session_id, rank, message_id in reader.batch(cursor, size):
                if session_id not in best or rank < best[session_id][0]:
                    best[session_id] = (rank, message_id)
            unchecked = best.keys() - checked
            checked |= unchecked
            if unchecked:
                visible.update(_among(sessions, db.vendor, unchecked))
            if reader.exhausted or (wanted is not None and len(visible) >= wanted):
                break
    found = [_Found(pk, best[pk][0], best[pk][1], at) for pk, at in visible.items()]
    # Best rank first; equal ranks newest first (two stable sorts).
    found.sort(key=lambda f: (f.updated_at, f.session_id), reverse=True)
    found.sort(key=lambda f: f.rank)
    return found


def _among(sessions: QuerySet[Session], vendor: str, ids: set[int]):
    """(id, updated_at) of those of `ids` in `sessions`. The ids travel as one parameter (a
    JSON array, a PostgreSQL array): a filter on thousands of ids costs the ORM several
    milliseconds to compile."""
    if vendor == "postgresql":
        listed = RawSQL("SELECT unnest(%s::bigint[])", (sorted(ids),))
    else:
        listed = RawSQL("SELECT value FROM json_each(%s)", (f"[{','.join(map(str, ids))}]",))
    return sessions.order_by().filter(pk__in=listed).values_list("pk", "updated_at")


def _rank(tier: int, relevance: float) -> float:
    """Smaller is better: a session's own text in (0, 1], its transcript in (1, 2]."""
    return tier + 1.0 / (1.0 + max(0.0, relevance))


class _Reader:
    """Reads the matching documents of both kinds, newest first, a batch at a time: a session's
    own text (tier 0) and messages (tier 1). Subclasses give the SQL: each statement takes
    the query, an id to read below and a limit, and gives (document id, relevance score,
    session id) rows."""

    KINDS = (("sessions", 0), ("messages", 1))

    def __init__(self, query: Query) -> None:
        self.below = {kind: _NO_ID for kind, _ in self.KINDS}
        self.done = {kind: False for kind, _ in self.KINDS}

    @property
    def exhausted(self) -> bool:
        return all(self.done.values())

    def statement(self, cursor, kind: str) -> tuple[str, list]:
        raise NotImplementedError

    def relevance(self, score: float) -> float:
        return score

    def batch(self, cursor, size: int) -> list[tuple[int, float, int | None]]:
        out: list[tuple[int, float, int | None]] = []
        for kind, tier in self.KINDS:
            if self.done[kind]:
                continue
            sql, params = self.statement(cursor, kind)
            cursor.execute(sql, [*params, self.below[kind], size])
            rows = cursor.fetchall()
            for pk, score, session_id in rows:
                rank = _rank(tier, self.relevance(score))
                out.append((session_id, rank, pk if kind == "messages" else None))
            if len(rows) < size:
                self.done[kind] = True
            else:
                self.below[kind] = min(row[0] for row in rows)
        return out


class _SQLiteReader(_Reader):
    """FTS5, read by rowid descending (the index's own order: a LIMIT stops it early).
    Relevance is the tables' `rank`, bm25 with the weights the migration configured (≤ 0,
    more negative is better). bm25 counts, for each query word, every row holding it (its
    IDF): ~150 ms for a word in most of a million messages. So a kind whose documents hold
    one of the words more than RANKED_BELOW times is read without it: its matches are then
    equal, newest first (a probe of each word, reading ids only, tells: ~1 ms each)."""

    TABLES = {"sessions": "search_session", "messages": "search_message"}
    READ = {
        "sessions": (
            "SELECT rowid, {score}, rowid FROM search_session WHERE search_session MATCH %s "
            "AND rowid < %s ORDER BY rowid DESC LIMIT %s"
        ),
        "messages": (
            "SELECT f.rowid, f.score, m.session_id FROM ("
            " SELECT rowid, {score} AS score FROM search_message WHERE search_message MATCH %s"
            " AND rowid < %s ORDER BY rowid DESC LIMIT %s"
            ") AS f JOIN tasks_message AS m ON m.id = f.rowid"
        ),
    }
    PROBE = "SELECT COUNT(*) FROM (SELECT rowid FROM {table} WHERE {table} MATCH %s LIMIT %s)"

    def __init__(self, query: Query) -> None:
        super().__init__(query)
        self.match = _fts5_query(query)
        self.terms = self.match.split(" ")
        self.ranked: dict[str, bool] = {}
        self.prefix_settled = not query.prefix

    def statement(self, cursor, kind: str) -> tuple[str, list]:
        if not self.prefix_settled:
            self._settle_prefix(cursor)
        if kind not in self.ranked:
            self.ranked[kind] = self._rare(cursor, self.TABLES[kind])
        score = "rank" if self.ranked[kind] else "0.0"
        return self.READ[kind].format(score=score), [self.match]

    def _settle_prefix(self, cursor) -> None:
        """FTS5 matches a prefix by merging, in memory, the rows of every indexed word that
        starts with it, before reading any: ~100 ms when the word as typed is itself in most
        of a million messages. Such a word is searched for as the whole word: its own
        newest matches fill any page (a longer word only it begins is then not found)."""
        self.prefix_settled = True
        whole = self.terms[-1].removesuffix("*")
        cursor.execute(self.PROBE.format(table="search_message"), [whole, RANKED_BELOW + 1])
        if cursor.fetchone()[0] > RANKED_BELOW:
            self.terms[-1] = whole
            self.match = " ".join(self.terms)

    def _rare(self, cursor, table: str) -> bool:
        for term in self.terms:
            cursor.execute(self.PROBE.format(table=table), [term, RANKED_BELOW + 1])
            if cursor.fetchone()[0] > RANKED_BELOW:
                return False
        return True

    def relevance(self, score: float) -> float:
        return -score


class _PostgresReader(_Reader):
    """tsvector: ts_rank_cd (≥ 0, larger is better), computed for the batch's rows only (it
    reads each row's vector, nothing global); weights {D, C, B, A}: A title and agent name,
    B plan, C note. The planner reads the id index backwards for a common word and the GIN
    index for a rare one."""

    READ = {
        "sessions": (
            "SELECT b.session_id, ts_rank_cd('{0.05, 0.2, 0.4, 1.0}', b.search, b.q), "
            "b.session_id FROM ("
            " SELECT session_id, search, q FROM tasks_sessiontext, to_tsquery('simple', %s) AS q"
            " WHERE search @@ q AND session_id < %s ORDER BY session_id DESC LIMIT %s"
            ") AS b"
        ),
        "messages": (
            "SELECT b.id, ts_rank_cd(b.search, b.q), b.session_id FROM ("
            " SELECT id, session_id, search, q FROM tasks_message, to_tsquery('simple', %s) AS q"
            " WHERE search @@ q AND id < %s ORDER BY id DESC LIMIT %s"
            ") AS b"
        ),
    }

    def __init__(self, query: Query) -> None:
        super().__init__(query)
        self.match = _tsquery(query)

    def statement(self, cursor, kind: str) -> tuple[str, list]:
        return self.READ[kind], [self.match]


_NO_ID = 2**62  # above every id: the first batch reads from the newest


def _fts5_query(query: Query) -> str:
    """FTS5 syntax: each word a quoted string (no operator can be spelled inside quotes; the
    words hold only letters and digits anyway), all required, the last a prefix."""
    terms = [f'"{word}"' for word in query.words]
    if query.prefix:
        terms[-1] += "*"
    return " ".join(terms)


def _tsquery(query: Query) -> str:
    """to_tsquery syntax: the words as typed (letters and digits only, so no operator),
    ANDed, the last a prefix."""
    terms = list(query.typed)
    if query.prefix:
        terms[-1] += ":*"
    return " & ".join(terms)


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
        .values("session_id", "title", "agent", "plan", "note", "said")
    }
    snippets = {}
    for session_id, message_id in rows:
        found = None
        if message_id is not None:
            found = snippet("transcript", texts.get(message_id, ""), query, markdown=True)
        elif session_id in own:
            row = own[session_id]
            for field in ("title", "agent", "plan", "note", "said"):
                text = row[field][: SAID_ROOM if field == "said" else INDEXED_CHARS]
                found = snippet(field, text, query, markdown=field in _MARKDOWN_FIELDS)
                if found is not None:
                    break
        if found is not None:
            snippets[session_id] = found
    return snippets


# What agents write, in markdown: their snippets are cut from the text without its markup.
_MARKDOWN_FIELDS = frozenset({"note", "said"})


def snippet(field: str, text: str, query: Query, *, markdown: bool = False) -> Snippet | None:
    """An excerpt of `text` around its first word matching `query`, whitespace collapsed,
    with the ranges of every matching word in it; None if no word matches. `markdown`: the
    excerpt is of the text a reader sees, without its markup (a word found only in markup,
    a link's address, gives no excerpt)."""
    first = _first(text, query)
    if first is None:
        return None
    if not markdown:
        return _excerpt(field, text, first, query)
    # From a line's start (so the markup there is whole), early enough for the context an
    # excerpt shows before the match, or what is close before it; then as much after it as
    # an excerpt can show even when its markup goes.
    floor = max(0, first.start() - MARKDOWN_BEFORE)
    line = text.rfind("\n", floor, max(floor, first.start() - SNIPPET_BEFORE))
    begin = line + 1 if line >= 0 else floor
    end = first.start() + SNIPPET_CHARS * 4
    plain = artifact_markdown.plain_text(text[begin:end])
    found = _first(plain, query)
    if found is None and (begin > 0 or end < len(text)):
        begin, end, plain = 0, len(text), artifact_markdown.plain_text(text)
        found = _first(plain, query)
    if found is None:
        return None
    return _excerpt(field, plain, found, query, before=begin > 0, after=end < len(text))


def _first(text: str, query: Query) -> re.Match | None:
    return next((m for m in _WORD.finditer(text) if query.matches(m.group())), None)


def _excerpt(
    field: str, text: str, first: re.Match, query: Query, *, before=False, after=False
) -> Snippet:
    """The excerpt of `text` around `first`; `before` and `after`: `text` is itself cut out of
    a longer one there."""
    start = max(0, first.start() - SNIPPET_BEFORE)
    if start > 0:
        # Start at a word, not inside one.
        space = text.rfind(" ", start, first.start())
        start = space + 1 if space >= 0 else first.start()
    window = _SPACES.sub(" ", text[start : start + SNIPPET_CHARS * 2]).strip()
    lead = "…" if start > 0 or before else ""
    cut = len(window) > SNIPPET_CHARS or start + SNIPPET_CHARS * 2 < len(text) or after
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
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
            "AND name IN ('search_session', 'search_message')"
        )
        tables = dict(cursor.fetchall())
        if len(tables) != 2:
            return  # not migrated this far (or migrated back)
        # The triggers of the migration that made the session index as it is.
        made_by = (
            "0027_search_what_agents_said" if "said" in tables["search_session"] else "0016_search"
        )
        for statement in importlib.import_module(f"tasks.migrations.{made_by}").SQLITE_TRIGGERS:
            cursor.execute(statement)
