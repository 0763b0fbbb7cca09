"""A real OAuth 2.0 authorization server on loopback, for tests: Authlib's server side
(AuthorizationServer, AuthorizationCodeGrant with PKCE required, RefreshTokenGrant that
rotates refresh tokens, RFC 7009 revocation) behind a small Starlette app served in a thread.

It knows one confidential client (id, secret, redirect URI) and one person (`user`), whom its
authorize endpoint approves without a login page (or refuses, with `approve = False`): in
tests, "the browser" follows Onlooker's redirect with httpx and gets the code back. Every
access token it issues is added to `subjects` (pass the SubjectAgent's `tokens` mapping), and
removed when revoked or replaced by a refresh, so the agent accepts exactly the tokens that
are live here.

    server = OAuthServer(port, subjects=peer_tokens, client_id="onlooker", client_secret="s",
                         redirect_uri="http://127.0.0.1:8000/oauth/callback/")
    server.urls          # authorization_url, token_url (for SubjectAgent's oauth_urls)
    server.grants        # the grant type of every token request, in order
    server.revoked       # every token revoked at the revocation endpoint
    server.stop()

`serve_card(card_url)` serves a copy of an agent's card at this server's
`/.well-known/agent-card.json` with `revocationUrl` beside its `tokenUrl` (the a2a-sdk peer's
card cannot say it), for tests that register an agent whose card names a revocation URL.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

import httpx
from authlib.oauth2 import AuthorizationServer, OAuth2Request
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    ClientMixin,
    OAuth2Payload,
    TokenMixin,
    grants,
)
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.peers.approval_agent import ServedInThread

SCOPE = "agent"
CODE_SECONDS = 600


@dataclass
class Client(ClientMixin):
    client_id: str
    client_secret: str
    redirect_uri: str

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_allowed_scope(self, scope: str | None) -> str:
        asked = set((scope or SCOPE).split())
        return " ".join(sorted(asked & {SCOPE}))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri == self.redirect_uri

    def check_client_secret(self, client_secret: str) -> bool:
        return hmac.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class Code(AuthorizationCodeMixin):
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: str
    code_challenge: str | None
    code_challenge_method: str | None
    issued_at: float = field(default_factory=time.time)

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class Token(TokenMixin):
    access_token: str
    refresh_token: str
    client_id: str
    scope: str
    user: str
    expires_in: int
    issued_at: float = field(default_factory=time.time)
    revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return time.time() > self.issued_at + self.expires_in

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> str:
        return self.user

    def get_client(self):
        return None


class _Payload(OAuth2Payload):
    def __init__(self, data: dict[str, str]) -> None:
        self._data = data

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self):
        return {key: [value] for key, value in self._data.items()}


class _Request(OAuth2Request):
    """A Starlette request as Authlib reads it (its query and form already read)."""

    def __init__(self, request: Request, args: dict[str, str], form: dict[str, str]) -> None:
        super().__init__(request.method, str(request.url), headers=request.headers)
        self._args, self._form = args, form
        self.payload = _Payload({**args, **form})

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _Server(AuthorizationServer):
    def __init__(self, owner: OAuthServer) -> None:
        super().__init__(scopes_supported=[SCOPE])
        self.owner = owner

    def query_client(self, client_id: str) -> Client | None:
        client = self.owner.client
        return client if client_id == client.client_id else None

    def save_token(self, token: dict, request: OAuth2Request) -> None:
        self.owner.issue(token, request.client.client_id, request.user)

    def send_signal(self, name, *args, **kwargs) -> None:
        pass

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        return request  # the endpoints below make it

    def handle_response(self, status: int, body, headers) -> Response:
        content = json.dumps(body) if isinstance(body, dict) else (body or "")
        return Response(content, status_code=status, headers=dict(headers))


class _CodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic"]

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        self.server.owner.codes[code] = Code(
            code,
            request.client.client_id,
            request.payload.redirect_uri,
            request.scope or SCOPE,
            request.user,
            data.get("code_challenge"),
            data.get("code_challenge_method"),
        )

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        found = self.server.owner.codes.get(code)
        fresh = found is not None and time.time() - found.issued_at < CODE_SECONDS
        return found if fresh and found.client_id == client.client_id else None

    def delete_authorization_code(self, authorization_code: Code) -> None:
        self.server.owner.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: Code) -> str:
        return authorization_code.user


class _RefreshGrant(grants.RefreshTokenGrant):
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: each refresh token works once

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        for token in self.server.owner.tokens:
            if not token.revoked and hmac.compare_digest(token.refresh_token, refresh_token):
                return token
        return None

    def authenticate_user(self, refresh_token: Token) -> str:
        return refresh_token.user

    def revoke_old_credential(self, refresh_token: Token) -> None:
        self.server.owner.revoke(refresh_token)


class _Revocation(RevocationEndpoint):
    def query_token(self, token_string: str, token_type_hint: str | None) -> Token | None:
        for token in self.server.owner.tokens:
            if token_string in (token.access_token, token.refresh_token):
                return token
        return None

    def revoke_token(self, token: Token, request: OAuth2Request) -> None:
        self.server.owner.revoked.append(request.form["token"])
        self.server.owner.revoke(token)

    def create_endpoint_request(self, request: OAuth2Request) -> OAuth2Request:
        return request


async def _form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (Starlette's form parser needs a library
    the project does not install)."""
    return dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))


