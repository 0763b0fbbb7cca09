"""The interaction's transitions (Interaction.objects): each moves only the states it names,
only in the round it was given, and says by its return value whether it moved anything.

Interactions are asked by real pushes through the receiver; the transitions are then called
as ingest and answers call them, with the times they pass in (no clock is read).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tasks.models import Interaction, Task
from tests.builders import EPOCH, approval, status
from tests.conftest import RegisteredAgent, make_agent, push

CLAIMED_AT = datetime(2026, 12, 1, 10, 2, tzinfo=UTC)
APPROVE = {"approved": True}
DENY = {"approved": False}
State = Interaction.State


@pytest.fixture
def agent(db) -> RegisteredAgent:
    return make_agent()


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_user("alice")


@pytest.fixture
def bob(db) -> User:
    return User.objects.create_user("bob")


def send(agent: RegisteredAgent, body: dict, name: str) -> None:
    assert push(Client(), agent, body, msg_id=name).status_code == 200


def ask(agent: RegisteredAgent, at: int = 1) -> Interaction:
    """The agent waits for approval of "Ship v2?" (interaction i-1), asked at `at` s."""
    body = status(
        "AUTH_REQUIRED",
        at=at,
        text="Ship v2?",
        message_id=f"m-{at}",
        metadata=approval("i-1", "Ship v2?"),
    )
    send(agent, body, f"ask-{at}")
    return Interaction.objects.get(interaction_id="i-1")


def move_on(agent: RegisteredAgent, at: int) -> None:
    send(agent, status("WORKING", at=at), f"working-{at}")


def fresh(interaction: Interaction) -> Interaction:
    return Interaction.objects.get(pk=interaction.pk)


def claim(interaction: Interaction, user: User, answer: dict = APPROVE) -> Interaction:
    """`interaction` claimed by `user`: the row as the claim left it (what answers binds)."""
    assert Interaction.objects.claim(
        interaction, by=user, answer=answer, reason="ship it", at=CLAIMED_AT
    )
    return fresh(interaction)


def sent(interaction: Interaction, user: User) -> Interaction:
    claimed = claim(interaction, user)
    assert Interaction.objects.record_sent(claimed, error="timed out")
    return fresh(interaction)


def answered(interaction: Interaction, user: User) -> Interaction:
    claimed = claim(interaction, user)
    assert Interaction.objects.record_answered(claimed, at=CLAIMED_AT)
    return fresh(interaction)


# -- open and reopen: the agent asks ---------------------------------------------------------


def test_open_creates_the_interaction_open_for_a_current_status_and_closed_for_history(agent):
    send(agent, status("WORKING", at=1), "start")
    task = Task.objects.get()

    def opened(interaction_id: str, *, current: bool) -> tuple[Interaction, bool]:
        return Interaction.objects.open(
            task,
            interaction_id,
            kind="approval",
            prompt="Ship?",
            detail=None,
            at=EPOCH,
            asked_at=EPOCH,
            asked_message_id="m-1",
            current=current,
        )

    now_asked, created = opened("i-now", current=True)
    assert created and now_asked.state == State.OPEN
    once_asked, created = opened("i-before", current=False)
    assert created and once_asked.state == State.CLOSED
    again, created = opened("i-now", current=False)
    assert not created and again.pk == now_asked.pk and again.state == State.OPEN


def test_reopen_starts_a_new_round_free_of_the_last_decision(agent, alice):
    done = answered(ask(agent), alice)

    assert Interaction.objects.reopen(done, asked_at=EPOCH, asked_message_id="m-9")

    again = fresh(done)
    assert (again.state, again.round, again.asked_message_id) == (State.OPEN, 2, "m-9")
    assert (again.answer, again.answered_by, again.answered_at, again.reason) == (
        None,
        None,
        None,
        "",
    )


def test_reopen_of_an_open_interaction_only_remembers_the_asking(agent):
    interaction = ask(agent)

    assert not Interaction.objects.reopen(interaction, asked_at=EPOCH, asked_message_id="m-9")

    again = fresh(interaction)
    assert (again.state, again.round, again.asked_message_id) == (State.OPEN, 1, "m-9")


def test_reopen_from_an_older_read_changes_nothing(agent, alice, bob):
    done = answered(ask(agent), alice)
    assert Interaction.objects.reopen(done, asked_at=EPOCH, asked_message_id="m-2")
    answered(fresh(done), bob)  # round 2 answered too

    # A second writer that read round 1 before the first reopened it.
    assert not Interaction.objects.reopen(done, asked_at=EPOCH, asked_message_id="m-3")

    again = fresh(done)
    assert (again.state, again.round, again.answered_by) == (State.ANSWERED, 2, bob)


# -- close: the agent moved on ---------------------------------------------------------------


def test_close_closes_what_is_pending_keeping_decisions_and_leaves_the_rest(agent, alice):
    send(agent, status("WORKING", at=1), "start")
    task = Task.objects.get()

    def opened(interaction_id: str) -> Interaction:
        return Interaction.objects.open(
            task, interaction_id, kind="approval", prompt="?", detail=None, at=EPOCH,
            asked_at=EPOCH, asked_message_id="", current=True,
        )[0]  # fmt: skip

    kept = opened("kept")
    opened("waiting")
    answering = claim(opened("answering"), alice)
    unconfirmed = sent(opened("sent"), alice)
    done = answered(opened("answered"), alice)
    gone = opened("dismissed")
    assert Interaction.objects.dismiss(gone, by=alice, at=CLAIMED_AT, forgotten_round=None)

    assert len(task.interactions.close(keep=kept)) == 3

    states = dict(task.interactions.values_list("interaction_id", "state"))
    assert states == {
        "kept": State.OPEN,
        "waiting": State.CLOSED,
        "answering": State.CLOSED,
        "sent": State.CLOSED,
        "answered": State.ANSWERED,
        "dismissed": State.DISMISSED,
    }
    for decided in (answering, unconfirmed, done):
        assert fresh(decided).answer == APPROVE


def test_a_working_status_on_a_working_task_writes_no_interaction(agent):
    send(agent, status("WORKING", at=1, text="starting"), "start")

    with CaptureQueriesContext(connection) as captured:
        send(agent, status("WORKING", at=2, text="still going"), "going")

    writes = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]
    assert writes and not [sql for sql in writes if '"tasks_interaction"' in sql]


def test_a_working_status_after_a_question_closes_it_keeping_the_decision(agent, alice):
    claim(ask(agent), alice)

    move_on(agent, at=2)

    closed = Interaction.objects.get()
    assert (closed.state, closed.answer) == (State.CLOSED, APPROVE)


# -- claim and reclaim: a person's decision --------------------------------------------------


def test_claim_binds_an_open_interaction_to_the_first_decision_only(agent, alice, bob):
    interaction = ask(agent)

    assert Interaction.objects.claim(
        interaction, by=alice, answer=APPROVE, reason="", at=CLAIMED_AT
    )
    assert not Interaction.objects.claim(interaction, by=bob, answer=DENY, reason="", at=CLAIMED_AT)

    bound = fresh(interaction)
    assert (bound.state, bound.answer, bound.answered_by) == (State.ANSWERING, APPROVE, alice)


def test_claim_of_an_older_round_changes_nothing(agent, alice, bob):
    first_round = ask(agent)  # read by bob's request, still open
    claimed = claim(first_round, alice)
    assert Interaction.objects.reopen(claimed, asked_at=EPOCH, asked_message_id="m-2")

    assert not Interaction.objects.claim(first_round, by=bob, answer=DENY, reason="", at=CLAIMED_AT)

    second_round = fresh(first_round)
    assert (second_round.state, second_round.round, second_round.answer) == (State.OPEN, 2, None)


@pytest.mark.parametrize("state", [State.ANSWERED, State.CLOSED, State.DISMISSED])
def test_claim_refuses_what_is_not_open(agent, alice, state):
    interaction = ask(agent)
    Interaction.objects.filter(pk=interaction.pk).update(state=state)

    assert not Interaction.objects.claim(
        fresh(interaction), by=alice, answer=APPROVE, reason="", at=CLAIMED_AT
    )
    assert fresh(interaction).state == state


def test_reclaim_takes_a_sent_decision_again(agent, alice):
    unconfirmed = sent(ask(agent), alice)
    later = CLAIMED_AT + timedelta(seconds=30)

    assert Interaction.objects.reclaim(unconfirmed, at=later)

    again = fresh(unconfirmed)
    assert (again.state, again.answered_at, again.answer) == (State.ANSWERING, later, APPROVE)


def test_reclaim_takes_a_claim_only_once_it_is_stale(agent, alice):
    claimed = claim(ask(agent), alice)

    in_flight = CLAIMED_AT + Interaction.STALE_CLAIM - timedelta(seconds=1)
    assert not Interaction.objects.reclaim(claimed, at=in_flight)
    assert fresh(claimed).answered_at == CLAIMED_AT

    dead = CLAIMED_AT + Interaction.STALE_CLAIM + timedelta(seconds=1)
    assert Interaction.objects.reclaim(claimed, at=dead)
    assert fresh(claimed).answered_at == dead


def test_reclaim_refuses_an_open_or_answered_interaction(agent, alice):
    interaction = ask(agent)
    late = CLAIMED_AT + timedelta(hours=1)
    assert not Interaction.objects.reclaim(interaction, at=late)
    assert fresh(interaction).state == State.OPEN

    done = answered(interaction, alice)
    assert not Interaction.objects.reclaim(done, at=late)
    assert fresh(done).state == State.ANSWERED


def test_reclaim_of_an_older_round_changes_nothing(agent, alice):
    unconfirmed = sent(ask(agent), alice)
    assert Interaction.objects.reopen(unconfirmed, asked_at=EPOCH, asked_message_id="m-2")
    sent(fresh(unconfirmed), alice)  # round 2 sent too

    assert not Interaction.objects.reclaim(unconfirmed, at=CLAIMED_AT + timedelta(seconds=30))
    assert fresh(unconfirmed).state == State.SENT


# -- release: nothing reached the agent ------------------------------------------------------


def test_release_opens_it_again_for_any_decision(agent, alice):
    claimed = claim(ask(agent), alice)

    assert Interaction.objects.release(claimed, error="connection refused", forgotten=True)

    again = fresh(claimed)
    assert (again.state, again.answer, again.answered_by, again.reason) == (
        State.OPEN,
        None,
        None,
        "",
    )
    assert (again.last_error, again.forgotten_round) == ("connection refused", 1)


def test_release_of_a_sent_decision_changes_nothing(agent, alice):
    unconfirmed = sent(ask(agent), alice)

    assert not Interaction.objects.release(unconfirmed, error="refused")

    assert (fresh(unconfirmed).state, fresh(unconfirmed).answer) == (State.SENT, APPROVE)


def test_release_after_the_agent_moved_on_keeps_it_closed_without_the_decision(agent, alice):
    claimed = claim(ask(agent), alice)
    move_on(agent, at=2)

    assert not Interaction.objects.release(claimed, error="refused")

    closed = fresh(claimed)
    assert (closed.state, closed.answer, closed.answered_by) == (State.CLOSED, None, None)


def test_release_by_a_stale_claim_leaves_the_retry_bound(agent, alice, bob):
    stale = claim(ask(agent), alice)
    retried_at = CLAIMED_AT + Interaction.STALE_CLAIM + timedelta(seconds=1)
    assert Interaction.objects.reclaim(stale, at=retried_at)

    # Alice's call comes back long after: it did not reach the agent, but bob's retry may.
    assert not Interaction.objects.release(stale, error="connection reset")

    bound = fresh(stale)
    assert (bound.state, bound.answer, bound.answered_at) == (
        State.ANSWERING,
        APPROVE,
        retried_at,
    )


def test_release_of_an_older_round_leaves_the_new_round_alone(agent, alice, bob):
    first = claim(ask(agent), alice)
    assert Interaction.objects.reopen(first, asked_at=EPOCH, asked_message_id="m-2")
    second = claim(fresh(first), bob, DENY)
    # Both claims were made at the same instant: only the round tells them apart.
    assert second.answered_at == first.answered_at

    assert not Interaction.objects.release(first, error="refused")

    assert (fresh(first).state, fresh(first).answer) == (State.ANSWERING, DENY)
    assert second.round == 2


# -- record: the outcome of the call ---------------------------------------------------------


def test_record_answered_confirms_the_claim(agent, alice):
    claimed = claim(ask(agent), alice)
    confirmed_at = CLAIMED_AT + timedelta(seconds=1)

    assert Interaction.objects.record_answered(claimed, at=confirmed_at)

    done = fresh(claimed)
    assert (done.state, done.answered_at, done.answer) == (State.ANSWERED, confirmed_at, APPROVE)


def test_record_answered_after_the_agent_moved_on(agent, alice):
    claimed = claim(ask(agent), alice)
    move_on(agent, at=2)

    assert Interaction.objects.record_answered(claimed, at=CLAIMED_AT)

    assert fresh(claimed).state == State.ANSWERED


def test_record_answered_refuses_a_dismissed_interaction(agent, alice):
    unconfirmed = sent(ask(agent), alice)
    assert Interaction.objects.dismiss(unconfirmed, by=alice, at=CLAIMED_AT, forgotten_round=1)

    assert not Interaction.objects.record_answered(unconfirmed, at=CLAIMED_AT)
    assert fresh(unconfirmed).state == State.DISMISSED


def test_record_answered_of_an_older_round_changes_nothing(agent, alice):
    first = claim(ask(agent), alice)
    assert Interaction.objects.reopen(first, asked_at=EPOCH, asked_message_id="m-2")
    move_on(agent, at=3)  # round 2 closed, never answered

    assert not Interaction.objects.record_answered(first, at=CLAIMED_AT)

    closed = fresh(first)
    assert (closed.state, closed.round, closed.answer) == (State.CLOSED, 2, None)


def test_record_sent_keeps_the_decision_bound(agent, alice):
    claimed = claim(ask(agent), alice)

    assert Interaction.objects.record_sent(claimed, error="read timed out", forgotten=True)

    unconfirmed = fresh(claimed)
    assert (unconfirmed.state, unconfirmed.answer) == (State.SENT, APPROVE)
    assert (unconfirmed.last_error, unconfirmed.forgotten_round) == ("read timed out", 1)


def test_record_sent_after_the_agent_moved_on_changes_nothing(agent, alice):
    claimed = claim(ask(agent), alice)
    move_on(agent, at=2)

    assert not Interaction.objects.record_sent(claimed, error="read timed out")

    assert (fresh(claimed).state, fresh(claimed).last_error) == (State.CLOSED, "")


def test_record_sent_by_a_stale_claim_leaves_the_retry_in_flight(agent, alice):
    stale = claim(ask(agent), alice)
    assert Interaction.objects.reclaim(
        stale, at=CLAIMED_AT + Interaction.STALE_CLAIM + timedelta(seconds=1)
    )

    assert not Interaction.objects.record_sent(stale, error="read timed out")

    assert fresh(stale).state == State.ANSWERING


# -- dismiss: a person closed it -------------------------------------------------------------


@pytest.mark.parametrize("sent_first", [False, True], ids=["open", "sent"])
def test_dismiss_closes_an_open_or_sent_interaction(agent, alice, sent_first):
    interaction = ask(agent)
    if sent_first:
        interaction = sent(interaction, alice)

    assert Interaction.objects.dismiss(interaction, by=alice, at=CLAIMED_AT, forgotten_round=1)

    gone = fresh(interaction)
    assert (gone.state, gone.dismissed_by, gone.dismissed_at, gone.forgotten_round) == (
        State.DISMISSED,
        alice,
        CLAIMED_AT,
        1,
    )


def test_dismiss_refuses_a_claim_in_flight_and_what_is_settled(agent, alice):
    claimed = claim(ask(agent), alice)
    assert not Interaction.objects.dismiss(claimed, by=alice, at=CLAIMED_AT, forgotten_round=1)
    assert fresh(claimed).state == State.ANSWERING

    assert Interaction.objects.record_answered(claimed, at=CLAIMED_AT)
    assert not Interaction.objects.dismiss(claimed, by=alice, at=CLAIMED_AT, forgotten_round=1)
    assert fresh(claimed).state == State.ANSWERED

    move_on(agent, at=2)
    closed = ask(agent, at=3)  # round 2, open: then the agent moves on from it
    move_on(agent, at=4)
    assert not Interaction.objects.dismiss(
        fresh(closed), by=alice, at=CLAIMED_AT, forgotten_round=None
    )
    assert fresh(closed).state == State.CLOSED


def test_dismiss_of_an_older_round_changes_nothing(agent, alice):
    first = sent(ask(agent), alice)  # read by the person's dismiss before asking the agent
    ask(agent, at=2)  # meanwhile the agent asks again: round 2, open

    assert not Interaction.objects.dismiss(first, by=alice, at=CLAIMED_AT, forgotten_round=1)

    asked = fresh(first)
    assert (asked.state, asked.round, asked.dismissed_by) == (State.OPEN, 2, None)
