"""Reads on the apply path, compiled by the ORM once and then run as SQL.

Deriving a session (changes.derive) runs after every batch of pushes to it, and its reads are
tiny (one session's rows, by index): building and compiling their QuerySets cost about three
times running them (recent tasks, SQLite: 0.39 ms as a QuerySet, 0.10 ms prepared). A
`Prepared` read is written as the QuerySet it stands for; the ORM compiles that once per
database, and each call runs the SQL through `raw()` with the key, which keeps the ORM's
conversions (JSON decoders, aware datetimes) and model instances. Only model fields are
converted: an annotation comes back as the database sends it, so annotate only what needs no
conversion (a text column, an id).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import router
from django.db.models import Model, QuerySet
from django.db.models.query import RawQuerySet

# Stands for the key while compiling: the params equal to it are where the key goes. No row
# has this id.
_KEY = -7_340_031_999


class Prepared:
    """`build(key)` → the QuerySet; `prepared(key)` → its rows (a RawQuerySet). The key must
    be a parameter of the SQL (a filter value), never part of its text (a slice)."""

    def __init__(self, build: Callable[[Any], QuerySet]) -> None:
        self._build = build
        self._model: type[Model] | None = None
        # By database alias: the SQL, its parameters, and where among them the key goes.
        self._compiled: dict[str, tuple[str, tuple, tuple[int, ...]]] = {}

    def __call__(self, key: Any) -> RawQuerySet:
        if self._model is None:
            self._model = self._build(_KEY).model
        alias = router.db_for_read(self._model)
        compiled = self._compiled.get(alias)
        if compiled is None:
            compiled = self._compiled[alias] = self._compile(alias)
        sql, params, slots = compiled
        values = list(params)
        for slot in slots:
            values[slot] = key
        return self._model._default_manager.raw(sql, values, using=alias)

    def _compile(self, alias: str) -> tuple[str, tuple, tuple[int, ...]]:
        sql, params = self._build(_KEY).query.get_compiler(alias).as_sql()
        slots = tuple(i for i, param in enumerate(params) if param == _KEY)
        if not slots:
            raise ValueError("a prepared read must filter by its key")
        return sql, tuple(params), slots
