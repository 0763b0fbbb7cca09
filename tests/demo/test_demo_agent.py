"""The example agent (`demo/`) end to end, with Onlooker as the receiver.

The agent runs as a subprocess (`python -m demo.agent`, sped up) on a free loopback port and
is registered with the real `add_agent` command, signing secret and all; Onlooker is
pytest-django's live server. Tasks are started and answered with Onlooker's own A2A client,
and the tests look at what Onlooker stored from the agent's signed pushes: cards, interactions,
artifacts, deliveries. Pushes to a receiver that is down or answers 503 are checked through a
small forwarding receiver placed in front of Onlooker.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from demo import run as demo_run
from demo.agent import serve, valid_secret
from demo.executor import QUEUED_TEXT
from demo.scenarios import FOCUSES, Picker
from tasks.answering import a2a_client, agent_card
from tasks.answering.agents import new_signing_secret
from tasks.models import Agent, Delivery, ProgressCard, Refusal, Task
from tasks.wire import profile
from tasks.wire.protocol import parse_timestamp
from tests.answering.test_a2a_peer import add_agent, onlooker  # noqa: F401 - a fixture
from tests.answering.test_a2a_peer import wait_for as _wait_for
from tests.processes import ROOT, clean_environment, free_port, wait_until_listening

pytestmark = pytest.mark.django_db(transaction=True)

SPEED = 20  # a release reaches its approval in about half a second
START_TIMEOUT = 15.0
RELEASE = "Ship release 2.5.0 of the checkout service"
RESEARCH = "Research: compare PostgreSQL and SQLite for a small team"
CONNECT = "Connect the GitHub account and open the pull request"


# -- the agent --------------------------------------------------------------------------------


@dataclass
class ExampleAgent:
    port: int
    process: subprocess.Popen
    stderr: Path
    secret: str | None

    @property
    def card_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/agent-card.json"

    def log(self) -> str:
        return self.stderr.read_text()

    def delivered(self, task_id: str) -> list[str]:
        """The webhook-ids of the task's pushes the agent saw taken, in order."""
        pattern = rf"push (\S+) task {re.escape(task_id)} .* attempt \d+: delivered"
        return re.findall(pattern, self.log())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_agent(directory: Path, *options: str, secret: str | None = None) -> ExampleAgent:
    port = free_port()
    stderr = directory / f"agent-{port}.stderr"
    command = [sys.executable, "-m", "demo.agent", "--port", str(port), *options]
    if secret:
        command += ["--signing-secret", secret]
    with stderr.open("w") as err:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=clean_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    agent = ExampleAgent(port, process, stderr, secret)
    try:
        wait_until_listening(process, port, timeout=START_TIMEOUT, log=agent.log)
    except AssertionError:
        agent.stop()
        raise
    return agent


@pytest.fixture(scope="module")
def example_agent(tmp_path_factory) -> ExampleAgent:
    """One signing agent for the module: fast, with short retries (they matter only to the
    retry test; elsewhere Onlooker answers at once)."""
    options = ["--speed", str(SPEED), "--retry-first", "0.05", "--retry-max", "0.4"]
    options += ["--retry-for", "30"]
    agent = start_agent(
        tmp_path_factory.mktemp("example-agent"), *options, secret=new_signing_secret()
    )
    yield agent
    agent.stop()


