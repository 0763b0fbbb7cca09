"""PostgreSQL goes away under a running Onlooker (a proxy in front of it is taken away: every
connection reset, new ones refused) and comes back: every page, API call and push is
answered 503 within seconds, none of them hangs or queues behind another, a socket's
handshake is refused cleanly, and everything is served again by itself once it is back."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from django.db import connection
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tasks.models import Delivery
from tasks.web.unavailable import CLOSE_TRY_AGAIN_LATER
from tests.builders import status
from tests.conftest import RegisteredAgent, encode, make_agent
from tests.live_server import LiveServer, child_database_url, session_cookie, wait_applied
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.django_db(transaction=True)

# What "fail fast" means here: the first requests wait for the pool (5 s) before the
# outage is known; everything after it is answered at once.
FIRST_ANSWER_WITHIN = 8.0  # seconds
KNOWN_ANSWER_WITHIN = 0.5
BACK_WITHIN = 5.0  # seconds after the database returns


@pytest.fixture
def proxied_server() -> Iterator[tuple[LiveServer, TcpProxy]]:
    if connection.vendor != "postgresql":
        pytest.skip("an outage of a database server: SQLite is a file beside the process")
    params = connection.settings_dict
    target = (params["HOST"] or "127.0.0.1", int(params["PORT"] or 5432))
    with TcpProxy(target) as proxy:
        url = urlsplit(child_database_url())
        credentials, at, _ = url.netloc.rpartition("@")
        netloc = f"{credentials}{at}127.0.0.1:{proxy.port}"
        with LiveServer(database_url=urlunsplit(url._replace(netloc=netloc))) as server:
            yield server, proxy


def push(server: LiveServer, registered: RegisteredAgent, n: int) -> httpx.Response:
    body = encode(status("WORKING", task=f"away-{n}", context=f"away-{n}", at=n))
    return httpx.post(
        server.url + registered.path,
        content=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {registered.bearer}",
        },
        timeout=30,
    )


def logged_in(server: LiveServer, cookie: dict) -> httpx.Client:
    return httpx.Client(base_url=server.url, cookies={cookie["name"]: cookie["value"]}, timeout=30)


def bring_back(proxy: TcpProxy, browser: httpx.Client) -> None:
    """The database returns: until pages are served again, within BACK_WITHIN."""
    proxy.bring_back()
    deadline = time.monotonic() + BACK_WITHIN
    while browser.get("/").status_code != 200:
        assert time.monotonic() < deadline, "pages are not served again"
        time.sleep(0.1)


def timed(call) -> tuple[float, httpx.Response | Exception]:
    started = time.monotonic()
    try:
        result = call()
    except Exception as error:  # noqa: BLE001 - what the client saw is the finding
        result = error
    return time.monotonic() - started, result


async def handshake(server: LiveServer, cookie: dict) -> int | None:
    """The close code the server answered a socket with, or None if it stayed open."""
    async with connect(
        f"{server.ws_url}/ws/live/",
        origin=server.url,
        additional_headers={"Cookie": f"{cookie['name']}={cookie['value']}"},
        open_timeout=10,
    ) as ws:
        try:
            await asyncio.wait_for(ws.recv(), timeout=1.0)
        except ConnectionClosed:
            return ws.close_code
        except TimeoutError:
            return None
    return None


def test_with_the_database_away_everything_is_a_quick_503_and_comes_back_by_itself(
    proxied_server, alice, ops
):
    server, proxy = proxied_server
    registered = make_agent(team=ops)
    cookie = session_cookie(alice, server.url)
    browser = logged_in(server, cookie)
    assert push(server, registered, 0).status_code == 200
    assert browser.get("/").status_code == 200

    logged_before = len(server.log())
    proxy.take_away()
    calls = {f"push {n}": (lambda n=n: push(server, registered, n)) for n in range(1, 9)}
    calls["page"] = lambda: browser.get("/")
    calls["api"] = lambda: browser.get("/api/sessions")
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        answers = dict(zip(calls, pool.map(timed, calls.values()), strict=True))
    for name, (seconds, response) in answers.items():
        assert isinstance(response, httpx.Response), (name, response)
        assert response.status_code == 503, (name, response.status_code, response.text[:200])
        assert seconds < FIRST_ANSWER_WITHIN, (name, seconds)
        assert response.headers["Retry-After"].isdigit(), name
    assert answers["page"][1].headers["Content-Type"].startswith("text/html")
    assert "cannot reach its database" in answers["page"][1].text
    assert answers["api"][1].json()["error"] == "unavailable"
    assert answers["push 1"][1].json()["error"] == "not stored"

    # Known to be away: answered at once, a socket refused with "try again later".
    for name, call in [("page", calls["page"]), ("api", calls["api"]), ("push", calls["push 1"])]:
        seconds, response = timed(call)
        assert response.status_code == 503 and seconds < KNOWN_ANSWER_WITHIN, (name, seconds)
    health = browser.get("/healthz")
    assert (health.status_code, health.json()["down"]) == (503, ["database"])
    assert asyncio.run(handshake(server, cookie)) == CLOSE_TRY_AGAIN_LATER

    bring_back(proxy, browser)
    back = push(server, registered, 20)
    assert back.status_code == 200, back.text
    wait_applied(back.json()["delivery"], timeout=BACK_WITHIN)
    assert browser.get("/api/sessions").status_code == 200
    assert asyncio.run(handshake(server, cookie)) is None  # open, live again
    # Nothing refused was kept: only the pushes answered 200.
    assert Delivery.objects.filter(agent=registered.agent).count() == 2
    # An outage is a few lines in the log, not a traceback per request.
    assert "Traceback" not in server.log()[logged_before:]


def test_a_push_kept_idle_through_an_outage_a_page_noticed_is_kept_once_it_is_back(
    proxied_server, alice, ops
):
    """Pushes keep their thread's connection between them. When a page, not a push, is what
    finds the database away, that connection is never used while it is away (pushes are
    refused before it), so nothing tells it it broke: the first push once the database is
    back must not be the one to find out."""
    server, proxy = proxied_server
    registered = make_agent(team=ops)
    cookie = session_cookie(alice, server.url)
    browser = logged_in(server, cookie)
    assert push(server, registered, 0).status_code == 200

    proxy.take_away()
    assert browser.get("/").status_code == 503
    bring_back(proxy, browser)
    back = push(server, registered, 1)
    assert back.status_code == 200, back.text
    wait_applied(back.json()["delivery"], timeout=BACK_WITHIN)
