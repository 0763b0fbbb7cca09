"""Reads and writes on the apply path, compiled once and then run as SQL.

Deriving a session (changes.derive) runs after every batch of pushes to it, and its queries
are tiny (one session's rows, by index): building and compiling them cost several times
running them (recent tasks, SQLite: 0.39 ms as a QuerySet, 0.05 ms prepared; a whole derive
whose card is unchanged, 1.9 ms with the ORM, 0.18 ms prepared). A `Prepared` read is
written as the QuerySet it stands for; the ORM compiles it once per database, and each call
runs that SQL with the key and makes the rows into model instances the way the ORM's own
iterator does (`from_db`, the database's and the fields' converters: JSON decoded, datetimes
aware, annotations converted too). `update` is save() of a stored row, its UPDATE made once;
`insert` is save() of a new row, its INSERT made once (the push receiver's one write: the
ORM's create() was most of what keeping a push cost beyond a bare endpoint).
Use these only where a profile shows the ORM's overhead; everywhere else, the ORM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections, router
from django.db.models import Model, QuerySet
from django.db.models.constants import OnConflict
from django.db.models.query import get_related_populators

# Stand for the keys while compiling: the params equal to one (a datetime's as the database
# is sent it) are where that key goes. No row has these ids, nor any of its times this one.
_KEY = -7_340_031_999
_WHEN = datetime(1901, 12, 13, 20, 45, 52, 123457, tzinfo=UTC)


def _placeholder(kind: type, n: int) -> Any:
    if kind is int:
        return _KEY - n
    if kind is str:
        return str(_KEY - n)
    if kind is datetime:
        return _WHEN + timedelta(seconds=n)
    raise TypeError(f"a prepared read's keys are int, str or datetime, not {kind!r}")


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple
    # For each key: where among the params, which key, and whether it goes as a datetime
    # is sent to this database (SQLite's are text).
    slots: tuple[tuple[int, int, bool], ...]
    columns: tuple  # the selected expressions, in order, for their converters
    fields: slice  # where the model's fields are among the columns
    attnames: tuple[str, ...]  # and which fields they are
    annotations: tuple[tuple[str, int], ...]  # (name, column) of each annotation
    related: tuple  # Django's own fillers of select_related rows, made once


class Prepared:
    """`build(key)` → the QuerySet; `prepared(key)` → its rows, as model instances. With
    `keys=(int, str, …)`, the kind of each, `build(k1, k2, …)` and `prepared(k1, k2, …)`.
    Each key must be a parameter of the SQL (a filter value), never part of its text (a
    slice). select_related rows are made as the ORM makes them."""

    def __init__(self, build: Callable[..., QuerySet], *, keys: tuple[type, ...] = (int,)) -> None:
        self._build = build
        self._placeholders = tuple(_placeholder(kind, n) for n, kind in enumerate(keys))
        self._model: type[Model] | None = None
        self._route = router.db_for_read  # a locking read (select_for_update) is a write's
        self._compiled: dict[str, _Compiled] = {}  # by database alias

    def __call__(self, *keys: Any) -> list[Model]:
        if len(keys) != len(self._placeholders):
            raise TypeError(f"{len(self._placeholders)} keys, please, not {len(keys)}")
        if self._model is None:
            built = self._build(*self._placeholders)
            self._model = built.model
            if built.query.select_for_update:
                self._route = router.db_for_write
        alias = self._route(self._model)
        compiled = self._compiled.get(alias)
        if compiled is None:
            compiled = self._compiled[alias] = self._compile(alias)
        params = list(compiled.params)
        connection = connections[alias]
        for slot, which, as_datetime in compiled.slots:
            key = keys[which]
            params[slot] = connection.ops.adapt_datetimefield_value(key) if as_datetime else key
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall()
        if not rows:
            return []
        # Per call, with this thread's connection, as the ORM's iterator does.
        converters = []
        for column, expression in enumerate(compiled.columns):
            functions = connection.ops.get_db_converters(expression) + expression.get_db_converters(
                connection
            )
            if functions:
                converters.append((column, functions, expression))
        instances = []
        for row in rows:
            row = list(row)
            for column, functions, expression in converters:
                value = row[column]
                for function in functions:
                    value = function(value, expression, connection)
                row[column] = value
            instance = self._model.from_db(alias, compiled.attnames, row[compiled.fields])
            for name, column in compiled.annotations:
                setattr(instance, name, row[column])
            for related in compiled.related:
                related.populate(row, instance)
            instances.append(instance)
        return instances

    def _compile(self, alias: str) -> _Compiled:
        compiler = self._build(*self._placeholders).query.get_compiler(alias)
        sql, params = compiler.as_sql()
        ops = compiler.connection.ops
        sent = {  # each key's placeholder as the database is sent it
            ops.adapt_datetimefield_value(key) if isinstance(key, datetime) else key: n
            for n, key in enumerate(self._placeholders)
        }
        slots = tuple(
            (i, sent[param], isinstance(self._placeholders[sent[param]], datetime))
            for i, param in enumerate(params)
            if isinstance(param, int | str | datetime) and param in sent
        )
        if {n for _, n, _ in slots} != set(range(len(self._placeholders))):
            raise ValueError("a prepared read must filter by each of its keys")
        info = compiler.klass_info
        if info is None:
            raise ValueError("a prepared read selects a model's rows")
        selected = info["select_fields"]
        fields = slice(selected[0], selected[-1] + 1)
        return _Compiled(
            sql=sql,
            params=tuple(params),
            slots=slots,
            columns=tuple(column[0] for column in compiler.select),
            fields=fields,
            attnames=tuple(column[0].target.attname for column in compiler.select[fields]),
            annotations=tuple(compiler.annotation_col_map.items()),
            related=tuple(get_related_populators(info, compiler.select, alias)),
        )


def update(instance: Model, fields: tuple[str, ...] | None = None) -> None:
    """`instance.save(update_fields=fields)` (every field when None) for a row that is
    stored, with its UPDATE compiled once. Like save(), it converts each value for the
    database (`pre_save`, `get_db_prep_save`); it sends no model signals (Onlooker has none,
    DESIGN.md). Anything it does not cover (a new row, an expression as a value, a field with
    its own placeholder, no row updated) is left to save(), so the outcome is save()'s."""
    if instance._state.adding or instance.pk is None:
        instance.save(update_fields=fields)
        return
    model = type(instance)
    alias = router.db_for_write(model, instance=instance)
    connection = connections[alias]
    sql, targets = _update(model, fields, alias)
    if sql is None:
        instance.save(update_fields=fields)
        return
    params = _values(instance, targets, connection, adding=False)
    if params is None:
        instance.save(update_fields=fields)
        return
    params.append(model._meta.pk.get_db_prep_value(instance.pk, connection))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        updated = cursor.rowcount
    if updated != 1:
        instance.save(update_fields=fields)  # save() decides: an INSERT, or its error