@dataclass
class Registered:
    agent: Agent
    push: a2a_client.PushConfig
    example: ExampleAgent

    def diagnose(self) -> str:
        deliveries = [
            (d.kind, d.outcome, d.warnings, d.body[:200])
            for d in Delivery.objects.filter(agent=self.agent).order_by("pk")
        ]
        refusals = list(Refusal.objects.values("reason", "count", "last_detail"))
        return (
            f"deliveries: {deliveries}\nrefusals: {refusals}\n"
            f"agent stderr:\n{self.example.log()[-4000:]}"
        )

    def wait_for(self, condition: Callable[[], object], what: str):
        return _wait_for(condition, what, self.diagnose)

    def start(self, text: str, **options) -> dict:
        result = a2a_client.send_message(self.agent, text, push=self.push, **options)
        return result["task"]

    def answer(self, row: Task, data: dict | None, text: str = "An answer") -> dict:
        """A follow-up on the task; an interactions/v1 answer when `data` is given."""
        typed = {}
        if data is not None:
            typed = {"metadata": {profile.INTERACTIONS: data}, "extensions": [profile.INTERACTIONS]}
        result = a2a_client.send_message(
            self.agent, text, task_id=row.task_id, context_id=row.session.context_id, **typed
        )
        return result["task"]

    def task_in(self, task_id: str, *states: str) -> Task:
        def reached() -> Task | None:
            return Task.objects.filter(agent=self.agent, task_id=task_id, state__in=states).first()

        return self.wait_for(reached, f"task {task_id} in {' or '.join(states)}")

    def assert_pushes_signed_and_accepted(self, task_id: str) -> list[Delivery]:
        """Onlooker took every push the agent delivered for the task, keyed by the webhook-id
        it signed (a push without a valid signature is refused for a signing agent)."""

        def logged_as_stored() -> list[Delivery] | None:
            # The agent logs a push once it has Onlooker's answer, which comes after the
            # commit the test may already have seen.
            deliveries = list(Delivery.objects.filter(agent=self.agent, task_id=task_id))
            stored = sorted(d.idempotency_key for d in deliveries)
            logged = sorted(f"id:{webhook_id}" for webhook_id in self.example.delivered(task_id))
            return deliveries if stored == logged else None

        deliveries = self.wait_for(logged_as_stored, "the agent's log to match the deliveries")
        assert {d.outcome for d in deliveries} <= {"applied", "stale"}, self.diagnose()
        assert all(d.duplicates == 0 and d.warnings == [] for d in deliveries), self.diagnose()
        assert not Refusal.objects.filter(agent=self.agent).exists(), self.diagnose()
        # One line per attempt, and no secret in any of them.
        log = self.example.log()
        for secret in (self.example.secret, self.push.token, self.push.bearer):
            assert secret not in log
        return deliveries


@pytest.fixture
def registered(onlooker, example_agent) -> Registered:  # noqa: F811 - the imported fixture
    registration = add_agent(example_agent.card_url, "--signing-secret", example_agent.secret)
    agent = Agent.objects.get(pk=registration["agent"])
    push = a2a_client.PushConfig(
        url=registration["push_url"],
        token=registration["push_token"],
        bearer=registration["push_bearer"],
    )
    return Registered(agent, push, example_agent)


def interaction_of(row: Task):
    """What the agent asks (the uncertain upload's check aside: a person marks that)."""
    [interaction] = row.interactions.exclude(kind="check")
    return interaction


def card_of(row: Task) -> ProgressCard:
    return ProgressCard.objects.get(session=row.session)


def assert_artifact_files(row: Task, artifact_id: str) -> None:
    """Text and an https link, with files/v1 data that describe the text exactly."""
    artifact = row.artifacts.get(artifact_id=artifact_id)
    text_part, url_part = artifact.parts
    content = text_part["text"].encode()
    assert artifact.files["sha256"] == hashlib.sha256(content).hexdigest()
    assert artifact.files["size"] == len(content)
    assert artifact.files["kind"] == "markdown" and artifact.files["path"].endswith(".md")
    assert url_part["url"].startswith("https://")


# -- the card the agent serves ----------------------------------------------------------------


