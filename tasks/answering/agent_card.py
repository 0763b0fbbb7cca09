"""Discovering an agent from its card (`/.well-known/agent-card.json`): fetched over agent_http's
pooled client within ONLOOKER_AGENT_CALL_SECONDS and MAX_CARD_BYTES, and parsed into a few
bounded fields, the card's own words made plain. A card that cannot be read or used is an
`a2a_client.A2AError`, in words, like every other failed call to an agent. Also what an origin
is, by which Onlooker decides where an agent's credential may go.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from tasks.answering import agent_http
from tasks.answering.a2a_client import A2A_VERSION, A2AError
from tasks.wire.agent_text import hidden, plain_text

CARD_PATH = "/.well-known/agent-card.json"
# A card is parsed into a few bounded fields (MAX_DESCRIPTION, MAX_SKILLS below): a generous
# one with fifty long skills is tens of KiB, so a MiB leaves room and still bounds the parse.
MAX_CARD_BYTES = 1024 * 1024
# What the Agent model stores; a longer name is shortened, a longer URL or version refused.
MAX_NAME, MAX_URL, MAX_VERSION = 200, 500, 20
# What is kept of a card's own words for the agent page: longer text is cut, further skills
# and tags are left out (a card is the agent's to write, and any size).
MAX_DESCRIPTION, MAX_SKILLS, MAX_TAGS, MAX_TAG = 2_000, 50, 10, 60
MAX_EXAMPLES = 3  # example prompts kept per skill


@dataclass(frozen=True)
class AgentCard:
    name: str
    rpc_url: str
    protocol_version: str
    extensions: list[str]
    push_notifications: bool
    # The card's own words, made plain (`plain_text`) and bounded: shown, never interpreted.
    description: str = ""
    skills: list[dict] = field(default_factory=list)  # {"name", "description", "tags"}
    # How callers authenticate, from `securitySchemes` (Agent.auth_scheme says the shape).
    auth_scheme: dict = field(default_factory=dict)


def card_url_for(url: str) -> str:
    """Accept the agent's base URL or its card URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise A2AError(f"{url!r} is not an http(s) URL")
    if parts.path.endswith(".json"):
        return url
    return url.rstrip("/") + CARD_PATH


def fetch_card(url: str) -> AgentCard:
    """Discover an agent from its base or card URL; also how a registered agent's card is
    refreshed (`fetch_card(agent.card_url)`)."""
    card_url = card_url_for(url)
    limits = agent_http.Limits(
        settings.ONLOOKER_AGENT_CALL_SECONDS, MAX_CARD_BYTES, f"the agent card at {card_url}"
    )
    try:
        reply = agent_http.exchange(
            "GET",
            card_url,
            limits,
            headers={"A2A-Version": A2A_VERSION, "Accept": "application/json"},
        )
    except agent_http.ReplyRefused as refused:
        raise A2AError(str(refused), http_status=refused.http_status) from None
    except httpx.TimeoutException:
        raise A2AError(f"the agent did not answer in time at {card_url}") from None
    except httpx.HTTPError as error:
        raise A2AError(f"could not reach {card_url}: {plain_text(str(error))}") from None
    if reply.status_code != 200:
        raise A2AError(
            f"{card_url} answered HTTP {reply.status_code}, not an agent card",
            http_status=reply.status_code,
        )
    try:
        card = json.loads(reply.content)
    except ValueError:
        raise A2AError(f"{card_url} did not answer JSON", http_status=200) from None
    return parse_card(card, card_url)


def parse_card(card: object, card_url: str) -> AgentCard:
    if not isinstance(card, dict):
        raise A2AError(f"{card_url} is not an agent card (not a JSON object)")
    interface = _jsonrpc_1x(card.get("supportedInterfaces"))
    if interface is None:
        raise A2AError(
            f"the agent card at {card_url} offers no JSON-RPC interface with protocol version "
            "1.x; Onlooker speaks A2A 1.0 over JSON-RPC"
        )
    capabilities = card.get("capabilities") if isinstance(card.get("capabilities"), dict) else {}
    declared = capabilities.get("extensions") or []
    extensions = [
        e["uri"]
        for e in declared
        if isinstance(e, dict) and isinstance(e.get("uri"), str) and _unbroken(e["uri"])
    ]
    # The name is shown on every tile: the agent's words, made plain like its errors.
    name = plain_text(card.get("name"), MAX_NAME)
    return AgentCard(
        name=name or urlsplit(card_url).hostname or "agent",
        rpc_url=interface["url"],
        protocol_version=interface["protocolVersion"],
        extensions=extensions,
        push_notifications=capabilities.get("pushNotifications") is True,
        description=plain_text(card.get("description"), MAX_DESCRIPTION),
        skills=_skills(card.get("skills")),
        auth_scheme=_auth_scheme(card),
    )


