"""PostgreSQL keeps the vector of a session's `said` (tasks/sessions/search_writes.py) in a
column of its own, `said_search`, and the index of the session's own text takes it from
there rather than reading `said` again with every write: the notes a card replaces go to
`said`, so a streaming agent rewrote up to 20,000 characters' vector with each push it
sent, for 2.2 ms of PostgreSQL's CPU per session per batch. The writes add a new entry's
words to the vector and make it again only when `said` is cut back (search_writes.py).

The vector is made from `said` as it is, the generated `search` column made again from it,
and its GIN index. SQLite's FTS5 index is untouched: nothing changes there.
"""

import importlib

from django.db import migrations

_0016 = importlib.import_module("tasks.migrations.0016_search")  # as it was written
_0027 = importlib.import_module("tasks.migrations.0027_search_what_agents_said")

# Kept here (not imported from tasks.sessions.search_writes) so this migration stays as it
# was written.
INDEXED_CHARS = 20_000

SAID_VECTOR = f"setweight({_0016._vector('said')}, 'D')"

FORWARD = [
    "DROP INDEX IF EXISTS search_session_gin",
    "ALTER TABLE tasks_sessiontext DROP COLUMN IF EXISTS search",
    "ALTER TABLE tasks_sessiontext ADD COLUMN said_search tsvector NOT NULL DEFAULT ''",
    f"UPDATE tasks_sessiontext SET said_search = {SAID_VECTOR}",  # noqa: S608 (no value)
    f"""ALTER TABLE tasks_sessiontext ADD COLUMN search tsvector GENERATED ALWAYS AS (
        setweight({_0016._vector("title || ' ' || agent")}, 'A')
        || setweight({_0016._vector(f"left(plan, {INDEXED_CHARS})")}, 'B')
        || setweight({_0016._vector(f"left(note, {INDEXED_CHARS})")}, 'C')
        || said_search) STORED""",
    "CREATE INDEX search_session_gin ON tasks_sessiontext USING gin (search)",
]
# As 0027 made them, and no vector of its own.
BACK = [
    *_0027.POSTGRES,
    "ALTER TABLE tasks_sessiontext DROP COLUMN IF EXISTS said_search",
]


def keep_said_vector(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in FORWARD:
            schema_editor.execute(statement)


def read_said_again(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in BACK:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("tasks", "0027_search_what_agents_said"),
    ]

    operations = [migrations.RunPython(keep_said_vector, read_said_again)]
