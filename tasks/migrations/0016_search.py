"""Full-text search (tasks/sessions/search.py): a session's own text in `SessionText`, and the
database's full-text indexes over it and over the transcript, filled from what is stored.

SQLite: two external-content FTS5 tables (`search_session` over tasks_sessiontext,
`search_message` over the first INDEXED_CHARS characters of each tasks_message text), kept
by triggers on their content tables, so every writer is covered (bulk_create included). PostgreSQL: a stored generated tsvector column on
each content table (over a bounded prefix of the text: a tsvector over a megabyte raises)
with a GIN index.

A later migration that makes SQLite rebuild tasks_message or tasks_sessiontext (an altered
column) drops their triggers: `search.ensure_triggers` re-creates them after every migrate.
On PostgreSQL, the `text`, `title`, `agent`, `plan` and `note` columns cannot change type
while the generated columns depend on them.
"""

import django.db.models.deletion
from django.db import migrations, models

# Kept here (not imported from tasks.sessions.search) so this migration stays as it was written.
INDEXED_CHARS = 20_000
TOKENIZE = "unicode61 remove_diacritics 2"

SQLITE_TABLES = [
    f"""CREATE VIRTUAL TABLE search_session USING fts5(
        title, agent, plan, note, content='tasks_sessiontext', content_rowid='session_id',
        tokenize='{TOKENIZE}', prefix='3')""",
    # Title and agent name weigh most, then the plan, then the note.
    "INSERT INTO search_session(search_session, rank) VALUES ('rank', 'bm25(10.0, 10.0, 3.0, 1.0)')",
    f"""CREATE VIRTUAL TABLE search_message USING fts5(
        text, content='tasks_message', content_rowid='id', tokenize='{TOKENIZE}', prefix='3')""",
]
# The same statements as tasks.sessions.search.SQLITE_TRIGGERS (which re-creates them if missing).
SQLITE_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS search_session_insert AFTER INSERT ON tasks_sessiontext BEGIN
        INSERT INTO search_session(rowid, title, agent, plan, note)
        VALUES (new.session_id, new.title, new.agent, new.plan, new.note);
    END""",
    """CREATE TRIGGER IF NOT EXISTS search_session_delete AFTER DELETE ON tasks_sessiontext BEGIN
        INSERT INTO search_session(search_session, rowid, title, agent, plan, note)
        VALUES ('delete', old.session_id, old.title, old.agent, old.plan, old.note);
    END""",
    """CREATE TRIGGER IF NOT EXISTS search_session_update AFTER UPDATE ON tasks_sessiontext BEGIN
        INSERT INTO search_session(search_session, rowid, title, agent, plan, note)
        VALUES ('delete', old.session_id, old.title, old.agent, old.plan, old.note);
        INSERT INTO search_session(rowid, title, agent, plan, note)
        VALUES (new.session_id, new.title, new.agent, new.plan, new.note);
    END""",
    """CREATE TRIGGER IF NOT EXISTS search_message_insert AFTER INSERT ON tasks_message BEGIN
        INSERT INTO search_message(rowid, text) VALUES (new.id, substr(new.text, 1, 20000));
    END""",
    """CREATE TRIGGER IF NOT EXISTS search_message_delete AFTER DELETE ON tasks_message BEGIN
        INSERT INTO search_message(search_message, rowid, text)
        VALUES ('delete', old.id, substr(old.text, 1, 20000));
    END""",
    """CREATE TRIGGER IF NOT EXISTS search_message_update AFTER UPDATE OF text ON tasks_message BEGIN
        INSERT INTO search_message(search_message, rowid, text)
        VALUES ('delete', old.id, substr(old.text, 1, 20000));
        INSERT INTO search_message(rowid, text) VALUES (new.id, substr(new.text, 1, 20000));
    END""",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS search_session_insert",
    "DROP TRIGGER IF EXISTS search_session_delete",
    "DROP TRIGGER IF EXISTS search_session_update",
    "DROP TRIGGER IF EXISTS search_message_insert",
    "DROP TRIGGER IF EXISTS search_message_delete",
    "DROP TRIGGER IF EXISTS search_message_update",
    "DROP TABLE IF EXISTS search_session",
    "DROP TABLE IF EXISTS search_message",
]


def _words(column):
    # ASCII punctuation to spaces, so `wiki.example.com` or `2.5` index their words as
    # SQLite's tokenizer does, rather than as one host or version token.
    return f"regexp_replace({column}, '[[:punct:]]+', ' ', 'g')"


def _vector(column):
    return f"to_tsvector('simple'::regconfig, {_words(column)})"


POSTGRES = [
    f"""ALTER TABLE tasks_message ADD COLUMN search tsvector GENERATED ALWAYS AS
        ({_vector(f"left(text, {INDEXED_CHARS})")}) STORED""",
    "CREATE INDEX search_message_gin ON tasks_message USING gin (search)",
    f"""ALTER TABLE tasks_sessiontext ADD COLUMN search tsvector GENERATED ALWAYS AS (
        setweight({_vector("title || ' ' || agent")}, 'A')
        || setweight({_vector(f"left(plan, {INDEXED_CHARS})")}, 'B')
        || setweight({_vector(f"left(note, {INDEXED_CHARS})")}, 'C')) STORED""",
    "CREATE INDEX search_session_gin ON tasks_sessiontext USING gin (search)",
]
POSTGRES_DROP = [
    "DROP INDEX IF EXISTS search_session_gin",
    "ALTER TABLE tasks_sessiontext DROP COLUMN IF EXISTS search",
    "DROP INDEX IF EXISTS search_message_gin",
    "ALTER TABLE tasks_message DROP COLUMN IF EXISTS search",
]


def fill_session_text(apps, schema_editor):
    """One SessionText per stored session, as search.keep would write it."""
    Session = apps.get_model("tasks", "Session")
    Card = apps.get_model("tasks", "Card")
    SessionText = apps.get_model("tasks", "SessionText")
    db = schema_editor.connection.alias
    last = 0
    while True:
        sessions = list(
            Session.objects.using(db)
            .filter(pk__gt=last)
            .order_by("pk")
            .values("pk", "title", "agent__name")[:2000]
        )
        if not sessions:
            return
        last = sessions[-1]["pk"]
        cards = {
            card["session_id"]: card
            for card in Card.objects.using(db)
            .filter(session_id__in=[s["pk"] for s in sessions])
            .values("session_id", "plan", "markdown")
        }
        rows = []
        for session in sessions:
            card = cards.get(session["pk"], {})
            plan = "\n".join(str(step.get("step", "")) for step in card.get("plan") or [])
            rows.append(
                SessionText(
                    session_id=session["pk"],
                    title=session["title"],
                    agent=session["agent__name"] or "",
                    plan=plan,
                    note=card.get("markdown") or "",
                )
            )
        SessionText.objects.using(db).bulk_create(rows)


def make_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in POSTGRES:  # computed for the rows already there
            schema_editor.execute(statement)
        return
    for statement in SQLITE_TABLES + SQLITE_TRIGGERS:
        schema_editor.execute(statement)
    schema_editor.execute(
        "INSERT INTO search_session(rowid, title, agent, plan, note) "
        "SELECT session_id, title, agent, plan, note FROM tasks_sessiontext"
    )
    schema_editor.execute(
        f"INSERT INTO search_message(rowid, text) SELECT id, substr(text, 1, {INDEXED_CHARS}) "
        "FROM tasks_message"
    )


def drop_indexes(apps, schema_editor):
    statements = POSTGRES_DROP if schema_editor.connection.vendor == "postgresql" else SQLITE_DROP
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('tasks', '0015_notification_channels'),
    ]

    operations = [
        migrations.CreateModel(
            name='SessionText',
            fields=[
                ('session', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='search_text', serialize=False, to='tasks.session')),
                ('title', models.TextField(blank=True)),
                ('agent', models.TextField(blank=True)),
                ('plan', models.TextField(blank=True)),
                ('note', models.TextField(blank=True)),
            ],
        ),
        # The session text first (the indexes are then filled from it in one statement).
        migrations.RunPython(fill_session_text, migrations.RunPython.noop),
        migrations.RunPython(make_indexes, drop_indexes),
    ]
