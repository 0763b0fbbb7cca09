"""Two server processes, each with its own applier, take one shuffled burst with duplicates,
half through each: every delivery is applied exactly once, none fails (two appliers never
wait for each other's sessions, so never deadlock), and the store ends where one process
applying the pushes in order would have left it.

On PostgreSQL the appliers claim with SKIP LOCKED. The embedded SQLite default is meant for
one server, but two on one file must still be safe: they keep pushes in one spool file and
their appliers take turns moving them (tasks/pushes/spool.py), so none is moved or counted twice.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import Client

from tasks.models import Delivery, UsageDay
from tests.conftest import make_agent
from tests.live_server import LiveServer, push_http
from tests.pushes.test_ordering_property import deliver, final_state, story

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS = 30  # stories of statuses, notes, plans, questions and artifacts (ordering property)


def test_two_servers_applying_one_burst_end_where_one_would_and_apply_each_push_once():
    numbered = [(f"msg-{i}", body) for i, body in enumerate(story(seed=2026, tasks=TASKS))]
    ordered = make_agent(name="in order")
    deliver(Client(), ordered, numbered)  # one process, in order, each applied on arrival

    rng = random.Random(13)
    shuffled = list(numbered)
    rng.shuffle(shuffled)
    # Half through each server; one in five is sent again, to the other one.
    sends = [(n % 2, key, body) for n, (key, body) in enumerate(shuffled)]
    sends += [((n + 1) % 2, key, body) for n, (key, body) in enumerate(shuffled) if n % 5 == 0]
    burst = make_agent(name="burst")
    with LiveServer() as one, LiveServer() as two:
        servers = (one, two)

        def send(item: tuple[int, str, dict]) -> int:
            server, key, body = item
            return push_http(servers[server], burst, body, msg_id=key, applied=False).status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(send, sends))
        deadline = time.monotonic() + 30
        while Delivery.objects.filter(outcome=Delivery.Outcome.PENDING).exists():
            assert time.monotonic() < deadline, "the two appliers left deliveries pending"
            time.sleep(0.05)

    assert set(codes) == {200}
    deliveries = Delivery.objects.filter(agent=burst.agent)
    assert deliveries.count() == len(numbered)
    assert sum(d.duplicates for d in deliveries) == len(sends) - len(numbered)
    # Applied once each; none failed, so none waited on (or deadlocked with) the other.
    assert {(d.attempts, d.last_error) for d in deliveries} == {(0, "")}
    assert final_state(burst.agent) == final_state(ordered.agent)
    # The usage ledger, added to by both processes at once, loses nothing and counts nothing
    # twice (the story's tasks each report telemetry as they end).
    assert ledger(burst.agent) == ledger(ordered.agent) != (0, 0, 0)


def ledger(agent) -> tuple[int, int, int]:
    rows = UsageDay.objects.filter(agent=agent).values_list("cost_nanos", "tokens", "steps")
    return tuple(sum(column) for column in zip(*rows, strict=True)) or (0, 0, 0)
