"""The spool file: on SQLite, where received pushes wait for the applier.

SQLite has one write lock per database file, and an applier batch holds the database's for
as long as it applies (up to about a tenth of a second under load). A push kept in the
database waited for it, and so did its 2xx: the receiver and the applier took turns, and
together did less than either alone. Kept in a file of their own beside the database
(`<database>-spool`, WAL, synchronised as the database is), pushes never wait for a batch:
the receiver's INSERT takes only the spool's lock, for one row.

Each batch first moves what the spool holds into the database's `Delivery` table, in the
batch's own transaction and with the ids the receiver answered with (`take` reads them,
deliveries.move_from_spool writes them), and deletes those rows from the spool once that has
committed (`clear`, through deliveries.clear_spool). A crash between the two leaves
rows in both; the next move finds them there (same id, same key) and only deletes them, so
nothing is lost and nothing applied twice. The spool's id sequence numbers every delivery
(`next_id` those kept in the database itself) and is kept above the database's highest
delivery id, so the id the receiver answers with is the delivery's, and never another's.

A copy of a push is found in the spool (its unique key) or, once the first has been moved,
in the database (read after the copy is kept, which never waits for the write lock: see
`keep`); either way it is counted once, on the first, and never applied.

PostgreSQL needs none of this (its writers lock rows, not the database), nor does a
database in memory (one process; the tests'): `path()` is then None and pushes are kept in
the database (deliveries.receive).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import Max

from tasks.models import Delivery
from tasks.runtime.writer import writing

SCHEMA = """
CREATE TABLE IF NOT EXISTS push (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id INTEGER NOT NULL,
    endpoint_id INTEGER,
    idempotency_key TEXT NOT NULL,
    received_at TEXT NOT NULL,
    kind TEXT NOT NULL,
    task_id TEXT NOT NULL,
    body TEXT NOT NULL,
    duplicates INTEGER NOT NULL DEFAULT 0,
    UNIQUE (agent_id, idempotency_key)
)
"""
BUSY_TIMEOUT_SECONDS = 10.0  # the spool's writers hold its lock for one row, or one DELETE

_opened = threading.local()  # this thread's connection: ((file, database), connection)


def path() -> str | None:
    """This process's spool file, or None where pushes are kept in the database itself."""
    if connection.vendor != "sqlite" or settings.ONLOOKER_SPOOL == "off":
        return None
    if settings.ONLOOKER_SPOOL:
        return settings.ONLOOKER_SPOOL
    database = _database()
    return _beside(database) if database is not None else None


def _beside(database: str) -> str:
    """The spool beside the database, `<database>-spool`; or the file an earlier version
    kept there as `<database>-inbox`, for as long as it is the only one: what it holds was
    acknowledged, and must be applied."""
    spool, earlier = f"{database}-spool", f"{database}-inbox"
    return earlier if os.path.exists(earlier) and not os.path.exists(spool) else spool


def _taken_from() -> str | None:
    """The spool the applier takes pushes from: this process's, or, with the spool turned
    off, the one beside the database if a server kept pushes there before (acknowledged,
    they must still be applied)."""
    file = path()
    if file is None and connection.vendor == "sqlite" and settings.ONLOOKER_SPOOL == "off":
        database = _database()
        if database is not None and os.path.exists(_beside(database)):
            return _beside(database)
    return file


def _database() -> str | None:
    """The database's file; None for one in memory."""
    database = str(connection.settings_dict["NAME"])
    return database if os.path.isfile(database) else None


@dataclass(frozen=True)
class Kept:
    delivery_id: int
    duplicate: bool
    # The database's delivery of which this push is a copy (see `keep`).
    copy_of: int | None = None