def _auth_scheme(card: dict) -> dict:
    """How callers authenticate, from the card's `securitySchemes` (A2A 1.0 one-of wrappers):
    the scheme its first `securityRequirements` entry names when Onlooker supports it, else
    the first supported one it declares. HTTP bearer, an API key in a header, or an OAuth 2.0
    authorization code flow; anything else (or nothing, or a card that says it wrongly) is
    bearer, as a card that says nothing: registration never fails on how a card says this."""
    schemes = card.get("securitySchemes")
    if not isinstance(schemes, dict) or not schemes:
        return dict(BEARER)
    required = _required_scopes(card.get("securityRequirements"))
    declared = [name for name in list(schemes)[:MAX_SCHEMES] if isinstance(name, str)]
    for name in [*required, *declared]:
        parsed = _scheme(schemes.get(name), required.get(name, []))
        if parsed is not None:
            return parsed
    return dict(BEARER)


BEARER = {"kind": "bearer"}
MAX_SCHEMES, MAX_HEADER, MAX_SCOPES, MAX_SCOPE = 20, 100, 20, 100
# RFC 9110 token: what a header name may be.
_HTTP_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 6749 scope-token: printable ASCII but space, '"' and '\\'.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
# Headers an API key must not be sent in: the HTTP and A2A framing of the call itself.
_FRAMING_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "accept",
        "accept-encoding",
        "user-agent",
        "cookie",
        "a2a-version",
        "a2a-extensions",
    }
)


def _required_scopes(requirements: object) -> dict[str, list[str]]:
    """The scheme names the card's requirements give, first entry first, each with the
    scopes it asks for (proto JSON: `[{"schemes": {name: {"list": [scope, ...]}}}]`)."""
    named: dict[str, list[str]] = {}
    if not isinstance(requirements, list):
        return named
    for requirement in requirements[:MAX_SCHEMES]:
        entry = requirement.get("schemes") if isinstance(requirement, dict) else None
        if not isinstance(entry, dict):
            continue
        for name, scopes in list(entry.items())[:MAX_SCHEMES]:
            listed = scopes.get("list") if isinstance(scopes, dict) else None
            named.setdefault(name, _scopes(listed if isinstance(listed, list) else []))
    return named


def _scheme(wrapper: object, scopes: list[str]) -> dict | None:
    """One declared scheme as Agent.auth_scheme holds it; None when Onlooker cannot use it."""
    if not isinstance(wrapper, dict):
        return None
    http = wrapper.get("httpAuthSecurityScheme")
    if isinstance(http, dict):
        scheme = http.get("scheme")
        return dict(BEARER) if isinstance(scheme, str) and scheme.lower() == "bearer" else None
    key = wrapper.get("apiKeySecurityScheme")
    if isinstance(key, dict):
        name = key.get("name")
        if (
            str(key.get("location", "")).lower() == "header"
            and isinstance(name, str)
            and len(name) <= MAX_HEADER
            and _HTTP_TOKEN.fullmatch(name)
            and name.lower() not in _FRAMING_HEADERS
        ):
            return {"kind": "api_key", "header": name}
        return None
    oauth2 = wrapper.get("oauth2SecurityScheme")
    if isinstance(oauth2, dict) and isinstance(oauth2.get("flows"), dict):
        return _authorization_code(oauth2["flows"].get("authorizationCode"), scopes)
    return None


