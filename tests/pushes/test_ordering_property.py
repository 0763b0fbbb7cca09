"""Pushes arrive at least once and in any order: whatever the order, with duplicates, the
store ends where in-order delivery ends. Each run applies the same deliveries to two fresh
agents (in order, and shuffled with duplicates) through the real view and compares."""

from __future__ import annotations

import json
import random

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.models import Artifact, Delivery, Interaction, Message, ProgressCard, Session, Task
from tasks.pushes import applier
from tasks.wire import profile
from tests.builders import approval, artifact, progress, status
from tests.conftest import make_agent, push

# In the long checks (-m slow; .ci/run runs them on both databases): many generated cases
# each, and the default run must stay inside its time budget.
pytestmark = pytest.mark.slow

TERMINALS = ["COMPLETED", "FAILED", "CANCELED", "REJECTED"]


def task_story(rng: random.Random, task: str, context: str, clock: list[int]) -> list[dict]:
    """One task's pushes in the order the agent generated them, with rising timestamps."""

    def tick() -> int:
        clock[0] += 1
        return clock[0]

    events = [status("SUBMITTED", task=task, context=context, at=tick())]
    for turn in range(rng.randint(0, 3)):
        at = tick()
        metadata = progress(
            *[(f"{task} step {i}", rng.choice(profile.STEP_STATES)) for i in range(3)]
        )
        if rng.random() < 0.3:
            metadata[profile.EFFECTS] = {"uncertain": f"{task}-effect-{turn}"}
        events.append(
            status(
                "WORKING",
                task=task,
                context=context,
                at=at,
                text=f"{task} working {turn}",
                metadata=metadata,
            )
        )
        if rng.random() < 0.5:
            events.append(artifact(f"{task}-a{turn}", f"out {turn}", task=task, context=context))
        if rng.random() < 0.5:
            kind, state = rng.choice(
                [("approval", "AUTH_REQUIRED"), ("question", "INPUT_REQUIRED")]
            )
            events.append(
                status(
                    state,
                    task=task,
                    context=context,
                    at=tick(),
                    text=f"{task} asks {turn}",
                    metadata=approval(f"{task}-i{turn}", f"{task} prompt {turn}", kind),
                )
            )
        elif rng.random() < 0.3:
            events.append(
                status(
                    "INPUT_REQUIRED",
                    task=task,
                    context=context,
                    at=tick(),
                    text=f"{task} plain {turn}",
                )
            )
    if rng.random() < 0.8:
        telemetry = {
            profile.TELEMETRY: {"steps": 3, "tokens": 100, "costUsd": 0.01, "traceId": task}
        }
        events.append(
            status(
                rng.choice(TERMINALS),
                task=task,
                context=context,
                at=tick(),
                text=f"{task} end",
                metadata=telemetry,
            )
        )
    return events


def story(seed: int, tasks: int) -> list[dict]:
    rng = random.Random(seed)
    clock = [0]
    events = []
    for index in range(tasks):
        context = f"ctx-{rng.randint(0, max(1, tasks // 3))}"
        events.extend(task_story(rng, f"task-{index}", context, clock))
    return events


def deliver(client, registered, events: list[tuple[str, dict]]) -> None:
    for webhook_id, body in events:
        response = push(client, registered, body, msg_id=webhook_id)
        assert response.status_code == 200, response.content


