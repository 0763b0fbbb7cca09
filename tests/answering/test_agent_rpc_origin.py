"""The agent card names the JSON-RPC URL Onlooker sends the agent's credential to: a card
must not steer it to another origin (scheme, host, port), neither when the agent is
registered (`add_agent`, the admin) nor when its card is read again (`sync_agents`).

The agent is a real a2a-sdk agent on loopback (card and JSON-RPC on one origin, in this
process), whose card can be made to name another JSON-RPC URL; the other origin is a
recording server that must never hear from Onlooker.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCard
from django.core.management import CommandError, call_command
from django.utils import timezone
from starlette.applications import Starlette

from tasks.answering import agent_card
from tasks.models import Agent, PushEndpoint
from tests.peers import approval_agent
from tests.peers.misbehaving_agent import MisbehavingAgent
from tests.processes import free_port

CREDENTIAL = "Bearer only-for-the-agent"
ADD_URL = "/admin/tasks/agent/add/"
CHANGELIST_URL = "/admin/tasks/agent/"


class MovableAgent:
    """A real a2a-sdk agent served by uvicorn in a thread; `names(url)` makes its card name
    another JSON-RPC URL, as a careless or hostile card host would. `seen` holds every HTTP
    request it got: (method, path, headers)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.named = self.rpc_url
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        card = approval_agent.agent_card(self.port)
        handler = DefaultRequestHandler(
            agent_executor=approval_agent.ApprovalExecutor(),
            task_store=InMemoryTaskStore(),
            agent_card=card,
        )

        async def as_named(served: AgentCard) -> AgentCard:
            changed = AgentCard()
            changed.CopyFrom(served)
            changed.supported_interfaces[0].url = self.named
            return changed

        app = Starlette(
            routes=[
                *create_jsonrpc_routes(handler, rpc_url=approval_agent.RPC_PATH),
                *create_agent_card_routes(card, card_modifier=as_named),
            ]
        )

        async def recording(scope, receive, send) -> None:
            if scope["type"] == "http":
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                self.seen.append((scope["method"], scope["path"], headers))
            await app(scope, receive, send)

        self._served = approval_agent.ServedInThread(recording, self.port)

    @property
    def rpc_url(self) -> str:
        return self.base_url + approval_agent.RPC_PATH

    @property
    def card_url(self) -> str:
        return self.base_url + agent_card.CARD_PATH

    def names(self, url: str) -> None:
        self.named = url

    def rpc_calls(self) -> list[dict[str, str]]:
        return [headers for method, _, headers in self.seen if method == "POST"]

    def stop(self) -> None:
        self._served.stop()


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; loopback servers must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def served_agent() -> Iterator[MovableAgent]:
    agent = MovableAgent()
    yield agent
    agent.stop()


@pytest.fixture
def sdk_agent(served_agent: MovableAgent) -> MovableAgent:
    served_agent.names(served_agent.rpc_url)
    served_agent.seen.clear()
    return served_agent


@pytest.fixture
def elsewhere() -> Iterator[MisbehavingAgent]:
    """Another origin (same host, another port) that records whatever reaches it."""
    with MisbehavingAgent() as server:
        yield server


