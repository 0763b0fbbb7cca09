"""Push configurations end with their task (issue 32 §6), against a real a2a-sdk agent that
knows who calls it (tests/peers/subject_agent.py: its task store and push configs are kept
per subject, and it records every call's credential).

Work is started from the composer (the real view), or as a person with their own
credential; the task ends (approved, or cancelled); a pass of answering/push_configs.py (the
real `end_push_configs` command) deletes the config at the agent as whoever created it, and
the agent no longer lists it. An agent that cannot be reached is retried with backoff
(time-machine) until it can. Onlooker runs as pytest-django's live server, so the agent's
pushes reach it for real.
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from tasks.answering import a2a_client, agents, callers, push_configs
from tasks.models import Agent, Interaction, PersonalCredential, PushEndpoint, Task
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    add_agent,
    onlooker,
    wait_for,
)
from tests.answering.test_answers import answer, person
from tests.conftest import member
from tests.peers.subject_agent import SubjectAgent
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)

SHARED, ALICE = "shared-token", "alice-token"
DELETE = "DeleteTaskPushNotificationConfig"


@pytest.fixture
def subject_peer():
    """Start SubjectAgents on loopback (the shared credential is "onlooker", alice's is
    hers); every one is stopped when the test ends."""
    started: list[SubjectAgent] = []

    def start() -> SubjectAgent:
        peer = SubjectAgent(free_port(), tokens={SHARED: "onlooker", ALICE: "alice"})
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()


def register(peer: SubjectAgent, *options: str) -> Agent:
    registration = add_agent(
        peer.card_url, "--team", "ops", "--credential", f"Bearer {SHARED}", *options
    )
    return Agent.objects.get(pk=registration["agent"])


def listed(caller, task_id: str) -> list[str]:
    """The config ids the agent lists for the task, to this caller."""
    return [c.get("id") for c in a2a_client.list_task_push_notification_configs(caller, task_id)]


def task_in(agent: Agent, task_id: str, state: str, peer: SubjectAgent) -> Task:
    def reached() -> Task | None:
        return Task.objects.filter(agent=agent, task_id=task_id, state=state).first()

    return wait_for(reached, f"Onlooker to see the task {state}", lambda: str(peer.calls))


def composer_work_completed(peer: SubjectAgent, agent: Agent, alice) -> PushEndpoint:
    """Alice starts work from the composer's "New session" and approves what it asks; the
    agent completes the task and pushes that to Onlooker. Returns the work's endpoint."""
    form = {"agent": agent.pk, "text": "Publish the release notes", "message_id": "0123456789ab"}
    response = alice.post("/sessions/new/", form)
    assert response.status_code == 302, response.content
    endpoint = PushEndpoint.objects.exclude(task_id="").get(agent=agent)
    assert not endpoint.followed

    def asking() -> Interaction | None:
        return Interaction.objects.filter(
            task__agent=agent, task__task_id=endpoint.task_id, state=Interaction.State.OPEN
        ).first()

    interaction = wait_for(asking, "the agent to ask for approval", lambda: str(peer.calls))
    code, data = answer(alice, interaction, decision="approve")
    assert code == 200, data
    task_in(agent, endpoint.task_id, "TASK_STATE_COMPLETED", peer)
    return endpoint


def end_push_configs() -> str:
    out = io.StringIO()
    call_command("end_push_configs", stdout=out)
    return out.getvalue()


# -- deleted as whoever created it ------------------------------------------------------------


def test_work_started_from_the_composer_has_its_config_deleted_at_the_agent_once_it_completes(
    onlooker,  # noqa: F811 - a fixture imported from test_a2a_peer
    subject_peer,
    ops,
    approvers,
):
    peer = subject_peer()
    agent = register(peer)
    own = PushEndpoint.objects.get(agent=agent, task_id="")
    endpoint = composer_work_completed(peer, agent, person("alice", ops, approvers))
    [started] = peer.calls_of("SendMessage")[:1]
    assert endpoint.public_id in listed(callers.shared(agent), endpoint.task_id)

    said = end_push_configs()

    assert said.startswith("Ended 1 push configuration of finished tasks; 1 deleted"), said
    [delete] = peer.calls_of(DELETE)
    # As the work was started: the config is the caller's at the agent.
    assert (delete.credential, delete.subject) == (started.credential, started.subject)
    assert delete.credential == f"Bearer {SHARED}"
    assert endpoint.public_id not in listed(callers.shared(agent), endpoint.task_id)
    endpoint.refresh_from_db()
    assert endpoint.ended_at is not None and endpoint.config_deleted_at is not None
    assert (endpoint.delete_attempts, endpoint.next_delete_at) == (0, None)
    # Done once: a later pass calls nobody, and the agent's own endpoint is untouched.
    assert end_push_configs().startswith("Ended 0 push configurations of finished tasks; 0 del")
    assert len(peer.calls_of(DELETE)) == 1
    own.refresh_from_db()
    assert (own.ended_at, own.config_deleted_at) == (None, None)
    assert [e.public_id for e in push_configs.live(agent)] == [own.public_id]


def start_as(agent: Agent, user) -> tuple[PushEndpoint, dict]:
    """Work started as `user` with their own credential, the way the composer starts it for
    someone who has one: a push config created for them, sent with their credential."""
    caller = callers.for_person(agent, user)
    endpoint, push = agents.new_push_config(agent, created_for=user)
    result = a2a_client.send_message(caller, "Publish the release notes", push=push)
    agents.serves_task(endpoint, result["task"]["id"])
    return endpoint, result["task"]


