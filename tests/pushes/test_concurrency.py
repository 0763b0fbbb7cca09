"""Concurrent deliveries: the same push sent at once by several retries is applied once, and
concurrent pushes that all create the same new task converge on one session and one task."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client

from tasks.models import Delivery, Message, Session, Task
from tests.builders import status
from tests.conftest import make_agent, push

pytestmark = pytest.mark.django_db(transaction=True)
THREADS = 8


def in_threads(work) -> list:
    """Run work(i) in THREADS threads released together; return the results in order."""
    barrier = threading.Barrier(THREADS)
    results: list = [None] * THREADS

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = work(index)
        except Exception as error:  # noqa: BLE001 - surfaced by the assertions below
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def outcome(response) -> str:
    assert response.status_code == 200, response.content
    return response.json()["outcome"]


def test_same_push_sent_concurrently_is_applied_exactly_once():
    registered = make_agent()
    body = status("WORKING", at=1, text="only once")
    results = in_threads(lambda i: outcome(push(Client(), registered, body, msg_id="retry-1")))
    assert sorted(results) == ["accepted"] + ["duplicate"] * (THREADS - 1)
    delivery = Delivery.objects.get()
    assert delivery.duplicates == THREADS - 1
    assert Message.objects.count() == 1


def test_concurrent_pushes_creating_one_task_converge_on_one_session_and_task():
    registered = make_agent()
    results = in_threads(
        lambda i: outcome(push(Client(), registered, status("WORKING", at=i + 1, text=f"step {i}")))
    )
    assert set(results) == {"accepted"}
    assert set(Delivery.objects.values_list("outcome", flat=True)) <= {"applied", "stale"}
    assert Session.objects.count() == 1
    task = Task.objects.get()
    assert task.status_message == f"step {THREADS - 1}"
    assert Message.objects.count() == THREADS
    assert Delivery.objects.count() == THREADS
