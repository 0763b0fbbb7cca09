"""PostgreSQL for the test process: the same backend, except that the flush between
transactional tests deletes rows instead of truncating tables.

TRUNCATE of every table costs about 0.2 s on PostgreSQL (it replaces each table's files);
DELETE of the few rows a test leaves costs milliseconds, and with over two hundred
transactional tests (every browser test) that is most of a minute. Django creates foreign
keys DEFERRABLE INITIALLY DEFERRED and runs the flush in one transaction, so the order of
the deletes does not matter. Sequences are not reset, as with the default flush: ids are
never reused between tests. The record of decisions refuses DELETE: its tables are truncated,
when a test wrote to them."""

from __future__ import annotations

from django.db.backends.postgresql import base, operations

# The record of decisions (tasks/models/decisions.py), append-only in the database itself.
APPEND_ONLY = frozenset({"tasks_decision", "tasks_decisionconfirmation"})


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(
        self, style, tables, *, reset_sequences: bool = False, allow_cascade: bool = False
    ) -> list[str]:
        if reset_sequences:  # no test asks for it; keep Django's own way if one does
            return super().sql_flush(
                style, tables, reset_sequences=True, allow_cascade=allow_cascade
            )
        flush = [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};"
            for table in tables
            if table not in APPEND_ONLY
        ]
        kept = [self.quote_name(table) for table in tables if table in APPEND_ONLY]
        if kept:
            # Their trigger refuses DELETE (migration 0024); TRUNCATE fires no row trigger,
            # and costs its price only after a test that wrote to them.
            written = " OR ".join(f"EXISTS (SELECT FROM {table})" for table in kept)
            flush.append(
                f"DO $$ BEGIN IF {written} THEN TRUNCATE {', '.join(kept)}; END IF; END $$;"
            )
        return flush


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
