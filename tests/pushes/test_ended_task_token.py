"""A task's own push token ends with its task (issue 32 §6): once the task has ended
(answering/push_configs.end_finished marks its endpoint), late and retried pushes are still
accepted for ONLOOKER_PUSH_TOKEN_GRACE_SECONDS, and refused with 401 after, storing nothing
but the refusal's count. The agent's own endpoint never ends. The clock moves with
time-machine; pushes go through the real receiver (Django test client)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks.answering import push_configs
from tasks.answering.agents import new_endpoint
from tasks.models import Delivery, PushEndpoint, Refusal
from tests.builders import status
from tests.conftest import NOW, RegisteredAgent, make_agent, push

pytestmark = pytest.mark.django_db

GRACE = 15 * 60


@pytest.fixture(autouse=True)
def grace(settings):
    settings.ONLOOKER_PUSH_TOKEN_GRACE_SECONDS = GRACE


@pytest.fixture
def own() -> RegisteredAgent:
    """An agent with its own endpoint (no task)."""
    return make_agent()


@pytest.fixture
def task_endpoint(own) -> RegisteredAgent:
    """The endpoint of one task Onlooker follows, with its own token and bearer."""
    endpoint, token, bearer = new_endpoint(own.agent, task_id="task-1")
    return RegisteredAgent(own.agent, endpoint, token, bearer, None)


def at(seconds: float):
    return time_machine.travel(NOW + timedelta(seconds=seconds), tick=False)


def ended(client, task_endpoint: RegisteredAgent) -> PushEndpoint:
    """The task completes (pushed through its own endpoint) and a pass marks its end at NOW."""
    with at(0):
        assert push(client, task_endpoint, status("WORKING", at=1)).status_code == 200
        assert push(client, task_endpoint, status("COMPLETED", at=2)).status_code == 200
        assert push_configs.end_finished() == 1
    endpoint = PushEndpoint.objects.get(pk=task_endpoint.endpoint.pk)
    assert endpoint.ended_at == NOW
    return endpoint


def test_a_task_endpoint_is_not_ended_while_its_task_runs(client, task_endpoint):
    with at(0):
        assert push(client, task_endpoint, status("WORKING", at=1)).status_code == 200
        assert push_configs.end_finished() == 0
    with at(GRACE * 10):
        assert push(client, task_endpoint, status("WORKING", at=3)).status_code == 200


def test_a_late_push_with_the_tasks_token_is_accepted_within_the_grace(client, task_endpoint):
    ended(client, task_endpoint)
    with at(GRACE - 1):
        response = push(client, task_endpoint, status("COMPLETED", at=3, text="late"))
    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "accepted"


def test_after_the_grace_the_tasks_token_is_refused_and_nothing_is_stored(client, task_endpoint):
    ended(client, task_endpoint)
    deliveries = Delivery.objects.count()
    with at(GRACE + 1):
        bearer = push(client, task_endpoint, status("COMPLETED", at=4))
        token = push(
            client,
            task_endpoint,
            status("COMPLETED", at=5),
            HTTP_AUTHORIZATION="",
            HTTP_X_A2A_NOTIFICATION_TOKEN=task_endpoint.token,
        )
    for response in (bearer, token):
        assert response.status_code == 401, response.content
        assert response.json() == {
            "error": "token expired",
            "detail": "this task's push token expired: the task ended at 2026-11-30 12:00:00 "
            f"UTC, and its token is accepted for {GRACE} s after",
        }
    assert Delivery.objects.count() == deliveries
    refusal = Refusal.objects.get(agent=task_endpoint.agent)
    assert (refusal.reason, refusal.count) == ("token_expired", 2)
    assert refusal.last_detail.startswith("this task's push token expired: the task ended at")


def test_wrong_credentials_on_an_ended_endpoint_hear_only_that_they_do_not_match(
    client, task_endpoint
):
    """The end is told only to a sender holding the endpoint's credentials."""
    ended(client, task_endpoint)
    with at(GRACE + 1):
        response = push(
            client, task_endpoint, status("WORKING", at=4), HTTP_AUTHORIZATION="Bearer x"
        )
    assert response.status_code == 401
    assert response.json()["detail"] == "the push credentials do not match this endpoint"


def test_the_agents_own_endpoint_never_ends(client, own, task_endpoint):
    ended(client, task_endpoint)
    with at(GRACE * 100):
        assert push_configs.end_finished() == 0
        response = push(client, own, status("COMPLETED", at=6))
    assert response.status_code == 200, response.content
    assert PushEndpoint.objects.get(pk=own.endpoint.pk).ended_at is None


def test_a_signing_agents_ended_task_endpoint_is_refused_after_the_grace(client):
    """Signed pushes prove the agent, not the task: the task's endpoint still ends."""
    signed = make_agent(signing=True)
    endpoint, token, bearer = new_endpoint(signed.agent, task_id="task-1")
    task = RegisteredAgent(signed.agent, endpoint, token, bearer, signed.secret)
    with at(0):
        assert push(client, task, status("COMPLETED", at=2)).status_code == 200
        push_configs.end_finished()
    with at(GRACE - 1):
        assert push(client, task, status("COMPLETED", at=3)).status_code == 200
    with at(GRACE + 1):
        assert push(client, task, status("COMPLETED", at=4)).status_code == 401
        assert push(client, signed, status("COMPLETED", at=5)).status_code == 200


def test_a_cached_endpoint_is_refused_on_time_once_its_end_is_known(
    client, task_endpoint, settings
):
    """The grace is judged with the clock at each push: an endpoint cached after its end was
    marked is refused the moment its grace is over, cached or not."""
    ended(client, task_endpoint)
    settings.ONLOOKER_ENDPOINT_CACHE_SECONDS = 3600  # cached from now on, ended
    with at(GRACE - 1):
        assert push(client, task_endpoint, status("COMPLETED", at=3)).status_code == 200
    with at(GRACE + 1), CaptureQueriesContext(connection) as queries:
        assert push(client, task_endpoint, status("COMPLETED", at=4)).status_code == 401
    assert not [q for q in queries if "tasks_pushendpoint" in q["sql"]]  # still cached


def test_an_end_marked_after_the_endpoint_was_cached_is_seen_within_the_cache_time(
    client, task_endpoint, settings
):
    """The cache's staleness only delays the refusal by ONLOOKER_ENDPOINT_CACHE_SECONDS."""
    settings.ONLOOKER_ENDPOINT_CACHE_SECONDS = 60
    with at(0):
        assert push(client, task_endpoint, status("COMPLETED", at=2)).status_code == 200
    # Marked as ended long ago (a pass that ran late), after this process cached it.
    assert push_configs.end_finished(NOW - timedelta(seconds=GRACE * 2)) == 1
    with at(30):  # the cached endpoint does not know it ended yet
        assert push(client, task_endpoint, status("COMPLETED", at=3)).status_code == 200
    with at(61):  # read again: refused
        assert push(client, task_endpoint, status("COMPLETED", at=4)).status_code == 401