# By (model, fields, database alias): the UPDATE (None: left to save()) and its fields.
_UPDATES: dict[tuple, tuple[str | None, tuple]] = {}


def _update(model: type[Model], fields: tuple[str, ...] | None, alias: str) -> tuple:
    statement = _UPDATES.get((model, fields, alias))
    if statement is None:
        statement = _UPDATES[(model, fields, alias)] = _update_statement(
            model, fields, connections[alias]
        )
    return statement


# Rows `update_all` sets in one statement; more go in several.
UPDATE_ROWS = 100


def update_all(instances: list[Model], fields: tuple[str, ...] | None = None) -> None:
    """`update(instance, fields)` of each of several stored rows of one model, in one
    statement on PostgreSQL (where each statement is a round trip: a batch's sessions,
    cards and tasks were three a session), one at a time elsewhere. A row given twice is
    written as its last. Values are converted as `update` converts them, and a row it does
    not cover (not stored yet, an expression as a value) is left to `update`, so the
    outcome is save()'s; so are all of them if any was not there to update."""
    rows: dict[Any, Model] = {}
    for instance in instances:
        if instance._state.adding or instance.pk is None:
            update(instance, fields)  # save(): each new row is its own
        else:
            rows[instance.pk] = instance
    rows = list(rows.values())
    if not rows:
        return
    model = type(rows[0])
    alias = router.db_for_write(model, instance=rows[0])
    connection = connections[alias]
    sql, targets = _update(model, fields, alias)
    if len(rows) == 1 or connection.vendor != "postgresql" or sql is None:
        for instance in rows:
            update(instance, fields)
        return
    by_values: list[tuple[Model, list]] = []
    for instance in rows:
        values = _values(instance, targets, connection, adding=False)
        if values is None:
            update(instance, fields)
        else:
            key = instance._meta.pk.get_db_prep_value(instance.pk, connection)
            by_values.append((instance, [key, *values]))
    for start in range(0, len(by_values), UPDATE_ROWS):
        chunk = by_values[start : start + UPDATE_ROWS]
        with connection.cursor() as cursor:
            cursor.execute(
                _update_from_values(model, fields, targets, len(chunk), alias),
                [value for _, params in chunk for value in params],
            )
            updated = cursor.rowcount
        if updated != len(chunk):
            for instance, _ in chunk:  # update() decides, each alone: an INSERT, or its error
                update(instance, fields)


def _values(instance: Model, targets: tuple, connection, *, adding: bool) -> list | None:
    """The row's values for `targets` as save() sends them (`pre_save`, then
    `get_db_prep_save`); None if one is an expression, which only save() can send."""
    params = []
    for field in targets:
        value = field.pre_save(instance, adding)
        if hasattr(value, "resolve_expression") or hasattr(value, "prepare_database_save"):
            return None
        value = field.get_db_prep_save(value, connection)
        if hasattr(value, "as_sql"):
            return None
        params.append(value)
    return params