def add_agent(*args: str) -> str:
    out = io.StringIO()
    call_command("add_agent", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def sync() -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("sync_agents", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- registering --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("other", "shown"),
    [
        pytest.param("http://127.0.0.1:{other_port}/a2a/jsonrpc", "{other_origin}", id="port"),
        pytest.param(
            "https://127.0.0.1:{port}/a2a/jsonrpc", "https://127.0.0.1:{port}", id="scheme"
        ),
        pytest.param("http://localhost:{port}/a2a/jsonrpc", "http://localhost:{port}", id="host"),
        pytest.param(
            "http://127.0.0.1:{port}@localhost:{port}/a2a/jsonrpc",
            "http://localhost:{port}",
            id="host-behind-user-info",
        ),
    ],
)
def test_add_agent_refuses_a_card_naming_a_json_rpc_url_at_another_origin(
    sdk_agent, elsewhere, other, shown
):
    values = {
        "port": sdk_agent.port,
        "other_port": elsewhere.base_url.rpartition(":")[2],
        "other_origin": elsewhere.base_url,
    }
    sdk_agent.names(other.format(**values))

    with pytest.raises(CommandError) as refused:
        add_agent(sdk_agent.base_url, "--credential", CREDENTIAL)

    assert refused.value.returncode == 1
    message = str(refused.value)
    assert f"the agent card at {sdk_agent.base_url} " in message
    assert shown.format(**values) in message
    assert "--allow-other-rpc-origin" in message
    assert Agent.objects.count() == 0 and PushEndpoint.objects.count() == 0
    assert elsewhere.requests == []


@pytest.mark.django_db
def test_add_agent_with_allow_other_rpc_origin_registers_and_keeps_the_choice(sdk_agent, elsewhere):
    sdk_agent.names(elsewhere.rpc_url)
    add_agent(sdk_agent.base_url, "--allow-other-rpc-origin")
    agent = Agent.objects.get()
    assert agent.rpc_url == elsewhere.rpc_url
    assert agent.allow_other_rpc_origin is True


@pytest.mark.django_db
def test_add_agent_at_the_cards_own_origin_needs_no_permission(sdk_agent):
    add_agent(sdk_agent.card_url)
    agent = Agent.objects.get()
    assert agent.rpc_url == sdk_agent.rpc_url
    assert agent.allow_other_rpc_origin is False


def test_default_ports_and_letter_case_make_no_other_origin():
    same = {
        agent_card.origin(url)
        for url in (
            "http://Agent.Example:80/a2a",
            "HTTP://agent.example/other/path?q=1",
            "http://user:pw@agent.example/",
        )
    }
    assert same == {"http://agent.example"}
    assert agent_card.origin("https://agent.example:443/x") == "https://agent.example"
    assert agent_card.origin("https://agent.example:8443/x") == "https://agent.example:8443"
    assert agent_card.origin("http://[::1]:8000/x") == "http://[::1]:8000"
    assert agent_card.origin("http://agent.example:443/") != agent_card.origin(
        "https://agent.example/"
    )


def test_admin_refuses_another_origin_unless_the_box_is_ticked(admin_client, sdk_agent, elsewhere):
    sdk_agent.names(elsewhere.rpc_url)
    form = {"card_url": sdk_agent.base_url, "credential": CREDENTIAL}

    refused = admin_client.post(ADD_URL, form)
    assert refused.status_code == 200
    page = refused.content.decode()
    assert f"the agent card at {sdk_agent.base_url} names a JSON-RPC URL" in page
    assert elsewhere.base_url in page
    assert 'name="allow_other_rpc_origin"' in page
    assert Agent.objects.count() == 0

    allowed = admin_client.post(ADD_URL, {**form, "allow_other_rpc_origin": "on"})
    assert allowed.status_code == 200
    assert "no-store" in allowed["Cache-Control"]  # the secrets-once page
    agent = Agent.objects.get()
    assert (agent.rpc_url, agent.allow_other_rpc_origin) == (elsewhere.rpc_url, True)


# --- reading the card again ------------------------------------------------------------------


@pytest.mark.django_db
def test_sync_keeps_the_json_rpc_url_when_the_card_moves_it_to_another_origin(
    sdk_agent, elsewhere, admin_client
):
    add_agent(sdk_agent.base_url, "--credential", CREDENTIAL)
    sdk_agent.names(elsewhere.rpc_url)
    before = timezone.now()

    out, err = sync()  # no CommandError: the agent was synced, at its old URL

    agent = Agent.objects.get()
    assert agent.rpc_url == sdk_agent.rpc_url
    assert agent.refused_rpc_url == elsewhere.rpc_url
    assert before <= agent.refused_rpc_url_at <= timezone.now()
    assert f"#{agent.pk}): 0 listed, 0 fetched, 0 applied" in out
    assert f"moved the JSON-RPC URL to another origin, {elsewhere.rpc_url}" in err
    assert f"keeps calling {sdk_agent.rpc_url}" in err
    # The credential went to the agent's own origin, never to the one its card named.
    assert [h["authorization"] for h in sdk_agent.rpc_calls()] == [CREDENTIAL]
    assert elsewhere.requests == []

    # The admin shows it, in the list and on the agent's page.
    assert elsewhere.rpc_url in admin_client.get(CHANGELIST_URL).content.decode()
    page = admin_client.get(f"/admin/tasks/agent/{agent.pk}/change/").content.decode()
    assert f"moved the JSON-RPC URL to another origin, {elsewhere.rpc_url}" in page

    # Refused again: still marked since the first time, still not followed.
    first = agent.refused_rpc_url_at
    _, err = sync()
    agent.refresh_from_db()
    assert (agent.rpc_url, agent.refused_rpc_url_at) == (sdk_agent.rpc_url, first)
    assert elsewhere.rpc_url in err
    assert elsewhere.requests == []

    # The card names its own origin again (another URL there): followed, the mark cleared.
    sdk_agent.names(f"{sdk_agent.rpc_url}?v=2")
    _, err = sync()
    agent.refresh_from_db()
    assert agent.rpc_url == f"{sdk_agent.rpc_url}?v=2"
    assert (agent.refused_rpc_url, agent.refused_rpc_url_at) == ("", None)
    assert "another origin" not in err


@pytest.mark.django_db
def test_a_person_may_accept_the_refused_url_in_the_admin(sdk_agent, elsewhere, admin_client):
    add_agent(sdk_agent.base_url, "--credential", CREDENTIAL)
    sdk_agent.names(elsewhere.rpc_url)
    sync()
    agent = Agent.objects.get()

    admin_client.post(
        CHANGELIST_URL, {"action": "accept_refused_rpc_url", "_selected_action": [agent.pk]}
    )

    agent.refresh_from_db()
    assert (agent.rpc_url, agent.allow_other_rpc_origin) == (elsewhere.rpc_url, True)
    assert agent.refused_rpc_url == ""
    # Accepted once, it is the agent's origin now: later refreshes keep following it there.
    elsewhere.answer({"jsonrpc": "2.0", "result": {"tasks": []}})
    out, err = sync()
    assert "0 listed" in out and "another origin" not in err
    assert [r.headers["authorization"] for r in elsewhere.requests if r.method == "POST"] == [
        CREDENTIAL
    ]
