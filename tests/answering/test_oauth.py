"""OAuth 2.0 where the agent's card declares it (issue 32 item 2): "Connect" runs the
authorization code flow with PKCE against a REAL authorization server on loopback (Authlib's
server side, tests/peers/oauth_server.py) whose issued access tokens are exactly what the
a2a-sdk subject peer accepts (tests/peers/subject_agent.py). The browser's part is played by
httpx following Onlooker's redirect (the server approves alice without a login page), and
the callback is called through the Django test client. Onlooker runs as pytest-django's live
server so the agent's pushes arrive."""

from __future__ import annotations

import html
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from tasks.answering import oauth
from tasks.models import Agent, Interaction, PersonalCredential, Task
from tests.answering.test_a2a_peer import add_agent, onlooker, wait_for  # noqa: F401 - fixture
from tests.conftest import member
from tests.peers.oauth_server import OAuthServer
from tests.peers.subject_agent import Call, SubjectAgent
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_ID, CLIENT_SECRET = "onlooker-client", "onlooker-client-secret"


@dataclass
class World:
    server: OAuthServer
    peer: SubjectAgent
    agent: Agent


@pytest.fixture
def start_world(onlooker) -> Iterator:  # noqa: F811 - a fixture imported from test_a2a_peer
    started: list = []

    def start(*, revocable: bool = False, access_seconds: int = 3600) -> World:
        tokens: dict[str, str] = {}
        server = OAuthServer(
            free_port(),
            subjects=tokens,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            redirect_uri=oauth.redirect_uri(),
            access_seconds=access_seconds,
        )
        started.append(server)
        peer = SubjectAgent(free_port(), tokens=tokens, scheme="oauth2", oauth_urls=server.urls)
        started.append(peer)
        card_url, options = peer.card_url, []
        if revocable:  # the same card, served with a revocation URL beside its token URL
            server.serve_card(peer.card_url)
            card_url, options = server.card_url, ["--allow-other-rpc-origin"]
        registration = add_agent(
            card_url,
            *options,
            "--team", "ops", "--per-person",
            "--oauth-client-id", CLIENT_ID, "--oauth-client-secret", CLIENT_SECRET,
        )  # fmt: skip
        return World(server, peer, Agent.objects.get(pk=registration["agent"]))

    yield start
    for running in reversed(started):
        running.stop()


@pytest.fixture
def alice(ops, approvers) -> Client:
    client = Client()
    client.force_login(member("alice", ops, approvers))
    return client


