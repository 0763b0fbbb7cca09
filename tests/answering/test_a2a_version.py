"""Version hygiene: Onlooker says which A2A version it speaks on every request (the card's GET
too), reads the version each answer declares and shows it on the agent's page when it differs,
and turns an agent's "version not supported" error into a sentence naming the versions it
does speak. Real HTTP on loopback (tests/peers/misbehaving_agent.py)."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tasks.answering import a2a_client
from tasks.answering.a2a_client import A2AError
from tasks.answering.agent_card import CARD_PATH
from tasks.models import Agent
from tests.answering.test_add_agent import agent_card
from tests.conftest import make_agent, member
from tests.peers.misbehaving_agent import Answer, MisbehavingAgent, Received

pytestmark = pytest.mark.django_db

TASK = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}
SENTENCE = "It answers as A2A 1.1; Onlooker speaks 1.0."


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; loopback servers must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def peer():
    with MisbehavingAgent() as agent:
        yield agent


@pytest.fixture
def registered(peer, ops: Group) -> Agent:
    """An agent of team ops whose calls go to the peer."""
    agent = make_agent(team=ops, name="Versioned").agent
    Agent.objects.filter(pk=agent.pk).update(
        card_url=peer.base_url + CARD_PATH, rpc_url=peer.rpc_url
    )
    return Agent.objects.get(pk=agent.pk)


def answers_as(peer: MisbehavingAgent, version: str | None) -> None:
    """From now on the peer's JSON-RPC answers declare `version` (None: no header)."""
    peer.answer(
        {"jsonrpc": "2.0", "result": TASK},
        headers={"A2A-Version": version} if version is not None else None,
    )


def called(agent: Agent) -> Agent:
    """The agent after one call to it, as stored."""
    a2a_client.get_task(agent, "t1")
    return Agent.objects.get(pk=agent.pk)


def agent_page(agent: Agent, ops: Group) -> str:
    client = Client()
    client.force_login(member("viewer", ops))
    return client.get(f"/agents/{agent.pk}/").content.decode()


def error_of(peer: MisbehavingAgent, error: dict, *, status: int = 200) -> A2AError:
    peer.answer({"jsonrpc": "2.0", "error": error}, status=status)
    with pytest.raises(A2AError) as raised:
        a2a_client.get_task(Agent(name="x", rpc_url=peer.rpc_url), "t1")
    return raised.value


# -- what Onlooker sends ----------------------------------------------------------------------


def test_reading_an_agents_card_says_which_a2a_version_onlooker_speaks(peer):
    peer.answer(agent_card(rpc_url=peer.rpc_url))

    call_command("add_agent", peer.base_url, stdout=io.StringIO())

    [request] = peer.requests
    assert (request.method, request.path) == ("GET", CARD_PATH)
    assert request.headers["a2a-version"] == "1.0"
    assert Agent.objects.get().answered_version == ""


# -- what the agent answers as -----------------------------------------------------------------


def test_an_answer_as_another_version_is_kept_and_shown_on_the_agents_page(peer, registered, ops):
    answers_as(peer, "1.1")
    assert called(registered).answered_version == "1.1"
    assert SENTENCE in agent_page(registered, ops)


def test_a_later_answer_as_1_0_clears_it_and_the_page_no_longer_says_so(peer, registered, ops):
    answers_as(peer, "1.1")
    agent = called(registered)
    answers_as(peer, "1.0")
    assert called(agent).answered_version == ""
    page = agent_page(registered, ops)
    assert "It answers as A2A" not in page
    assert "data-agent-answered-version" not in page


@pytest.mark.parametrize(
    ("declared", "kept"),
    [("1.0", ""), ("1.0.3", ""), (None, ""), ("banana", ""), ("0.3", "0.3"), ("2.0.1", "2.0")],
)
def test_major_and_minor_decide_whether_an_answer_differs(peer, registered, declared, kept):
    Agent.objects.filter(pk=registered.pk).update(answered_version="9.9")
    registered.answered_version = "9.9"
    answers_as(peer, declared)
    assert called(registered).answered_version == kept


def test_the_version_is_written_only_when_it_changes(peer, registered):
    answers_as(peer, "1.1")
    agent = called(registered)
    with CaptureQueriesContext(connection) as queries:
        a2a_client.get_task(agent, "t1")
        a2a_client.get_task(agent, "t1")
    assert [q["sql"] for q in queries.captured_queries if "answered_version" in q["sql"]] == []
    answers_as(peer, "1.0")
    with CaptureQueriesContext(connection) as queries:
        a2a_client.get_task(agent, "t1")
    assert len([q for q in queries if "answered_version" in q["sql"]]) == 1


