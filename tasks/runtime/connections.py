"""Database connections of the process's long-lived threads (the push receiver, the applier,
the notification sender).

Django closes a connection when a unit of work ends (a request, `close_old_connections`): on
PostgreSQL, with CONN_MAX_AGE=0, that hands it back to the pool, and the next unit takes one
again. That suits a view's thread, which is its request's. A thread that does one small unit
after another (a push, a batch of one push) would pay for the pool every time: a sixth of a
push's CPU on the receiver, a millisecond on a lone push's way to the browser. Such a thread
keeps its connection and replaces it only once an error has left it unusable.
"""

from __future__ import annotations

import threading

from django.db import DatabaseError, connection, connections

from tasks.runtime import outage

# The outage.comebacks() this thread's connection was last seen in.
_seen = threading.local()


def keep_unless_broken() -> None:
    """Call between two units of work on a long-lived thread: keep this thread's connection,
    unless an error (the server restarted, ended the connection) has left it unusable, or a
    unit left it outside autocommit, or the database went away and came back since (a
    connection kept idle through an outage that another thread noticed was never told it
    broke); the next query then connects again."""
    comebacks = outage.comebacks()
    seen, _seen.comebacks = getattr(_seen, "comebacks", comebacks), comebacks
    if connection.connection is None:
        return
    if seen != comebacks:
        connection.close()
        return
    if connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
        connection.close()
        return
    if connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
            return
        connection.errors_occurred = False


def close_this_thread_s() -> None:
    """A long-lived thread is ending: hand its connections back (nothing else would)."""
    connections.close_all()


def lost(error: BaseException) -> bool:
    """Whether `error` came from this thread's connection breaking (the server restarted or
    ended it while it was kept idle) or from getting one: the next unit connects again, and
    there is nothing in the code to show a traceback for."""
    raw = connection.connection
    return isinstance(error, DatabaseError) and (raw is None or getattr(raw, "broken", False))
