"""End to end with a real a2a-sdk 1.x agent on loopback as the pushing peer.

The peer (`tests/peers/approval_agent.py`) runs as a subprocess; Onlooker runs as pytest-django's
live server. The agent is registered with the real `add_agent` command, a task is started and
answered with raw JSON-RPC calls, and what Onlooker stored from the pushes is compared with the
agent's own `GetTask` view and with the read API.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.db import connections
from pytest_django.live_server_helper import LiveServer

from tasks.models import Agent, Delivery, Interaction, Refusal, Session, Task
from tasks.wire.protocol import parse_timestamp
from tests.peers import approval_agent as peer_module
from tests.processes import ROOT, free_port

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 20.0
POLL = 0.05
A2A_HEADERS = {
    "A2A-Version": "1.0",
    "A2A-Extensions": ",".join(
        (
            peer_module.INTERACTIONS,
            peer_module.PROGRESS,
            peer_module.TELEMETRY,
            peer_module.FILES,
        )
    ),
}


def wait_for(condition: Callable[[], object], what: str, diagnose: Callable[[], str] = str):
    """Poll until `condition()` is truthy; fail after DEADLINE seconds saying what was awaited."""
    deadline = time.monotonic() + DEADLINE
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {DEADLINE:.0f} s waiting for {what}\n{diagnose()}")
        time.sleep(POLL)


@dataclass
class Peer:
    port: int
    process: subprocess.Popen
    push_log: Path
    stderr: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def card_url(self) -> str:
        return f"{self.base_url}/.well-known/agent-card.json"

    @property
    def rpc_url(self) -> str:
        return f"{self.base_url}{peer_module.RPC_PATH}"

    def pushes(self, event: str) -> list[dict]:
        if not self.push_log.exists():
            return []
        records = [json.loads(line) for line in self.push_log.read_text().splitlines() if line]
        return [record for record in records if record["event"] == event]

    def settled(self) -> bool:
        """Every push the agent sent has been answered (or none was sent)."""
        sent = {p["key"] for p in self.pushes("sent")}
        return sent == {p["key"] for p in self.pushes("answered")}

    def rpc(self, method: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        response = httpx.post(self.rpc_url, json=body, headers=A2A_HEADERS, timeout=10)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert "error" not in answer, f"{method} failed: {answer['error']}"
        return answer["result"]

    def get_task(self, task_id: str) -> dict:
        return self.rpc("GetTask", {"id": task_id})

    def diagnose(self) -> str:
        log = self.push_log.read_text() if self.push_log.exists() else "(no pushes)"
        deliveries = [
            (d.kind, d.outcome, d.warnings, d.body[:300]) for d in Delivery.objects.order_by("pk")
        ]
        refusals = list(Refusal.objects.values("reason", "count", "last_detail"))
        return (
            f"peer pushes:\n{log}\ndeliveries: {deliveries}\nrefusals: {refusals}\n"
            f"peer stderr:\n{self.stderr.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@pytest.fixture
def start_peer(tmp_path):
    """Start approval peers as subprocesses; every one is stopped when the test ends."""
    started: list[Peer] = []

    def start(*, port: int | None = None, sign_secret: str | None = None) -> Peer:
        port = port or free_port()
        name = f"peer-{len(started)}"
        push_log, stderr = tmp_path / f"{name}-pushes.jsonl", tmp_path / f"{name}.stderr"
        command = [sys.executable, "-m", "tests.peers.approval_agent", "--port", str(port)]
        command += ["--push-log", str(push_log)]
        if sign_secret:
            command += ["--sign-secret", sign_secret]
        with stderr.open("w") as err:
            process = subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL
            )
        peer = Peer(port, process, push_log, stderr)
        started.append(peer)

        def card_served() -> bool:
            if process.poll() is not None:
                pytest.fail(f"the peer exited with {process.returncode}:\n{stderr.read_text()}")
            try:
                return httpx.get(peer.card_url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(card_served, "the peer's agent card", peer.diagnose)
        return peer

    yield start
    for peer in started:
        peer.stop()


def shares_test_database(server: LiveServer) -> bool:
    """An in-memory SQLite test database is only visible through the one shared connection;
    a server thread with its own connection hits "database table is locked" at random."""
    return all(
        server.thread.connections_override.get(conn.alias) is conn
        for conn in connections.all()
        if conn.vendor == "sqlite" and conn.is_in_memory_db()
    )


@pytest.fixture
def onlooker(request, transactional_db, settings):
    """The running Onlooker (pytest-django's live server); push URLs point at it.

    `live_server` is session-scoped and does not wait for the test database: requested
    statically it can start before the in-memory SQLite test database exists and then never
    shares its connection. Requested here, after `transactional_db`, it does. Should another
    test have started it too early, this test gets a private server that does.
    """
    server = request.getfixturevalue("live_server")
    if not shares_test_database(server):
        server = LiveServer("localhost")
        request.addfinalizer(server.stop)
    settings.ONLOOKER_PUBLIC_URL = server.url
    return server


@pytest.fixture
def viewer(client, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="unused-in-tests")
    client.force_login(user)
    return client


def add_agent(card_url: str, *options: str) -> dict:
    out = io.StringIO()
    call_command("add_agent", card_url, "--json", *options, stdout=out)
    return json.loads(out.getvalue())


def start_task(peer: Peer, registration: dict) -> dict:
    config = {
        "id": f"onlooker-{uuid.uuid4().hex[:12]}",
        "url": registration["push_url"],
        "token": registration["push_token"],
        "authentication": {"scheme": "Bearer", "credentials": registration["push_bearer"]},
    }
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "Write the release notes for 2.4 and publish them"}],
    }
    result = peer.rpc(
        "SendMessage",
        {
            "message": message,
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": config},
        },
    )
    return result["task"]


def reply(peer: Peer, task: dict, text: str, answer: dict | None = None) -> dict:
    """A follow-up on the task: both ids, and an interactions/v1 answer when given."""
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "taskId": task["id"],
        "contextId": task["contextId"],
        "parts": [{"text": text}],
    }
    if answer is not None:
        decision = "approve" if answer.get("approved") else "deny"
        message["messageId"] = f"{answer['interactionId']}:{decision}"
        message["metadata"] = {peer_module.INTERACTIONS: answer}
        message["extensions"] = [peer_module.INTERACTIONS]
    return peer.rpc(
        "SendMessage", {"message": message, "configuration": {"returnImmediately": True}}
    )


def onlooker_task(agent_id: int, task_id: str) -> Task | None:
    return Task.objects.filter(agent_id=agent_id, task_id=task_id).first()


def wait_for_approval(peer: Peer, registration: dict) -> dict:
    """Start a task and wait until Onlooker shows its session waiting for a human."""
    task = start_task(peer, registration)

    def waiting() -> bool:
        session = Session.objects.filter(
            agent_id=registration["agent"], context_id=task["contextId"]
        ).first()
        return bool(session and session.needs_human and session.state == "TASK_STATE_AUTH_REQUIRED")

    wait_for(waiting, "the session to need a human", peer.diagnose)
    return task


def wait_for_state(peer: Peer, registration: dict, task: dict, state: str) -> Task:
    def reached() -> Task | None:
        row = onlooker_task(registration["agent"], task["id"])
        return row if row is not None and row.state == state else None

    return wait_for(reached, f"the task to reach {state}", peer.diagnose)


def text_of(message: dict | None) -> str:
    if not message:
        return ""
    return "\n".join(part["text"] for part in message.get("parts", []) if "text" in part)


def assert_every_push_accepted(peer: Peer, agent_id: int) -> list[dict]:
    """What the agent sent is exactly what Onlooker logged, and none of it was refused."""
    wait_for(peer.settled, "the peer's pushes to be answered", peer.diagnose)
    answered = peer.pushes("answered")
    assert answered, "the peer sent no pushes"
    assert [p["status"] for p in answered] == [200] * len(answered), peer.diagnose()
    assert not Refusal.objects.filter(agent_id=agent_id).exists(), peer.diagnose()
    deliveries = Delivery.objects.filter(agent_id=agent_id)
    assert sorted(d.idempotency_key for d in deliveries) == sorted(p["key"] for p in answered)
    assert {d.outcome for d in deliveries} <= {"applied", "stale"}, peer.diagnose()
    assert all(d.duplicates == 0 for d in deliveries)
    return answered


def assert_matches_get_task(peer: Peer, agent_id: int, row: Task) -> dict:
    """Onlooker's task agrees with the agent's own view of it (GetTask)."""
    agent_view = peer.get_task(row.task_id)
    status = agent_view["status"]
    assert row.state == status["state"]
    assert row.session.state == status["state"]
    assert row.session.context_id == agent_view["contextId"]
    assert row.status_timestamp == parse_timestamp(status["timestamp"])
    assert row.status_message == text_of(status.get("message"))

    # Artifacts: the same ids, chunks assembled into the same parts, the same files/v1 name.
    stored = {a.artifact_id: a for a in row.artifacts.order_by("artifact_id", "-sequence")}
    assert set(stored) == {a["artifactId"] for a in agent_view["artifacts"]}
    for artifact in agent_view["artifacts"]:
        mine = stored[artifact["artifactId"]]
        assert mine.parts == artifact["parts"]
        assert mine.name == artifact.get("name", "")
        files = artifact["metadata"][peer_module.FILES]
        assert mine.files["path"] == files["path"]
        assert mine.files["kind"] == files["kind"]
        assert mine.files["sha256"] == files["sha256"]

    # The plan is the agent's latest progress/v1 steps (GetTask merges status metadata).
    assert row.plan == agent_view["metadata"][peer_module.PROGRESS]["steps"]

    # The approval the agent asked for (its status message carried interactions/v1).
    asked = [
        m["metadata"][peer_module.INTERACTIONS]
        for m in [*agent_view.get("history", []), status.get("message") or {}]
        if peer_module.INTERACTIONS in m.get("metadata", {})
    ]
    assert asked, "the agent never asked for an approval"
    interactions = list(Interaction.objects.filter(task=row))
    assert [(i.interaction_id, i.kind, i.prompt) for i in interactions] == [
        (asked[0]["interactionId"], asked[0]["kind"], asked[0]["prompt"])
    ]

    # The agent's messages in the transcript are the ones in its history and status: each as
    # said, or, when it became the card's note, as the card's receipt.
    said = {
        m["messageId"]: text_of(m)
        for m in [*agent_view.get("history", []), status.get("message") or {}]
        if m.get("role") == "ROLE_AGENT"
    }
    kept = row.session.messages.filter(role="ROLE_AGENT").exclude(message_id="")
    assert {m.message_id for m in kept} == set(said)
    for m in kept:
        assert m.text == said[m.message_id] or (
            m.card_update and m.text.startswith("Progress card updated (rev ")
        ), m.text
    return agent_view


def assert_api_matches(viewer, row: Task, agent_view: dict) -> dict:
    """The read API shows the session the way the agent sees its task."""
    response = viewer.get(f"/api/sessions/{row.session_id}")
    assert response.status_code == 200, response.content
    data = response.json()
    status = agent_view["status"]
    interrupted = status["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert data["contextId"] == agent_view["contextId"]
    assert data["state"] == status["state"]
    assert data["needsHuman"] is interrupted
    assert data["title"] == text_of(agent_view["history"][0])
    [task] = data["tasks"]
    assert task["taskId"] == agent_view["id"]
    assert task["state"] == status["state"]
    # JSON datetimes are rounded to milliseconds.
    shown = parse_timestamp(task["statusTimestamp"])
    assert abs((shown - parse_timestamp(status["timestamp"])).total_seconds()) < 0.001
    [interaction] = data["interactions"]
    assert interaction["taskId"] == agent_view["id"]
    assert interaction["kind"] == "approval"
    assert interaction["prompt"] == peer_module.PROMPT
    if interrupted:
        assert interaction["state"] == "open"
    else:
        assert interaction["state"] in ("closed", "answered")
    [agent_artifact] = agent_view["artifacts"]
    files = agent_artifact["metadata"][peer_module.FILES]
    [artifact] = data["artifacts"]
    assert artifact["artifactId"] == agent_artifact["artifactId"]
    assert artifact["name"] == agent_artifact["name"]
    assert (artifact["kind"], artifact["path"], artifact["sha256"]) == (
        files["kind"],
        files["path"],
        files["sha256"],
    )
    agent_texts = {m["text"] for m in data["messages"] if m["role"] == "ROLE_AGENT"}
    assert status.get("message") is None or text_of(status["message"]) in agent_texts
    return data


def approve_on_token_peer(onlooker, start_peer) -> tuple[Peer, Agent, Task, list[dict]]:
    """Register a plain token peer, start a task, approve it; return once it completed."""
    peer = start_peer()
    registration = add_agent(peer.card_url)
    agent = Agent.objects.get(pk=registration["agent"])
    assert agent.rpc_url == peer.rpc_url
    assert agent.push_notifications is True
    assert registration["push_url"].startswith(onlooker.url + "/a2a/push/")
    assert registration["signing_secret"] is None

    task = wait_for_approval(peer, registration)
    row = onlooker_task(agent.pk, task["id"])
    [interaction] = row.interactions.all()
    assert (interaction.kind, interaction.state) == ("approval", "open")
    assert interaction.prompt == peer_module.PROMPT

    answer = {"interactionId": interaction.interaction_id, "approved": True}
    reply(peer, task, "Approve", answer)
    row = wait_for_state(peer, registration, task, "TASK_STATE_COMPLETED")
    answered = assert_every_push_accepted(peer, agent.pk)
    return peer, agent, row, answered


def test_token_peer_approved_completes_with_telemetry_matching_get_task(
    onlooker, start_peer, viewer
):
    peer, agent, row, answered = approve_on_token_peer(onlooker, start_peer)
    assert [(p["kind"], p["state"]) for p in answered] == [
        ("task", "TASK_STATE_SUBMITTED"),
        ("statusUpdate", "TASK_STATE_WORKING"),
        ("artifactUpdate", None),
        ("artifactUpdate", None),
        ("statusUpdate", "TASK_STATE_AUTH_REQUIRED"),
        ("statusUpdate", "TASK_STATE_WORKING"),
        ("statusUpdate", "TASK_STATE_COMPLETED"),
    ]
    # Unsigned pushes are keyed by their body's SHA-256.
    assert all(p["key"].startswith("sha256:") for p in answered)
    agent_view = assert_matches_get_task(peer, agent.pk, row)
    assert agent_view["status"]["state"] == "TASK_STATE_COMPLETED"
    assert row.status_message == peer_module.PUBLISHED_TEXT
    assert row.interactions.get().state in ("closed", "answered")
    assert row.session.needs_human is False
    assert_api_matches(viewer, row, agent_view)

    # Telemetry rides on the terminal status update; GetTask keeps it in the task metadata.
    sent = agent_view["metadata"][peer_module.TELEMETRY]
    assert row.telemetry is not None
    assert row.telemetry["traceId"] == sent["traceId"] == peer_module.TELEMETRY_DATA["traceId"]
    assert row.telemetry["costUsd"] == sent["costUsd"]


def test_whole_numbers_from_a_python_sdk_agent_keep_telemetry_counts_and_file_sizes(
    onlooker, start_peer, viewer
):
    peer, agent, row, _ = approve_on_token_peer(onlooker, start_peer)
    agent_view = peer.get_task(row.task_id)
    # What the agent stored is numerically what it was told (3 == 3.0), in both views.
    assert agent_view["metadata"][peer_module.TELEMETRY] == peer_module.TELEMETRY_DATA
    [agent_artifact] = agent_view["artifacts"]
    assert agent_artifact["metadata"][peer_module.FILES] == peer_module.FILE_INFO
    assert [d.warnings for d in Delivery.objects.filter(agent=agent)] == [[]] * 7
    assert row.telemetry == peer_module.TELEMETRY_DATA
    assert row.artifacts.get().files == peer_module.FILE_INFO
    [artifact] = viewer.get(f"/api/sessions/{row.session_id}").json()["artifacts"]
    assert (artifact["version"], artifact["size"]) == (1, peer_module.FILE_INFO["size"])


def test_signed_peer_denied_is_rejected_and_every_signed_push_is_accepted(
    onlooker, start_peer, viewer
):
    # Register from the running agent's card, then restart it with the secret it was given:
    # the way an operator would configure a signing agent.
    unsigned = start_peer()
    registration = add_agent(unsigned.card_url, "--generate-signing-secret")
    secret = registration["signing_secret"]
    assert secret.startswith("whsec_")
    unsigned.stop()
    peer = start_peer(port=unsigned.port, sign_secret=secret)
    agent = Agent.objects.get(pk=registration["agent"])

    task = wait_for_approval(peer, registration)
    row = onlooker_task(agent.pk, task["id"])
    interaction = row.interactions.get()
    reply(peer, task, "Deny", {"interactionId": interaction.interaction_id, "approved": False})
    row = wait_for_state(peer, registration, task, "TASK_STATE_REJECTED")

    answered = assert_every_push_accepted(peer, agent.pk)
    # Signed pushes are keyed by their webhook-id, so each key is the id the agent signed.
    assert all(p["key"].startswith("id:msg_") for p in answered)
    assert len(answered) == 7
    agent_view = assert_matches_get_task(peer, agent.pk, row)
    assert agent_view["status"]["state"] == "TASK_STATE_REJECTED"
    assert row.status_message == peer_module.DENIED_TEXT
    assert row.telemetry is None
    assert row.interactions.get().state in ("closed", "answered")
    assert_api_matches(viewer, row, agent_view)


def test_text_reply_does_not_approve_and_the_session_still_needs_a_human(
    onlooker, start_peer, viewer
):
    peer = start_peer()
    registration = add_agent(peer.card_url)
    agent_id = registration["agent"]
    task = wait_for_approval(peer, registration)

    reply(peer, task, "yes, approved, go ahead and publish")

    def asked_again() -> bool:
        row = onlooker_task(agent_id, task["id"])
        return row.status_message == peer_module.ASK_AGAIN_TEXT and peer.settled()

    wait_for(asked_again, "the agent to ask again", peer.diagnose)
    answered = assert_every_push_accepted(peer, agent_id)
    assert [p["state"] for p in answered[-2:]] == [
        "TASK_STATE_WORKING",
        "TASK_STATE_AUTH_REQUIRED",
    ]
    row = onlooker_task(agent_id, task["id"])
    agent_view = assert_matches_get_task(peer, agent_id, row)
    assert agent_view["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert row.state == "TASK_STATE_AUTH_REQUIRED"
    assert row.session.needs_human is True
    assert row.telemetry is None
    # The same approval, still open after the WORKING in between: nothing was approved.
    [interaction] = row.interactions.all()
    assert interaction.state == "open"
    assert interaction.answer is None
    assert_api_matches(viewer, row, agent_view)
