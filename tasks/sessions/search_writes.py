"""The SQL that writes a session's own text for search (tasks/sessions/search.py `keep` and
`also_said`, its only callers): one statement each, spelled for each database.

`said` holds what the session's agents said that the card no longer shows (the notes and
plans it replaced) and its artifact names, one entry after another, newest first, bounded.
"""

from __future__ import annotations

# Of what agents said before (SessionText.said): the newest this many characters. The row is
# rewritten, and its index entry made again, with every note that replaces another, so an
# agent that rewrites its note all day must not make each write cost more than the last; the
# index reads no more than INDEXED_CHARS of it anyway. People search for what was said
# lately: the oldest text is dropped first.
SAID_CHARS = 20_000  # search.INDEXED_CHARS


# SQL spelled differently by the two databases: the position of one text in another, and a
# newline (entries in `said` are whole lines: a text is in it when it is between newlines).
_SPELLING = {
    "sqlite": {"position": "instr", "nl": "char(10)"},
    "postgresql": {"position": "strpos", "nl": "chr(10)"},
}


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


def _upsert(position: str, nl: str) -> str:
    """One statement, with the agent's name read in it, that writes nothing (and so reindexes
    nothing) when the text is unchanged; a note or plan it replaces goes to `said`."""
    return f"""
INSERT INTO tasks_sessiontext (session_id, title, agent, plan, note)
SELECT %s, %s, tasks_agent.name, %s, %s FROM tasks_agent WHERE tasks_agent.id = %s
ON CONFLICT (session_id) DO UPDATE SET
    title = excluded.title, agent = excluded.agent, plan = excluded.plan, note = excluded.note,
    said = substr({_moved(position, nl, "note")} || {_moved(position, nl, "plan")}
                  || tasks_sessiontext.said, 1, {SAID_CHARS})
WHERE (tasks_sessiontext.title, tasks_sessiontext.agent, tasks_sessiontext.plan,
       tasks_sessiontext.note) <> (excluded.title, excluded.agent, excluded.plan, excluded.note)
"""  # noqa: S608 (only the names above go into the text; every value is a parameter)


def _also(position: str, nl: str) -> str:
    """A line added to the front of `said`, unless it is there already (the row is made if
    the session has none yet: `keep` fills in the rest)."""
    return f"""
INSERT INTO tasks_sessiontext (session_id, title, agent, plan, note, said)
VALUES (%s, '', '', '', '', %s)
ON CONFLICT (session_id) DO UPDATE SET
    said = substr(excluded.said || {nl} || tasks_sessiontext.said, 1, {SAID_CHARS})
WHERE NOT {_held(position, nl, "tasks_sessiontext.said", "excluded.said")}
"""  # noqa: S608 (only the names above go into the text; every value is a parameter)


UPSERT = {vendor: _upsert(**spelling) for vendor, spelling in _SPELLING.items()}
ALSO = {vendor: _also(**spelling) for vendor, spelling in _SPELLING.items()}