def _authorization_code(flow: object, required: list[str]) -> dict | None:
    """An OAuth 2.0 authorization code flow: its endpoints (clean http(s) URLs) and the
    scopes to ask for (those the requirement names, else every scope the flow declares).
    `revocationUrl` beside `tokenUrl` is not A2A 1.0: a card may add it (RFC 7009), and
    "Disconnect" then revokes the tokens there too."""
    if not isinstance(flow, dict):
        return None
    authorization_url, token_url = flow.get("authorizationUrl"), flow.get("tokenUrl")
    if not (_plain_url(authorization_url) and _plain_url(token_url)):
        return None
    refresh_url, revocation_url = flow.get("refreshUrl"), flow.get("revocationUrl")
    declared = flow.get("scopes")
    return {
        "kind": "oauth2",
        "authorization_url": authorization_url,
        "token_url": token_url,
        "refresh_url": refresh_url if _plain_url(refresh_url) else token_url,
        "revocation_url": revocation_url if _plain_url(revocation_url) else "",
        "scopes": required
        or _scopes(list(declared)[:MAX_SCOPES] if isinstance(declared, dict) else []),
    }


def _plain_url(url: object) -> bool:
    """An http(s) URL a person's browser may be sent to and Onlooker may post to: clean
    (`_clean_url`), without user info or a fragment."""
    if not isinstance(url, str) or not _clean_url(url):
        return False
    parts = urlsplit(url)
    return "@" not in parts.netloc and not parts.fragment and "#" not in url


def _scopes(scopes: list) -> list[str]:
    """Bounded, valid scope tokens, each once, in the card's order."""
    kept: list[str] = []
    for scope in scopes[:MAX_SCOPES]:
        usable = isinstance(scope, str) and len(scope) <= MAX_SCOPE
        if usable and _SCOPE_TOKEN.fullmatch(scope) and scope not in kept:
            kept.append(scope)
    return kept


def _skills(skills: object) -> list[dict]:
    """The card's skills as the agent page shows them: name, description and tags, plain
    text; one without a name or description is left out."""
    if not isinstance(skills, list):
        return []
    shown = []
    for skill in skills[:MAX_SKILLS]:
        if not isinstance(skill, dict):
            continue
        name = plain_text(skill.get("name"), MAX_NAME) or plain_text(skill.get("id"), MAX_NAME)
        description = plain_text(skill.get("description"), MAX_DESCRIPTION)
        tags = skill.get("tags") if isinstance(skill.get("tags"), list) else []
        words = [plain_text(tag, MAX_TAG) for tag in tags[:MAX_TAGS]]
        # A few of its example prompts: New session offers them as first messages.
        given = skill.get("examples") if isinstance(skill.get("examples"), list) else []
        # Read from a bounded prefix, so a card listing a million costs no more.
        examples = [plain_text(e, MAX_DESCRIPTION) for e in given[: MAX_EXAMPLES * 3]]
        if name or description:
            shown.append(
                {
                    "name": name,
                    "description": description,
                    "tags": [t for t in words if t],
                    "examples": [e for e in examples if e][:MAX_EXAMPLES],
                }
            )
    return shown


def _jsonrpc_1x(interfaces: object) -> dict | None:
    if not isinstance(interfaces, list):
        return None
    for interface in interfaces:
        if not isinstance(interface, dict):
            continue
        version = str(interface.get("protocolVersion", ""))
        url = interface.get("url")
        if (
            interface.get("protocolBinding") == "JSONRPC"
            and (version == "1" or version.startswith("1."))
            and len(version) <= MAX_VERSION
            and _unbroken(version)
            and isinstance(url, str)
            and _clean_url(url)
        ):
            return interface
    return None


def _clean_url(url: str) -> bool:
    """An http(s) URL with a host, a valid port and nothing hidden in it (no spaces, control
    or format characters, which would be shown to people and stored)."""
    if not _unbroken(url):
        return False
    try:
        origin(url)
    except ValueError:
        return False
    return True


def _unbroken(uri: str) -> bool:
    """At most MAX_URL characters, none of them a space, control or format character."""
    return len(uri) <= MAX_URL and not any(c.isspace() or hidden(c) for c in uri)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str:
    """`scheme://host[:port]` of an http(s) URL, without the port when it is the scheme's
    default: two URLs reach the same server exactly when their origins are equal. The
    credential is sent to the JSON-RPC URL, so its origin is what a person must agree to.
    ValueError when the URL has none (not http(s), no host, a port that is not one)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname  # lower case, without user info or IPv6 brackets
    port = parts.port  # ValueError for a port that is not a number in range
    if scheme not in _DEFAULT_PORTS or not host:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"
