"""PostgreSQL ended every connection (a restart, a failover, an operator): the next page is
served, not a 500. Connections idle in the pool are dead then, and nothing notices until
one is used; the pool checks each before lending it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from django.test import Client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_pool(postgresql_pool) -> Iterator:
    """A pool of this test's own: what earlier tests left in the process's pool (connections
    still lent to their threads, a reconnection backing off) is not what it is about."""
    connection.close()
    connection.close_pool()
    yield connection.pool
    connection.close()
    connection.close_pool()


def end_every_connection() -> int:
    """What a restart does to the test database's connections, this test's own included."""
    params = connection.get_connection_params() | {"autocommit": True}
    with psycopg.connect(**params) as other:
        (ended,) = other.execute(
            # With a timeout it waits for each backend to have ended (the signal alone does
            # not): the test then meets dead connections, not ones about to die.
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return ended


def test_a_page_after_the_database_ended_every_connection_is_served(own_pool, alice):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    assert client.get("/").status_code == 200
    connection.close()  # this thread's connection goes back to the pool, idle with the rest
    assert own_pool.get_stats()["pool_available"] >= 1

    assert end_every_connection() >= 1

    served = [client.get("/").status_code for _ in range(3)]
    assert served == [200, 200, 200], own_pool.get_stats()
