"""Rotating the keys credentials are sealed with (`manage.py rotate_credentials`).

Every stored credential is a `SealedTextField` (tasks/models/sealed.py), found here by looking
at the models rather than by a list that a new field could be missing from. Rotation seals
each stored value again under the newest key of ONLOOKER_CREDENTIAL_KEYS, so the older keys
can then be dropped. It reads and writes the columns as stored (tokens, never the plain
values: the field itself would open and seal again), a batch of rows per transaction, so the
database's write lock is held briefly and an interrupted run can simply be started again (a
value already under the newest key is left as it is).

A value no configured key opens is named (model, primary key, field; never the value) and
left untouched: dropping it would lose a credential that the right key could still open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.apps import apps
from django.db import connections, models, router, transaction

from tasks.models import sealed

BATCH = 100  # rows per transaction


@dataclass(frozen=True)
class Unopened:
    """A stored value that no configured key opens."""

    model: str  # "tasks.Agent"
    pk: object
    field: str


@dataclass
class Tally:
    """What rotation did to one sealed field of one model."""

    model: str
    field: str
    resealed: int = 0
    current: int = 0  # already under the newest key
    changed_meanwhile: int = 0  # written again while it ran (by code sealing it anew)
    unopened: list[Unopened] = field(default_factory=list)

    def line(self) -> str:
        said = f"{self.model}.{self.field}: {self.resealed} resealed, "
        said += f"{self.current} already under the newest key"
        if self.changed_meanwhile:
            said += f", {self.changed_meanwhile} changed while rotating (left as written)"
        return said + f", {len(self.unopened)} no key opens"


def sealed_fields() -> list[tuple[type[models.Model], models.Field]]:
    """Every concrete SealedTextField of every model with a table of its own."""
    found = []
    for model in apps.get_models():
        meta = model._meta
        if meta.proxy or not meta.managed:
            continue
        found += [(model, f) for f in meta.concrete_fields if isinstance(f, sealed.SealedTextField)]
    return found


def rotate(batch: int = BATCH) -> list[Tally]:
    """Seal every stored credential again under the newest key; what happened, per field."""
    return [rotate_field(model, sealed_field, batch) for model, sealed_field in sealed_fields()]


def rotate_field(model: type[models.Model], sealed_field: models.Field, batch: int) -> Tally:
    tally = Tally(model._meta.label, sealed_field.name)
    column = _Column(model, sealed_field)
    after = None
    while rows := column.stored(after, batch):
        with transaction.atomic(using=column.alias):
            for pk, stored in rows:
                _reseal(column, pk, stored, tally)
        after = rows[-1][0]
    return tally


def _reseal(column: _Column, pk: object, stored: str, tally: Tally) -> None:
    if sealed.under_newest(stored):
        tally.current += 1
        return
    try:
        resealed = sealed.reseal(stored)
    except sealed.Unreadable:
        tally.unopened.append(Unopened(tally.model, pk, tally.field))
        return
    if column.replace(pk, stored, resealed):
        tally.resealed += 1
    else:
        tally.changed_meanwhile += 1


class _Column:
    """A sealed field's column, read and written as stored, in primary key order."""

    def __init__(self, model: type[models.Model], sealed_field: models.Field) -> None:
        self.alias = router.db_for_write(model)
        quote = connections[self.alias].ops.quote_name
        self._table = quote(model._meta.db_table)
        self._pk = quote(model._meta.pk.column)
        self._column = quote(sealed_field.column)

    def stored(self, after: object, batch: int) -> list[tuple[object, str]]:
        where = f"{self._column} <> ''"
        params: list[object] = []
        if after is not None:
            where += f" AND {self._pk} > %s"
            params.append(after)
        sql = (
            f"SELECT {self._pk}, {self._column} FROM {self._table} "  # noqa: S608 (quoted names)
            f"WHERE {where} ORDER BY {self._pk} LIMIT %s"
        )
        with connections[self.alias].cursor() as cursor:
            cursor.execute(sql, [*params, batch])
            return list(cursor.fetchall())

    def replace(self, pk: object, stored: str, resealed: str) -> bool:
        """Write `resealed` unless the row was written since it was read (then the newer
        value stays, sealed by whoever wrote it)."""
        sql = (
            f"UPDATE {self._table} SET {self._column} = %s "  # noqa: S608 (quoted names)
            f"WHERE {self._pk} = %s AND {self._column} = %s"
        )
        with connections[self.alias].cursor() as cursor:
            cursor.execute(sql, [resealed, pk, stored])
            return cursor.rowcount == 1
