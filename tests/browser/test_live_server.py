"""The harness itself, without a browser: a real Daphne on the test database, reached over
real HTTP with real push credentials and a session cookie made in the test process."""

from __future__ import annotations

import httpx
import pytest

from tasks.models import Session
from tests.builders import status
from tests.conftest import make_agent
from tests.live_server import LiveServer, push_http, session_cookie

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_live_server_shares_the_test_database_and_secret_key(server, alice, ops):
    # The package's shared server (a LiveServer like any other): no start of its own.
    signed, plain = make_agent(signing=True, team=ops), make_agent(team=ops, name="Plain")
    response = push_http(server, signed, status("WORKING", at=1, context="a"))
    assert response.json()["outcome"] == "accepted", server.log()
    assert push_http(server, plain, status("WORKING", at=1, context="b")).status_code == 200
    # Written by the child, read here: the same database.
    assert set(Session.objects.values_list("context_id", flat=True)) == {"a", "b"}
    cookie = session_cookie(alice, server.url)
    page = httpx.get(server.url + "/", cookies={cookie["name"]: cookie["value"]})
    assert page.status_code == 200, server.log()
    assert "data-tile-session" in page.text
    assert httpx.get(server.url + "/").status_code == 302  # no cookie, no page


def test_live_server_restarts_on_the_same_port(db):
    with LiveServer() as server:
        port = server.port
        server.restart()
        assert server.port == port and server.running
        assert httpx.get(server.url + "/healthz").status_code == 200, server.log()
        server.kill()
        assert not server.running
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + "/healthz")
    assert not server.running
