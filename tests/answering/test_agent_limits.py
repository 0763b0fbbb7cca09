"""No agent can exhaust the server (issue 29 §3): every call to an agent ends by its deadline
(ONLOOKER_AGENT_CALL_SECONDS, connecting, sending and reading the whole reply) and reads at
most its size limit (ONLOOKER_AGENT_REPLY_BYTES; a card MAX_CARD_BYTES), decompressed.

Through the real views where a person acts (Approve on the session page, Refresh on the agent
page), against a hostile loopback agent (tests/peers/hostile_agent.py) whose every reply
would be a valid answer if read in full. Past a limit the person reads why, memory stays
flat, nothing of the reply is applied, and the one-decision rule holds: the agent had the
request, so the answer stays bound, and a retry of it works once the agent behaves; only
when the deadline passes before a connection exists is nothing sent, and the question open.
The deadline is made one second here, so no test waits fifteen.
"""

from __future__ import annotations

import html
import socket
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from django.test import Client

from tasks.answering import a2a_client, agent_http
from tasks.models import Agent, Interaction, Task
from tests.answering.test_answers import answer, person, sent_messages, waiting_interaction
from tests.conftest import make_agent
from tests.peers.hostile_agent import MB, HostileAgent
from tests.web.test_agent_page import flash

DEADLINE = 1  # seconds, for every call in these tests
LIMIT = "4 MiB"  # ONLOOKER_AGENT_REPLY_BYTES' default, said in words
# What a call may hold at its peak: the reply up to the limit, a copy, and the request's own.
FLAT = 16 * MB


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; the loopback agent must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def one_second_deadline(settings, request):
    # The tests of a deadline wait for a short one; those of size have the default, so a
    # machine busy with other tests never turns their "too large" into "too slow".
    if "deadline" in request.node.name:
        settings.ONLOOKER_AGENT_CALL_SECONDS = DEADLINE


@pytest.fixture
def hostile() -> Iterator[HostileAgent]:
    with HostileAgent() as agent:
        yield agent


@pytest.fixture
def alice(ops, approvers) -> Client:
    return person("alice", ops, approvers)


@dataclass
class Traced:
    peak: int = 0  # bytes allocated at the most, above what was allocated before


@contextmanager
def traced() -> Iterator[Traced]:
    """The peak of Python's allocations (every thread's) while in it, once it is left."""
    measured = Traced()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        yield measured
        measured.peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def bound_and_not_applied(client: Client, interaction: Interaction, words: str) -> None:
    """The agent may have the answer: it stays bound to it, nothing of the reply was applied,
    and the page says why the last try failed."""
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.SENT
    assert interaction.answer == {"approved": True}
    assert Task.objects.get().state == "TASK_STATE_AUTH_REQUIRED"  # the reply said COMPLETED
    page = html.unescape(client.get(f"/sessions/{interaction.task.session_id}/").content.decode())
    assert f"Last try: {words}" in page
    assert "Retry sending Approve" in page and 'value="deny"' not in page


def retry_works(client: Client, interaction: Interaction, hostile: HostileAgent) -> None:
    """Once the agent answers within the limits, the same decision goes again and is taken."""
    code, data = answer(client, interaction, decision="approve")
    assert code == 200, data
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.ANSWERED
    first, *_, last = sent_messages(hostile)
    assert first == last  # the identical message, the same messageId


# -- the size limit -------------------------------------------------------------------------


def test_an_approve_against_an_agent_replying_60_mb_stops_at_the_limit_with_memory_flat(
    alice, hostile, ops
):
    interaction = waiting_interaction(hostile, ops)
    hostile.floods("POST", 60 * MB)  # chunked: no length said up front, so it is counted

    with traced() as memory:
        code, data = answer(alice, interaction, decision="approve")

    assert memory.peak < FLAT, f"{memory.peak / MB:.1f} MiB held for a 60 MB reply"
    words = f"the agent's reply was larger than {LIMIT}"
    assert code == 502 and data["detail"].startswith(f"Not confirmed: {words}."), data
    bound_and_not_applied(alice, interaction, words)
    hostile.floods("POST", 3 * MB)  # under the limit: read like any reply
    retry_works(alice, interaction, hostile)


def test_an_approve_against_an_agent_declaring_60_mb_is_refused_before_reading_any(
    alice, hostile, ops
):
    interaction = waiting_interaction(hostile, ops)
    hostile.declares("POST", 60 * MB)

    with traced() as memory:
        code, data = answer(alice, interaction, decision="approve")

    # Not one body read held: what the request itself allocates, under half the limit.
    assert memory.peak < 2 * MB, f"{memory.peak / MB:.1f} MiB held for a declared 60 MB reply"
    words = f"the agent's reply was larger than {LIMIT}"
    assert code == 502 and data["detail"].startswith(f"Not confirmed: {words}."), data
    bound_and_not_applied(alice, interaction, words)
    hostile.answers("POST")
    retry_works(alice, interaction, hostile)


def test_an_approve_against_a_gzip_bomb_stops_at_the_limit_as_it_inflates(alice, hostile, ops):
    interaction = waiting_interaction(hostile, ops)
    hostile.bombs("POST", 60 * MB)  # tens of KB on the wire, 60 MB inflated

    with traced() as memory:
        code, data = answer(alice, interaction, decision="approve")

    assert memory.peak < FLAT, f"{memory.peak / MB:.1f} MiB held for a 60 MB gzip bomb"
    words = f"the agent's reply was larger than {LIMIT}"
    assert code == 502 and data["detail"].startswith(f"Not confirmed: {words}."), data
    bound_and_not_applied(alice, interaction, words)
    hostile.bombs("POST", 3 * MB)  # gzip that inflates within the limit is read
    retry_works(alice, interaction, hostile)