def final_state(agent) -> dict:
    return {
        "sessions": sorted(
            Session.objects.filter(agent=agent).values_list(
                "context_id", "state", "needs_human", "title"
            )
        ),
        "tasks": sorted(
            (
                t.task_id,
                t.session.context_id,
                t.state,
                t.status_timestamp,
                json.dumps(t.plan),
                json.dumps(t.telemetry),
                sorted(t.uncertain_effects),
                t.status_message,
            )
            for t in Task.objects.filter(agent=agent).select_related("session")
        ),
        "interactions": sorted(
            Interaction.objects.filter(task__agent=agent).values_list(
                "task__task_id", "interaction_id", "kind", "prompt", "state"
            )
        ),
        "artifacts": sorted(
            (a.task.task_id, a.artifact_id, json.dumps(a.parts), json.dumps(a.files))
            for a in Artifact.objects.filter(task__agent=agent).select_related("task")
        ),
        "cards": sorted(
            (
                c.session.context_id,
                json.dumps(c.plan),
                c.markdown,
                json.dumps(c.facts, sort_keys=True),
            )
            for c in ProgressCard.objects.filter(session__agent=agent).select_related("session")
        ),
        # Every message kept once, at its time. By id, not text: a note that changed the
        # card is kept as its receipt, which names the card's revision, and revisions
        # follow arrival order (a note that arrived late never reached the card).
        "transcript": list(
            Message.objects.filter(session__agent=agent)
            .exclude(message_id="")
            .order_by("session__context_id", "at", "message_id")
            .values_list("session__context_id", "role", "message_id", "at")
        ),
    }


def in_order_and_shuffled(
    client, events: list[dict], seed: int, duplicate_rate: float, *, batched: bool = False
):
    """`batched`: kept first, then applied in batches of 100, in the order received, as the
    applier does under load (one at a time per request otherwise)."""
    rng = random.Random(seed)
    numbered = [(f"msg-{i}", body) for i, body in enumerate(events)]
    shuffled = numbered + [e for e in numbered if rng.random() < duplicate_rate]
    rng.shuffle(shuffled)
    ordered_agent, shuffled_agent = make_agent(name="in order"), make_agent(name="shuffled")
    with override_settings(ONLOOKER_APPLIER="external" if batched else "inline"):
        deliver(client, ordered_agent, numbered)
        deliver(client, shuffled_agent, shuffled)
    while batched and applier.apply_batch(seconds=60.0).claimed:
        pass
    return ordered_agent.agent, shuffled_agent.agent, len(shuffled)


# Eight random orders on every run; the slow check below takes 10,000 deliveries in one.
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), tasks=st.integers(1, 4), order_seed=st.integers(0, 2**32))
def test_any_order_of_the_same_deliveries_gives_the_same_final_state(
    db, client, seed, tasks, order_seed
):
    events = story(seed, tasks)
    ordered, shuffled, _ = in_order_and_shuffled(client, events, order_seed, duplicate_rate=0.2)
    assert not Delivery.objects.filter(outcome=Delivery.Outcome.PENDING).exists()
    assert final_state(shuffled) == final_state(ordered)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), tasks=st.integers(1, 6), order_seed=st.integers(0, 2**32))
def test_deliveries_applied_in_batches_end_where_one_at_a_time_ends(
    db, client, seed, tasks, order_seed
):
    numbered = [(f"msg-{i}", body) for i, body in enumerate(story(seed, tasks))]
    random.Random(order_seed).shuffle(numbered)
    one_at_a_time, batched = make_agent(name="one at a time"), make_agent(name="batched")
    deliver(client, one_at_a_time, numbered)  # each applied on its own request
    with override_settings(ONLOOKER_APPLIER="external"):
        deliver(client, batched, numbered)  # kept; then applied in batches of up to 25
    while applier.apply_batch(limit=25, seconds=60.0).claimed:
        pass
    assert not Delivery.objects.filter(outcome=Delivery.Outcome.PENDING).exists()
    assert final_state(batched.agent) == final_state(one_at_a_time.agent)


@pytest.mark.slow
def test_ten_thousand_shuffled_deliveries_with_duplicates_lose_nothing(db, client):
    events = story(seed=7, tasks=1700)
    ordered, shuffled, sent = in_order_and_shuffled(
        client, events, seed=11, duplicate_rate=0.2, batched=True
    )
    assert sent >= 10_000
    assert sent - len(events) >= 0.18 * len(events)
    assert Delivery.objects.filter(agent=shuffled).count() == len(events)
    duplicates = sum(Delivery.objects.filter(agent=shuffled).values_list("duplicates", flat=True))
    assert duplicates == sent - len(events)
    assert not Delivery.objects.filter(outcome=Delivery.Outcome.PENDING).exists()
    assert final_state(shuffled) == final_state(ordered)
