"""`manage.py add_agent`: registering an agent from its A2A 1.0 card, served by a real HTTP
server on loopback, and the credentials it prints once."""

from __future__ import annotations

import base64
import io
import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from tasks.models import Agent, PushEndpoint, Session
from tests.conftest import sign_headers
from tests.processes import free_port

CARD_PATH = "/.well-known/agent-card.json"
PROGRESS = "https://nylorun.dev/a2a/ext/progress/v1"
INTERACTIONS = "https://nylorun.dev/a2a/ext/interactions/v1"
WORKING = {
    "statusUpdate": {
        "taskId": "t-1",
        "contextId": "c-1",
        "status": {"state": "TASK_STATE_WORKING"},
    }
}


def agent_card(rpc_url: str = "http://127.0.0.1:9/a2a/jsonrpc", **overrides) -> dict:
    """A valid A2A 1.0 agent card with one JSON-RPC interface."""
    card = {
        "name": "Card Builder",
        "description": "Builds things and reports progress.",
        "version": "2.1.0",
        "supportedInterfaces": [
            {"url": rpc_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "streaming": False,
            "pushNotifications": True,
            "extensions": [
                {"uri": PROGRESS, "required": False},
                {"uri": INTERACTIONS, "description": "questions and approvals"},
            ],
        },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain", "text/markdown"],
        "skills": [
            {
                "id": "build",
                "name": "Build",
                "description": "Builds a project",
                "tags": ["build"],
            }
        ],
    }
    card.update(overrides)
    return card


class CardServer:
    """A real HTTP server on 127.0.0.1 answering whatever a test sets, per path."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, str, bytes]] = {}
        self.requests: list[str] = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.card_server = self  # type: ignore[attr-defined]
        self._server = server
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def card_url(self) -> str:
        return self.base_url + CARD_PATH

    def answer(
        self,
        body: object,
        *,
        status: int = 200,
        content_type: str = "application/json",
        path: str = CARD_PATH,
    ) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers[path] = (status, content_type, raw)

    def serve_card(self, **overrides) -> dict:
        card = agent_card(rpc_url=f"{self.base_url}/a2a/jsonrpc", **overrides)
        self.answer(card)
        return card

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        owner: CardServer = self.server.card_server  # type: ignore[attr-defined]
        owner.requests.append(self.path)
        status, content_type, raw = owner.answers.get(
            self.path, (404, "text/html", b"<h1>Not Found</h1>")
        )
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format, *args) -> None:
        pass  # keep the test output quiet


@contextmanager
def running_card_server(monkeypatch):
    # httpx honours proxy variables; a loopback server must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = CardServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def card_server(monkeypatch):
    with running_card_server(monkeypatch) as server:
        yield server


def add_agent(*args: str) -> str:
    out = io.StringIO()
    call_command("add_agent", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def add_agent_json(*args: str) -> dict:
    output = add_agent(*args, "--json")
    return json.loads(output)  # exactly one JSON document, or this raises


def push_path(result: dict) -> str:
    return urlsplit(result["push_url"]).path


def refusal(*args: str) -> str:
    with pytest.raises(CommandError) as raised:
        add_agent(*args)
    assert Agent.objects.count() == 0
    assert PushEndpoint.objects.count() == 0
    return str(raised.value)


# --- registering ------------------------------------------------------------------------


@pytest.mark.django_db
def test_valid_card_registers_the_agent(card_server):
    card_server.serve_card()
    add_agent(card_server.base_url, "--team", "ops", "--credential", "Bearer call-me")

    assert card_server.requests == [CARD_PATH]
    agent = Agent.objects.get()
    assert agent.name == "Card Builder"
    assert agent.card_url == card_server.card_url
    assert agent.rpc_url == f"{card_server.base_url}/a2a/jsonrpc"
    assert agent.protocol_version == "1.0"
    assert agent.extensions == [PROGRESS, INTERACTIONS]
    assert agent.push_notifications is True
    assert agent.team == Group.objects.get(name="ops")
    assert agent.credential == "Bearer call-me"
    assert agent.signing_secrets == []
    assert agent.card_fetched_at is not None
    assert agent.endpoints.count() == 1


@pytest.mark.django_db
def test_name_option_overrides_the_card_name(card_server):
    card_server.serve_card()
    add_agent(card_server.base_url, "--name", "Night builds")
    assert Agent.objects.get().name == "Night builds"


@pytest.mark.django_db
def test_card_url_is_accepted_as_well_as_the_base_url(card_server):
    card_server.serve_card(name="Direct")
    add_agent(card_server.card_url)
    assert card_server.requests == [CARD_PATH]
    assert Agent.objects.get().card_url == card_server.card_url


@pytest.mark.django_db
def test_existing_team_is_reused(card_server):
    team = Group.objects.create(name="ops")
    card_server.serve_card()
    add_agent(card_server.base_url, "--team", "ops")
    add_agent(card_server.base_url, "--team", "ops", "--name", "Second", "--again")
    assert Group.objects.count() == 1
    assert list(Agent.objects.values_list("team", flat=True)) == [team.pk, team.pk]


@pytest.mark.django_db
def test_without_team_the_agent_is_everyones(card_server):
    card_server.serve_card()
    add_agent(card_server.base_url)
    assert Agent.objects.get().team is None
    assert Group.objects.count() == 0


@pytest.mark.django_db
def test_card_without_extensions_registers_with_none(card_server):
    card_server.serve_card(capabilities={"pushNotifications": False})
    add_agent(card_server.base_url)
    agent = Agent.objects.get()
    assert agent.extensions == []
    assert agent.push_notifications is False


@pytest.mark.django_db
def test_json_output_is_exactly_one_object_with_the_push_details(card_server):
    card_server.serve_card()
    output = add_agent(card_server.base_url, "--json")
    result = json.loads(output)
    assert output.strip().count("\n") == 0, "more than the one JSON object was printed"
    assert set(result) == {
        "agent",
        "push_url",
        "push_token",
        "push_bearer",
        "signing_secret",
        "api_token",
        "expire_after",
        "on_expiry",
        "no_self_approval",
        "per_person",
    }
    # The team's policy, as registered: none unless asked for.
    assert (result["expire_after"], result["on_expiry"], result["no_self_approval"]) == (
        None,
        "deny",
        False,
    )
    assert result["api_token"].startswith("onl_")
    agent = Agent.objects.get()
    endpoint = agent.endpoints.get()
    assert result["agent"] == agent.pk
    assert result["push_url"] == (f"{settings.ONLOOKER_PUBLIC_URL}/a2a/push/{endpoint.public_id}/")
    assert result["signing_secret"] is None
    assert result["push_token"] and result["push_bearer"]
    assert result["push_token"] != result["push_bearer"]


@pytest.mark.django_db
def test_each_registration_gets_its_own_endpoint_and_credentials(card_server):
    card_server.serve_card()
    first = add_agent_json(card_server.base_url)
    second = add_agent_json(card_server.base_url, "--again")
    assert first["agent"] != second["agent"]
    assert first["push_url"] != second["push_url"]
    assert first["push_token"] != second["push_token"]
    assert first["push_bearer"] != second["push_bearer"]


@pytest.mark.django_db
def test_a_card_url_registered_already_is_refused_naming_the_agent(card_server):
    card_server.serve_card()
    add_agent(card_server.card_url, "--name", "Night builds")
    agent = Agent.objects.get()

    # The base URL, in other letters, is the same card.
    with pytest.raises(CommandError) as raised:
        add_agent(card_server.base_url.replace("http://", "HTTP://") + "/", "--team", "ops")

    message = str(raised.value)
    assert f"{card_server.card_url} is already registered as Night builds (agent {agent.pk})" in (
        message
    )
    assert "nothing was registered" in message and "--again" in message
    assert list(Agent.objects.all()) == [agent]
    assert PushEndpoint.objects.count() == 1
    assert not Group.objects.exists()
    assert card_server.requests == [CARD_PATH]  # refused before asking the agent


@pytest.mark.django_db
def test_again_registers_a_card_url_a_second_time_on_purpose(card_server):
    card_server.serve_card()
    first = add_agent_json(card_server.base_url)
    second = add_agent_json(card_server.base_url, "--again", "--team", "ops")
    assert Agent.objects.get(pk=second["agent"]).team.name == "ops"
    assert Agent.objects.get(pk=first["agent"]).team is None


@pytest.mark.django_db
def test_human_readable_output_shows_the_push_url_and_secrets(card_server):
    card_server.serve_card()
    output = add_agent(card_server.base_url, "--generate-signing-secret")
    agent = Agent.objects.get()
    endpoint = agent.endpoints.get()
    assert f"Registered Card Builder (agent {agent.pk})" in output
    assert endpoint.push_url in output
    assert agent.signing_secret in output
    assert "shown only now" in output


# --- the printed credentials work -------------------------------------------------------


@pytest.mark.django_db
def test_printed_push_bearer_authenticates_a_push(card_server, client):
    card_server.serve_card()
    result = add_agent_json(card_server.base_url)

    wrong = client.post(
        push_path(result), WORKING, content_type="application/json", HTTP_AUTHORIZATION="Bearer x"
    )
    assert wrong.status_code == 401

    response = client.post(
        push_path(result),
        WORKING,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {result['push_bearer']}",
    )
    assert response.status_code == 200, response.content
    assert Session.objects.get().context_id == "c-1"


@pytest.mark.django_db
def test_printed_push_token_authenticates_a_push(card_server, client):
    card_server.serve_card()
    result = add_agent_json(card_server.base_url)
    response = client.post(
        push_path(result),
        WORKING,
        content_type="application/json",
        HTTP_X_A2A_NOTIFICATION_TOKEN=result["push_token"],
    )
    assert response.status_code == 200, response.content
    assert Session.objects.filter(agent_id=result["agent"]).count() == 1


@pytest.mark.django_db
def test_generated_signing_secret_verifies_signed_pushes(card_server, client):
    card_server.serve_card()
    result = add_agent_json(card_server.base_url, "--generate-signing-secret")
    secret = result["signing_secret"]
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) >= 24

    body = json.dumps(WORKING).encode()
    signed = {
        "HTTP_" + name.upper().replace("-", "_"): value
        for name, value in sign_headers(secret, body).items()
    }
    response = client.post(push_path(result), body, content_type="application/json", **signed)
    assert response.status_code == 200, response.content
    assert Session.objects.count() == 1


@pytest.mark.django_db
def test_agent_with_a_signing_secret_is_refused_an_unsigned_push(card_server, client):
    card_server.serve_card()
    result = add_agent_json(card_server.base_url, "--generate-signing-secret")
    response = client.post(
        push_path(result),
        WORKING,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {result['push_bearer']}",
    )
    assert response.status_code == 401
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_given_signing_secret_is_kept_and_verifies(card_server, client):
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    card_server.serve_card()
    result = add_agent_json(card_server.base_url, "--signing-secret", secret)
    assert result["signing_secret"] == secret

    body = json.dumps(WORKING).encode()
    signed = {
        "HTTP_" + name.upper().replace("-", "_"): value
        for name, value in sign_headers(secret, body).items()
    }
    response = client.post(push_path(result), body, content_type="application/json", **signed)
    assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_push_credentials_are_stored_only_as_digests(card_server):
    card_server.serve_card()
    result = add_agent_json(card_server.base_url, "--credential", "Bearer call-me")
    stored = [
        *PushEndpoint.objects.values().get().values(),
        *Agent.objects.values().get().values(),
    ]
    for secret in (result["push_token"], result["push_bearer"]):
        assert not any(secret in str(value) for value in stored)
    endpoint = PushEndpoint.objects.get()
    assert endpoint.token_digest and endpoint.bearer_digest
    assert endpoint.token_digest != endpoint.bearer_digest


# --- refusals -----------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "card_changes",
    [
        pytest.param(
            {
                "supportedInterfaces": [
                    {
                        "url": "http://127.0.0.1:9/a2a",
                        "protocolBinding": "JSONRPC",
                        "protocolVersion": "0.3",
                    }
                ]
            },
            id="1.0-shaped-card-with-a-0.3-interface",
        ),
        pytest.param(
            {
                "supportedInterfaces": None,
                "protocolVersion": "0.3.0",
                "url": "http://127.0.0.1:9/a2a",
                "preferredTransport": "JSONRPC",
                "additionalInterfaces": [{"url": "http://127.0.0.1:9/a2a", "transport": "JSONRPC"}],
            },
            id="0.3-card",
        ),
    ],
)
def test_card_with_only_a_0_3_interface_is_refused(card_server, card_changes):
    card = agent_card(**card_changes)
    if card["supportedInterfaces"] is None:
        del card["supportedInterfaces"]
    card_server.answer(card)
    message = refusal(card_server.base_url)
    assert "no JSON-RPC interface with protocol version 1.x" in message
    assert card_server.card_url in message


@pytest.mark.django_db
@pytest.mark.parametrize("binding", ["GRPC", "HTTP+JSON"])
def test_card_without_jsonrpc_1x_is_refused(card_server, binding):
    card_server.answer(
        agent_card(
            supportedInterfaces=[
                {
                    "url": "http://127.0.0.1:9/a2a",
                    "protocolBinding": binding,
                    "protocolVersion": "1.0",
                }
            ]
        )
    )
    message = refusal(card_server.base_url)
    assert "no JSON-RPC interface with protocol version 1.x" in message


@pytest.mark.django_db
def test_card_with_jsonrpc_after_grpc_registers_the_jsonrpc_url(card_server):
    grpc = {"url": "127.0.0.1:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
    jsonrpc = {
        "url": f"{card_server.base_url}/rpc",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    card_server.answer(agent_card(supportedInterfaces=[grpc, jsonrpc]))
    add_agent(card_server.base_url)
    assert Agent.objects.get().rpc_url == f"{card_server.base_url}/rpc"


@pytest.mark.django_db
def test_answer_that_is_not_json_is_refused(card_server):
    card_server.answer(b"<html><body>Welcome</body></html>", content_type="text/html")
    message = refusal(card_server.base_url)
    assert message == f"{card_server.card_url} did not answer JSON"


@pytest.mark.django_db
def test_json_that_is_not_an_object_is_refused(card_server):
    card_server.answer([agent_card()])
    message = refusal(card_server.base_url)
    assert "not an agent card" in message


@pytest.mark.django_db
def test_missing_card_is_refused_with_the_http_status(card_server):
    message = refusal(card_server.base_url)  # nothing served: the server answers 404
    assert card_server.requests == [CARD_PATH]
    assert message == f"{card_server.card_url} answered HTTP 404, not an agent card"


@pytest.mark.django_db
def test_unreachable_agent_is_refused():
    url = f"http://127.0.0.1:{free_port()}"
    message = refusal(url)
    assert message.startswith(f"could not reach {url}{CARD_PATH}")


@pytest.mark.django_db
def test_url_that_is_not_http_is_refused():
    message = refusal("ftp://agent.example.com")
    assert "is not an http(s) URL" in message


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        (base64.b64encode(b"k" * 32).decode(), "starts with whsec_"),
        ("whsec_" + base64.b64encode(b"short").decode(), "24 to 64 bytes"),
        ("whsec_", "24 to 64 bytes"),
    ],
    ids=["no-prefix", "too-short", "empty"],
)
def test_bad_signing_secret_is_refused(card_server, secret, expected):
    card_server.serve_card()
    message = refusal(card_server.base_url, "--signing-secret", secret)
    assert expected in message


@pytest.mark.django_db
def test_signing_secret_and_generate_together_are_refused(card_server):
    card_server.serve_card()
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    message = refusal(card_server.base_url, "--signing-secret", secret, "--generate-signing-secret")
    assert "not allowed with" in message


@pytest.mark.django_db
@pytest.mark.parametrize("credential", ["abc123", "Bearer", "Bearer   "])
def test_credential_without_a_scheme_and_value_is_refused(card_server, credential):
    card_server.serve_card()
    message = refusal(card_server.base_url, "--credential", credential)
    assert '"<scheme> <value>"' in message


@pytest.mark.django_db
def test_card_with_an_overlong_name_is_refused_or_shortened(card_server):
    card_server.serve_card(name="N" * 300)
    try:
        add_agent(card_server.base_url)
    except CommandError:
        assert Agent.objects.count() == 0
    else:
        assert len(Agent.objects.get().name) <= 200
