"""An authorization server that misbehaves cannot hurt Onlooker: whatever its token endpoint
answers (too much, too slowly, not JSON, an error in markup, a redirect, a token that is not
a bearer token or could not go in a header), the callback is a 400 page saying what went
wrong, in plain words, and nothing is stored; a refresh it cannot answer keeps the
connection for the next try. A scriptable token endpoint on loopback (Starlette in a thread)."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tasks.answering import oauth
from tasks.models import Agent, PersonalCredential
from tests.conftest import member
from tests.peers.approval_agent import ServedInThread
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_SECRET = "client-secret-9f2c"


class TokenEndpoint:
    """POST /token answers `reply` (status, body bytes, headers) after `delay` seconds."""

    def __init__(self) -> None:
        self.port = free_port()
        self.reply: tuple[int, bytes, dict[str, str]] = (200, b"{}", {})
        self.delay = 0.0
        self.requests = 0
        self.url = f"http://127.0.0.1:{self.port}/token"
        self._served = ServedInThread(
            Starlette(routes=[Route("/token", self._token, methods=["POST"])]), self.port
        )

    def answer(self, body: object, status: int = 200, **headers: str) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.reply = (status, raw, {"content-type": "application/json", **headers})

    async def _token(self, request: Request) -> Response:
        self.requests += 1
        await request.body()
        if self.delay:
            await asyncio.sleep(self.delay)
        status, body, headers = self.reply
        return Response(body, status_code=status, headers=headers)

    def stop(self) -> None:
        self._served.stop()


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    served = TokenEndpoint()
    yield served
    served.stop()


@pytest.fixture
def agent(endpoint) -> Agent:
    return Agent.objects.create(
        name="ops-bot",
        card_url="http://127.0.0.1:9/.well-known/agent-card.json",
        rpc_url="http://127.0.0.1:9/a2a/jsonrpc",
        protocol_version="1.0",
        per_person=True,
        oauth_client_id="onlooker",
        oauth_client_secret=CLIENT_SECRET,
        auth_scheme={
            "kind": "oauth2",
            "authorization_url": "http://127.0.0.1:9/authorize",
            "token_url": endpoint.url,
            "refresh_url": endpoint.url,
            "revocation_url": "",
            "scopes": ["agent"],
        },
    )


@pytest.fixture
def alice(approvers) -> Client:
    client = Client()
    client.force_login(member("alice", approvers))
    return client


def callback_with_a_code(client: Client, agent: Agent):
    page = client.post(f"/oauth/{agent.pk}/connect/").content.decode()
    [url] = re.findall(r'href="([^"]+)" data-oauth-authorize', page)
    state = parse_qs(urlsplit(html.unescape(url)).query)["state"][0]
    return client.get("/oauth/callback/", {"state": state, "code": "a-code"})


GOOD = {"access_token": "at-1", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "r"}


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (
            (200, {"access_token": "a" * 70_000, "token_type": "Bearer"}),
            "ops-bot’s authorization server answered more than 64 KiB: not a token.",
        ),
        ((200, b"<html>hello</html>"), "did not answer a token Onlooker can read"),
        ((500, b"oops"), "answered HTTP 500; try again later"),
        ((302, b""), "answered HTTP 302"),
        (
            (400, {"error": "invalid_grant", "error_description": "<b>bad</b>\x1b[31m code\u202e"}),
            "refused: bad code",
        ),
        ((400, {"error": "invalid_client"}), "refused: invalid_client"),
        (
            (400, {"error": "invalid_grant", "error_description": f"{CLIENT_SECRET}/a-code?"}),
            "refused: …/…?",
        ),
        ((200, {**GOOD, "token_type": "mac"}), "sent no usable bearer token"),
        ((200, {**GOOD, "access_token": "two words"}), "sent no usable bearer token"),
        ((200, {**GOOD, "access_token": "x" * 5000}), "sent no usable bearer token"),
        ((200, {**GOOD, "access_token": 12345}), "sent no usable bearer token"),
        ((200, {"token_type": "Bearer"}), "sent no usable bearer token"),
        ((200, [GOOD]), "did not answer a token Onlooker can read"),
        ((200, {**GOOD, "expires_in": "soon"}), "did not answer a token Onlooker can read"),
    ],
)
def test_a_bad_token_reply_is_a_clear_400_and_nothing_is_stored(
    endpoint, agent, alice, reply, said
):
    status, body = reply
    endpoint.answer(body, status, **({"location": "http://127.0.0.1:9/"} if status == 302 else {}))

    answer = callback_with_a_code(alice, agent)

    assert answer.status_code == 400
    shown = html.unescape(answer.content.decode())
    assert said.replace("’", "'") in shown.replace("’", "'"), shown[-1500:]
    assert "\x1b" not in shown and "\u202e" not in shown and "<b>bad" not in shown
    assert CLIENT_SECRET not in shown
    assert endpoint.requests == 1
    assert not PersonalCredential.objects.exists()


def test_a_token_endpoint_that_does_not_answer_in_time_is_a_clear_400(
    endpoint, agent, alice, monkeypatch
):
    monkeypatch.setattr(oauth, "TIMEOUT", oauth.httpx.Timeout(0.5))
    endpoint.answer(GOOD)
    endpoint.delay = 3

    answer = callback_with_a_code(alice, agent)

    assert answer.status_code == 400
    assert "did not answer in time" in answer.content.decode()
    assert not PersonalCredential.objects.exists()


def test_odd_but_usable_replies_are_kept_within_bounds(endpoint, agent, alice):
    endpoint.answer(
        {"access_token": "at-ok", "token_type": "bearer", "expires_in": 10**10, "scope": 7}
    )
    assert callback_with_a_code(alice, agent).status_code == 302
    credential = PersonalCredential.objects.get()
    assert credential.secret == "at-ok" and credential.refresh_token == ""
    assert credential.expires_at is None  # an unbelievable lifetime is not believed
    assert credential.scope == "agent"  # what was asked for, not the server's non-string


def test_a_refresh_the_server_cannot_answer_keeps_the_connection_for_the_next_try(
    endpoint, agent, alice
):
    PersonalCredential.objects.create(
        user=User.objects.get(username="alice"),
        agent=agent,
        kind="oauth",
        secret="at-old",
        refresh_token="rt-old",
        expires_at=datetime.now(UTC) - timedelta(minutes=5),
    )
    endpoint.answer(b"busy", 503)

    refused = alice.post(
        "/sessions/new/",
        {"agent": str(agent.pk), "text": "Go", "message_id": "hostile-refresh-1"},
        HTTP_ACCEPT="application/json",
    )

    assert refused.status_code == 403  # per-person: no usable token, nothing sent
    assert endpoint.requests == 1
    credential = PersonalCredential.objects.get()
    assert credential.refresh_token == "rt-old" and credential.secret == "at-old"
    assert not oauth.needs_reconnect(credential)

    endpoint.answer({**GOOD, "access_token": "at-new", "refresh_token": "rt-new"})
    assert oauth.access_token(credential) == "at-new"
    credential.refresh_from_db()
    assert (credential.secret, credential.refresh_token) == ("at-new", "rt-new")