def test_an_error_page_without_the_header_does_not_clear_it(peer, registered):
    answers_as(peer, "1.1")
    agent = called(registered)
    peer.answer(b"<h1>Bad gateway</h1>", status=502, content_type="text/html")
    with pytest.raises(A2AError):
        a2a_client.get_task(agent, "t1")
    assert Agent.objects.get(pk=agent.pk).answered_version == "1.1"


def test_a_version_error_naming_its_version_is_kept_too(peer, registered):
    peer.answer(
        {"jsonrpc": "2.0", "error": {"code": -32009, "message": "unsupported"}},
        status=400,
        headers={"A2A-Version": "0.3"},
    )
    with pytest.raises(A2AError):
        a2a_client.get_task(registered, "t1")
    assert Agent.objects.get(pk=registered.pk).answered_version == "0.3"


# -- an agent that does not speak 1.0 -----------------------------------------------------------


def test_the_a2a_sdks_version_error_names_the_version_the_agent_speaks(peer):
    error = error_of(
        peer,
        {
            "code": -32009,
            "message": "A2A version '1.0' is not supported by this handler. "
            "Expected version '0.3'.",
        },
    )
    assert str(error) == "the agent does not speak A2A 1.0 (it supports 0.3)"
    assert error.code == -32009


def test_an_invalid_request_naming_supported_versions_becomes_the_same_sentence(peer):
    error = error_of(
        peer,
        {"code": -32600, "message": "Invalid Request: supported versions: 0.3, 0.2.1"},
        status=400,
    )
    assert str(error) == "the agent does not speak A2A 1.0 (it supports 0.3, 0.2)"
    assert (error.code, error.http_status) == (-32600, 400)


def test_versions_named_in_the_errors_data_count_too(peer):
    error = error_of(
        peer,
        {
            "code": -32600,
            "message": "Unsupported protocol version",
            "data": {"supportedVersions": ["0.3"]},
        },
    )
    assert str(error) == "the agent does not speak A2A 1.0 (it supports 0.3)"


@pytest.mark.parametrize(
    ("error", "sentence"),
    [
        (
            {"code": -32600, "message": "Invalid Request"},
            "the agent answered an error: Invalid Request",
        ),
        (  # numbers in an error that is not about versions are not versions
            {"code": -32600, "message": "field 2.5 is out of range"},
            "the agent answered an error: field 2.5 is out of range",
        ),
        ({"code": -32009, "message": "Version not supported"}, "the agent does not speak A2A 1.0"),
        (  # it speaks 1.0 and took the request for another version: nothing else to name
            {
                "code": -32009,
                "message": "A2A version '0.3' is not supported by this handler. "
                "Expected version '1.0'.",
            },
            "the agent does not speak A2A 1.0",
        ),
        (  # it names only the version it refuses: no other to name
            {"code": -32009, "message": "A2A version '1.0' is not supported"},
            "the agent does not speak A2A 1.0",
        ),
    ],
)
def test_without_another_version_named_the_sentence_is_as_before(peer, error, sentence):
    assert str(error_of(peer, error)) == sentence


def test_what_an_agent_calls_a_version_list_is_bounded(peer):
    message = "supported versions: " + ", ".join(f"0.{n}" for n in range(1, 200))
    error = error_of(peer, {"code": -32600, "message": message})
    assert str(error) == "the agent does not speak A2A 1.0 (it supports 0.1, 0.2, 0.3, 0.4, 0.5)"


def test_sync_agents_says_the_agent_does_not_speak_1_0_and_which_it_does(peer, registered):
    def answer(received: Received) -> Answer:
        if received.method == "GET":
            return Answer(body=agent_card(rpc_url=peer.rpc_url))
        return Answer(
            status=400,
            body={
                "jsonrpc": "2.0",
                "id": received.json()["id"],
                "error": {
                    "code": -32009,
                    "message": "A2A version '1.0' is not supported by this handler. "
                    "Expected version '0.3'.",
                },
            },
        )

    peer.answer_each(answer)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError):
        call_command("sync_agents", stdout=out, stderr=err)
    said = out.getvalue() + err.getvalue()
    [line] = [line for line in said.splitlines() if line.startswith("Versioned")]
    assert "the agent does not speak A2A 1.0 (it supports 0.3)" in line
