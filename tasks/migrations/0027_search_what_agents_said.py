"""Search finds what a session's agents said before (tasks/sessions/search.py): the index of a
session's own text (migration 0016) takes in `SessionText.said` (0026 added the column), and
the sessions stored before this get their artifact names in it.

SQLite: the FTS5 table `search_session` is made again with a `said` column (an FTS5 table
cannot gain a column), with its triggers, and filled from tasks_sessiontext. PostgreSQL: the
stored generated tsvector is made again with `said` in it, at the lowest weight (D), and its
GIN index. The transcript's index (`search_message`) is untouched.
"""

import importlib

from django.db import migrations

# Kept here (not imported from tasks.sessions.search) so this migration stays as it was written.
INDEXED_CHARS = 20_000
SAID_CHARS = 20_000
TOKENIZE = "unicode61 remove_diacritics 2"
_0016 = importlib.import_module("tasks.migrations.0016_search")  # as it was written

SQLITE_SESSION_TABLE = [
    f"""CREATE VIRTUAL TABLE search_session USING fts5(
        title, agent, plan, note, said, content='tasks_sessiontext', content_rowid='session_id',
        tokenize='{TOKENIZE}', prefix='3')""",
    # Title and agent name weigh most, then the plan, then the note, then what was said before.
    "INSERT INTO search_session(search_session, rank) "
    "VALUES ('rank', 'bm25(10.0, 10.0, 3.0, 1.0, 0.5)')",
]
SQLITE_SESSION_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS search_session_insert AFTER INSERT ON tasks_sessiontext BEGIN
        INSERT INTO search_session(rowid, title, agent, plan, note, said)
        VALUES (new.session_id, new.title, new.agent, new.plan, new.note, new.said);
    END""",
    """CREATE TRIGGER IF NOT EXISTS search_session_delete AFTER DELETE ON tasks_sessiontext BEGIN
        INSERT INTO search_session(search_session, rowid, title, agent, plan, note, said)
        VALUES ('delete', old.session_id, old.title, old.agent, old.plan, old.note, old.said);
    END""",
    """CREATE TRIGGER IF NOT EXISTS search_session_update AFTER UPDATE ON tasks_sessiontext BEGIN
        INSERT INTO search_session(search_session, rowid, title, agent, plan, note, said)
        VALUES ('delete', old.session_id, old.title, old.agent, old.plan, old.note, old.said);
        INSERT INTO search_session(rowid, title, agent, plan, note, said)
        VALUES (new.session_id, new.title, new.agent, new.plan, new.note, new.said);
    END""",
]
# Every trigger the indexes need from here on (tasks.sessions.search.ensure_triggers makes
# them again after a migrate that dropped them): the transcript's, as 0016 made them.
SQLITE_TRIGGERS = SQLITE_SESSION_TRIGGERS + [
    statement for statement in _0016.SQLITE_TRIGGERS if "search_message" in statement
]
SQLITE_SESSION_DROP = [
    "DROP TRIGGER IF EXISTS search_session_insert",
    "DROP TRIGGER IF EXISTS search_session_delete",
    "DROP TRIGGER IF EXISTS search_session_update",
    "DROP TABLE IF EXISTS search_session",
]


def _vector(column):
    return _0016._vector(f"left({column}, {INDEXED_CHARS})")


POSTGRES_DROP = [
    "DROP INDEX IF EXISTS search_session_gin",
    "ALTER TABLE tasks_sessiontext DROP COLUMN IF EXISTS search",
]
POSTGRES = POSTGRES_DROP + [
    f"""ALTER TABLE tasks_sessiontext ADD COLUMN search tsvector GENERATED ALWAYS AS (
        setweight({_0016._vector("title || ' ' || agent")}, 'A')
        || setweight({_vector("plan")}, 'B')
        || setweight({_vector("note")}, 'C')
        || setweight({_vector("said")}, 'D')) STORED""",
    "CREATE INDEX search_session_gin ON tasks_sessiontext USING gin (search)",
]
# As 0016 made them.
POSTGRES_BACK = POSTGRES_DROP + [
    statement for statement in _0016.POSTGRES if "tasks_sessiontext" in statement
]


def fill_said(apps, schema_editor):
    """Sessions stored before this: their artifact names, one a line (what `also_said` keeps
    for new artifacts). Their earlier notes were never kept."""
    postgres = schema_editor.connection.vendor == "postgresql"
    joined = "string_agg(name, chr(10))" if postgres else "group_concat(name, char(10))"
    schema_editor.execute(
        f"""UPDATE tasks_sessiontext SET said = substr(coalesce((
            SELECT {joined} FROM (
                SELECT DISTINCT a.name FROM tasks_artifact AS a
                JOIN tasks_task AS t ON t.id = a.task_id
                WHERE t.session_id = tasks_sessiontext.session_id AND a.name <> ''
            ) AS names
        ), ''), 1, {SAID_CHARS})"""  # noqa: S608 (no value in the text)
    )


def make_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in POSTGRES:  # computed for the rows already there
            schema_editor.execute(statement)
        return
    for statement in SQLITE_SESSION_DROP + SQLITE_SESSION_TABLE + SQLITE_SESSION_TRIGGERS:
        schema_editor.execute(statement)
    schema_editor.execute(
        "INSERT INTO search_session(rowid, title, agent, plan, note, said) "
        "SELECT session_id, title, agent, plan, note, said FROM tasks_sessiontext"
    )


def unmake_indexes(apps, schema_editor):
    """Back to 0016's index of a session's own text (without `said`)."""
    if schema_editor.connection.vendor == "postgresql":
        for statement in POSTGRES_BACK:
            schema_editor.execute(statement)
        return
    session_0016 = [s for s in _0016.SQLITE_TABLES if "search_session" in s]
    triggers_0016 = [s for s in _0016.SQLITE_TRIGGERS if "search_session" in s]
    for statement in SQLITE_SESSION_DROP + session_0016 + triggers_0016:
        schema_editor.execute(statement)
    schema_editor.execute(
        "INSERT INTO search_session(rowid, title, agent, plan, note) "
        "SELECT session_id, title, agent, plan, note FROM tasks_sessiontext"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tasks", "0026_screen_a_team_keeps_open"),
    ]

    operations = [
        # `said` filled first: the index is then made from it.
        migrations.RunPython(fill_said, migrations.RunPython.noop),
        migrations.RunPython(make_indexes, unmake_indexes),
    ]
