"""The baseline for the ingest benchmark: the least a push receiver can do.

A raw ASGI app (no framework) that reads the body, verifies the Standard Webhooks signature
with the same library Onlooker uses, and INSERTs (webhook-id, body) into one table,
committing before it answers 200. Run it under the same server as Onlooker:

    BARE_PUSH_SECRET=whsec_… BARE_PUSH_DATABASE=/tmp/bare.sqlite3 \
        daphne -b 127.0.0.1 -p 8001 tests.benchmarks.bare_push:application

`BARE_PUSH_DATABASE` is a SQLite file path or a postgres:// URL. The database work runs in a
worker thread, as Django runs a sync view, so the comparison is about what the real view does
and not about who blocks the event loop. Connections are kept per thread by default
(`BARE_PUSH_CONNECTION=persistent`), which is what a hand-written receiver would do;
`per-request` opens one per push, as Django does with CONN_MAX_AGE=0.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from standardwebhooks import Webhook

TABLE = "bench_bare_push"
SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def is_postgres(database: str) -> bool:
    return database.startswith(("postgres://", "postgresql://"))


def connect(database: str) -> Any:
    """A DB-API connection set up as Onlooker sets up its own (WAL, IMMEDIATE, 20 s wait)."""
    if is_postgres(database):
        import psycopg  # imported here: the SQLite baseline must not need it

        # Autocommit, so `transaction()` is exactly BEGIN … COMMIT, as Django's atomic().
        return psycopg.connect(database, autocommit=True)
    connection = sqlite3.connect(database, timeout=20, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


def prepare(database: str) -> None:
    """Create the baseline's table (empty). Called by the benchmark before the server starts."""
    connection = connect(database)
    try:
        key = "bigserial" if is_postgres(database) else "integer"
        # The unique webhook id is the baseline's idempotency: Onlooker's delivery log has one.
        statements = [
            f"DROP TABLE IF EXISTS {TABLE}",
            f"CREATE TABLE {TABLE} (id {key} PRIMARY KEY, webhook_id text NOT NULL UNIQUE,"
            " body text NOT NULL)",
        ]
        for statement in statements:
            connection.execute(statement)
        connection.commit()
    finally:
        connection.close()


def count_rows(database: str) -> int:
    connection = connect(database)
    try:
        return connection.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
    finally:
        connection.close()


class _Store:
    def __init__(self, database: str, *, persistent: bool) -> None:
        self.database = database
        self.persistent = persistent
        self.postgres = is_postgres(database)
        self.local = threading.local()

    def insert(self, webhook_id: str, body: str) -> bool:
        """Insert and commit; False when the webhook id was already stored (a duplicate)."""
        connection = getattr(self.local, "connection", None) if self.persistent else None
        if connection is None:
            connection = connect(self.database)
            if self.persistent:
                self.local.connection = connection
        try:
            return self._insert(connection, webhook_id, body)
        finally:
            if not self.persistent:
                connection.close()

    def _insert(self, connection: Any, webhook_id: str, body: str) -> bool:
        if self.postgres:
            import psycopg

            try:
                with connection.transaction():
                    connection.execute(
                        f"INSERT INTO {TABLE} (webhook_id, body) VALUES (%s, %s)",
                        (webhook_id, body),
                    )
            except psycopg.errors.UniqueViolation:
                return False
            return True
        # IMMEDIATE as Onlooker: writers queue on the lock instead of failing mid-way.
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute(
                f"INSERT INTO {TABLE} (webhook_id, body) VALUES (?, ?)", (webhook_id, body)
            )
            connection.execute("COMMIT")
        except sqlite3.IntegrityError:
            connection.execute("ROLLBACK")
            return False
        except BaseException:
            # Never leave a kept connection inside a transaction: the next push would fail.
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return True


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BarePush:
    def __init__(self, secret: str, database: str, *, persistent: bool = True) -> None:
        self.webhook = Webhook(secret)
        self.store = _Store(database, persistent=persistent)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await _answer(send, 405, {"error": "method not allowed"})
            return
        body = await _read_body(receive)
        raw = dict(scope["headers"])
        headers = {
            name: raw.get(name.encode(), b"").decode("latin-1") for name in SIGNATURE_HEADERS
        }
        try:
            # The same HMAC check as Onlooker's; json_parse stays on, so the body is also
            # parsed as JSON, which any receiver has to do.
            self.webhook.verify(body, headers)
        except Exception as error:  # noqa: BLE001 - any failure means "not verified"
            await _answer(send, 401, {"error": "bad signature", "detail": str(error)})
            return
        stored = await asyncio.to_thread(
            self.store.insert, headers["webhook-id"], body.decode("utf-8")
        )
        await _answer(send, 200, {"outcome": "applied" if stored else "duplicate"})


def _from_environment() -> BarePush | None:
    secret = os.environ.get("BARE_PUSH_SECRET", "")
    database = os.environ.get("BARE_PUSH_DATABASE", "")
    if not (secret and database):
        return None  # imported by the benchmark itself, not served
    mode = os.environ.get("BARE_PUSH_CONNECTION", "persistent")
    return BarePush(secret, database, persistent=mode != "per-request")


application = _from_environment()
