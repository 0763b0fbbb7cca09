"""Escalation (issue 31 §3): a channel made with `add_channel … --after 30m` hears only of
questions still open that long after their round opened, as `interaction.escalated`, once
per round; then how they ended. A channel without --after hears as before.

Questions are opened by real signed pushes and answered through the real view (the agent a
loopback stub); the channels are real webhook receivers on loopback, their bodies checked
with the Standard Webhooks library; time moves with time-machine. These commit for real:
the sender's workers have connections of their own.
"""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import claims, sender, sending
from tasks.wire import profile
from tests.builders import status
from tests.conftest import make_agent, push
from tests.notify.test_sender import approve, ask, posts, verified, webhook_channel
from tests.peers.misbehaving_agent import MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

Kind, State = Notification.Kind, Notification.State


@pytest.fixture
def bot(ops, agent_stub):
    """alice-bot, of team ops, speaking the profile; its JSON-RPC URL the stub's."""
    registered = make_agent(team=ops, name="alice-bot", signing=True)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def other_receiver():
    with MisbehavingAgent() as peer:
        peer.answer(b"ok", content_type="text/plain")
        yield peer


def escalation_channel(peer, after: str = "30m") -> tuple[NotificationChannel, str]:
    """Made as a person would: `add_channel --after`, on loopback (allowed on purpose)."""
    out = io.StringIO()
    url = peer.base_url + "/hooks/escalation"
    call_command(
        "add_channel", "--team", "ops", "--webhook", url, "--after", after,
        "--allow-private", "--json", stdout=out,
    )  # fmt: skip
    made = json.loads(out.getvalue())
    return NotificationChannel.objects.get(pk=made["channel"]), made["signing_secret"]


def latest(peer, secret: str) -> dict:
    """The newest post's body, its signature checked (as it arrives: a signature is good
    for five minutes)."""
    return verified(posts(peer)[-1], secret)


def types(peer) -> list[str]:
    return [json.loads(request.body)["type"] for request in posts(peer)]


def kinds(channel: NotificationChannel) -> list[tuple[str, int, str]]:
    rows = Notification.objects.filter(channel=channel).order_by("round", "kind", "reminder")
    return [(row.kind, row.round, row.state) for row in rows]


def test_only_a_question_still_open_after_the_delay_escalates_once_then_its_end_follows(
    clock, bot, receiver, other_receiver, ops, approvers
):
    normal, _ = webhook_channel(receiver, remind_after=timedelta(minutes=15))
    escalation, secret = escalation_channel(other_receiver)
    assert escalation.escalate_after == timedelta(minutes=30)
    interaction = ask(bot)

    assert sender.send_due() == 1  # the opening, to the normal channel only
    clock.shift(timedelta(minutes=29))
    sender.send_due()
    assert posts(other_receiver) == []  # not yet: nobody has waited 30 minutes

    clock.shift(timedelta(minutes=2))
    sender.send_due()
    assert types(other_receiver) == ["interaction.escalated"]
    escalated = latest(other_receiver, secret)
    assert escalated["type"] == "interaction.escalated"
    assert escalated["interaction"]["interactionId"] == "i-1"
    assert escalated["interaction"]["state"] == "open"
    assert posts(other_receiver)[0].headers["webhook-id"] == (f"onl_{interaction.pk}_1_escalated")
    clock.shift(timedelta(hours=3))
    sender.send_due()
    assert len(posts(other_receiver)) == 1  # once per round, whatever else falls due

    approve(interaction, ops, approvers)
    sender.send_due()
    ended = latest(other_receiver, secret)
    assert ended["type"] == "interaction.resolved"
    assert ended["resolution"]["text"] == "Answered by alice: Approve."
    # The channel without --after heard as it always did: the opening and its reminders.
    assert [kind for kind, _, _ in kinds(normal)] == [
        Kind.OPENED, Kind.REMINDER, Kind.REMINDER, Kind.REMINDER, Kind.RESOLVED,
    ]  # fmt: skip
    assert kinds(escalation) == [
        (Kind.ESCALATED, 1, State.SENT),
        (Kind.RESOLVED, 1, State.SENT),
    ]


def test_a_question_answered_before_its_delay_escalates_to_no_one(
    clock, bot, receiver, other_receiver, ops, approvers
):
    webhook_channel(receiver)
    escalation, _ = escalation_channel(other_receiver)
    interaction = ask(bot)
    sender.send_due()
    clock.shift(timedelta(minutes=10))
    approve(interaction, ops, approvers)

    clock.shift(timedelta(hours=1))
    sender.send_due()

    assert posts(other_receiver) == []
    # Its escalation was dropped when it fell due; no resolution of what it never heard.
    assert kinds(escalation) == [(Kind.ESCALATED, 1, State.SKIPPED)]
    assert [body.json()["type"] for body in posts(receiver)] == [
        "interaction.opened",
        "interaction.resolved",
    ]


def test_the_agent_moving_on_before_the_delay_drops_the_escalation(clock, bot, other_receiver):
    escalation, _ = escalation_channel(other_receiver)
    ask(bot)
    clock.shift(timedelta(minutes=31))
    # The round ended before any sender looked: it was due, so a resolution is queued
    # beside it, and the sender drops both, as the channel never heard the question.
    assert push(Client(), bot, status("WORKING", at=5)).status_code == 200
    sender.send_due()
    assert posts(other_receiver) == []
    assert {state for _, _, state in kinds(escalation)} == {State.SKIPPED}


def test_each_round_escalates_once(clock, bot, other_receiver, ops, approvers):
    escalation, secret = escalation_channel(other_receiver)
    interaction = ask(bot)
    clock.shift(timedelta(minutes=31))
    sender.send_due()
    approve(interaction, ops, approvers)
    sender.send_due()
    clock.shift(timedelta(minutes=5))
    ask(bot, at=3_000)  # the agent asks again: round 2

    clock.shift(timedelta(minutes=29))
    sender.send_due()
    assert types(other_receiver) == ["interaction.escalated", "interaction.resolved"]
    clock.shift(timedelta(minutes=2))
    sender.send_due()
    assert latest(other_receiver, secret)["type"] == "interaction.escalated"
    ids = [request.headers["webhook-id"] for request in posts(other_receiver)]
    assert ids[-1] == f"onl_{interaction.pk}_2_escalated" and len(set(ids)) == 3


def test_a_resolution_waits_for_an_escalation_being_sent_then_follows_it(
    clock, bot, other_receiver, ops, approvers
):
    escalation, secret = escalation_channel(other_receiver)
    interaction = ask(bot)
    clock.shift(timedelta(minutes=31))
    # A sender has taken the escalation (still open) and is sending it...
    held = claims.claim_next(escalation.pk, timezone.now(), set())
    assert held is not None and held.notification.kind == Kind.ESCALATED
    # ...when someone answers: the channel may be hearing of it this moment.
    approve(interaction, ops, approvers)
    assert sender.send_channel(escalation.pk) == 0  # the resolution waits for it
    assert posts(other_receiver) == []

    sending.send(held.notification, at=timezone.now())
    sender._sent(held, timezone.now())  # what the sender records once the receiver took it
    assert sender.send_channel(escalation.pk) == 1
    assert latest(other_receiver, secret)["type"] == "interaction.resolved"
    assert types(other_receiver) == ["interaction.escalated", "interaction.resolved"]
