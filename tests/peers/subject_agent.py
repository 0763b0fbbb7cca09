"""The approval peer (tests/peers/approval_agent.py) behind authentication: a real a2a-sdk
agent that knows who calls it. Each JSON-RPC call's credential is mapped to a subject; the
agent's task store is scoped per subject (a2a-sdk's owner scope), so `ListTasks` shows each
caller only the tasks that caller started, as the Nylorun profile v2 says. Every call is
recorded (method, the credential header as received, the subject), and a call without a
known credential is refused with 401 before the agent sees it.

    peer = SubjectAgent(port, tokens={"alice-token": "alice"}, scheme="bearer")
    ...                                # register peer.card_url; calls carry a credential
    peer.calls[-1]      # Call("SendMessage", credential="Bearer …", subject="alice")
    peer.tokens["new"] = "bob"          # tokens are looked up per call: tests may add some
    peer.stop()

`scheme`: "bearer" (the card declares HTTP bearer), "api_key" (an API key in `X-API-Key`),
"oauth2" (an authorization code flow at `oauth_urls`), or "none" (the card declares no
scheme; the credential is still read as bearer).
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from dataclasses import dataclass

import httpx
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
)
from a2a.types import (
    APIKeySecurityScheme,
    AuthorizationCodeOAuthFlow,
    HTTPAuthSecurityScheme,
    OAuth2SecurityScheme,
    OAuthFlows,
    SecurityScheme,
)
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, SimpleUser
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import JSONResponse

from tests.peers.approval_agent import RPC_PATH, ApprovalExecutor, ServedInThread, agent_card

API_KEY_HEADER = "X-API-Key"


@dataclass(frozen=True)
class Call:
    method: str
    credential: str  # the credential header as received ("" when none)
    subject: str | None  # who it authenticated as (None: refused)


class _Credentials:
    """ASGI middleware: who calls the JSON-RPC path (the card is public). The body is read
    to record the method, then handed on unchanged."""

    def __init__(self, app, peer: SubjectAgent) -> None:
        self.app, self.peer = app, peer

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != RPC_PATH:
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = Headers(scope=scope)
        if self.peer.scheme == "api_key":
            presented = token = headers.get(API_KEY_HEADER, "")
        else:
            presented = headers.get("Authorization", "")
            scheme, _, token = presented.partition(" ")
            token = token.strip() if scheme.lower() == "bearer" else ""
        subject = self.peer.tokens.get(token) if token else None
        self.peer.calls.append(Call(_method(body), presented, subject))
        if subject is None:
            refused = JSONResponse({"error": "unknown or missing credential"}, status_code=401)
            await refused(scope, receive, send)
            return
        scope = {**scope, "user": SimpleUser(subject), "auth": AuthCredentials(["authenticated"])}
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _method(body: bytes) -> str:
    try:
        return str(json.loads(body).get("method", ""))
    except (ValueError, AttributeError):
        return ""


class SubjectAgent:
    def __init__(
        self,
        port: int,
        *,
        tokens: MutableMapping[str, str],
        scheme: str = "bearer",
        oauth_urls: dict[str, str] | None = None,
    ) -> None:
        self.port, self.tokens, self.scheme = port, tokens, scheme
        self.calls: list[Call] = []
        self.card_url = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
        self.rpc_url = f"http://127.0.0.1:{port}{RPC_PATH}"
        card = agent_card(port)
        schemes = _security_schemes(scheme, oauth_urls or {})
        for name, value in schemes.items():
            card.security_schemes[name].CopyFrom(value)
        config_store = InMemoryPushNotificationConfigStore()
        self.config_store = config_store
        self._client = httpx.AsyncClient(timeout=10, trust_env=False)
        handler = DefaultRequestHandler(
            agent_executor=ApprovalExecutor(),
            task_store=InMemoryTaskStore(),  # scoped per owner: the caller's subject
            agent_card=card,
            push_config_store=config_store,
            push_sender=BasePushNotificationSender(
                httpx_client=self._client, config_store=config_store
            ),
        )
        app = Starlette(
            routes=[
                *create_jsonrpc_routes(handler, rpc_url=RPC_PATH),
                *create_agent_card_routes(card),
            ],
            middleware=[Middleware(_Credentials, peer=self)],
        )
        self._served = ServedInThread(app, port)

    def calls_of(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    def stop(self) -> None:
        self._served.stop()


def _security_schemes(scheme: str, oauth_urls: dict[str, str]) -> dict[str, SecurityScheme]:
    if scheme == "bearer":
        return {
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer")
            )
        }
    if scheme == "api_key":
        return {
            "key": SecurityScheme(
                api_key_security_scheme=APIKeySecurityScheme(location="header", name=API_KEY_HEADER)
            )
        }
    if scheme == "oauth2":
        flow = AuthorizationCodeOAuthFlow(
            authorization_url=oauth_urls["authorization_url"],
            token_url=oauth_urls["token_url"],
            refresh_url=oauth_urls.get("refresh_url", oauth_urls["token_url"]),
            scopes={"agent": "act for you with the agent"},
            pkce_required=True,
        )
        return {
            "oauth": SecurityScheme(
                oauth2_security_scheme=OAuth2SecurityScheme(
                    flows=OAuthFlows(authorization_code=flow)
                )
            )
        }
    return {}
