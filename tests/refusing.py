"""A database that refuses some statements, with real triggers (on SQLite and PostgreSQL
alike): how tests make a write fail at the process boundary, never by patching our code.
Triggers only bind what commits for real: use with `django_db(transaction=True)`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection


class Refusing:
    """Makes the database refuse some statements on one table, with a real trigger."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []

    def refuse(self, table: str, *operations: str) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    "CREATE OR REPLACE FUNCTION onlooker_test_refuse() RETURNS trigger AS "
                    "$$ BEGIN RAISE EXCEPTION 'refused by a test trigger'; END $$ "
                    "LANGUAGE plpgsql"
                )
            for operation in operations:
                name = f"refuse_{operation.lower()}_{table}"
                if connection.vendor == "postgresql":
                    cursor.execute(
                        f"CREATE TRIGGER {name} BEFORE {operation} ON {table} "
                        "FOR EACH ROW EXECUTE FUNCTION onlooker_test_refuse()"
                    )
                else:
                    cursor.execute(
                        f"CREATE TRIGGER {name} BEFORE {operation} ON {table} "
                        "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END"
                    )
                self.made.append((name, table))

    def allow_all(self) -> None:
        with connection.cursor() as cursor:
            for name, table in self.made:
                if connection.vendor == "postgresql":
                    cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                else:
                    cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
            if connection.vendor == "postgresql":
                cursor.execute("DROP FUNCTION IF EXISTS onlooker_test_refuse()")
        self.made.clear()


@pytest.fixture
def database() -> Iterator[Refusing]:
    refusing = Refusing()
    yield refusing
    refusing.allow_all()
