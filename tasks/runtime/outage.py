"""The database is away: say so at once, and notice by itself when it is back.

Without this, on PostgreSQL, a request that met a database that was down waited the pool's
whole timeout before it failed, and so did every request after it; pushes, which share one
thread, waited in turn behind each other (tens of seconds each); and once the database was
back the pool kept failing until its reconnection backoff (doubling, for minutes) let it try
again.

Here the first unit of work whose database error turns out to mean "unreachable" (a direct
connection, tried at once, fails too) marks the database away. From then on every page, API
call, push and socket handshake is answered 503 at once without touching the database
(`is_away`), and a prober thread tries a direct connection every PROBE_EVERY seconds. When
one gets through, the process's pool is replaced by a fresh one, whose first connections
are made now rather than when the old one's backoff ends, and requests are served again.

Each process has its own view of this (the server, its applier process). SQLite is a file
beside the process: it is never away.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from django.db import InterfaceError, OperationalError, connections

log = logging.getLogger(__name__)

PROBE_EVERY = 1.0  # seconds between two connection attempts while the database is away
PROBE_CONNECT_TIMEOUT = 2  # seconds (libpq's smallest connect_timeout)
RETRY_AFTER = 5  # seconds, what a 503 tells clients to wait before asking again

_lock = threading.Lock()
_away_since: float | None = None
_prober: threading.Thread | None = None
_comebacks = 0


def comebacks() -> int:
    """How many times this process saw the database come back: a connection a thread kept
    from before the last one is dead, though nothing has told it yet (connections.py)."""
    return _comebacks


def is_away() -> bool:
    """Whether this process last found the database unreachable (one read, no I/O)."""
    return _away_since is not None


def noticed(error: BaseException) -> bool:
    """Call with the exception a unit of work failed with: True when it means the database
    cannot be reached (it is then away until a probe gets through). Any other error, a
    deadlock or a bad query, is the caller's to report as it would have."""
    # Only these can mean the server is gone: an integrity or programming error came from a
    # server that answered, and needs no connection attempt to say so.
    if not isinstance(error, OperationalError | InterfaceError) or not _pooled():
        return False
    if is_away():
        return True
    with _lock:
        if is_away():  # another thread found out while this one waited
            return True
        if not _reachable():
            _mark_away()
            return True
    if _connection_error(error):
        # Reachable, yet this connection broke or none could be had: the server restarted
        # or ended its connections, and the pool's other idle ones are dead too. Checked
        # now (those that fail are replaced), rather than one by one as they are lent, with
        # a pause that doubles each time.
        with contextlib.suppress(Exception):
            connections["default"].pool.check()
    return False


def _connection_error(error: BaseException) -> bool:
    raw = connections["default"].connection
    return raw is None or getattr(raw, "broken", False)


def _pooled() -> bool:
    return connections["default"].vendor == "postgresql"


def _reachable() -> bool:
    """A connection of its own, apart from the pool (which may be backing off, or full)."""
    import psycopg

    params = connections["default"].get_connection_params()
    params["connect_timeout"] = PROBE_CONNECT_TIMEOUT
    try:
        with psycopg.connect(**params, autocommit=True) as probe:
            probe.execute("SELECT 1")
    except psycopg.Error as error:
        log.debug("database probe failed: %s", error)
        return False
    return True


def _mark_away() -> None:
    global _away_since, _prober
    _away_since = time.monotonic()
    log.warning("the database cannot be reached: answering 503 until it is back")
    if _prober is None or not _prober.is_alive():
        _prober = threading.Thread(target=_probe_until_back, name="onlooker-probe", daemon=True)
        _prober.start()


def _probe_until_back() -> None:
    global _away_since, _comebacks
    while True:
        time.sleep(PROBE_EVERY)
        if not _reachable():
            continue
        # The old pool's connections are dead and its reconnection attempts may be backing
        # off for minutes: a new pool connects now. Connections lent from the old one are
        # closed when their threads hand them back.
        connections["default"].close_pool()
        with _lock:
            away_for = time.monotonic() - (_away_since or time.monotonic())
            _away_since = None
            _comebacks += 1
        log.warning("the database is back after %.1f s", away_for)
        return
