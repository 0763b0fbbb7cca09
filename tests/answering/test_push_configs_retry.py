"""Deleting push configurations at agents that misbehave, the background loop, and the
`push_configs` listing (answering/push_configs.py). The agent is a loopback stub
(tests/peers/misbehaving_agent.py) that answers every call the same way and records what it
got; the task ends through Onlooker's real push receiver; time moves with time-machine."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client

from tasks.answering import push_configs
from tasks.answering.agents import new_endpoint
from tasks.models import PushEndpoint
from tests.answering.test_a2a_peer import wait_for
from tests.builders import status
from tests.conftest import NOW, RegisteredAgent, make_agent, member, push
from tests.peers.misbehaving_agent import MisbehavingAgent
from tests.processes import free_port

pytestmark = pytest.mark.django_db

DELETE = "DeleteTaskPushNotificationConfig"
RETRIES = [1, 2, 4, 8, 16, 32, 60]  # minutes between the 8 attempts


def at(moment):
    return time_machine.travel(moment, tick=False)


def agent_at(rpc_url: str) -> RegisteredAgent:
    registered = make_agent()
    registered.agent.rpc_url = rpc_url
    registered.agent.credential = "Bearer shared-secret-credential"
    registered.agent.save()
    return registered


def ended_task(registered: RegisteredAgent, task_id: str = "task-1", **kw) -> RegisteredAgent:
    """A task with its own endpoint, completed through it (pushed at NOW)."""
    endpoint, token, bearer = new_endpoint(registered.agent, task_id=task_id, **kw)
    task = RegisteredAgent(registered.agent, endpoint, token, bearer, None)
    with at(NOW):
        body = status("COMPLETED", task=task_id, context=f"ctx-{task_id}", at=1)
        assert push(Client(), task, body).status_code == 200
    return task


def reread(task: RegisteredAgent) -> PushEndpoint:
    return PushEndpoint.objects.get(pk=task.endpoint.pk)


@pytest.fixture
def stub():
    with MisbehavingAgent() as agent:
        yield agent


def test_an_agent_answering_500_is_retried_with_backoff_and_given_up_after_8_attempts(stub):
    stub.answer({"error": "internal"}, status=500)
    task = ended_task(agent_at(stub.rpc_url))
    moment = NOW
    for attempt, wait in enumerate([*RETRIES, None], start=1):
        with at(moment):
            done = push_configs.run_once()
        endpoint = reread(task)
        assert endpoint.delete_attempts == attempt
        assert endpoint.last_delete_error == "the agent answered HTTP 500"
        if wait is None:
            assert (done.given_up, endpoint.next_delete_at) == (1, None)
            break
        assert done.retrying == 1
        assert endpoint.next_delete_at == moment + timedelta(minutes=wait)
        with at(endpoint.next_delete_at - timedelta(seconds=1)):
            assert push_configs.run_once().retrying == 0  # not due yet
        moment = endpoint.next_delete_at
    assert len(stub.calls(DELETE)) == 8
    assert push_configs.status(endpoint) == "gave up after 8 attempts: the agent answered HTTP 500"
    with at(moment + timedelta(days=30)):
        push_configs.run_once()
    assert len(stub.calls(DELETE)) == 8  # given up: never called again
    assert endpoint.config_deleted_at is None


def test_each_delete_names_the_task_and_the_config_and_goes_with_the_shared_credential(stub):
    stub.rpc_result({})
    registered = agent_at(stub.rpc_url)
    task = ended_task(registered)
    with at(NOW):
        done = push_configs.run_once()
    assert (done.deleted, done.retrying) == (1, 0)
    assert stub.calls(DELETE) == [{"taskId": "task-1", "id": task.endpoint.public_id}]
    [request] = [r for r in stub.requests if DELETE in r.body.decode()]
    assert request.headers["authorization"] == "Bearer shared-secret-credential"
    assert reread(task).config_deleted_at == NOW


def test_an_agent_that_no_longer_knows_the_task_counts_as_deleted(stub):
    stub.rpc_error(-32001, "Task not found", reason="TASK_NOT_FOUND")
    task = ended_task(agent_at(stub.rpc_url))
    with at(NOW):
        assert push_configs.run_once().deleted == 1
    assert reread(task).config_deleted_at == NOW


def test_an_agent_without_the_method_is_given_up_at_once(stub):
    stub.rpc_error(-32601, "Method not found")
    task = ended_task(agent_at(stub.rpc_url))
    with at(NOW):
        assert push_configs.run_once().given_up == 1
    endpoint = reread(task)
    assert (endpoint.delete_attempts, endpoint.next_delete_at) == (1, None)
    assert endpoint.last_delete_error == "the agent does not know this A2A 1.0 method"


def test_an_unreachable_agent_is_called_once_a_pass_its_other_deletes_wait_uncounted():
    registered = agent_at(f"http://127.0.0.1:{free_port()}/a2a/jsonrpc")
    first, second = ended_task(registered, "task-1"), ended_task(registered, "task-2")
    with at(NOW):
        done = push_configs.run_once()
    assert (done.retrying, done.postponed) == (1, 1)
    assert reread(first).delete_attempts == 1
    waiting = reread(second)
    assert (waiting.delete_attempts, waiting.last_delete_error) == (0, "")
    assert waiting.next_delete_at == NOW + timedelta(minutes=1)


def test_a_pass_calls_at_most_a_batch_of_agents(stub, monkeypatch):
    stub.rpc_result({})
    monkeypatch.setattr(push_configs, "BATCH", 2)
    registered = agent_at(stub.rpc_url)
    tasks = [ended_task(registered, f"task-{n}") for n in range(3)]
    with at(NOW):
        assert push_configs.run_once().deleted == 2
        assert push_configs.run_once().deleted == 1
    assert all(reread(t).config_deleted_at == NOW for t in tasks)
    assert len(stub.calls(DELETE)) == 3


def test_a_delete_another_pass_has_claimed_is_not_called_twice(stub):
    """Two passes at once (two servers): each due delete is claimed by one of them."""
    stub.rpc_result({})
    task = ended_task(agent_at(stub.rpc_url))
    with at(NOW):
        push_configs.end_all_finished()
        [endpoint] = push_configs.due()
        assert push_configs._claim(endpoint, NOW)  # the other pass took it
        assert push_configs.delete_due().deleted == 0
        assert not push_configs._claim(endpoint, NOW)
    assert stub.calls(DELETE) == [] and reread(task).config_deleted_at is None


def test_the_config_ender_runs_in_the_background_and_stops(stub, transactional_db):
    stub.rpc_result({})
    task = ended_task(agent_at(stub.rpc_url))
    loop = push_configs.Background(poll_seconds=0.05)
    loop.start()
    try:
        wait_for(lambda: reread(task).config_deleted_at, "the background pass to delete it")
    finally:
        loop.stop()
    assert not loop.running
    assert len(stub.calls(DELETE)) == 1


# -- what is in use, listed -------------------------------------------------------------------


def test_push_configs_lists_what_is_in_use_newest_first_without_secrets(stub):
    stub.answer({"error": "internal"}, status=500)
    with at(NOW - timedelta(hours=2)):
        registered = agent_at(stub.rpc_url)
    alice = member("alice")
    with at(NOW - timedelta(hours=1)):
        followed = ended_task(registered, "task-f")  # pushed at NOW, so ended
        PushEndpoint.objects.filter(pk=followed.endpoint.pk).update(followed=True)
        gone = ended_task(registered, "task-gone")
        PushEndpoint.objects.filter(pk=gone.endpoint.pk).update(config_deleted_at=NOW)
    with at(NOW - timedelta(minutes=5)):
        started, token, bearer = new_endpoint(registered.agent, created_for=alice)
    PushEndpoint.objects.filter(pk=started.pk).update(task_id="task-s", followed=False)
    with at(NOW):
        push_configs.run_once()  # task-f ends; its delete fails (500): retrying

    out = io.StringIO()
    call_command("push_configs", str(registered.agent.pk), stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"Builder (agent {registered.agent.pk}): 3 push configurations in use."
    assert lines[1].startswith(f"  {started.public_id} · started · task task-s · created ")
    assert lines[1].endswith("· for alice · in use")
    assert f"{followed.endpoint.public_id} · followed · task task-f" in lines[2]
    assert lines[2].endswith("retrying (attempt 1): the agent answered HTTP 500")
    assert f"{registered.endpoint.public_id} · agent's own · no task" in lines[3]

    out = io.StringIO()
    call_command("push_configs", str(registered.agent.pk), "--json", stdout=out)
    listed = json.loads(out.getvalue())
    assert [c["endpoint"] for c in listed] == [
        started.public_id,
        followed.endpoint.public_id,
        registered.endpoint.public_id,
    ]
    assert [c["kind"] for c in listed] == ["started", "followed", "agent's own"]
    assert listed[1]["ended_at"] == NOW.isoformat() and listed[1]["delete_attempts"] == 1
    assert listed[0]["created_for"] == "alice" and listed[2]["created_for"] is None
    secrets = [registered.token, registered.bearer, token, bearer, followed.token]
    secrets += [e.token_digest for e in PushEndpoint.objects.all()]
    secrets += ["shared-secret-credential"]
    for shown in (out.getvalue(), "\n".join(lines)):
        assert not [s for s in secrets if s in shown]


@pytest.mark.parametrize("agent_id", ["12345", "x", "²", "9" * 40])
def test_push_configs_for_an_unknown_or_malformed_agent_says_so(agent_id):
    with pytest.raises(CommandError) as refused:
        call_command("push_configs", agent_id, stdout=io.StringIO())
    assert str(refused.value) == "No agent 12345." or "must be a number" in str(refused.value)
