"""PostgreSQL for the test process: the same backend, except that the flush between
transactional tests deletes rows instead of truncating tables.

TRUNCATE of every table costs about 0.2 s on PostgreSQL (it replaces each table's files);
DELETE of the few rows a test leaves costs milliseconds, and with over two hundred
transactional tests (every browser test) that is most of a minute. Django creates foreign
keys DEFERRABLE INITIALLY DEFERRED and runs the flush in one transaction, so the order of
the deletes does not matter. Sequences are not reset, as with the default flush: ids are
never reused between tests."""

from __future__ import annotations

from django.db.backends.postgresql import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(
        self, style, tables, *, reset_sequences: bool = False, allow_cascade: bool = False
    ) -> list[str]:
        if reset_sequences:  # no test asks for it; keep Django's own way if one does
            return super().sql_flush(
                style, tables, reset_sequences=True, allow_cascade=allow_cascade
            )
        return [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};"
            for table in tables
        ]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
