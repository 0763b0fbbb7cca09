"""The subject-scoped approval peer (tests/peers/subject_agent.py) for the tests of syncing and
following as a person: alice has her own token at the agent, Onlooker's shared credential is
another subject ("onlooker"), and alice starts and approves tasks directly at the agent, the
way she would from another client ("tasks she started elsewhere")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from django.contrib.auth.models import Group, User

from tasks.answering import agents
from tasks.models import Agent, PersonalCredential
from tests.answering.test_a2a_peer import wait_for
from tests.peers import approval_agent
from tests.peers.subject_agent import SubjectAgent
from tests.processes import free_port

ALICE = "alice-token"
SHARED = "shared-token"
LOST = "http://127.0.0.1:9/a2a/push/lost/"  # the discard port: pushes there go nowhere


@pytest.fixture
def subject_peer() -> Iterator[SubjectAgent]:
    peer = SubjectAgent(free_port(), tokens={ALICE: "alice", SHARED: "onlooker"})
    yield peer
    peer.stop()


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; loopback servers must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


def registered(peer: SubjectAgent, team: Group, *, per_person: bool = False) -> Agent:
    """The peer as an agent of `team`, called with the shared credential unless a person's."""
    agent = agents.register(
        peer.card_url, credential=f"Bearer {SHARED}", per_person=per_person
    ).agent
    agent.team = team
    agent.save(update_fields=["team"])
    return agent


def connect(user: User, agent: Agent, token: str = ALICE) -> PersonalCredential:
    """A person's own token for the agent, as the settings page would keep it."""
    return PersonalCredential.objects.create(user=user, agent=agent, kind="token", secret=token)


def rpc(peer: SubjectAgent, token: str, method: str, params: dict) -> dict:
    """A JSON-RPC call straight to the agent, outside Onlooker, as whoever holds `token`."""
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {token}"}
    answer = httpx.post(peer.rpc_url, json=body, headers=headers, timeout=10, trust_env=False)
    answer.raise_for_status()
    reply = answer.json()
    assert "error" not in reply, reply
    return reply["result"]


def start_task(peer: SubjectAgent, token: str = ALICE) -> dict:
    """A task started at the agent by whoever holds `token`, pushing nowhere Onlooker hears;
    returned once it waits for the approval."""
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "Go"}]}
    config = {"id": f"elsewhere-{uuid.uuid4().hex[:8]}", "url": LOST}
    configuration = {"returnImmediately": True, "taskPushNotificationConfig": config}
    task = rpc(peer, token, "SendMessage", {"message": message, "configuration": configuration})
    task = task["task"]
    wait_for_state(peer, token, task["id"], "TASK_STATE_AUTH_REQUIRED")
    return task


def approve(peer: SubjectAgent, task: dict, token: str = ALICE) -> None:
    message = approval_agent.approval_message(task)
    configuration = {"returnImmediately": True}
    rpc(peer, token, "SendMessage", {"message": message, "configuration": configuration})


def wait_for_state(peer: SubjectAgent, token: str, task_id: str, state: str) -> None:
    wait_for(
        lambda: rpc(peer, token, "GetTask", {"id": task_id})["status"]["state"] == state,
        f"the agent's task to be {state}",
    )


def sent_since(peer: SubjectAgent, mark: int) -> list[tuple[str, str, str | None]]:
    """(method, credential, subject) of each call the agent received after `mark` calls:
    what Onlooker sent, when the test itself called nothing in between."""
    return [(call.method, call.credential, call.subject) for call in peer.calls[mark:]]
