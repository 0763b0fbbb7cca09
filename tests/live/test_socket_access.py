"""Live sockets end when access ends: a logout, a password change, a deactivation, a team
change or a session moving out of reach closes the sockets it concerns within 2 seconds,
while everyone else's keep hearing. Real ASGI app, real logins and logouts, real pushes."""

from __future__ import annotations

import time

import pytest
import time_machine
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.asgi import application
from tasks.live import access
from tasks.models import Session
from tests.builders import status
from tests.conftest import make_agent, member, push

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_channel_layers"),
]
HEADERS = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000")]
PROMISE = 2.0  # seconds: access ends within this


@pytest.fixture
def quick_sweep(monkeypatch):
    """Sweep ten times a second, so these tests wait less; one test keeps the real pace."""
    monkeypatch.setattr(access, "SWEEP_EVERY", 0.1)


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def socket(client: Client, path: str = "/ws/live/") -> WebsocketCommunicator:
    cookie = (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())
    return WebsocketCommunicator(application, path, headers=[*HEADERS, cookie])


async def opened(client: Client, path: str = "/ws/live/") -> WebsocketCommunicator:
    communicator = socket(client, path)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def closed_with(communicator: WebsocketCommunicator) -> tuple[int | None, float]:
    """The close code the server sent, and how long it took."""
    started = time.monotonic()
    output = await communicator.receive_output(timeout=PROMISE + 1)
    assert output["type"] == "websocket.close", output
    return output.get("code"), time.monotonic() - started


async def hears(communicator: WebsocketCommunicator, registered, context: str, at: int) -> bool:
    await sync_to_async(push)(Client(), registered, status("WORKING", at=at, context=context))
    message = await communicator.receive_json_from(timeout=5)
    return message["session"] == await sync_to_async(session_pk)(context)


def session_pk(context: str) -> int:
    return Session.objects.get(context_id=context).pk


def run(scenario):
    return async_to_sync(scenario)()


def test_logout_closes_the_sockets_of_that_login_within_two_seconds(alice, ops):
    """At the real sweep pace. Alice's other login and Bob keep hearing the team."""
    registered = make_agent(team=ops)
    phone, laptop, bob = logged_in(alice), logged_in(alice), logged_in(member("bob", ops))

    async def scenario():
        on_phone, on_laptop, bobs = await opened(phone), await opened(laptop), await opened(bob)
        response = await sync_to_async(laptop.post)("/accounts/logout/")
        assert response.status_code == 302
        code, took = await closed_with(on_laptop)
        heard = [await hears(s, registered, "after", 1) for s in (on_phone, bobs)]
        for communicator in (on_phone, bobs, on_laptop):
            await communicator.disconnect()
        return code, took, heard

    code, took, heard = run(scenario)
    assert code == access.CLOSE_LOGGED_OUT
    assert took < PROMISE
    assert heard == [True, True]


@pytest.mark.usefixtures("quick_sweep")
def test_a_closed_socket_hears_nothing_of_the_team_afterwards(alice, ops):
    registered = make_agent(team=ops)
    client = logged_in(alice)

    async def scenario():
        communicator = await opened(client)
        await sync_to_async(client.post)("/accounts/logout/")
        code, _ = await closed_with(communicator)
        await sync_to_async(push)(Client(), registered, status("WORKING", at=1, context="x"))
        nothing = await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return code, nothing

    assert run(scenario) == (access.CLOSE_LOGGED_OUT, True)


@pytest.mark.usefixtures("quick_sweep")
def test_removal_from_the_team_closes_sockets_and_a_reconnect_joins_only_what_is_left(alice, ops):
    registered = make_agent(team=ops)
    open_agent = make_agent(name="Open")
    client, bob = logged_in(alice), logged_in(member("bob", ops))

    async def scenario():
        alices, bobs = await opened(client), await opened(bob)
        await sync_to_async(alice.groups.remove)(ops)
        code, took = await closed_with(alices)
        bob_hears = await hears(bobs, registered, "team", 1)
        # The page reconnects at once: admitted, but to everyone's sessions only.
        again = await opened(client)
        await sync_to_async(push)(Client(), registered, status("WORKING", at=2, context="team"))
        team_heard = not await again.receive_nothing(timeout=0.3)
        open_heard = await hears(again, open_agent, "open", 1)
        for communicator in (alices, bobs, again):
            await communicator.disconnect()
        return code, took, bob_hears, team_heard, open_heard

    code, took, bob_hears, team_heard, open_heard = run(scenario)
    assert (code, bob_hears, team_heard, open_heard) == (
        access.CLOSE_ACCESS_CHANGED,
        True,
        False,
        True,
    )
    assert took < PROMISE


