"""One SQLite writer at a time, across the threads and processes of one database.

The applier's batches, the notification sender's writes and the receiver's (on the spool
file, pushes/spool.py) take turns here, where a waiter wakes the moment the other is done, rather
than in SQLite's busy handler, which sleeps in growing steps (up to 100 ms at a time).
Threads of a process take turns on a lock, processes (a server and its applier process) on
a lock file beside the database file. PostgreSQL writers never wait for each other this
way: `writing()` is then nothing."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from django.db import connection

try:
    import fcntl
except ImportError:  # not on Windows: processes there take turns in SQLite's busy handler
    fcntl = None

_threads: dict[str, threading.Lock] = {}  # database file → its writers' lock in this process
_lock_files: dict[str, IO[bytes] | None] = {}


@contextmanager
def writing(database: str | None = None) -> Iterator[None]:
    """Be the one writer of `database` (a SQLite file; by default the default connection's
    database, and nothing at all on PostgreSQL) until the block ends."""
    if database is None:
        if connection.vendor != "sqlite":
            yield
            return
        database = str(connection.settings_dict["NAME"])
    with _threads.setdefault(database, threading.Lock()):
        lock_file = _lock_file(database)
        if lock_file is None:
            yield
            return
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _lock_file(database: str) -> IO[bytes] | None:
    """The database's lock file, opened once per process; None for a database in memory
    (one process only) or where there are no file locks. Call holding its thread lock."""
    if database not in _lock_files:
        opened = None
        if fcntl is not None and os.path.isfile(database):
            opened = open(f"{database}-writer", "ab")  # noqa: SIM115 - open for the process
        _lock_files[database] = opened
    return _lock_files[database]
