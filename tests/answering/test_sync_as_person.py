"""A sync finds what the subject it calls as may see: `sync_agents` with the agent's shared
credential does not find the task alice started elsewhere; `sync_agents --as alice` does,
with her credential, and the session is her team's like any other. Against the real a2a-sdk
approval peer whose task store is scoped per subject (tests/peers/subject_agent.py)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from tasks.answering import callers, sync
from tasks.models import Session, Task
from tests.answering import person_peer
from tests.answering.person_peer import ALICE, SHARED, connect, registered, sent_since, start_task
from tests.conftest import make_agent, member

subject_peer = person_peer.subject_peer
direct_connections = person_peer.direct_connections

pytestmark = pytest.mark.django_db(transaction=True)


def sync_agents(*options: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("sync_agents", *options, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_the_shared_credential_misses_alices_task_and_syncing_as_alice_finds_it(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops)
    alice = member("alice", ops, approvers)
    connect(alice, agent)
    task = start_task(subject_peer)
    mark = len(subject_peer.calls)

    assert f"(#{agent.pk}): 0 listed, 0 fetched, 0 applied" in sync_agents()
    assert sent_since(subject_peer, mark) == [("ListTasks", f"Bearer {SHARED}", "onlooker")]
    assert not Task.objects.exists()

    mark = len(subject_peer.calls)
    output = sync_agents("--as", "alice")

    assert f"(#{agent.pk}, as alice): 1 listed, 1 fetched, 1 applied" in output
    assert sent_since(subject_peer, mark) == [
        ("ListTasks", f"Bearer {ALICE}", "alice"),
        ("GetTask", f"Bearer {ALICE}", "alice"),
    ]
    found = Task.objects.get(agent=agent, task_id=task["id"])
    assert found.state == "TASK_STATE_AUTH_REQUIRED"
    # Her team sees it like any other session of the agent.
    bob = member("bob", ops)
    assert Session.objects.visible_to(bob).filter(context_id=task["contextId"]).exists()
    # A second run changes nothing: listed, not fetched again.
    assert "1 listed, 0 fetched, 0 applied" in sync_agents("--as", "alice")


def test_a_persons_sync_is_not_bounded_by_the_newest_status_the_shared_credential_saw(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops)
    connect(member("alice", ops, approvers), agent)
    hers = start_task(subject_peer)
    ours = start_task(subject_peer, SHARED)
    assert "1 listed, 1 fetched, 1 applied" in sync_agents()
    # What Onlooker holds under its own subject is newer than anything alice started.
    Task.objects.filter(task_id=ours["id"]).update(
        status_timestamp=Task.objects.get(task_id=ours["id"]).status_timestamp + timedelta(days=1)
    )
    assert "0 listed" in sync_agents()

    output = sync_agents("--as", "alice")

    assert "1 listed, 1 fetched, 1 applied" in output
    assert Task.objects.filter(agent=agent, task_id=hers["id"]).exists()


def test_syncing_as_a_person_without_a_credential_on_a_per_person_agent_sends_nothing(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops, per_person=True)
    member("bob", ops, approvers)

    with pytest.raises(CommandError, match=r"takes only each person's own credential and bob"):
        sync_agents("--as", "bob", "--agent", str(agent.pk))

    assert subject_peer.calls == []


def test_syncing_as_a_person_on_a_shared_agent_without_a_credential_uses_the_shared_one(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops)
    member("bob", ops, approvers)
    start_task(subject_peer)
    mark = len(subject_peer.calls)

    assert f"(#{agent.pk}, as bob): 0 listed" in sync_agents("--as", "bob")
    assert sent_since(subject_peer, mark) == [("ListTasks", f"Bearer {SHARED}", "onlooker")]


def test_syncing_as_someone_who_may_not_call_the_agent_is_refused(subject_peer, ops, approvers):
    agent = registered(subject_peer, ops)
    member("viewer", ops)
    member("carol", approvers)  # may answer, but is not on the agent's team

    with pytest.raises(CommandError, match="no active user has that username"):
        sync_agents("--as", "nobody")
    with pytest.raises(CommandError, match="may not call agents"):
        sync_agents("--as", "viewer")
    with pytest.raises(CommandError, match=f"may not see agent #{agent.pk}"):
        sync_agents("--as", "carol", "--agent", str(agent.pk))
    assert subject_peer.calls == []


def test_a_sync_refuses_a_caller_of_another_agent(subject_peer, ops):
    agent = registered(subject_peer, ops)
    stranger = callers.shared(make_agent(team=ops).agent)

    with pytest.raises(ValueError, match="another agent"):
        sync.sync_agent(agent, caller=stranger)
    assert subject_peer.calls == []
