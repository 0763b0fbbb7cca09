"""Onlooker's calls to agents over HTTP (httpx). For now: agent card discovery.

Every failure is an `A2AError` whose message a person can read.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

CARD_PATH = "/.well-known/agent-card.json"
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# What the Agent model stores; a longer name is shortened, a longer URL or version refused.
MAX_NAME, MAX_URL, MAX_VERSION = 200, 500, 20


class A2AError(Exception):
    """A call to an agent failed; str(error) says how, in words."""


@dataclass(frozen=True)
class AgentCard:
    name: str
    rpc_url: str
    protocol_version: str
    extensions: list[str]
    push_notifications: bool


def card_url_for(url: str) -> str:
    """Accept the agent's base URL or its card URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise A2AError(f"{url!r} is not an http(s) URL")
    if parts.path.endswith(".json"):
        return url
    return url.rstrip("/") + CARD_PATH


def fetch_card(url: str) -> AgentCard:
    card_url = card_url_for(url)
    try:
        response = httpx.get(card_url, timeout=TIMEOUT, follow_redirects=False)
    except httpx.TimeoutException:
        raise A2AError(f"the agent did not answer in time at {card_url}") from None
    except httpx.HTTPError as error:
        raise A2AError(f"could not reach {card_url}: {error}") from None
    if response.status_code != 200:
        raise A2AError(f"{card_url} answered HTTP {response.status_code}, not an agent card")
    try:
        card = response.json()
    except ValueError:
        raise A2AError(f"{card_url} did not answer JSON") from None
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
        e["uri"] for e in declared if isinstance(e, dict) and isinstance(e.get("uri"), str)
    ]
    name = card.get("name") if isinstance(card.get("name"), str) else ""
    return AgentCard(
        name=(name.strip() or urlsplit(card_url).hostname or "agent")[:MAX_NAME],
        rpc_url=interface["url"],
        protocol_version=interface["protocolVersion"],
        extensions=extensions,
        push_notifications=capabilities.get("pushNotifications") is True,
    )


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
            and isinstance(url, str)
            and len(url) <= MAX_URL
            and urlsplit(url).scheme in ("http", "https")
        ):
            return interface
    return None