def keep(
    file: str,
    *,
    agent_id: int,
    endpoint_id: int | None,
    key: str,
    received_at: datetime,
    kind: str,
    task_id: str,
    body: str,
) -> Kept:
    """Keep a push in the spool, committed when this returns, or count it on its copy there.

    Kept, it is then looked for in the database: a first copy the applier has taken from the
    spool is the database's, committed before it left the spool, so before this one could be
    kept there; looked for after, it is found (`copy_of`), and this copy is counted on it
    when it is moved (deliveries.move_from_spool). The applier may have moved this very push
    meanwhile: that row is not another copy."""
    handle, attached = _connect(file)
    with writing(file):
        values = (agent_id, endpoint_id, key, received_at.isoformat(), kind, task_id, body)
        kept = _keep(handle, agent_id, key, values)
    if kept.duplicate:
        return kept
    if attached:  # one statement on this connection, made once
        first = handle.execute(
            "SELECT id FROM onlooker.tasks_delivery"
            " WHERE agent_id = ? AND idempotency_key = ? AND id != ? LIMIT 1",
            (agent_id, key, kept.delivery_id),
        ).fetchone()
        first = None if first is None else first[0]
    else:
        known = Delivery.objects.filter(agent_id=agent_id, idempotency_key=key)
        first = known.exclude(pk=kept.delivery_id).values_list("pk", flat=True).first()
    return Kept(kept.delivery_id, duplicate=False, copy_of=first)


def _keep(handle: sqlite3.Connection, agent_id: int, key: str, values: tuple) -> Kept:
    """Call holding the spool's writer lock: a copy found here cannot be moved (deleted)
    between the INSERT it refused and the UPDATE that counts it."""
    try:
        inserted = handle.execute(
            "INSERT INTO push (agent_id, endpoint_id, idempotency_key, received_at, kind,"
            " task_id, body) VALUES (?, ?, ?, ?, ?, ?, ?)",
            values,
        )
        return Kept(inserted.lastrowid, duplicate=False)
    except sqlite3.IntegrityError:
        found = handle.execute(
            "UPDATE push SET duplicates = duplicates + 1"
            " WHERE agent_id = ? AND idempotency_key = ? RETURNING id",
            (agent_id, key),
        ).fetchone()
        if found is None:
            raise  # not its key that the INSERT broke
        return Kept(found[0], duplicate=True)


def next_id(file: str) -> int:
    """An id for a delivery kept in the database itself (one fetched from its agent): the
    spool's sequence numbers them too, so no id is ever given twice."""
    handle, _ = _connect(file)
    with writing(file):
        numbered = "UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'push' RETURNING seq"
        return handle.execute(numbered).fetchone()[0]


class Spooled(NamedTuple):
    """A push waiting in the spool, as `take` reads it."""

    spool_id: int
    agent_id: int
    endpoint_id: int | None
    key: str
    received_at: str  # ISO 8601
    kind: str
    task_id: str
    body: str
    duplicates: int


@dataclass(frozen=True)
class Taken:
    """Pushes `take` read from the spool, oldest first, and what the database has of them
    (`KNOWN`): their agents and endpoints, and deliveries already there by (agent, key)."""

    pushes: list[Spooled]
    agents: set[int]
    endpoints: set[int]
    kept: dict[tuple[int, str], int]
    ids_taken: set[int]


def take(limit: int) -> Taken | None:
    """Read up to `limit` pushes, oldest first, from the spool, for a move into `Delivery`
    (deliveries.move_from_spool writes them, in the caller's transaction, which holds the
    database's write lock); None where there is no spool or nothing in it."""
    file = _taken_from()
    if file is None:
        return None
    rows = _connect(file)[0].execute(
        "SELECT id, agent_id, endpoint_id, idempotency_key, received_at, kind, task_id, body,"
        " duplicates FROM push ORDER BY id LIMIT ?",
        (limit,),
    )
    rows = rows.fetchall()
    if not rows:
        return None
    pushes = [Spooled._make(row) for row in rows]
    return Taken(pushes, *_known(pushes))


