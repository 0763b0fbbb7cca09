"""How a card's `securitySchemes` become the agent's auth scheme (answering/agent_card.py):
bearer, an API key in a header, or an OAuth 2.0 authorization code flow; anything Onlooker
cannot use, and anything said wrongly, is bearer and never breaks registration. One real
registration against the a2a-sdk subject peer whose card declares OAuth 2.0."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from tasks.answering.agent_card import parse_card
from tasks.models import Agent
from tests.answering.test_add_agent import agent_card
from tests.peers.subject_agent import SubjectAgent
from tests.processes import free_port

CARD_URL = "http://127.0.0.1:9/.well-known/agent-card.json"
AUTHORIZE = "https://auth.example/authorize"
TOKEN = "https://auth.example/token"


def scheme_of(**card) -> dict:
    return parse_card(agent_card(**card), CARD_URL).auth_scheme


def oauth(**flow) -> dict:
    code = {"authorizationUrl": AUTHORIZE, "tokenUrl": TOKEN, **flow}
    return {"oauth2SecurityScheme": {"flows": {"authorizationCode": code}}}


BEARER = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}}
API_KEY = {"key": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}}


def test_a_card_that_says_nothing_is_bearer():
    assert scheme_of() == {"kind": "bearer"}
    assert scheme_of(securitySchemes={}) == {"kind": "bearer"}


def test_http_bearer_is_bearer():
    assert scheme_of(securitySchemes=BEARER) == {"kind": "bearer"}


def test_an_api_key_in_a_header_names_its_header():
    assert scheme_of(securitySchemes=API_KEY) == {"kind": "api_key", "header": "X-API-Key"}


def test_an_oauth_authorization_code_flow_keeps_its_endpoints_and_scopes():
    scheme = scheme_of(
        securitySchemes={"oauth": oauth(scopes={"agent": "act", "read": "read"})},
    )
    assert scheme == {
        "kind": "oauth2",
        "authorization_url": AUTHORIZE,
        "token_url": TOKEN,
        "refresh_url": TOKEN,
        "revocation_url": "",
        "scopes": ["agent", "read"],
    }


def test_a_revocation_url_beside_the_token_url_is_kept():
    scheme = scheme_of(
        securitySchemes={
            "oauth": oauth(
                revocationUrl="https://auth.example/revoke",
                refreshUrl="https://auth.example/refresh",
            )
        }
    )
    assert scheme["revocation_url"] == "https://auth.example/revoke"
    assert scheme["refresh_url"] == "https://auth.example/refresh"


def test_the_scopes_the_requirement_names_are_the_ones_asked_for():
    scheme = scheme_of(
        securitySchemes={"oauth": oauth(scopes={"agent": "", "admin": ""})},
        securityRequirements=[{"schemes": {"oauth": {"list": ["agent"]}}}],
    )
    assert scheme["scopes"] == ["agent"]


def test_the_scheme_the_first_requirement_names_wins_over_the_first_declared():
    schemes = {**BEARER, **API_KEY, "oauth": oauth()}
    required = [{"schemes": {"key": {"list": []}}}, {"schemes": {"oauth": {"list": []}}}]
    assert scheme_of(securitySchemes=schemes, securityRequirements=required)["kind"] == "api_key"
    assert scheme_of(securitySchemes=schemes)["kind"] == "bearer"


def test_an_unsupported_required_scheme_falls_to_the_next_usable_one():
    schemes = {
        "mtls": {"mtlsSecurityScheme": {}},
        "oidc": {"openIdConnectSecurityScheme": {"openIdConnectUrl": "https://a.example/x"}},
        **API_KEY,
    }
    required = [{"schemes": {"mtls": {"list": []}}}]
    assert scheme_of(securitySchemes=schemes, securityRequirements=required)["kind"] == "api_key"


@pytest.mark.parametrize(
    "schemes",
    [
        {"basic": {"httpAuthSecurityScheme": {"scheme": "Basic"}}},
        {"mtls": {"mtlsSecurityScheme": {}}},
        {"q": {"apiKeySecurityScheme": {"location": "query", "name": "key"}}},
        {"c": {"apiKeySecurityScheme": {"location": "cookie", "name": "session"}}},
        {"k": {"apiKeySecurityScheme": {"location": "header", "name": "X API Key"}}},
        {"k": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key\r\nEvil: 1"}}},
        {"k": {"apiKeySecurityScheme": {"location": "header", "name": "X" * 101}}},
        {"k": {"apiKeySecurityScheme": {"location": "header", "name": "Host"}}},
        {"k": {"apiKeySecurityScheme": {"location": "header", "name": "A2A-Version"}}},
        {"k": {"apiKeySecurityScheme": {"location": "header", "name": 7}}},
        {"o": {"oauth2SecurityScheme": {"flows": {"clientCredentials": {"tokenUrl": TOKEN}}}}},
        {"o": {"oauth2SecurityScheme": {"flows": "authorizationCode"}}},
        {"o": oauth(authorizationUrl="javascript:alert(1)")},
        {"o": oauth(tokenUrl="ftp://auth.example/token")},
        {"o": oauth(tokenUrl="https://user:pw@auth.example/token")},
        {"o": oauth(authorizationUrl="https://auth.example/a#frag")},
        {"o": oauth(authorizationUrl="https://auth.example/" + "a" * 600)},
        {"o": oauth(tokenUrl="https://auth.example/to ken")},
        {"o": oauth(tokenUrl="https://auth.example/\u202etoken")},
        {"o": oauth(tokenUrl=["https://auth.example/token"])},
        {"o": oauth(authorizationUrl=None)},
        {"x": "bearer"},
        {"x": None},
        {"x": []},
    ],
)
def test_what_onlooker_cannot_use_is_bearer(schemes):
    assert scheme_of(securitySchemes=schemes) == {"kind": "bearer"}


@pytest.mark.parametrize(
    "card",
    [
        {"securitySchemes": "bearer"},
        {"securitySchemes": [BEARER]},
        {"securitySchemes": 42},
        {"securitySchemes": BEARER, "securityRequirements": "bearer"},
        {"securitySchemes": BEARER, "securityRequirements": [None, 1, {"schemes": []}]},
        {"securitySchemes": BEARER, "securityRequirements": [{"schemes": {"bearer": 5}}]},
        {
            "securitySchemes": {"oauth": oauth()},
            "securityRequirements": [{"schemes": {"oauth": {"list": "agent"}}}],
        },
    ],
)
def test_a_card_that_says_it_wrongly_still_registers(card):
    assert scheme_of(**card)["kind"] in ("bearer", "oauth2")


def test_a_huge_card_is_parsed_within_its_bounds():
    schemes = {f"s{i}": {"mtlsSecurityScheme": {}} for i in range(5000)}
    schemes["late"] = API_KEY["key"]  # past the schemes looked at
    many_scopes = {f"scope{i}": "x" * 50 for i in range(5000)}
    assert scheme_of(securitySchemes=schemes) == {"kind": "bearer"}
    scheme = scheme_of(securitySchemes={"oauth": oauth(scopes=many_scopes)})
    assert scheme["scopes"] == [f"scope{i}" for i in range(20)]


def test_invalid_scopes_are_left_out():
    scopes = {"ok": "", 'bad"quote': "", "sp ace": "", "x" * 101: "", "back\\slash": ""}
    assert scheme_of(securitySchemes={"oauth": oauth(scopes=scopes)})["scopes"] == ["ok"]


@pytest.mark.django_db(transaction=True)
def test_registering_the_subject_peer_that_declares_oauth_stores_its_flow():
    port = free_port()
    urls = {
        "authorization_url": "http://127.0.0.1:1/authorize",
        "token_url": "http://127.0.0.1:1/token",
    }
    peer = SubjectAgent(port, tokens={}, scheme="oauth2", oauth_urls=urls)
    try:
        out = io.StringIO()
        call_command("add_agent", peer.card_url, "--json", stdout=out)
    finally:
        peer.stop()
    agent = Agent.objects.get(pk=json.loads(out.getvalue())["agent"])
    assert agent.auth_scheme == {
        "kind": "oauth2",
        "authorization_url": urls["authorization_url"],
        "token_url": urls["token_url"],
        "refresh_url": urls["token_url"],
        "revocation_url": "",
        "scopes": ["agent"],
    }
    assert agent.credential_header == "Authorization"
