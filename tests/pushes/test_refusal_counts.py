"""Refused pushes cannot be turned into a write flood: a lone refusal is counted in the
database at once, the ones that follow within ONLOOKER_REFUSAL_WRITE_SECONDS are added up and
written together, and none is lost."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks.models import Delivery, Refusal
from tasks.pushes import refusals
from tests.builders import status
from tests.conftest import push

BAD_SIGNATURE = {"HTTP_WEBHOOK_SIGNATURE": "v1,bm90IHRoZSBzaWduYXR1cmU="}


def refusal_writes(queries) -> int:
    return sum(1 for q in queries if q["sql"].startswith("UPDATE") and "refusal" in q["sql"])


@pytest.fixture
def flood_window(settings):
    """A window longer than the test: every refusal after the first waits for it."""
    settings.ONLOOKER_REFUSAL_WRITE_SECONDS = 3600
    yield


def test_a_flood_of_badly_signed_pushes_writes_one_count_not_one_each(
    client, signed_agent, flood_window
):
    with CaptureQueriesContext(connection) as queries:
        answers = [
            push(client, signed_agent, status("WORKING", at=n), **BAD_SIGNATURE).status_code
            for n in range(200)
        ]
    assert set(answers) == {401}
    assert refusal_writes(queries.captured_queries) == 1, "the first refusal is written at once"
    assert Refusal.objects.get(agent=signed_agent.agent).count == 1

    refusals.counter.write()  # the window's end
    refusal = Refusal.objects.get(agent=signed_agent.agent)
    assert (refusal.reason, refusal.count) == ("unauthenticated", 200)
    assert refusal.last_detail == "no signature matched"
    assert not Delivery.objects.exists()


def test_a_lone_refusal_after_a_quiet_window_is_written_at_once(client, token_agent, settings):
    settings.ONLOOKER_REFUSAL_WRITE_SECONDS = 1
    response = push(client, token_agent, status("WORKING", at=1), HTTP_AUTHORIZATION="Bearer no")
    assert response.status_code == 401
    assert Refusal.objects.get(agent=token_agent.agent).count == 1


@pytest.mark.django_db(transaction=True)
def test_the_counts_of_a_flood_are_written_by_themselves_when_the_window_ends(
    client, token_agent, settings
):
    settings.ONLOOKER_REFUSAL_WRITE_SECONDS = 1
    for n in range(20):
        push(client, token_agent, status("WORKING", at=n), HTTP_AUTHORIZATION="Bearer no")
    deadline = time.monotonic() + 5
    while Refusal.objects.get(agent=token_agent.agent).count < 20:
        assert time.monotonic() < deadline, "the flood's counts were never written"
        time.sleep(0.05)
    assert Refusal.objects.get(agent=token_agent.agent).count == 20
