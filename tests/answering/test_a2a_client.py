"""The A2A client (`tasks/answering/a2a_client.py`) against real servers on loopback.

What a working agent does comes from the real a2a-sdk approval agent
(`tests/peers/approval_agent.py`, a subprocess). What the client sends on the wire, and how it
copes with agents that misbehave, comes from a scriptable HTTP server
(`tests/peers/misbehaving_agent.py`), which also stands in for Onlooker's push receiver.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.db import connections

from tasks.answering import a2a_client, agent_card, agent_http
from tasks.answering.a2a_client import A2AError, PushConfig
from tasks.models import Agent
from tasks.wire import agent_text
from tasks.wire.profile import FILES, INTERACTIONS, PROGRESS
from tests.peers import approval_agent as peer_module
from tests.peers.misbehaving_agent import MisbehavingAgent
from tests.processes import ROOT, free_port

DEADLINE = 20.0
WAITING = "TASK_STATE_AUTH_REQUIRED"


def wait_for(condition: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + DEADLINE
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {DEADLINE:.0f} s waiting for {what}")
        time.sleep(0.05)
    return value


def agent_at(url: str, *, extensions: list[str] | None = None, credential: str = "") -> Agent:
    """An unsaved Agent: the client needs only its address, extensions and credential."""
    return Agent(name="test", rpc_url=url, extensions=extensions or [], credential=credential)


def raised(call: Callable[[], object]) -> A2AError:
    with pytest.raises(A2AError) as info:
        call()
    return info.value


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; loopback servers must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class SdkAgent:
    base_url: str
    card: agent_card.AgentCard
    agent: Agent

    def start_task(self, push: PushConfig | None = None, **options) -> dict:
        return a2a_client.send_message(self.agent, "Publish the notes", push=push, **options)[
            "task"
        ]

    def state(self, task: dict) -> str:
        return a2a_client.get_task(self.agent, task["id"])["status"]["state"]

    def wait_for_state(self, task: dict, state: str) -> dict:
        wait_for(lambda: self.state(task) == state, f"task {task['id']} to be {state}")
        return a2a_client.get_task(self.agent, task["id"])


@pytest.fixture(scope="module")
def sdk_agent(tmp_path_factory) -> Iterator[SdkAgent]:
    """One real a2a-sdk agent for the module, discovered from its card like a registered one."""
    port = free_port()
    stderr = tmp_path_factory.mktemp("sdk-agent") / "stderr"
    with stderr.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.peers.approval_agent", "--port", str(port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:

        def card_served() -> bool:
            if process.poll() is not None:
                pytest.fail(f"the agent exited with {process.returncode}:\n{stderr.read_text()}")
            try:
                return httpx.get(base_url + agent_card.CARD_PATH, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(card_served, "the agent's card")
        card = agent_card.fetch_card(base_url)
        agent = agent_at(card.rpc_url, extensions=card.extensions, credential="Bearer unused")
        yield SdkAgent(base_url, card, agent)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def receiver() -> Iterator[MisbehavingAgent]:
    """Where the real agent pushes: answers 200 and records every push."""
    with MisbehavingAgent() as server:
        yield server


@pytest.fixture
def bad_agent() -> Iterator[MisbehavingAgent]:
    with MisbehavingAgent() as server:
        yield server


def pushes_to(server: MisbehavingAgent, path: str) -> list:
    return [r for r in server.requests if r.method == "POST" and r.path == path]


def pushed_states(server: MisbehavingAgent, path: str) -> list[str | None]:
    states = []
    for request in pushes_to(server, path):
        body = request.json()
        member = next(iter(body.values()))
        states.append((member.get("status") or {}).get("state"))
    return states


def open_interaction(task: dict) -> dict:
    return task["status"]["message"]["metadata"][INTERACTIONS]


# --- against the real a2a-sdk agent ---------------------------------------------------------


def test_card_discovery_finds_the_jsonrpc_url_and_the_declared_extensions(sdk_agent):
    card = sdk_agent.card
    assert card.rpc_url == f"{sdk_agent.base_url}{peer_module.RPC_PATH}"
    assert card.protocol_version == "1.0"
    assert card.push_notifications is True
    assert set(card.extensions) == {INTERACTIONS, PROGRESS, peer_module.TELEMETRY, FILES}


def test_send_message_starts_a_task_whose_updates_reach_the_attached_push_config(
    sdk_agent, receiver
):
    push = PushConfig(
        url=f"{receiver.base_url}/push/one",
        token=f"tok-{uuid.uuid4().hex}",
        bearer=f"bearer-{uuid.uuid4().hex}",
        id="onlooker-cfg-1",
    )
    result = a2a_client.send_message(sdk_agent.agent, "Write the release notes", push=push)

    task = result["task"]
    assert task["id"] and task["contextId"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"  # returned immediately
    wait_for(lambda: WAITING in pushed_states(receiver, "/push/one"), "the approval push")
    pushes = pushes_to(receiver, "/push/one")
    assert pushed_states(receiver, "/push/one")[0] == "TASK_STATE_SUBMITTED"
    for request in pushes:
        assert request.headers["authorization"] == f"Bearer {push.bearer}"
        assert request.headers["x-a2a-notification-token"] == push.token
        member = next(iter(request.json().values()))
        assert member.get("taskId", member.get("id")) == task["id"]


def test_get_task_shows_the_task_waiting_for_approval(sdk_agent):
    task = sdk_agent.start_task()
    seen = sdk_agent.wait_for_state(task, WAITING)
    assert (seen["id"], seen["contextId"]) == (task["id"], task["contextId"])
    assert open_interaction(seen)["kind"] == "approval"
    assert len(seen["history"]) > 1
    shortened = a2a_client.get_task(sdk_agent.agent, task["id"], history_length=1)
    assert len(shortened["history"]) == 1


def test_follow_up_with_a_typed_approval_completes_the_task(sdk_agent):
    task = sdk_agent.wait_for_state(sdk_agent.start_task(), WAITING)
    interaction_id = open_interaction(task)["interactionId"]

    result = a2a_client.send_message(
        sdk_agent.agent,
        "Approved",
        message_id=f"{interaction_id}:approve",
        task_id=task["id"],
        context_id=task["contextId"],
        metadata={INTERACTIONS: {"interactionId": interaction_id, "approved": True}},
        extensions=[INTERACTIONS],
    )

    assert result["task"]["id"] == task["id"]
    done = sdk_agent.wait_for_state(task, "TASK_STATE_COMPLETED")
    assert done["contextId"] == task["contextId"]


def test_list_tasks_pages_through_a_conversation(sdk_agent):
    before = datetime.now(UTC) - timedelta(seconds=1)
    first = sdk_agent.start_task()
    context_id = first["contextId"]
    others = [sdk_agent.start_task(context_id=context_id) for _ in range(2)]
    started = {first["id"], *(t["id"] for t in others)}
    for task in [first, *others]:
        sdk_agent.wait_for_state(task, WAITING)

    page_one = a2a_client.list_tasks(sdk_agent.agent, context_id=context_id, page_size=2)
    assert len(page_one.tasks) == 2
    assert page_one.total_size == 3
    assert page_one.next_page_token is not None
    page_two = a2a_client.list_tasks(
        sdk_agent.agent, context_id=context_id, page_size=2, page_token=page_one.next_page_token
    )
    assert len(page_two.tasks) == 1
    assert page_two.next_page_token is None
    paged = [t["id"] for t in [*page_one.tasks, *page_two.tasks]]
    assert set(paged) == started

    one_by_one = a2a_client.iter_tasks(sdk_agent.agent, context_id=context_id, page_size=1)
    assert [t["id"] for t in one_by_one] == paged
    since_before = a2a_client.list_tasks(
        sdk_agent.agent, context_id=context_id, status_timestamp_after=before
    )
    assert {t["id"] for t in since_before.tasks} == started
    future = datetime.now(UTC) + timedelta(days=1)
    later = a2a_client.list_tasks(sdk_agent.agent, status_timestamp_after=future)
    assert later.tasks == []


def test_cancel_task_cancels_a_waiting_task_and_a_second_cancel_is_refused(sdk_agent):
    task = sdk_agent.wait_for_state(sdk_agent.start_task(), WAITING)

    canceled = a2a_client.cancel_task(sdk_agent.agent, task["id"])
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert sdk_agent.state(task) == "TASK_STATE_CANCELED"

    error = raised(lambda: a2a_client.cancel_task(sdk_agent.agent, task["id"]))
    assert (error.code, error.reason) == (-32002, "TASK_NOT_CANCELABLE")
    assert str(error) == "the agent cannot cancel this task (it has already ended)"


def test_unknown_task_is_a_task_the_agent_no_longer_knows(sdk_agent):
    for call in (a2a_client.get_task, a2a_client.cancel_task):
        error = raised(lambda call=call: call(sdk_agent.agent, f"gone-{uuid.uuid4().hex}"))
        assert str(error) == "the agent no longer knows this task"
        assert (error.code, error.reason, error.http_status) == (-32001, "TASK_NOT_FOUND", 200)


def test_message_to_an_ended_task_is_an_unsupported_operation_in_the_agents_words(sdk_agent):
    task = sdk_agent.wait_for_state(sdk_agent.start_task(), WAITING)
    a2a_client.cancel_task(sdk_agent.agent, task["id"])

    error = raised(
        lambda: a2a_client.send_message(
            sdk_agent.agent, "More", task_id=task["id"], context_id=task["contextId"]
        )
    )
    assert (error.code, error.reason) == (-32004, "UNSUPPORTED_OPERATION")
    assert str(error).startswith("the agent does not support this operation (")
    assert "terminal state" in str(error)


def test_created_push_config_receives_updates_and_a_deleted_one_does_not(sdk_agent, receiver):
    task = sdk_agent.wait_for_state(sdk_agent.start_task(), WAITING)
    for name in ("keep", "gone"):
        config = a2a_client.create_task_push_notification_config(
            sdk_agent.agent,
            task["id"],
            f"{receiver.base_url}/push/{name}",
            token=f"tok-{name}",
            bearer=f"bearer-{name}",
            config_id=f"cfg-{name}",
        )
        assert config["id"] == f"cfg-{name}"
        assert config["taskId"] == task["id"]
        assert config["url"] == f"{receiver.base_url}/push/{name}"
    gone = a2a_client.delete_task_push_notification_config(sdk_agent.agent, task["id"], "cfg-gone")
    assert gone is None
    # Deleting again is not an error (idempotent in A2A 1.0).
    a2a_client.delete_task_push_notification_config(sdk_agent.agent, task["id"], "cfg-gone")

    interaction_id = open_interaction(task)["interactionId"]
    a2a_client.send_message(
        sdk_agent.agent,
        "Approved",
        task_id=task["id"],
        context_id=task["contextId"],
        metadata={INTERACTIONS: {"interactionId": interaction_id, "approved": True}},
        extensions=[INTERACTIONS],
    )

    wait_for(
        lambda: "TASK_STATE_COMPLETED" in pushed_states(receiver, "/push/keep"),
        "the completion push to the kept config",
    )
    assert pushed_states(receiver, "/push/keep")[0] == "TASK_STATE_WORKING"
    assert {r.headers["authorization"] for r in pushes_to(receiver, "/push/keep")} == {
        "Bearer bearer-keep"
    }
    # Events go out one after another: the WORKING push would have reached it by now.
    assert pushes_to(receiver, "/push/gone") == []


def test_push_config_for_an_unknown_task_is_refused(sdk_agent, receiver):
    error = raised(
        lambda: a2a_client.create_task_push_notification_config(
            sdk_agent.agent, "no-such-task", f"{receiver.base_url}/push/x", token="t"
        )
    )
    assert error.code == -32001
    assert str(error) == "the agent no longer knows this task"


# --- on the wire ------------------------------------------------------------------------------


def test_calls_carry_the_version_the_declared_profile_extensions_and_the_credential(bad_agent):
    other = "https://example.org/ext/other/v1"
    agent = agent_at(
        bad_agent.rpc_url,
        extensions=[PROGRESS, other, INTERACTIONS, FILES],
        credential="Bearer call-me",
    )
    task = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}
    bad_agent.rpc_result(task)

    assert a2a_client.get_task(agent, "t1") == task

    [request] = bad_agent.requests
    assert (request.method, request.path) == ("POST", "/a2a/jsonrpc")
    assert request.headers["a2a-version"] == "1.0"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"] == "Bearer call-me"
    requested = request.headers["a2a-extensions"].split(",")
    assert sorted(requested) == sorted([INTERACTIONS, PROGRESS, FILES])


def test_agent_without_a_credential_or_profile_extensions_gets_neither_header(bad_agent):
    agent = agent_at(bad_agent.rpc_url, extensions=["https://example.org/ext/other/v1"])
    bad_agent.rpc_result({"id": "t1", "status": {"state": "TASK_STATE_WORKING"}})
    a2a_client.get_task(agent, "t1")
    [request] = bad_agent.requests
    assert "authorization" not in request.headers
    assert "a2a-extensions" not in request.headers
    assert request.headers["a2a-version"] == "1.0"


def test_each_method_sends_its_a2a_1_0_request(bad_agent):
    agent = agent_at(bad_agent.rpc_url)
    hook = "https://onlooker.example/a2a/push/abc/"
    push = PushConfig(url=hook, token="tok", bearer="bear", id="cfg")
    authentication = {"scheme": "Bearer", "credentials": "bear"}
    task = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}
    answer = {"interactionId": "i-1", "approved": True}
    calls = [
        (
            {"task": task},
            lambda: a2a_client.send_message(
                agent,
                "Approve",
                message_id="i-1:approve",
                task_id="t1",
                context_id="c1",
                metadata={INTERACTIONS: answer},
                extensions=[INTERACTIONS],
                push=push,
            ),
            "SendMessage",
            {
                "message": {
                    "messageId": "i-1:approve",
                    "role": "ROLE_USER",
                    "parts": [{"text": "Approve"}],
                    "taskId": "t1",
                    "contextId": "c1",
                    "metadata": {INTERACTIONS: answer},
                    "extensions": [INTERACTIONS],
                },
                "configuration": {
                    "returnImmediately": True,
                    "taskPushNotificationConfig": {
                        "id": "cfg",
                        "url": hook,
                        "token": "tok",
                        "authentication": authentication,
                    },
                },
            },
        ),
        (task, lambda: a2a_client.get_task(agent, "t1"), "GetTask", {"id": "t1"}),
        (task, lambda: a2a_client.cancel_task(agent, "t1"), "CancelTask", {"id": "t1"}),
        (
            {"tasks": [task], "nextPageToken": "", "pageSize": 10, "totalSize": 1},
            lambda: a2a_client.list_tasks(
                agent,
                context_id="c1",
                status_timestamp_after=datetime(2026, 11, 30, 12, 0, 0, 5000, tzinfo=UTC),
                page_size=10,
                page_token="p2",
            ),
            "ListTasks",
            {
                "contextId": "c1",
                "statusTimestampAfter": "2026-11-30T12:00:00.005000Z",
                "pageSize": 10,
                "pageToken": "p2",
            },
        ),
        (
            {"taskId": "t1", "id": "cfg", "url": hook},
            lambda: a2a_client.create_task_push_notification_config(
                agent, "t1", hook, token="tok", bearer="bear", config_id="cfg"
            ),
            "CreateTaskPushNotificationConfig",
            {
                "taskId": "t1",
                "id": "cfg",
                "url": hook,
                "token": "tok",
                "authentication": authentication,
            },
        ),
        (
            None,
            lambda: a2a_client.delete_task_push_notification_config(agent, "t1", "cfg"),
            "DeleteTaskPushNotificationConfig",
            {"taskId": "t1", "id": "cfg"},
        ),
    ]
    for result, call, method, params in calls:
        bad_agent.rpc_result(result)
        call()
        body = bad_agent.requests[-1].json()
        assert (body["jsonrpc"], body["method"], body["params"]) == ("2.0", method, params)
    ids = [r.json()["id"] for r in bad_agent.requests]
    assert len(set(ids)) == len(calls), "every request has its own id"


def test_a_new_message_gets_a_fresh_message_id_and_no_task_or_push(bad_agent):
    bad_agent.rpc_result({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": []}})
    agent = agent_at(bad_agent.rpc_url)
    a2a_client.send_message(agent, "Hello")
    a2a_client.send_message(agent, "Hello")
    first, second = (r.json()["params"] for r in bad_agent.requests)
    assert first["message"]["messageId"] != second["message"]["messageId"]
    assert set(first["message"]) == {"messageId", "role", "parts"}
    assert first["configuration"] == {"returnImmediately": True}


def test_consecutive_calls_reuse_one_pooled_connection(bad_agent):
    bad_agent.rpc_result({"id": "t1", "status": {"state": "TASK_STATE_WORKING"}})
    agent = agent_at(bad_agent.rpc_url)
    for _ in range(3):
        a2a_client.get_task(agent, "t1")
    assert len({r.client_port for r in bad_agent.requests}) == 1


def test_threads_share_one_pool_created_once_and_all_their_calls_succeed(bad_agent):
    agent_http.close_http_client()
    start = threading.Barrier(16)
    clients, tasks, failures = [], [], []
    bad_agent.rpc_result({"id": "t1", "status": {"state": "TASK_STATE_WORKING"}})
    agent = agent_at(bad_agent.rpc_url)

    def work() -> None:
        start.wait()
        clients.append(agent_http.http_client())
        try:
            tasks.append(a2a_client.get_task(agent, "t1"))
        except A2AError as error:
            failures.append(error)
        finally:
            connections.close_all()  # recording the echo took one: a thread hands it back

    threads = [threading.Thread(target=work) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE)
    assert failures == []
    assert len(tasks) == 16
    assert len({id(client) for client in clients}) == 1


# --- agents that misbehave ----------------------------------------------------------------------


def test_html_answer_is_reported_as_not_json(bad_agent):
    bad_agent.answer(b"<html><body>Welcome</body></html>", content_type="text/html; charset=utf-8")
    error = raised(lambda: a2a_client.get_task(agent_at(bad_agent.rpc_url), "t1"))
    assert str(error) == "the agent answered something that is not JSON (text/html)"
    assert (error.code, error.reason, error.http_status) == (None, None, 200)


def test_http_502_is_reported_with_its_status(bad_agent):
    bad_agent.answer(b"<h1>Bad Gateway</h1>", status=502, content_type="text/html")
    error = raised(lambda: a2a_client.send_message(agent_at(bad_agent.rpc_url), "Hi"))
    assert str(error) == "the agent answered HTTP 502"
    assert (error.code, error.http_status) == (None, 502)


def test_refused_credentials_say_so(bad_agent):
    bad_agent.answer({"detail": "unauthorized"}, status=401)
    error = raised(lambda: a2a_client.get_task(agent_at(bad_agent.rpc_url), "t1"))
    assert str(error) == "the agent answered HTTP 401: it refused Onlooker's credentials"
    assert error.http_status == 401


def test_busy_conversation_is_reported_as_busy(bad_agent):
    bad_agent.rpc_error(-32004, "Context c1 is busy with task t0", reason="CONTEXT_BUSY")
    error = raised(
        lambda: a2a_client.send_message(agent_at(bad_agent.rpc_url), "Next", context_id="c1")
    )
    assert str(error) == "the agent is busy with this conversation"
    assert (error.code, error.reason, error.http_status) == (-32004, "CONTEXT_BUSY", 200)


def test_unsupported_version_says_the_agent_does_not_speak_a2a_1_0(bad_agent):
    # What an a2a-sdk agent answers a request it takes for another protocol version.
    bad_agent.rpc_error(
        -32009,
        "A2A version '0.3' is not supported by this handler. Expected version '1.0'.",
        reason="VERSION_NOT_SUPPORTED",
    )
    error = raised(lambda: a2a_client.get_task(agent_at(bad_agent.rpc_url), "t1"))
    assert str(error) == "the agent does not speak A2A 1.0"
    assert (error.code, error.reason) == (-32009, "VERSION_NOT_SUPPORTED")


def test_other_json_rpc_errors_show_the_agents_words_on_one_short_line(bad_agent):
    bad_agent.rpc_error(-32603, "Internal\n   error:  " + "x" * 5000)
    error = raised(lambda: a2a_client.get_task(agent_at(bad_agent.rpc_url), "t1"))
    prefix = "the agent answered an error: Internal error: xxx"
    assert str(error).startswith(prefix)
    assert str(error).endswith("…")
    assert len(str(error)) <= len("the agent answered an error: ") + agent_text.MAX_AGENT_TEXT
    assert (error.code, error.reason) == (-32603, None)


def test_json_rpc_error_with_an_http_error_status_keeps_the_agents_error(bad_agent):
    bad_agent.answer(
        {"jsonrpc": "2.0", "error": {"code": -32001, "message": "Task not found"}}, status=404
    )
    error = raised(lambda: a2a_client.get_task(agent_at(bad_agent.rpc_url), "t1"))
    assert str(error) == "the agent no longer knows this task"
    assert (error.code, error.http_status) == (-32001, 404)


@pytest.mark.parametrize(
    "answer",
    [
        {"hello": "world"},
        {"jsonrpc": "2.0", "id": "someone-else", "result": {}},
        [{"jsonrpc": "2.0", "result": {}}],
    ],
    ids=["no-result", "other-request-id", "batch"],
)
def test_json_that_is_not_the_answer_to_the_request_is_refused(bad_agent, answer):
    bad_agent.answer(answer)
    error = raised(lambda: a2a_client.get_task(agent_at(bad_agent.rpc_url), "t1"))
    assert str(error) == (
        "the agent answered JSON that is not a JSON-RPC response to Onlooker's request"
    )


def test_result_that_is_not_a2a_is_refused(bad_agent):
    bad_agent.rpc_result({"status": "ok"})
    agent = agent_at(bad_agent.rpc_url)
    error = raised(lambda: a2a_client.send_message(agent, "Hi"))
    assert str(error) == "the agent answered SendMessage with something that is not A2A 1.0"
    error = raised(lambda: a2a_client.get_task(agent, "t1"))
    assert str(error) == "the agent answered GetTask with something that is not A2A 1.0"


def test_slow_answer_past_the_read_timeout_fails_fast_and_a_retry_works(bad_agent, monkeypatch):
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.3)
    agent = agent_at(bad_agent.rpc_url)
    task = {"id": "t1", "status": {"state": "TASK_STATE_WORKING"}}
    bad_agent.answer({"jsonrpc": "2.0", "result": task}, delay=10)

    began = time.monotonic()
    error = raised(lambda: a2a_client.get_task(agent, "t1"))
    assert time.monotonic() - began < 5
    assert str(error) == "the agent did not answer within 0.3 s"
    assert (error.code, error.http_status) == (None, None)

    bad_agent.rpc_result(task)
    assert a2a_client.get_task(agent, "t1") == task


def test_refused_connection_names_the_agent_without_secrets_in_its_url():
    port = free_port()  # nothing listens there
    agent = agent_at(f"http://onlooker:url-secret@127.0.0.1:{port}/a2a/jsonrpc?key=query-secret")
    error = raised(lambda: a2a_client.get_task(agent, "t1"))
    assert str(error) == f"could not connect to the agent at http://127.0.0.1:{port}/a2a/jsonrpc"
    assert (error.code, error.http_status) == (None, None)


def test_task_list_that_never_advances_is_stopped(bad_agent):
    bad_agent.rpc_result({"tasks": [{"id": "t1"}], "nextPageToken": "same"})
    tasks = a2a_client.iter_tasks(agent_at(bad_agent.rpc_url))
    error = raised(lambda: list(tasks))
    assert str(error) == "the agent's task list does not advance (it repeats a page)"


def test_errors_and_logs_never_show_the_credential_or_push_secrets(bad_agent, caplog, monkeypatch):
    monkeypatch.setattr(agent_http, "READ_TIMEOUT", 0.2)
    caplog.set_level("DEBUG")
    secrets = ("sekrit-credential", "sekrit-token", "sekrit-bearer")
    agent = agent_at(bad_agent.rpc_url, credential=f"Bearer {secrets[0]}")
    push = PushConfig(url="https://onlooker.example/push/", token=secrets[1], bearer=secrets[2])
    scenarios = [
        lambda: bad_agent.answer(b"<p>oops</p>", content_type="text/html"),
        lambda: bad_agent.answer(b"", status=502),
        lambda: bad_agent.rpc_error(-32004, "busy", reason="CONTEXT_BUSY"),
        lambda: bad_agent.rpc_error(-32603, "boom"),
        lambda: bad_agent.answer({"jsonrpc": "2.0", "result": {}}, delay=5),
    ]
    shown = [repr(push)]
    for scenario in scenarios:
        scenario()
        error = raised(lambda: a2a_client.send_message(agent, "Hi", push=push))
        shown += [str(error), repr(error)]
    down = agent_at(f"http://127.0.0.1:{free_port()}/rpc", credential=f"Bearer {secrets[0]}")
    error = raised(lambda: a2a_client.send_message(down, "Hi", push=push))
    shown += [str(error), repr(error), caplog.text]

    assert len(caplog.records) >= len(scenarios) + 1, "every failure is logged"
    assert not [text for text in shown if any(secret in text for secret in secrets)]