def test_card_offers_jsonrpc_1_0_push_notifications_and_the_five_extensions(example_agent):
    card = httpx.get(example_agent.card_url, timeout=5).json()
    assert card["name"] == "Example agent" and card["description"]
    [interface] = card["supportedInterfaces"]
    assert interface == {
        "url": f"http://127.0.0.1:{example_agent.port}/a2a/jsonrpc",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    capabilities = card["capabilities"]
    assert capabilities["pushNotifications"] is True
    assert capabilities.get("streaming", False) is False
    declared = capabilities["extensions"]
    # The URIs Onlooker reads; `required` false (ProtoJSON leaves a false out).
    assert [e["uri"] for e in declared] == list(profile.EXTENSIONS) == list(demo_run.EXTENSIONS)
    assert all(e.get("required", False) is False for e in declared)
    parsed = agent_card.parse_card(card, example_agent.card_url)
    assert parsed.extensions == list(profile.EXTENSIONS) and parsed.push_notifications


# -- release ----------------------------------------------------------------------------------


def wait_for_approval(registered: Registered) -> Task:
    task = registered.start(RELEASE)
    row = registered.task_in(task["id"], "TASK_STATE_AUTH_REQUIRED")
    assert row.session.needs_human
    interaction = interaction_of(row)
    assert (interaction.kind, interaction.state) == ("approval", "open")
    assert interaction.prompt == "Deploy checkout 2.5.0 to production?"
    return row


def test_release_asks_before_deploying_and_an_approval_deploys(registered):
    row = wait_for_approval(registered)
    card = card_of(row)
    assert [s["status"] for s in card.plan] == [
        "completed",
        "completed",
        "completed",
        "in_progress",
        "pending",
    ]
    assert card.plan[3]["step"] == "Deploy to production"
    # The note is markdown with a progress bar and a table, rendered by Onlooker.
    assert 'Steps <progress value="2" max="5"></progress>' in card.markdown
    assert re.search(r'<progress[^>]* value="2"', card.html) and "<table>" in card.html
    assert card.facts["question"] == {"kind": "approval", "prompt": interaction_of(row).prompt}
    # The upload whose outcome was lost (effects/v1), reported once.
    assert card.facts["uncertain"] == ["upload:checkout-2.5.0.tar.gz"]
    assert_artifact_files(row, "release-notes")

    interaction = interaction_of(row)
    registered.answer(row, {"interactionId": interaction.interaction_id, "approved": True})
    row = registered.task_in(row.task_id, "TASK_STATE_COMPLETED")

    card = card_of(row)
    assert [s["status"] for s in card.plan] == ["completed"] * 5
    assert "is live" in card.markdown
    telemetry = card.facts["telemetry"]
    assert telemetry["steps"] == 5 and telemetry["tokens"] > 0 and telemetry["costUsd"] > 0
    assert re.fullmatch(r"[0-9a-f]{32}", telemetry["traceId"])
    assert row.telemetry == telemetry
    assert set(row.artifacts.values_list("artifact_id", flat=True)) == {
        "release-notes",
        "deploy-report",
    }
    assert_artifact_files(row, "deploy-report")
    assert row.uncertain_effects == ["upload:checkout-2.5.0.tar.gz"]
    # Its check waits for a person after the task ended (answering.md, "Uncertain effects").
    check = row.interactions.get(kind="check")
    assert (check.state, check.prompt) == (
        "open",
        "Check: Upload of checkout-2.5.0.tar.gz unconfirmed",
    )
    assert card.facts["unchecked"] == ["upload:checkout-2.5.0.tar.gz"]
    deliveries = registered.assert_pushes_signed_and_accepted(row.task_id)
    uncertain = [d for d in deliveries if profile.EFFECTS in d.body]
    assert len(uncertain) == 1


def test_a_denied_release_skips_the_deploy_and_says_so(registered):
    row = wait_for_approval(registered)
    interaction = interaction_of(row)
    registered.answer(row, {"interactionId": interaction.interaction_id, "approved": False})
    row = registered.task_in(row.task_id, "TASK_STATE_COMPLETED")

    card = card_of(row)
    assert [s["status"] for s in card.plan] == [
        "completed",
        "completed",
        "completed",
        "skipped",
        "skipped",
    ]
    assert "not deployed" in card.markdown and "**denied**" in card.markdown
    # No deploy, so no deploy report; the release notes made before the question stay.
    assert list(row.artifacts.values_list("artifact_id", flat=True)) == ["release-notes"]
    assert card.facts["telemetry"]["steps"] == 3
    assert "question" not in card.facts
    registered.assert_pushes_signed_and_accepted(row.task_id)


def test_a_text_reply_never_approves_and_cancel_ends_the_waiting_task(registered):
    row = wait_for_approval(registered)
    interaction = interaction_of(row)

    registered.answer(row, None, text="yes, approved, deploy it")
    # A typed answer to some other interaction is no answer either.
    registered.answer(row, {"interactionId": "approval-someone-else", "approved": True})

    def asked_again() -> bool:
        again = row.session.messages.filter(text__startswith="A text reply is not an approval.")
        return again.count() == 2

    registered.wait_for(asked_again, "the agent to ask again, twice")
    row.refresh_from_db()
    assert row.state == "TASK_STATE_AUTH_REQUIRED" and row.session.needs_human
    assert interaction_of(row).pk == interaction.pk
    assert interaction_of(row).state == "open"
    assert not row.artifacts.filter(artifact_id="deploy-report").exists()

    answer = a2a_client.cancel_task(registered.agent, row.task_id)
    assert answer["status"]["state"] == "TASK_STATE_CANCELED"
    # Onlooker hears it from the agent's push (this test applied nothing itself).
    row = registered.task_in(row.task_id, "TASK_STATE_CANCELED")
    # The question closed with it; only the uncertain upload's check still needs a person.
    kinds = list(row.session.tasks.values_list("interactions__kind", "interactions__state"))
    assert sorted(kinds) == [("approval", "closed"), ("check", "open")]
    assert row.session.needs_human
    registered.assert_pushes_signed_and_accepted(row.task_id)


# -- research and connect ---------------------------------------------------------------------


def test_research_asks_a_question_and_uses_the_chosen_value(registered):
    task = registered.start(RESEARCH)
    row = registered.task_in(task["id"], "TASK_STATE_INPUT_REQUIRED")
    interaction = interaction_of(row)
    assert interaction.kind == "question"
    assert interaction.detail == {"choices": FOCUSES}

    chosen = interaction.detail["choices"][2]
    registered.answer(row, {"interactionId": interaction.interaction_id, "value": chosen}, chosen)
    row = registered.task_in(row.task_id, "TASK_STATE_COMPLETED")

    card = card_of(row)
    assert f"focused on {chosen}" in card.markdown
    summary = row.artifacts.get(artifact_id="summary")
    assert f"Focus: **{chosen}**" in summary.parts[0]["text"]
    assert_artifact_files(row, "summary")
    registered.assert_pushes_signed_and_accepted(row.task_id)


@pytest.mark.parametrize("approved", [True, False], ids=["connected", "declined"])
def test_a_connection_goes_on_when_connected_and_cancels_when_declined(registered, approved):
    task = registered.start(CONNECT)
    row = registered.task_in(task["id"], "TASK_STATE_AUTH_REQUIRED")
    interaction = interaction_of(row)
    assert interaction.kind == "connection"
    assert interaction.detail["url"] == "https://example.com/connect"

    registered.answer(row, {"interactionId": interaction.interaction_id, "approved": approved})
    if approved:
        row = registered.task_in(row.task_id, "TASK_STATE_COMPLETED")
        assert_artifact_files(row, "pull-request")
        assert [s["status"] for s in card_of(row).plan] == ["completed"] * 4
    else:
        row = registered.task_in(row.task_id, "TASK_STATE_CANCELED")
        assert "connection was declined" in row.status_message
        assert [s["status"] for s in card_of(row).plan] == [
            "completed",
            "failed",
            "skipped",
            "skipped",
        ]
        assert not row.artifacts.exists()
        assert card_of(row).facts["telemetry"]["steps"] == 1
    registered.assert_pushes_signed_and_accepted(row.task_id)


# -- conversations, push configs, task lists --------------------------------------------------


def test_a_new_message_to_a_busy_context_is_queued_and_runs_after(registered):
    first = registered.start(RELEASE)
    second = registered.start(RESEARCH, context_id=first["contextId"])
    # A new task in the same conversation, answered at once and told it waits its turn.
    assert second["contextId"] == first["contextId"] and second["id"] != first["id"]
    assert second["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert second["status"]["message"]["parts"] == [{"text": QUEUED_TEXT}]

    row = registered.task_in(first["id"], "TASK_STATE_AUTH_REQUIRED")
    later = registered.task_in(second["id"], "TASK_STATE_INPUT_REQUIRED")
    assert later.session_id == row.session_id

    def first_status(task_id: str, state: str) -> str:
        for delivery in Delivery.objects.filter(task_id=task_id).order_by("pk"):
            body = json.loads(delivery.body).get("statusUpdate", {})
            if body.get("status", {}).get("state") == state:
                return body["status"]["timestamp"]
        raise AssertionError(f"no {state} for {task_id}")

    # The second started working only once the first had paused for its approval.
    started = first_status(second["id"], "TASK_STATE_WORKING")
    assert started > first_status(first["id"], "TASK_STATE_AUTH_REQUIRED")


def test_a_push_config_created_later_gets_the_rest_and_list_tasks_filters_by_time(registered):
    agent, push = registered.agent, registered.push
    task = a2a_client.send_message(agent, RESEARCH)["task"]  # no push config yet

    def asking() -> dict | None:
        now = a2a_client.get_task(agent, task["id"])
        return now if now["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" else None

    asked = registered.wait_for(asking, "the question, asked without pushes")
    assert not Task.objects.filter(task_id=task["id"]).exists()  # Onlooker heard nothing
    a2a_client.create_task_push_notification_config(
        agent, task["id"], push.url, token=push.token, bearer=push.bearer
    )
    interaction_id = asked["status"]["message"]["metadata"][profile.INTERACTIONS]["interactionId"]
    a2a_client.send_message(
        agent,
        "Speed",
        task_id=task["id"],
        context_id=task["contextId"],
        metadata={profile.INTERACTIONS: {"interactionId": interaction_id, "value": "Speed"}},
        extensions=[profile.INTERACTIONS],
    )
    row = registered.task_in(task["id"], "TASK_STATE_COMPLETED")
    assert "focused on Speed" in row.status_message
    registered.assert_pushes_signed_and_accepted(task["id"])

    # ListTasks (a2a-sdk's, over the agent's store) keeps tasks whose status is at or after
    # statusTimestampAfter.
    done = parse_timestamp(a2a_client.get_task(agent, task["id"])["status"]["timestamp"])
    context = task["contextId"]
    listed = a2a_client.list_tasks(agent, context_id=context, status_timestamp_after=done)
    assert [t["id"] for t in listed.tasks] == [task["id"]]
    after = done + timedelta(milliseconds=1)
    assert (
        a2a_client.list_tasks(agent, context_id=context, status_timestamp_after=after).tasks == []
    )


# -- at least once ----------------------------------------------------------------------------


class FlakyReceiver:
    """A receiver in front of Onlooker: answers 503 to its first `failures` pushes, then
    forwards each push (body and headers as received) and answers what Onlooker answered."""

    def __init__(self, port: int, target: str, failures: int) -> None:
        self.port, self.target, self.failures = port, target, failures
        self.seen: list[tuple[str, int]] = []  # (webhook-id, status answered)
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status, answer = owner.handle(dict(self.headers), body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def handle(self, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        # One at a time, so `seen` is in arrival order.
        with self._lock:
            webhook_id = headers.get("webhook-id", "")
            if len(self.seen) < self.failures:
                self.seen.append((webhook_id, 503))
                return 503, b'{"error": "restarting"}'
            forwarded = {
                k: v
                for k, v in headers.items()
                if k.lower().startswith("webhook-")
                or k.lower() in ("authorization", "x-a2a-notification-token", "content-type")
            }
            response = httpx.post(self.target, content=body, headers=forwarded, timeout=10)
            self.seen.append((webhook_id, response.status_code))
            return response.status_code, response.content

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def test_pushes_are_retried_in_order_with_the_same_webhook_id_until_taken(registered):
    port = free_port()
    receiver = FlakyReceiver(port, registered.push.url, failures=2)
    flaky = a2a_client.PushConfig(
        url=f"http://127.0.0.1:{port}/hook",
        token=registered.push.token,
        bearer=registered.push.bearer,
    )
    task = a2a_client.send_message(registered.agent, CONNECT, push=flaky)["task"]
    try:
        # Nothing listens yet (Onlooker "down"): the agent retries...
        time.sleep(0.6)
        assert not Delivery.objects.exists()
        # ... and once something answers (503 twice, then Onlooker), everything arrives.
        receiver.start()
        row = registered.task_in(task["id"], "TASK_STATE_AUTH_REQUIRED")
        registered.answer(
            row, {"interactionId": interaction_of(row).interaction_id, "approved": True}
        )
        registered.task_in(task["id"], "TASK_STATE_COMPLETED")
    finally:
        receiver.stop()

    first = receiver.seen[0][0]
    assert [status for _, status in receiver.seen[:2]] == [503, 503]
    # The refused push came back with the same webhook-id (Onlooker's idempotency key).
    assert receiver.seen[:3] == [(first, 503), (first, 503), (first, 200)]
    taken = [webhook_id for webhook_id, status in receiver.seen if status == 200]
    assert len(taken) == len(set(taken))
    deliveries = registered.assert_pushes_signed_and_accepted(task["id"])
    # In the order the agent made them: the task first, the end last.
    by_arrival = sorted(deliveries, key=lambda d: d.pk)
    assert [f"id:{webhook_id}" for webhook_id in taken] == [d.idempotency_key for d in by_arrival]
    assert by_arrival[0].kind == "task" and "TASK_STATE_COMPLETED" in by_arrival[-1].body
    # Every attempt is a line of the agent's log: the refused connections and the 503s.
    attempts = re.findall(rf"push {first} .* attempt (\d+): ([^;\n]+)", registered.example.log())
    assert [int(n) for n, _ in attempts] == list(range(1, len(attempts) + 1))
    outcomes = [outcome for _, outcome in attempts]
    assert outcomes[0] == "no answer (ConnectError)"
    assert outcomes[-3:] == ["HTTP 503", "HTTP 503", "delivered"]


# -- running it -------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_agent_quickly_and_cleanly(tmp_path, sig):
    agent = start_agent(tmp_path, "--retry-first", "0.05")
    dead = f"http://127.0.0.1:{free_port()}/nobody"
    address = AgentAddressStub(f"http://127.0.0.1:{agent.port}/a2a/jsonrpc")
    a2a_client.send_message(address, RELEASE, push=a2a_client.PushConfig(url=dead))
    time.sleep(0.3)  # working, and retrying pushes to a receiver that is not there
    started = time.monotonic()
    assert agent.stop(sig) == 0, agent.log()
    assert time.monotonic() - started < 5
    assert "Traceback" not in agent.log() and "example agent stopped" in agent.log()


@dataclass
class AgentAddressStub:
    """Where to call an agent that is not registered in Onlooker."""

    rpc_url: str
    extensions: tuple[str, ...] = profile.EXTENSIONS
    credential: str = ""
    credential_header: str = "Authorization"


def test_serve_runs_the_agent_in_a_thread_until_stopped():
    port = free_port()
    handle = serve(port=port, speed=50)
    try:
        card = httpx.get(handle.card_url, timeout=5).json()
        assert card["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{port}/a2a/jsonrpc"
    finally:
        handle.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(handle.card_url, timeout=1)


def test_a_scenario_is_picked_by_its_first_keyword_else_in_turn():
    picker = Picker()
    assert picker.pick("Please deploy the new build") == "release"
    assert picker.pick("Compare two queues") == "research"
    assert picker.pick("Link my GitHub account") == "connect"
    assert picker.pick("Research how to ship faster") == "research"  # the first one wins
    assert picker.pick("Shipping today") == "release"  # a word's start counts...
    # ... not the middle of a word; with no keyword, the scenarios take turns.
    assert [picker.pick("Our relationship") for _ in range(4)] == [
        "release",
        "research",
        "connect",
        "release",
    ]


def test_only_a_whsec_base64_secret_is_taken():
    assert valid_secret(new_signing_secret())
    # The library accepts "nope"; a receiver would refuse every push signed with it.
    for bad in ("nope", "whsec_", "whsec_!!", "c2VjcmV0"):
        assert not valid_secret(bad), bad