# What the database has of a move's rows, in one statement: their agents and endpoints (gone
# if deleted meanwhile), and deliveries already there, by id (these very rows, moved before
# a crash kept them from being cleared; or an id the database gave otherwise) or by key (the
# first copy of a push whose copy the receiver found there).
KNOWN = """
SELECT 'agent', id, NULL, NULL FROM tasks_agent WHERE id IN (SELECT value FROM json_each(%s))
UNION ALL
SELECT 'endpoint', id, NULL, NULL FROM tasks_pushendpoint
 WHERE id IN (SELECT value FROM json_each(%s))
UNION ALL
SELECT 'delivery', id, agent_id, idempotency_key FROM tasks_delivery
 WHERE id IN (SELECT value FROM json_each(%s))
UNION ALL
SELECT 'delivery', d.id, d.agent_id, d.idempotency_key
 FROM json_each(%s) AS pair CROSS JOIN tasks_delivery AS d
 WHERE d.agent_id = json_extract(pair.value, '$[0]')
   AND d.idempotency_key = json_extract(pair.value, '$[1]')
"""


def _known(
    pushes: list[Spooled],
) -> tuple[set[int], set[int], dict[tuple[int, str], int], set[int]]:
    agents: set[int] = set()
    endpoints: set[int] = set()
    kept: dict[tuple[int, str], int] = {}
    ids_taken: set[int] = set()
    params = [
        json.dumps(sorted({push.agent_id for push in pushes})),
        json.dumps(sorted({push.endpoint_id for push in pushes if push.endpoint_id is not None})),
        json.dumps([push.spool_id for push in pushes]),
        json.dumps([[push.agent_id, push.key] for push in pushes]),
    ]
    with connection.cursor() as cursor:
        cursor.execute(KNOWN, params)
        for what, pk, agent_id, key in cursor.fetchall():
            if what == "agent":
                agents.add(pk)
            elif what == "endpoint":
                endpoints.add(pk)
            else:
                kept[(agent_id, key)] = pk
                ids_taken.add(pk)
    return agents, endpoints, kept, ids_taken


def clear(moved: dict[int, int]) -> list[tuple[int, str, int]]:
    """Delete moved pushes from the spool: call once the move has committed, still holding
    the database's writer lock. Returns the copies counted on them since they were moved:
    (agent, key, how many more), for deliveries.clear_spool to count on their deliveries."""
    file = _taken_from()
    if file is None or not moved:
        return []
    handle, _ = _connect(file)
    with writing(file):
        deleted = handle.execute(
            "DELETE FROM push WHERE id IN (SELECT value FROM json_each(?))"
            " RETURNING id, agent_id, idempotency_key, duplicates",
            (json.dumps(list(moved)),),
        ).fetchall()
    return [
        (agent_id, key, duplicates - moved[spool_id])
        for spool_id, agent_id, key, duplicates in deleted
        if duplicates > moved[spool_id]
    ]


def waiting() -> int:
    """How many pushes the spool holds (0 where there is none)."""
    file = path()
    if file is None:
        return 0
    return _connect(file)[0].execute("SELECT count(*) FROM push").fetchone()[0]


def _connect(file: str) -> tuple[sqlite3.Connection, bool]:
    """This thread's connection to the spool, and whether the database is attached to it
    (as `onlooker`, read only by `keep`; not where the database is in memory)."""
    database = _database()
    opened = getattr(_opened, "connection", None)
    if opened is not None and opened[0] == (file, database):
        return opened[1], database is not None
    if opened is not None:
        opened[1].close()
    handle = sqlite3.connect(file, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    handle.execute("PRAGMA journal_mode=WAL")
    handle.execute("PRAGMA synchronous=NORMAL")
    # The database's highest delivery id, read before the spool is locked (so the two locks
    # are never held in the other order); only moves raise it, and they take spool ids.
    floor = Delivery.objects.aggregate(highest=Max("pk"))["highest"] or 0
    handle.execute("BEGIN IMMEDIATE")
    try:
        handle.execute(SCHEMA)
        handle.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'push', 0"
            " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'push')"
        )
        handle.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'push'", (floor,))
        handle.execute("COMMIT")
        if database is not None:
            handle.execute("ATTACH DATABASE ? AS onlooker", (database,))
    except BaseException:
        if handle.in_transaction:
            handle.execute("ROLLBACK")
        handle.close()
        raise
    _opened.connection = ((file, database), handle)
    return handle, database is not None