@pytest.mark.usefixtures("quick_sweep")
def test_deactivation_closes_every_socket_of_the_user(alice, ops):
    registered = make_agent(team=ops)
    logins = [logged_in(alice), logged_in(alice), logged_in(member("bob", ops))]

    async def scenario():
        first, second, bobs = [await opened(login) for login in logins]
        alice.is_active = False
        await sync_to_async(alice.save)(update_fields=["is_active"])
        codes = [(await closed_with(s))[0] for s in (first, second)]
        bob_hears = await hears(bobs, registered, "team", 1)
        for communicator in (first, second, bobs):
            await communicator.disconnect()
        return codes, bob_hears

    codes, bob_hears = run(scenario)
    assert codes == [access.CLOSE_LOGGED_OUT] * 2
    assert bob_hears


@pytest.mark.usefixtures("quick_sweep")
def test_a_password_change_ends_every_socket_and_only_the_changing_login_reconnects(alice, ops):
    """Django's rule: the login that changed the password stays logged in under a new session
    key (its cookie is replaced), every other login of the user is logged out."""
    registered = make_agent(team=ops)
    alice.set_password("first correct horse battery")
    alice.save()
    here, elsewhere = logged_in(alice), logged_in(alice)

    async def scenario():
        changing, other = await opened(here), await opened(elsewhere)
        response = await sync_to_async(here.post)(
            "/accounts/password_change/",
            {
                "old_password": "first correct horse battery",
                "new_password1": "second staple orbit lantern",
                "new_password2": "second staple orbit lantern",
            },
        )
        assert response.status_code == 302, response.content[:500]
        codes = [(await closed_with(s))[0] for s in (changing, other)]
        again = await opened(here)
        still_hears = await hears(again, registered, "team", 1)
        refused = await socket(elsewhere).connect()
        for communicator in (changing, other, again):
            await communicator.disconnect()
        return codes, still_hears, refused

    codes, still_hears, refused = run(scenario)
    assert codes == [access.CLOSE_LOGGED_OUT] * 2
    assert still_hears
    assert refused == (False, access.CLOSE_LOGGED_OUT)


@pytest.mark.usefixtures("quick_sweep")
def test_a_session_page_closes_when_its_session_moves_out_of_reach(alice, ops):
    registered = make_agent(team=ops)
    ops_agent = make_agent(team=ops, name="Other")
    push(Client(), registered, status("WORKING", at=1, context="moving"))
    page = f"/ws/live/?session={session_pk('moving')}"
    client = logged_in(alice)

    async def scenario():
        on_page, overview = await opened(client, page), await opened(client)
        # The agent moves to a team Alice is not on: her session page loses its session.
        registered.agent.team = await sync_to_async(Group.objects.create)(name="elsewhere")
        await sync_to_async(registered.agent.save)(update_fields=["team"])
        code, took = await closed_with(on_page)
        # Her overview's access did not change: it stays open through sweeps, and hears.
        stays = await overview.receive_nothing(timeout=0.3)
        overview_hears = stays and await hears(overview, ops_agent, "still-ops", 1)
        for communicator in (on_page, overview):
            await communicator.disconnect()
        return code, took, overview_hears

    code, took, overview_hears = run(scenario)
    assert (code, overview_hears) == (access.CLOSE_ACCESS_CHANGED, True)
    assert took < PROMISE


@pytest.mark.usefixtures("quick_sweep")
def test_an_expired_login_closes_its_sockets(alice):
    client = logged_in(alice)

    async def scenario():
        communicator = await opened(client)
        later = time.time() + settings.SESSION_COOKIE_AGE + 60
        with time_machine.travel(later, tick=True):
            code, _ = await closed_with(communicator)
        await communicator.disconnect()
        return code

    assert run(scenario) == access.CLOSE_LOGGED_OUT


def test_one_sweep_checks_many_sockets_in_the_same_few_queries(ops):
    """The sweep's cost does not grow with the sockets: 5 or 60 of them, of 30 people (one a
    superuser), half on session pages, take the same number of queries."""
    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1, context="page"))
    page = session_pk("page")
    people = [member(f"person{n}", ops) for n in range(29)]
    people.append(User.objects.create_superuser("root"))
    sockets = []
    for n in range(60):
        person = people[n % len(people)]
        key = logged_in(person).cookies["sessionid"].value
        groups = frozenset(["team.all", f"team.{ops.pk}"] + ([f"session.{page}"] * (n % 2)))
        sockets.append(access.Watched(person.pk, key, page if n % 2 else None, groups, revoke=None))

    def queries(watched: list[access.Watched]) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert access.verdicts(watched) == {}
        return len(captured.captured_queries)

    assert queries(sockets[25:30]) == queries(sockets) <= 5