# -- the deadline ---------------------------------------------------------------------------


@pytest.mark.parametrize("head", [False, True], ids=["body", "headers"])
def test_an_approve_against_a_trickling_agent_fails_at_the_deadline_and_a_retry_works(
    alice, hostile, ops, monkeypatch, head
):
    # Each byte comes well within a read timeout: only the call's deadline can end it.
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.5)
    interaction = waiting_interaction(hostile, ops)
    hostile.trickles("POST", every=0.2, lasting=10, head=head)

    started = time.monotonic()
    code, data = answer(alice, interaction, decision="approve")
    took = time.monotonic() - started

    assert DEADLINE <= took < DEADLINE + 2, f"the Approve took {took:.1f} s"
    words = f"the agent's reply did not arrive in full within {DEADLINE} s"
    assert code == 502 and data["detail"].startswith(f"Not confirmed: {words}."), data
    bound_and_not_applied(alice, interaction, words)
    hostile.answers("POST")
    retry_works(alice, interaction, hostile)


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A loopback port whose listener never accepts and whose queue is full: a connection
    to it is never made, the way a host that drops packets behaves."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    fillers = [socket.socket() for _ in range(3)]
    for filler in fillers:
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
    yield listener.getsockname()[1]
    for opened in (*fillers, listener):
        opened.close()


def test_an_approve_whose_deadline_passes_while_connecting_was_not_sent_and_stays_open(
    alice, ops, unanswered_port
):
    nowhere = SimpleNamespace(rpc_url=f"http://127.0.0.1:{unanswered_port}/a2a/jsonrpc")
    interaction = waiting_interaction(nowhere, ops)

    started = time.monotonic()
    code, data = answer(alice, interaction, decision="approve")
    took = time.monotonic() - started

    # The deadline, not the 5 s connect timeout; nothing reached the agent, so any decision.
    assert DEADLINE <= took < DEADLINE + 2, f"the Approve took {took:.1f} s"
    assert code == 502 and data["detail"].startswith("Not sent: could not connect"), data
    assert f"within {DEADLINE} s; you can answer again." in data["detail"]
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN


# -- the card -------------------------------------------------------------------------------


def agent_on(hostile: HostileAgent, ops) -> Agent:
    """A registered agent of ops' team whose card and JSON-RPC URL are the hostile agent's."""
    agent = make_agent(team=ops).agent
    agent.card_url, agent.rpc_url = hostile.card_url, hostile.rpc_url
    agent.description = "Drafts release notes"
    agent.save()
    return agent


def refresh(client: Client, agent: Agent) -> str:
    """Refresh from the agent, as its page's button posts; the page message it leaves."""
    return flash(client.post(f"/agents/{agent.pk}/refresh/"))


def card_unchanged(agent: Agent, words: str) -> None:
    agent.refresh_from_db()
    assert agent.description == "Drafts release notes" and agent.card_fetched_at is None
    assert agent.last_error == words


def test_a_card_refresh_against_a_60_mb_card_stops_at_the_card_limit_and_changes_nothing(
    alice, hostile, ops
):
    agent = agent_on(hostile, ops)
    hostile.floods("GET", 60 * MB)

    with traced() as memory:
        said = refresh(alice, agent)

    assert memory.peak < FLAT, f"{memory.peak / MB:.1f} MiB held for a 60 MB card"
    words = f"the agent card at {hostile.card_url} was larger than 1 MiB"
    assert said.startswith(f"Refresh failed: its card could not be read again: {words}."), said
    card_unchanged(agent, words)


def test_a_card_refresh_against_a_trickling_card_fails_at_the_deadline(
    alice, hostile, ops, monkeypatch
):
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.5)
    agent = agent_on(hostile, ops)
    hostile.trickles("GET", every=0.2, lasting=10)

    started = time.monotonic()
    said = refresh(alice, agent)
    took = time.monotonic() - started

    # The card's deadline, then the task list the agent answers at once.
    assert DEADLINE <= took < DEADLINE + 2, f"the refresh took {took:.1f} s"
    words = f"the agent card at {hostile.card_url} did not arrive in full within {DEADLINE} s"
    assert said.startswith(f"Refresh failed: its card could not be read again: {words}."), said
    card_unchanged(agent, words)


# -- compressed replies -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "body", "words"),
    [
        pytest.param(
            "br",
            {"jsonrpc": "2.0", "result": {"id": "task-1", "contextId": "ctx-1"}},
            "the agent's reply came encoded as 'br', which Onlooker does not read",
            id="not-asked-for",
        ),
        pytest.param("gzip", b"not gzip at all", "the agent's reply was not valid gzip", id="bad"),
    ],
)
def test_a_reply_onlooker_cannot_inflate_within_the_limit_is_refused_in_words(
    agent_stub, encoding, body, words
):
    agent_stub.answer(body, headers={"Content-Encoding": encoding})
    agent = Agent(name="test", rpc_url=agent_stub.rpc_url, extensions=[], credential="")

    with pytest.raises(a2a_client.A2AError) as error:
        a2a_client.get_task(agent, "task-1")

    assert str(error.value) == words
    # gzip is all Onlooker asks for: it is what it inflates a chunk at a time.
    assert agent_stub.requests[-1].headers["accept-encoding"] == "gzip"
