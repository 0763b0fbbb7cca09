"""The record of decisions refuses, in the database itself, any UPDATE of its rows (and on
PostgreSQL any DELETE): no code path, the admin or a shell included, changes what was
decided. SQLite keeps DELETE to the model's refusal, as Django's test flush empties tables
with it."""

from django.db import migrations

TABLES = ("tasks_decision", "tasks_decisionconfirmation")


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(
                f"""
                CREATE OR REPLACE FUNCTION {table}_append_only() RETURNS trigger AS $$
                BEGIN
                    RAISE EXCEPTION 'the record of decisions is append-only';
                END
                $$ LANGUAGE plpgsql;
                CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
                    FOR EACH ROW EXECUTE FUNCTION {table}_append_only();
                """
            )
        elif vendor == "sqlite":
            schema_editor.execute(
                f"""
                CREATE TRIGGER {table}_append_only BEFORE UPDATE ON {table}
                BEGIN
                    SELECT RAISE(ABORT, 'the record of decisions is append-only');
                END
                """
            )


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {table}_append_only()")
        elif vendor == "sqlite":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only")


class Migration(migrations.Migration):
    dependencies = [("tasks", "0023_approvals_come_to_people")]

    operations = [migrations.RunPython(forwards, backwards)]
