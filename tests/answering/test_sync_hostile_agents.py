"""Whatever an agent answers `sync_agents` with (a task list of wrong types, tasks it cannot
find, tasks nested past what any parser keeps), every other agent and every other task of
that agent is still synced, and each problem is a line naming the agent and what was wrong."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command

from tasks.answering.agent_card import CARD_PATH
from tasks.models import Agent, Delivery, Task
from tasks.pushes import fetched
from tasks.wire import protocol
from tests.answering.test_add_agent import agent_card
from tests.builders import ts
from tests.conftest import make_agent
from tests.peers.misbehaving_agent import Answer, MisbehavingAgent, Received

pytestmark = pytest.mark.django_db


def task(task_id: str, *, state: str = "TASK_STATE_WORKING", **extra: object) -> dict:
    status = {"state": state, "timestamp": ts(1)}
    return {"id": task_id, "contextId": f"ctx-{task_id}", "status": status, **extra}


def nested(depth: int) -> object:
    value: object = "bottom"
    for _ in range(depth):
        value = {"more": value}
    return value


class ScriptedAgent:
    """A loopback agent with a card, a task list and, per task id, a GetTask answer: a task
    (a dict), any other result, a result's JSON text (bytes), or an `Answer` sent as it is."""

    def __init__(self, server: MisbehavingAgent, name: str) -> None:
        self.server = server
        self.listed: object = []
        self.tasks: dict[str, object] = {}
        registered = make_agent(name=name)
        Agent.objects.filter(pk=registered.agent.pk).update(
            card_url=server.base_url + CARD_PATH, rpc_url=server.rpc_url
        )
        self.agent = Agent.objects.get(pk=registered.agent.pk)
        self.prefix = f"{name} (#{self.agent.pk}): "
        server.answer_each(self._answer)

    def serve(self, *tasks: dict) -> None:
        """List these tasks and answer GetTask with each."""
        self.listed = [{"id": t["id"], "status": t["status"]} for t in tasks]
        self.tasks.update({t["id"]: t for t in tasks})

    def get_task_calls(self) -> list[str]:
        return [params["id"] for params in self.server.calls("GetTask")]

    def _answer(self, request: Received) -> Answer:
        if request.method == "GET":
            return Answer(body=agent_card(rpc_url=self.server.rpc_url))
        call = request.json()
        if call["method"] == "ListTasks":
            result = self.listed if not isinstance(self.listed, list) else {"tasks": self.listed}
        else:
            result = self.tasks.get(call["params"]["id"])
        if isinstance(result, Answer):
            return result
        if result is None:
            error = {"code": -32001, "message": "Task not found"}
            return Answer(body={"jsonrpc": "2.0", "id": call["id"], "error": error})
        if isinstance(result, bytes):  # too deep for any JSON encoder to write
            request_id = json.dumps(call["id"]).encode()
            return Answer(
                body=b'{"jsonrpc": "2.0", "id": ' + request_id + b', "result": ' + result + b"}"
            )
        return Answer(body={"jsonrpc": "2.0", "id": call["id"], "result": result})


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; loopback servers must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def agents(db) -> Iterator[tuple[ScriptedAgent, ScriptedAgent]]:
    """A hostile agent, synced first, and a good one after it."""
    with MisbehavingAgent() as first, MisbehavingAgent() as second:
        hostile, good = ScriptedAgent(first, "Hostile"), ScriptedAgent(second, "Good")
        good.serve(task("good-1"), task("good-2"))
        yield hostile, good