def authorize(client: Client, world: World) -> dict[str, str]:
    """Press Connect, and follow the redirect as the browser would: the authorization
    server approves alice and sends her back with `code` and `state`."""
    pressed = client.post(f"/oauth/{world.agent.pk}/connect/")
    assert pressed.status_code == 200, pressed.content
    assert pressed["Referrer-Policy"] == "no-referrer" and "no-store" in pressed["Cache-Control"]
    [url] = re.findall(r'href="([^"]+)" data-oauth-authorize', pressed.content.decode())
    url = html.unescape(url)
    assert f'content="0; url={html.escape(url)}"' in pressed.content.decode()  # goes on itself
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and query["scope"] == ["agent"]
    sent_to = httpx.get(url, follow_redirects=False, trust_env=False)
    assert sent_to.status_code == 302, sent_to.text
    back = urlsplit(sent_to.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == oauth.redirect_uri()
    return {key: values[0] for key, values in parse_qs(back.query).items()}


def callback(client: Client, params: dict[str, str]):
    return client.get("/oauth/callback/?" + urlencode(params))


def connect(client: Client, world: World) -> PersonalCredential:
    answer = callback(client, authorize(client, world))
    assert answer.status_code == 302 and answer["Location"] == "/settings/", answer.content
    return PersonalCredential.objects.get(agent=world.agent)


def start_session(client: Client, agent: Agent) -> int:
    form = {"agent": str(agent.pk), "text": "Write the notes", "message_id": uuid.uuid4().hex}
    response = client.post("/sessions/new/", form, HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content
    return response.json()["session"]


def approval_waiting(session_pk: int) -> Interaction:
    return wait_for(
        lambda: Interaction.objects.filter(task__session_id=session_pk, state="open").first(),
        "the agent to ask for an approval",
    )


def approve(client: Client, interaction: Interaction) -> None:
    response = client.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": "approve"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200, response.content


def stored_secret_column(credential: PersonalCredential) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT secret, refresh_token FROM tasks_personalcredential WHERE id = %s",
            [credential.pk],
        )
        return " ".join(cursor.fetchone())


def nothing_stored() -> bool:
    return not PersonalCredential.objects.exists()


# -- connecting, and calling with the token -------------------------------------------------


def test_connect_stores_sealed_tokens_and_alices_approve_carries_the_issued_token(
    start_world, alice
):
    world = start_world()
    credential = connect(alice, world)

    [issued] = world.server.live_access_tokens()
    assert credential.kind == "oauth"
    assert credential.secret == issued and credential.refresh_token.startswith("rt-")
    assert credential.scope == "agent"
    assert credential.expires_at > datetime.now(UTC) + timedelta(minutes=59)
    raw = stored_secret_column(credential)
    assert issued not in raw and credential.refresh_token not in raw  # sealed at rest
    assert world.server.grants == ["authorization_code"]

    session = start_session(alice, world.agent)
    approve(alice, approval_waiting(session))
    assert world.peer.calls_of("SendMessage")[-1] == Call(
        "SendMessage", f"Bearer {issued}", "alice"
    )
    wait_for(
        lambda: Task.objects.filter(session_id=session, state="TASK_STATE_COMPLETED").exists(),
        "the task to complete",
    )


def test_a_token_past_its_expiry_is_refreshed_before_the_next_call(start_world, alice):
    world = start_world()
    first = connect(alice, world).secret
    start_session(alice, world.agent)
    assert world.peer.calls_of("SendMessage")[-1].credential == f"Bearer {first}"

    with time_machine.travel(datetime.now(UTC) + timedelta(hours=2), tick=True):
        start_session(alice, world.agent)

    assert world.server.grants == ["authorization_code", "refresh_token"]
    [renewed] = world.server.live_access_tokens()
    assert renewed != first and first not in world.peer.tokens  # the old one is gone
    assert world.peer.calls_of("SendMessage")[-1] == Call(
        "SendMessage", f"Bearer {renewed}", "alice"
    )
    credential = PersonalCredential.objects.get()
    assert credential.secret == renewed
    assert credential.expires_at > datetime.now(UTC) + timedelta(hours=2, minutes=59)


def test_two_calls_at_once_refresh_once(start_world, alice, ops, approvers):
    """With rotating refresh tokens a second refresh would present a used one and lose the
    connection: the claim makes the second call wait and use the first one's token."""
    world = start_world()
    connect(alice, world)
    second = Client()
    second.force_login(User.objects.get(username="alice"))
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def start(client: Client) -> None:
        try:
            barrier.wait(timeout=5)
            start_session(client, world.agent)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            failures.append(error)
        finally:
            connection.close()

    with time_machine.travel(datetime.now(UTC) + timedelta(hours=2), tick=True):
        threads = [threading.Thread(target=start, args=(c,)) for c in (alice, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    assert failures == []
    assert world.server.grants == ["authorization_code", "refresh_token"]
    [renewed] = world.server.live_access_tokens()
    sent = [call.credential for call in world.peer.calls_of("SendMessage")]
    assert sent == [f"Bearer {renewed}"] * 2


def forget_grant(world) -> None:
    """The authorization server forgets her grant: her next refresh is refused."""
    for token in world.server.tokens:
        world.server.revoke(token)


def start_session_refused(client, world):
    return client.post(
        "/sessions/new/",
        {"agent": str(world.agent.pk), "text": "Go", "message_id": uuid.uuid4().hex},
        HTTP_ACCEPT="application/json",
    )


def test_a_refresh_the_server_refuses_leaves_the_row_for_reconnect(start_world, alice):
    world = start_world()
    credential = connect(alice, world)
    forget_grant(world)
    mark = len(world.peer.calls)

    with time_machine.travel(datetime.now(UTC) + timedelta(hours=2), tick=True):
        refused = start_session_refused(alice, world)
        assert refused.status_code == 403  # per-person: nothing goes with another's token
        assert world.peer.calls[mark:] == []
        credential.refresh_from_db()
        assert credential.refresh_token == "" and oauth.needs_reconnect(credential)
        page = alice.get("/settings/").content.decode()
        assert "Reconnect</button>" in page and "could not be renewed" in page

        renewed = connect(alice, world)  # Reconnect runs the flow again, on the same row
        assert renewed.pk == credential.pk and not oauth.needs_reconnect(renewed)
        assert renewed.secret in world.server.live_access_tokens()
        start_session(alice, world.agent)
    assert world.peer.calls_of("SendMessage")[-1].credential == f"Bearer {renewed.secret}"


# -- what the callback refuses -----------------------------------------------------------------


def test_a_tampered_state_is_refused_and_nothing_is_stored(start_world, alice):
    world = start_world()
    params = authorize(alice, world)
    params["state"] = params["state"][:-2] + ("AA" if not params["state"].endswith("AA") else "BB")

    answer = callback(alice, params)

    assert answer.status_code == 400
    assert "unknown, already used or altered" in answer.content.decode()
    assert answer["Referrer-Policy"] == "strict-origin"
    assert nothing_stored() and world.server.grants == []  # the code was never sent


# As they come on the wire: non-ASCII, a UTF-8-encoded lone surrogate, a byte that is no
# UTF-8, far too long.
@pytest.mark.parametrize("state", ["%C3%A9" * 43, "%ED%A0%80", "%FF", "x" * 10_000])
def test_a_state_no_ascii_or_far_too_long_is_refused_not_a_server_error(start_world, alice, state):
    world = start_world()
    params = authorize(alice, world)
    del params["state"]
    answer = alice.get(f"/oauth/callback/?{urlencode(params)}&state={state}")
    assert answer.status_code == 400
    assert "unknown, already used or altered" in answer.content.decode()
    assert nothing_stored() and world.server.grants == []


def test_a_missing_state_is_refused(start_world, alice):
    world = start_world()
    params = authorize(alice, world)
    del params["state"]
    answer = callback(alice, params)
    assert answer.status_code == 400 and "without its state" in answer.content.decode()
    assert nothing_stored()


def test_a_state_is_used_once(start_world, alice):
    world = start_world()
    params = authorize(alice, world)
    assert callback(alice, params).status_code == 302
    PersonalCredential.objects.all().delete()

    again = callback(alice, params)

    assert again.status_code == 400 and "already used" in again.content.decode()
    assert nothing_stored() and world.server.grants == ["authorization_code"]


def test_a_replayed_code_is_refused_with_the_servers_words(start_world, alice):
    world = start_world()
    params = authorize(alice, world)
    assert callback(alice, params).status_code == 302
    PersonalCredential.objects.all().delete()
    # The same code, under a fresh state of alice's own: only the server can refuse it.
    fresh = authorize(alice, world)

    answer = callback(alice, {"state": fresh["state"], "code": params["code"]})

    assert answer.status_code == 400
    assert "authorization server refused: Invalid &#x27;code&#x27; in request." in (
        answer.content.decode()
    )
    assert nothing_stored()
    assert world.server.grants == ["authorization_code", "authorization_code"]


def test_a_state_started_by_someone_else_is_refused(start_world, alice, ops, approvers):
    world = start_world()
    params = authorize(alice, world)
    bob = Client()
    bob.force_login(member("bob", ops, approvers))
    assert callback(bob, params).status_code == 400
    assert nothing_stored()


def test_a_person_whose_permission_was_taken_meanwhile_is_refused(start_world, alice, approvers):
    world = start_world()
    params = authorize(alice, world)
    approvers.user_set.clear()
    answer = callback(alice, params)
    assert answer.status_code == 403 and "permission to answer" in answer.content.decode()
    assert nothing_stored() and world.server.grants == []


def test_an_expired_state_is_refused(start_world, alice):
    world = start_world()
    params = authorize(alice, world)
    with time_machine.travel(datetime.now(UTC) + timedelta(minutes=11), tick=True):
        answer = callback(alice, params)
    assert answer.status_code == 400 and "has expired" in answer.content.decode()
    assert nothing_stored() and world.server.grants == []


def test_a_person_who_declines_is_told_and_nothing_is_stored(start_world, alice):
    world = start_world()
    world.server.approve = False
    params = authorize(alice, world)
    assert params["error"] == "access_denied" and "code" not in params

    answer = callback(alice, params)

    assert answer.status_code == 400
    assert "You did not allow Onlooker to act for you at" in answer.content.decode()
    assert nothing_stored()


def test_started_connects_are_bounded_per_session(start_world, alice):
    world = start_world()
    states = [authorize(alice, world) for _ in range(oauth.MAX_PENDING + 2)]
    assert callback(alice, states[0]).status_code == 400  # the oldest were dropped
    assert callback(alice, states[-1]).status_code == 302


# -- who may connect ---------------------------------------------------------------------------


def test_connect_is_refused_without_the_answer_permission_or_a_client(start_world, alice, ops):
    world = start_world()
    viewer = Client()
    viewer.force_login(member("viewer", ops))
    assert viewer.post(f"/oauth/{world.agent.pk}/connect/").status_code == 403
    assert alice.post("/oauth/999999/connect/").status_code == 404
    assert alice.get(f"/oauth/{world.agent.pk}/connect/").status_code == 405

    Agent.objects.filter(pk=world.agent.pk).update(oauth_client_id="")
    refused = alice.post(f"/oauth/{world.agent.pk}/connect/")
    assert refused.status_code == 400 and "not registered yet" in refused.content.decode()

    Agent.objects.filter(pk=world.agent.pk).update(auth_scheme={"kind": "bearer"})
    refused = alice.post(f"/oauth/{world.agent.pk}/connect/")
    assert refused.status_code == 400 and "does not declare OAuth 2.0" in refused.content.decode()


def test_an_agent_of_another_team_cannot_be_connected(start_world, approvers):
    world = start_world()
    outsider = Client()
    outsider.force_login(member("outsider", approvers))
    assert outsider.post(f"/oauth/{world.agent.pk}/connect/").status_code == 404


# -- disconnecting ------------------------------------------------------------------------------


def test_disconnect_revokes_at_the_server_and_the_agent_refuses_the_token(start_world, alice):
    world = start_world(revocable=True)
    assert world.agent.auth_scheme["revocation_url"] == world.server.revocation_url
    credential = connect(alice, world)
    issued, refresh = credential.secret, credential.refresh_token
    assert world.peer.tokens == {issued: "alice"}

    answer = alice.post(f"/oauth/{world.agent.pk}/disconnect/")

    assert answer.status_code == 302 and answer["Location"] == "/settings/"
    assert set(world.server.revoked) == {issued, refresh}
    assert world.peer.tokens == {}
    refused = httpx.post(
        world.peer.rpc_url,
        json={"jsonrpc": "2.0", "id": "1", "method": "ListTasks", "params": {}},
        headers={"Authorization": f"Bearer {issued}", "A2A-Version": "1.0"},
        trust_env=False,
    )
    assert refused.status_code == 401
    assert nothing_stored()


def test_disconnect_without_a_revocation_url_forgets_the_tokens(start_world, alice):
    world = start_world()
    connect(alice, world)
    assert alice.post(f"/oauth/{world.agent.pk}/disconnect/").status_code == 302
    assert world.server.revoked == [] and nothing_stored()
    page = alice.get("/settings/").content.decode()
    assert "data-oauth-connect>" in page and "data-oauth-disconnect" not in page
    assert "Disconnected from Approval peer" in page


def test_the_settings_page_shows_the_connection_and_never_a_token(start_world, alice):
    world = start_world()
    before = alice.get("/settings/").content.decode()
    assert "data-credential-state>Not connected<" in before
    credential = connect(alice, world)
    page = alice.get("/settings/").content.decode()
    assert "Connected to" in page  # the message after the callback
    assert "data-credential-state>Connected<" in page  # when, once: in "Connected since"
    assert "Connected since" in page and "data-oauth-disconnect" in page
    assert "data-oauth-connect>" not in page
    assert credential.secret not in page and credential.refresh_token not in page


def test_the_redirect_uri_is_onlookers_public_callback():
    assert oauth.redirect_uri() == settings.ONLOOKER_PUBLIC_URL.rstrip("/") + "/oauth/callback/"


def test_a_connection_that_cannot_be_renewed_sends_nothing_rather_than_the_shared_credential(
    start_world, alice
):
    """Without per-person, a person with no credential goes with the shared one; a person
    whose own connection cannot be renewed must not: that would act as someone else."""
    world = start_world()
    connect(alice, world)
    Agent.objects.filter(pk=world.agent.pk).update(per_person=False)
    forget_grant(world)
    mark = len(world.peer.calls)

    with time_machine.travel(datetime.now(UTC) + timedelta(hours=2), tick=True):
        refused = start_session_refused(alice, world)
    assert refused.status_code == 403
    assert "could not be renewed just now: nothing was sent" in refused.json()["detail"]
    assert "disconnect it to act with the shared one" in refused.json()["detail"]
    assert world.peer.calls[mark:] == []
