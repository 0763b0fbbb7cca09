"""The SQL that writes a session's own text for search (tasks/sessions/search.py `keep` and
`also_said`, its only callers): one statement each, spelled for each database.

`said` holds what the session's agents said that the card no longer shows (the notes and
plans it replaced) and its artifact names, one entry after another, newest first, bounded.
"""

from __future__ import annotations

# Of what agents said before (SessionText.said): the newest SAID_CHARS to SAID_ROOM
# characters. People search for what was said lately: the oldest text is dropped first.
# `said` grows to SAID_ROOM and is then cut back to SAID_CHARS, not cut at every write:
# PostgreSQL keeps its words' vector (`said_search`, migration 0028) and adds only a new
# entry's to it, rather than reading all of `said` again with every note that replaces
# another (2.2 ms of PostgreSQL's CPU per session per batch at 20,000 characters, a fifth
# of a busy batch's time); a cut makes it again, once every 4,000 characters or so.
SAID_CHARS = 20_000
SAID_ROOM = 24_000


# SQL spelled differently by the two databases: the position of one text in another, and a
# newline (entries in `said` are whole lines: a text is in it when it is between newlines).
_SPELLING = {
    "sqlite": {"position": "instr", "nl": "char(10)", "vector": False},
    "postgresql": {"position": "strpos", "nl": "chr(10)", "vector": True},
}


def _said_vector(text: str) -> str:
    """SQL (PostgreSQL): the words of `text` as `said` is indexed (migrations 0027, 0028)."""
    return (
        "setweight(to_tsvector('simple'::regconfig, "
        f"regexp_replace({text}, '[[:punct:]]+', ' ', 'g')), 'D')"
    )


def _prepend(added: str, vector: bool) -> str:
    """SET clauses: `added` (SQL, '' or whole lines) goes before what `said` holds, cut back
    to SAID_CHARS once it would pass SAID_ROOM; with `vector` (PostgreSQL), `said_search`
    follows it: the added words before the vector's, or the vector made again from what a
    cut left. There `added` is worked out once, in a sub-select (OFFSET 0: not folded into
    each place it is used, where it would look through `said` again each time)."""
    if not vector:
        grown = f"({added} || tasks_sessiontext.said)"
        return (
            f"said = CASE WHEN length({grown}) > {SAID_ROOM} "
            f"THEN substr({grown}, 1, {SAID_CHARS}) ELSE {grown} END"
        )
    kept = f"substr(g.grown, 1, {SAID_CHARS})"
    return f"""(said, said_search) = (
        SELECT CASE WHEN length(g.grown) > {SAID_ROOM} THEN {kept} ELSE g.grown END,
               CASE WHEN length(g.grown) > {SAID_ROOM} THEN {_said_vector(kept)}
                    ELSE {_said_vector("g.added")} || tasks_sessiontext.said_search END
        FROM (SELECT a.added, a.added || tasks_sessiontext.said AS grown
              FROM (SELECT {added} AS added OFFSET 0) AS a) AS g
    )"""  # noqa: S608 (only the names above go into the text; every value is a parameter)


def _held(position: str, nl: str, within: str, text: str) -> str:
    """SQL: whether `text` is whole lines of `within` (or empty)."""
    return f"({text} = '' OR {position}({nl} || {within} || {nl}, {nl} || {text} || {nl}) > 0)"


def _moved(position: str, nl: str, field: str) -> str:
    """SQL: the field's old text and a newline, to go to the front of `said`, or '' when the
    new text or `said` still holds it (an agent that adds a line to its note each time
    would otherwise fill `said` with copies)."""
    old = f"tasks_sessiontext.{field}"
    kept = " OR ".join(
        [
            _held(position, nl, f"excluded.{field}", old),
            _held(position, nl, "tasks_sessiontext.said", old),
        ]
    )
    return f"CASE WHEN {kept} THEN '' ELSE {old} || {nl} END"


def _upsert(position: str, nl: str, vector: bool, rows: int = 0) -> str:
    """One statement, with the agent's name read in it, that writes nothing (and so reindexes
    nothing) when the text is unchanged; a note or plan it replaces goes to `said`. Its
    parameters: session id, title, plan, note, agent id. `rows` (PostgreSQL): as many
    sessions' texts at once, their parameters one session after another (each session
    once: a statement cannot write one row twice)."""
    moved = f"{_moved(position, nl, 'note')} || {_moved(position, nl, 'plan')}"
    if rows:
        texts = ", ".join(["(%s::bigint, %s::text, %s::text, %s::text, %s::bigint)"] * rows)
        select = (
            "SELECT v.id, v.title, tasks_agent.name, v.plan, v.note "  # noqa: S608
            f"FROM (VALUES {texts}) AS v(id, title, plan, note, agent_id), tasks_agent "
            "WHERE tasks_agent.id = v.agent_id"
        )
    else:
        select = (
            "SELECT %s, %s, tasks_agent.name, %s, %s FROM tasks_agent WHERE tasks_agent.id = %s"
        )
    return f"""
INSERT INTO tasks_sessiontext (session_id, title, agent, plan, note)
{select}
ON CONFLICT (session_id) DO UPDATE SET
    title = excluded.title, agent = excluded.agent, plan = excluded.plan, note = excluded.note,
    {_prepend(moved, vector)}
WHERE (tasks_sessiontext.title, tasks_sessiontext.agent, tasks_sessiontext.plan,
       tasks_sessiontext.note) <> (excluded.title, excluded.agent, excluded.plan, excluded.note)
"""  # noqa: S608 (only the names above go into the text; every value is a parameter)


def _also(position: str, nl: str, vector: bool) -> str:
    """A line added to the front of `said`, unless it is there already (the row is made if
    the session has none yet: `keep` fills in the rest)."""
    if vector:
        row = "(session_id, title, agent, plan, note, said, said_search)"
        vector_of_line = _said_vector("v.line")
        values = (
            f"SELECT v.id, '', '', '', '', v.line, {vector_of_line} "  # noqa: S608
            "FROM (VALUES (%s::bigint, %s::text)) AS v(id, line)"
        )
    else:
        row, values = (
            "(session_id, title, agent, plan, note, said)",
            "VALUES (%s, '', '', '', '', %s)",
        )
    return f"""
INSERT INTO tasks_sessiontext {row}
{values}
ON CONFLICT (session_id) DO UPDATE SET
    {_prepend(f"excluded.said || {nl}", vector)}
WHERE NOT {_held(position, nl, "tasks_sessiontext.said", "excluded.said")}
"""  # noqa: S608 (only the names above go into the text; every value is a parameter)


UPSERT = {vendor: _upsert(**spelling) for vendor, spelling in _SPELLING.items()}
UPSERT_ROWS = 100  # sessions' texts written in one statement (PostgreSQL)
_UPSERTS: dict[int, str] = {}


def upsert_rows(rows: int) -> str:
    """PostgreSQL: UPSERT for `rows` sessions' texts (1 to UPSERT_ROWS) in one statement."""
    sql = _UPSERTS.get(rows)
    if sql is None:
        sql = _UPSERTS[rows] = _upsert(**_SPELLING["postgresql"], rows=rows)
    return sql


ALSO = {vendor: _also(**spelling) for vendor, spelling in _SPELLING.items()}