def _update_from_values(
    model: type[Model], fields: tuple[str, ...] | None, targets: tuple, rows: int, alias: str
) -> str:
    """PostgreSQL: UPDATE … FROM a list of (key, values…) rows. Its first row is the
    columns of a NULL of the table's own row type, which joins no row: every column of the
    list then has its column's type, and values sent untyped (text) take it, as in an
    UPDATE of one row, with the same checks (a text too long for its column raises, never
    cut). That row is in the list itself: a list's own untyped columns would be text, which
    a UNION with it could not match to a time."""
    key = (model, fields, alias, rows)
    sql = _UPDATES_FROM_VALUES.get(key)
    if sql is not None:
        return sql
    quote = connections[alias].ops.quote_name
    meta = model._meta
    table = quote(meta.db_table)
    names = [quote(meta.pk.column)] + [quote(field.column) for field in targets]
    typed = "(" + ", ".join(f"(NULL::{table}).{name}" for name in names) + ")"
    values = ", ".join([typed] + ["(" + ", ".join(["%s"] * len(names)) + ")"] * rows)
    assignments = ", ".join(f"{name} = v.{name}" for name in names[1:])
    # Only quoted names from the model go into the text; every value is a parameter.
    sql = _UPDATES_FROM_VALUES[key] = (
        f"UPDATE {table} SET {assignments} "  # noqa: S608
        f"FROM (VALUES {values}) AS v({', '.join(names)}) "
        f"WHERE {table}.{names[0]} = v.{names[0]}"
    )
    return sql


# By (model, fields, database alias, rows): `update_all`'s statement.
_UPDATES_FROM_VALUES: dict[tuple, str] = {}


def _update_statement(
    model: type[Model], names: tuple[str, ...] | None, connection
) -> tuple[str | None, tuple]:
    meta = model._meta
    if names is None:
        targets = tuple(f for f in meta.concrete_fields if not f.primary_key)
    else:
        targets = tuple(meta.get_field(name) for name in names)
    if any(hasattr(field, "get_placeholder") or field.primary_key for field in targets):
        return None, targets
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in targets)
    # Only quoted names from the model go into the text; every value is a parameter.
    sql = f"UPDATE {table} SET {assignments} WHERE {table}.{quote(meta.pk.column)} = %s"  # noqa: S608
    return sql, targets


def insert(instance: Model, *, ignore_conflicts: bool = False) -> None:
    """`instance.save()` for a new row whose key the database assigns, with its INSERT made
    once; the key is set on `instance` from the INSERT's RETURNING. `ignore_conflicts`: as
    `bulk_create([instance], ignore_conflicts=True)`, a row that a unique constraint refuses
    is skipped, and the key is not set. Values are converted as save() converts them
    (`pre_save` with add=True, `get_db_prep_save`). Anything it does not cover (an expression
    as a value, a field with its own placeholder or a database default, a database that
    cannot return the key) is left to the ORM, so the outcome is the ORM's: a unique row
    already stored raises IntegrityError."""
    model = type(instance)
    alias = router.db_for_write(model, instance=instance)
    connection = connections[alias]
    key = (model, alias, ignore_conflicts)
    statement = _INSERTS.get(key)
    if statement is None:
        statement = _INSERTS[key] = _insert_statement(model, connection, ignore_conflicts)
    sql, targets = statement
    params = (
        None
        if sql is None or instance.pk is not None
        else _values(instance, targets, connection, adding=True)
    )
    if params is None:
        if ignore_conflicts:
            model._base_manager.using(alias).bulk_create([instance], ignore_conflicts=True)
        else:
            instance.save(force_insert=True, using=alias)
        return
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = None if ignore_conflicts else cursor.fetchone()
    if row is not None:
        instance.pk = row[0]
    instance._state.adding = False
    instance._state.db = alias


# By (model, database alias, ignore_conflicts): the INSERT (None: left to the ORM) and the
# fields it writes.
_INSERTS: dict[tuple, tuple[str | None, tuple]] = {}


def _insert_statement(
    model: type[Model], connection, ignore_conflicts: bool
) -> tuple[str | None, tuple]:
    meta = model._meta
    pk = meta.pk
    targets = tuple(f for f in meta.concrete_fields if f is not pk)
    if (
        pk not in meta.db_returning_fields
        or not connection.features.can_return_columns_from_insert
        or (ignore_conflicts and not connection.features.supports_ignore_conflicts)
        or any(hasattr(f, "get_placeholder") or f.has_db_default() for f in targets)
    ):
        return None, targets
    ops = connection.ops
    table = ops.quote_name(meta.db_table)
    columns = ", ".join(ops.quote_name(field.column) for field in targets)
    values = ", ".join(["%s"] * len(targets))
    if ignore_conflicts:
        # INSERT OR IGNORE on SQLite, ON CONFLICT DO NOTHING on PostgreSQL: the ORM's words.
        start = ops.insert_statement(on_conflict=OnConflict.IGNORE)
        end = ops.on_conflict_suffix_sql(targets, OnConflict.IGNORE, None, None)
    else:
        start, end = "INSERT INTO", f"RETURNING {table}.{ops.quote_name(pk.column)}"
    # Only quoted names from the model go into the text; every value is a parameter.
    sql = f"{start} {table} ({columns}) VALUES ({values}) {end}".rstrip()  # noqa: S608
    return sql, targets