def sync() -> tuple[str, list[str]]:
    """stdout, and the lines of stderr; the command fails when anything was not synced."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="some agents could not be synced"):
        call_command("sync_agents", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue().splitlines()


def synced_ids() -> set[str]:
    return set(Task.objects.values_list("task_id", flat=True))


def test_a_task_list_of_wrong_types_is_one_line_per_task_and_the_rest_is_synced(agents):
    hostile, good = agents
    hostile.serve(task("status-list"), task("status-text"), task("fine"))
    hostile.listed = [
        {"id": "status-list", "status": ["TASK_STATE_WORKING"]},
        {"id": "status-text", "status": "TASK_STATE_WORKING"},
        {"id": {"$gt": ""}, "status": {"state": "TASK_STATE_WORKING"}},
        {"id": 7},
        {"id": ["fine"]},
        {"id": ""},
        {"status": {"timestamp": ts(1)}},
        {"id": "fine", "status": {"timestamp": ts(1)}},
        {"id": "odd\ud800", "status": {"timestamp": ts(1)}},
        {"id": "nul\x00", "status": {"timestamp": ts(1)}},
    ]

    out, lines = sync()

    assert synced_ids() == {"status-list", "status-text", "fine", "good-1", "good-2"}
    assert f"{good.prefix}2 listed, 2 fetched, 2 applied" in out
    mine = [line.removeprefix(hostile.prefix) for line in lines if line.startswith(hostile.prefix)]
    assert mine == [
        "10 listed, 3 fetched, 3 applied, 7 not synced",
        "a task in its list has an object for its id; A2A task ids are strings",
        "a task in its list has a number for its id; A2A task ids are strings",
        "a task in its list has a list for its id; A2A task ids are strings",
        "a task in its list has an empty id",
        "a task in its list has no id",
        "task 'odd': its id holds NUL or a lone surrogate, which Onlooker cannot ask for or keep",
        "task 'nul': its id holds NUL or a lone surrogate, which Onlooker cannot ask for or keep",
    ]
    assert hostile.get_task_calls() == ["status-list", "status-text", "fine"]


def test_tasks_the_agent_cannot_give_or_onlooker_cannot_read_are_skipped_one_by_one(agents):
    hostile, good = agents
    hostile.serve(
        task("deep", metadata=nested(100)),
        task("html-state", state="<b>DONE</b>\u202e"),
        task("fine"),
    )
    hostile.tasks["unreadable"] = (
        b'{"id": "unreadable", "contextId": "c", "metadata": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}"
    )
    hostile.tasks["not-a-task"] = "nonsense"
    hostile.listed[:0] = [{"id": "gone"}, {"id": "unreadable"}, {"id": "not-a-task"}]

    out, lines = sync()

    assert synced_ids() == {"fine", "good-1", "good-2"}
    assert f"{good.prefix}2 listed, 2 fetched, 2 applied" in out
    mine = [line.removeprefix(hostile.prefix) for line in lines if line.startswith(hostile.prefix)]
    assert mine[:4] == [
        "6 listed, 3 fetched, 1 applied, 5 not synced",
        "task 'gone': GetTask failed: the agent no longer knows this task",
        "task 'unreadable': the agent answered JSON nested too deeply to read",
        "task 'not-a-task': GetTask failed: the agent answered GetTask with something that is "
        "not A2A 1.0",
    ]
    cannot_read = "the agent sent a task Onlooker cannot read: "
    assert mine[4].startswith(f"task 'deep': {cannot_read}task.metadata.more.more"), mine[4]
    assert mine[4].endswith("nests too deeply: Onlooker keeps at most 64 levels")
    assert mine[5].startswith(f"task 'html-state': {cannot_read}task.status.state "), mine[5]
    assert "<" not in mine[5] and "\u202e" not in mine[5]
    assert len(mine) == 6


def test_a_fetched_task_too_deep_to_encode_is_refused_as_unreadable(db):
    """Whoever fetched it (sync, an answer's SendMessage), it is an answer Onlooker cannot
    read, not an error no caller expects; through sync the client's own parse usually gives
    up first."""
    registered = make_agent()
    with pytest.raises(protocol.BadBody, match="the task nests too deeply"):
        fetched.apply_fetched(registered.agent, task("deep", metadata=nested(5_000)))
    assert not Task.objects.exists() and not Delivery.objects.exists()


def test_an_agent_that_cannot_give_three_tasks_in_a_row_is_given_up_on(agents):
    hostile, good = agents
    hostile.listed = [{"id": f"gone-{number}"} for number in range(6)]

    out, lines = sync()

    assert hostile.get_task_calls() == ["gone-0", "gone-1", "gone-2"]
    assert lines[0] == (
        f"{hostile.prefix}3 listed, 0 fetched, 0 applied, 3 not synced; failed: stopped after "
        "3 tasks in a row could not be fetched"
    )
    assert f"{good.prefix}2 listed, 2 fetched, 2 applied" in out


def test_a_task_list_nested_too_deeply_to_read_fails_that_agent_only(agents):
    hostile, good = agents
    deep = b'{"jsonrpc": "2.0", "id": "x", "result": {"tasks": ' + b"[" * 100_000
    hostile.listed = Answer(body=deep)

    out, lines = sync()

    assert lines == [
        f"{hostile.prefix}0 listed, 0 fetched, 0 applied; failed: the agent answered JSON "
        "nested too deeply to read"
    ]
    assert synced_ids() == {"good-1", "good-2"}
    assert f"{good.prefix}2 listed, 2 fetched, 2 applied" in out