def cancelled_as_alice(peer: SubjectAgent, agent: Agent, ops, approvers):
    alice = member("alice", ops, approvers)
    PersonalCredential.objects.create(user=alice, agent=agent, kind="token", secret=ALICE)
    endpoint, task = start_as(agent, alice)
    task_in(agent, task["id"], "TASK_STATE_AUTH_REQUIRED", peer)
    a2a_client.cancel_task(callers.for_person(agent, alice), task["id"])
    task_in(agent, task["id"], "TASK_STATE_CANCELED", peer)
    assert endpoint.public_id in listed(callers.for_person(agent, alice), task["id"])
    with pytest.raises(a2a_client.A2AError) as unknown:  # not the shared subject's task
        listed(callers.shared(agent), task["id"])
    assert unknown.value.code == -32001
    return alice, endpoint


def test_a_config_created_with_a_persons_own_credential_is_deleted_with_it(
    onlooker,  # noqa: F811
    subject_peer,
    ops,
    approvers,
):
    peer = subject_peer()
    agent = register(peer, "--per-person")
    alice, endpoint = cancelled_as_alice(peer, agent, ops, approvers)

    done = push_configs.run_once()

    assert (done.deleted, done.retrying, done.given_up) == (1, 0, 0)
    [delete] = peer.calls_of(DELETE)
    assert (delete.credential, delete.subject) == (f"Bearer {ALICE}", "alice")
    assert listed(callers.for_person(agent, alice), endpoint.task_id) == []
    endpoint.refresh_from_db()
    assert endpoint.config_deleted_at is not None


def test_a_creator_without_a_credential_any_more_is_stood_in_for_by_the_shared_one(
    onlooker,  # noqa: F811
    subject_peer,
    ops,
    approvers,
):
    """The agent is per-person, so for_person refuses; the delete still goes out (shared),
    and the agent's "no such task" for that subject counts as gone: nothing is left retrying."""
    peer = subject_peer()
    agent = register(peer, "--per-person")
    alice, endpoint = cancelled_as_alice(peer, agent, ops, approvers)
    PersonalCredential.objects.filter(user=alice).delete()

    done = push_configs.run_once()

    assert (done.deleted, done.retrying) == (1, 0)
    [delete] = peer.calls_of(DELETE)
    assert (delete.credential, delete.subject) == (f"Bearer {SHARED}", "onlooker")
    endpoint.refresh_from_db()
    assert endpoint.config_deleted_at is not None and endpoint.last_delete_error == ""


# -- an agent that cannot be reached ----------------------------------------------------------


def test_an_agent_that_cannot_be_reached_is_retried_with_backoff_until_the_delete_gets_through(
    onlooker,  # noqa: F811
    subject_peer,
    ops,
    approvers,
):
    peer = subject_peer()
    agent = register(peer)
    endpoint = composer_work_completed(peer, agent, person("alice", ops, approvers))
    # The agent moves out of reach (nothing listens at its address) once the task is done.
    Agent.objects.filter(pk=agent.pk).update(rpc_url=f"http://127.0.0.1:{free_port()}/a2a/x")
    start = timezone.now()

    def at(**later):
        return time_machine.travel(start + timedelta(**later), tick=False)

    with at():
        assert push_configs.run_once().retrying == 1
    endpoint.refresh_from_db()
    assert endpoint.delete_attempts == 1
    assert endpoint.next_delete_at == start + timedelta(minutes=1)
    assert endpoint.last_delete_error.startswith("could not connect to the agent at http://127.")
    assert SHARED not in endpoint.last_delete_error
    assert push_configs.status(endpoint).startswith("retrying (attempt 1): could not connect")

    with at(seconds=59):
        assert push_configs.run_once().retrying == 0  # not due yet
    with at(minutes=1, seconds=1):
        assert push_configs.run_once().retrying == 1
    endpoint.refresh_from_db()
    assert endpoint.delete_attempts == 2
    assert endpoint.next_delete_at == start + timedelta(minutes=3, seconds=1)  # then 2 min

    Agent.objects.filter(pk=agent.pk).update(rpc_url=peer.rpc_url)  # back
    with at(minutes=3, seconds=2):
        done = push_configs.run_once()
    assert (done.deleted, done.retrying) == (1, 0)
    assert endpoint.public_id not in listed(callers.shared(agent), endpoint.task_id)
    endpoint.refresh_from_db()
    assert endpoint.config_deleted_at == start + timedelta(minutes=3, seconds=2)
    assert (endpoint.next_delete_at, endpoint.last_delete_error) == (None, "")
    assert len(peer.calls_of(DELETE)) == 1  # the calls that failed never reached it


# -- add_agent says what a runtime needs ---------------------------------------------------------


def test_add_agent_says_which_host_a_runtimes_allowlist_needs_and_which_secret_to_register(
    subject_peer, settings, db
):
    settings.ONLOOKER_PUBLIC_URL = "https://onlooker.example.com"
    peer = subject_peer()
    out = io.StringIO()
    call_command("add_agent", peer.card_url, "--credential", f"Bearer {SHARED}", stdout=out)
    said = out.getvalue()
    assert (
        "If the agent's runtime only pushes to allowlisted hosts, allow onlooker.example.com; "
        "if it needs a push secret registered, use the push bearer/token above (or the "
        "signing secret)." in said
    )