class OAuthServer:
    def __init__(
        self,
        port: int,
        *,
        subjects: MutableMapping[str, str],
        client_id: str,
        client_secret: str,
        redirect_uri: str,
        user: str = "alice",
        access_seconds: int = 3600,
    ) -> None:
        self.port, self.subjects, self.user = port, subjects, user
        self.client = Client(client_id, client_secret, redirect_uri)
        self.access_seconds = access_seconds
        self.approve = True  # False: the person refuses (error=access_denied)
        self.codes: dict[str, Code] = {}
        self.tokens: list[Token] = []
        self.grants: list[str] = []
        self.revoked: list[str] = []
        self.card: dict | None = None
        self.base_url = f"http://127.0.0.1:{port}"
        self.urls = {
            "authorization_url": f"{self.base_url}/authorize",
            "token_url": f"{self.base_url}/token",
        }
        self.revocation_url = f"{self.base_url}/revoke"
        self.card_url = f"{self.base_url}/.well-known/agent-card.json"
        self.server = _Server(self)
        self.server.register_token_generator(
            "default",
            BearerTokenGenerator(
                access_token_generator=lambda **_: "at-" + secrets.token_urlsafe(24),
                refresh_token_generator=lambda **_: "rt-" + secrets.token_urlsafe(24),
                expires_generator=lambda client, grant_type: self.access_seconds,
            ),
        )
        self.server.register_grant(_CodeGrant, [CodeChallenge(required=True)])
        self.server.register_grant(_RefreshGrant)
        self.server.register_endpoint(_Revocation)
        app = Starlette(
            routes=[
                Route("/authorize", self._authorize, methods=["GET"]),
                Route("/token", self._token, methods=["POST"]),
                Route("/revoke", self._revoke, methods=["POST"]),
                Route("/.well-known/agent-card.json", self._card, methods=["GET"]),
            ]
        )
        self._served = ServedInThread(app, port)

    # -- what it issues -----------------------------------------------------------------

    def issue(self, token: dict, client_id: str, user: str) -> None:
        self.tokens.append(
            Token(
                token["access_token"],
                token.get("refresh_token", ""),
                client_id,
                token.get("scope", ""),
                user,
                int(token.get("expires_in", 0)),
            )
        )
        self.subjects[token["access_token"]] = user

    def revoke(self, token: Token) -> None:
        token.revoked = True
        self.subjects.pop(token.access_token, None)

    def live_access_tokens(self) -> list[str]:
        return [token.access_token for token in self.tokens if not token.revoked]

    # -- its endpoints ------------------------------------------------------------------

    async def _authorize(self, request: Request) -> Response:
        oauth_request = _Request(request, dict(request.query_params), {})
        try:
            grant = self.server.get_consent_grant(oauth_request, end_user=self.user)
        except Exception as error:  # an OAuth2Error: said to the browser, not redirected
            return JSONResponse({"error": getattr(error, "error", str(error))}, status_code=400)
        user = self.user if self.approve else None
        return self.server.create_authorization_response(oauth_request, user, grant)

    async def _token(self, request: Request) -> Response:
        form = await _form(request)
        self.grants.append(form.get("grant_type", ""))
        return self.server.create_token_response(_Request(request, {}, form))

    async def _revoke(self, request: Request) -> Response:
        oauth_request = _Request(request, {}, await _form(request))
        return self.server.create_endpoint_response("revocation", oauth_request)

    async def _card(self, request: Request) -> Response:
        if self.card is None:
            return JSONResponse({"error": "no card"}, status_code=404)
        return JSONResponse(self.card)

    def serve_card(self, card_url: str) -> None:
        """Serve `card_url`'s card here, its OAuth flows naming this server's revocation URL."""
        card = httpx.get(card_url, timeout=5).json()
        for scheme in card.get("securitySchemes", {}).values():
            flow = scheme.get("oauth2SecurityScheme", {}).get("flows", {})
            if "authorizationCode" in flow:
                flow["authorizationCode"]["revocationUrl"] = self.revocation_url
        self.card = card

    def stop(self) -> None:
        self._served.stop()
