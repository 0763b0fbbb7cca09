"""The agent page's "Refresh from the agent" and "Follow this task" call the agent as the
person who presses: with alice's own credential she refreshes in the task she started
elsewhere (the shared credential does not see it) and follows it, the push config created
under her subject, after which the agent's pushes for it reach Onlooker. A person without a
credential on an agent that takes only each person's own is refused with a link to connect
one, and nothing is sent. Against the real a2a-sdk approval peer scoped per subject
(tests/peers/subject_agent.py) and Onlooker's live server for the pushes."""

from __future__ import annotations

import pytest

from tasks.models import Delivery, PushEndpoint, Session, Task
from tests.answering import person_peer
from tests.answering.person_peer import (
    ALICE,
    SHARED,
    approve,
    connect,
    registered,
    sent_since,
    start_task,
)
from tests.answering.test_a2a_peer import onlooker as live_onlooker
from tests.answering.test_a2a_peer import wait_for
from tests.conftest import make_agent, member
from tests.web.test_agent_page import client_of, flash, text

subject_peer = person_peer.subject_peer
direct_connections = person_peer.direct_connections
onlooker = live_onlooker


@pytest.mark.django_db(transaction=True)
def test_alices_refresh_finds_the_task_she_started_elsewhere_and_her_team_sees_it(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops)
    alice = member("alice", ops, approvers)
    connect(alice, agent)
    task = start_task(subject_peer)
    mark = len(subject_peer.calls)

    # Bob has no credential of his own: his Refresh calls with the shared one.
    bobs = flash(client_of(member("bob", ops, approvers)).post(f"/agents/{agent.pk}/refresh/"))
    assert "0 tasks listed" in bobs
    assert sent_since(subject_peer, mark) == [("ListTasks", f"Bearer {SHARED}", "onlooker")]

    mark = len(subject_peer.calls)
    words = flash(client_of(alice).post(f"/agents/{agent.pk}/refresh/"))

    assert "Refreshed: card re-read, 1 task listed, 1 fetched, 1 applied" in words
    assert sent_since(subject_peer, mark) == [
        ("ListTasks", f"Bearer {ALICE}", "alice"),
        ("GetTask", f"Bearer {ALICE}", "alice"),
    ]
    session = Session.objects.get(agent=agent, context_id=task["contextId"])
    # Her team sees the session like any other of the agent's.
    page = client_of(member("carol", ops)).get(f"/agents/{agent.pk}/").content.decode()
    assert f'href="/sessions/{session.pk}/"' in page


@pytest.mark.django_db(transaction=True)
def test_alices_follow_creates_the_push_config_under_her_subject_and_its_pushes_arrive(
    subject_peer, onlooker, ops, approvers
):
    agent = registered(subject_peer, ops)
    alice = member("alice", ops, approvers)
    connect(alice, agent)
    task = start_task(subject_peer)
    mark = len(subject_peer.calls)

    words = flash(client_of(alice).post(f"/agents/{agent.pk}/follow/", {"task_id": task["id"]}))

    assert f"Following task “{task['id']}”: fetched" in words
    assert sent_since(subject_peer, mark) == [
        ("ListTaskPushNotificationConfigs", f"Bearer {ALICE}", "alice"),
        ("CreateTaskPushNotificationConfig", f"Bearer {ALICE}", "alice"),
        ("GetTask", f"Bearer {ALICE}", "alice"),
    ]
    endpoint = PushEndpoint.objects.get(agent=agent, task_id=task["id"], active=True)
    assert endpoint.created_for == alice
    row = Task.objects.get(agent=agent, task_id=task["id"])
    assert row.state == "TASK_STATE_AUTH_REQUIRED"

    approve(subject_peer, task)

    wait_for(
        lambda: Task.objects.get(pk=row.pk).state == "TASK_STATE_COMPLETED",
        "the agent's push of alice's task to be applied",
    )
    assert Delivery.objects.filter(endpoint=endpoint, outcome="applied").exists()


@pytest.mark.django_db(transaction=True)
def test_the_shared_credential_cannot_follow_a_task_another_subject_started(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops)
    task = start_task(subject_peer)
    bob = client_of(member("bob", ops, approvers))
    mark = len(subject_peer.calls)

    words = flash(bob.post(f"/agents/{agent.pk}/follow/", {"task_id": task["id"]}))

    assert "The agent does not know task" in words and "nothing is followed" in words
    assert {credential for _, credential, _ in sent_since(subject_peer, mark)} == {
        f"Bearer {SHARED}"
    }
    assert not PushEndpoint.objects.filter(task_id=task["id"]).exists()


@pytest.mark.django_db(transaction=True)
def test_a_person_without_a_credential_on_a_per_person_agent_is_refused_with_the_link(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops, per_person=True)
    task = start_task(subject_peer)
    bob = client_of(member("bob", ops, approvers))
    link = f'href="/settings/#credential-{agent.pk}"'
    calls = list(subject_peer.calls)

    page = bob.get(f"/agents/{agent.pk}/").content.decode()
    assert link in page
    assert f"Connect your credential for {agent.name} to refresh or follow its tasks" in text(page)
    assert "data-agent-refresh" not in page and "data-agent-follow" not in page

    refused = bob.post(f"/agents/{agent.pk}/refresh/")
    assert refused.status_code == 403
    assert link in refused.content.decode()
    assert f"Connect your credential for {agent.name} to refresh" in text(refused.content.decode())
    refused = bob.post(f"/agents/{agent.pk}/follow/", {"task_id": task["id"]})
    assert refused.status_code == 403
    assert f"Connect your credential for {agent.name} to follow this task" in text(
        refused.content.decode()
    )

    assert subject_peer.calls == calls
    assert not PushEndpoint.objects.exclude(task_id="").exists()
    assert not Task.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_person_with_a_credential_sees_the_forms_on_a_per_person_agent(
    subject_peer, ops, approvers
):
    agent = registered(subject_peer, ops, per_person=True)
    alice = member("alice", ops, approvers)
    connect(alice, agent)

    page = client_of(alice).get(f"/agents/{agent.pk}/").content.decode()

    assert "data-agent-refresh" in page and "data-agent-follow" in page
    assert "data-agent-connect" not in page


def test_a_config_the_agent_did_not_take_is_dropped_as_the_person_who_asked(
    ops, approvers, agent_stub
):
    """Agents keep configs per subject: the clean-up goes out with the same credential."""
    agent = make_agent(team=ops).agent
    agent.rpc_url, agent.push_notifications = agent_stub.rpc_url, True
    agent.credential = f"Bearer {SHARED}"
    agent.save()
    alice = member("alice", ops, approvers)
    connect(alice, agent)
    agent_stub.answer(b"overloaded", status=500, content_type="text/plain")

    words = flash(client_of(alice).post(f"/agents/{agent.pk}/follow/", {"task_id": "t-1"}))

    assert "The agent did not take the push config" in words
    sent = [(r.json()["method"], r.headers.get("authorization")) for r in agent_stub.requests]
    assert sent == [
        ("ListTaskPushNotificationConfigs", f"Bearer {ALICE}"),
        ("CreateTaskPushNotificationConfig", f"Bearer {ALICE}"),
        ("DeleteTaskPushNotificationConfig", f"Bearer {ALICE}"),
    ]
    assert not PushEndpoint.objects.filter(task_id="t-1").exists()
