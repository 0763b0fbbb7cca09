"""`sync_agents` recovers what pushes never delivered, from a real a2a-sdk agent, and a second
run changes nothing."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import CommandError, call_command

from tasks.models import Agent, Delivery, Interaction, Session, Task
from tests.answering.test_a2a_peer import add_agent, start_peer, wait_for  # noqa: F401 - fixtures
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def sync(*options: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("sync_agents", *options, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def start_task_pushing_nowhere(peer) -> dict:
    """A task whose pushes go to a port nothing listens on: Onlooker hears none of them."""
    config = {"id": "lost", "url": f"http://127.0.0.1:{free_port()}/a2a/push/lost/"}
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "Write the release notes"}],
    }
    configuration = {"returnImmediately": True, "taskPushNotificationConfig": config}
    return peer.rpc("SendMessage", {"message": message, "configuration": configuration})["task"]


def test_sync_recovers_a_task_whose_pushes_were_lost_and_is_idempotent(start_peer):  # noqa: F811
    peer = start_peer()
    registration = add_agent(peer.card_url)
    task = start_task_pushing_nowhere(peer)
    wait_for(
        lambda: peer.get_task(task["id"])["status"]["state"] == "TASK_STATE_AUTH_REQUIRED",
        "the agent to wait for approval",
    )
    assert not Task.objects.exists()

    output = sync()

    assert f"#{registration['agent']}): 1 listed, 1 fetched, 1 applied" in output
    recovered = Task.objects.get(task_id=task["id"])
    assert recovered.state == "TASK_STATE_AUTH_REQUIRED"
    session = Session.objects.get(context_id=task["contextId"])
    assert session.needs_human and session.card.question["kind"] == "approval"
    assert Interaction.objects.get(task=recovered).state == Interaction.State.OPEN
    deliveries = Delivery.objects.count()

    # Nothing newer than what Onlooker holds: listed, not fetched again.
    assert "1 listed, 0 fetched, 0 applied" in sync()
    assert "1 listed, 0 fetched, 0 applied" in sync("--since", "1d")
    assert Delivery.objects.count() == deliveries


def test_sync_says_which_agent_could_not_be_reached(start_peer):  # noqa: F811
    peer = start_peer()
    add_agent(peer.card_url)
    peer.stop()
    with pytest.raises(CommandError, match="some agents could not be synced"):
        call_command("sync_agents", stdout=io.StringIO(), stderr=(err := io.StringIO()))
    assert "could not connect to the agent" in err.getvalue()


def test_since_must_be_a_duration_or_a_time(db):
    with pytest.raises(CommandError, match="give a duration like 30m"):
        sync("--since", "yesterday")


def test_sync_reads_each_agents_card_again(start_peer):  # noqa: F811
    peer = start_peer()
    registration = add_agent(peer.card_url)
    Agent.objects.filter(pk=registration["agent"]).update(
        rpc_url="http://127.0.0.1:1/old", extensions=[], last_error="stale"
    )
    sync()
    agent = Agent.objects.get(pk=registration["agent"])
    assert (agent.rpc_url, agent.last_error) == (peer.rpc_url, "")
    assert "https://docs.nylorun.com/a2a/interactions/v1" in agent.extensions


# -- one agent registered twice -----------------------------------------------------------


def start_task_in_context(peer, context_id: str) -> dict:
    """A follow-up task in a conversation the agent already has, its pushes lost too."""
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "contextId": context_id,
        "parts": [{"text": "And the changelog"}],
    }
    config = {"id": "lost-2", "url": f"http://127.0.0.1:{free_port()}/a2a/push/lost/"}
    configuration = {"returnImmediately": True, "taskPushNotificationConfig": config}
    return peer.rpc("SendMessage", {"message": message, "configuration": configuration})["task"]


def sessions_of(context_id: str) -> list[int]:
    return list(Session.objects.filter(context_id=context_id).values_list("agent_id", flat=True))


def test_an_agent_registered_twice_never_gets_two_sessions_for_one_context(start_peer):  # noqa: F811
    peer = start_peer()
    first = add_agent(peer.card_url)["agent"]
    second = add_agent(peer.card_url, "--again")["agent"]
    task = start_task_pushing_nowhere(peer)

    # Both registrations list the task; the first to sync takes it, the other leaves it.
    output = sync()

    assert f"(#{first}): 1 listed, 1 fetched, 1 applied" in output
    assert f"(#{second}): 1 listed, 0 fetched, 0 applied, 1 left to its other registration" in (
        output
    )
    assert sessions_of(task["contextId"]) == [first]
    assert list(Task.objects.values_list("agent_id", flat=True)) == [first]

    # Synced alone, the second registration leaves it too.
    sync("--agent", str(second))
    assert sessions_of(task["contextId"]) == [first]


def test_a_new_task_in_a_context_the_other_registration_holds_goes_there(start_peer):  # noqa: F811
    peer = start_peer()
    first = add_agent(peer.card_url)["agent"]
    second = add_agent(peer.card_url, "--again")["agent"]
    task = start_task_pushing_nowhere(peer)
    sync("--agent", str(first))
    follow_up = start_task_in_context(peer, task["contextId"])

    # The second registration holds neither the new task nor its context: it leaves both.
    sync("--agent", str(second))
    assert sessions_of(task["contextId"]) == [first]

    sync()
    assert sessions_of(task["contextId"]) == [first]
    session = Session.objects.get(context_id=task["contextId"])
    assert set(session.tasks.values_list("task_id", flat=True)) == {task["id"], follow_up["id"]}
