"""Expiry, declared per agent (issue 31 §4): a question still open `--expire-after` after its
round opened is denied on the team's behalf ("No one answered within 4 h"), or with
`--on-expiry leave` only marked expired (reminders stop, the agent keeps waiting, people may
still answer). Never an approval; two expirers at once deny once.

The real a2a-sdk agent (tests/peers/approval_agent.py) is registered with the real
`add_agent` command and receives the deny; elsewhere a loopback agent counts what it gets.
Time moves with time-machine; the pages, the record's API and the webhooks are read as
people and receivers read them.
"""

from __future__ import annotations

import html
import re
import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.utils import timezone

from tasks.answering import answers, expiry
from tasks.answering.rules import NotAllowed
from tasks.models import Agent, Decision, Interaction, Session
from tasks.models.agents import duration_words
from tasks.models.notify import Notification
from tasks.notify import sender
from tasks.sessions import timeline
from tasks.wire import profile
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    add_agent,
    onlooker,
    start_peer,
    wait_for,
    wait_for_approval,
    wait_for_state,
)
from tests.answering.test_answers import answer, person, sent_messages
from tests.builders import EPOCH, approval, status
from tests.conftest import make_agent, push
from tests.notify.test_sender import posts, verified, webhook_channel
from tests.peers import approval_agent as peer_module
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

FOUR_HOURS = "No one answered within 4 h"


@pytest.fixture
def clock():
    with time_machine.travel(EPOCH, tick=True) as traveller:
        yield traveller


@pytest.fixture
def receiver():
    """A team's webhook receiver on loopback."""
    with MisbehavingAgent() as peer:
        peer.answer(b"ok", content_type="text/plain")
        yield peer


def policy(agent: Agent, *, after: timedelta = timedelta(hours=4), on_expiry: str = "deny"):
    agent.expire_after, agent.on_expiry = after, on_expiry
    agent.save(update_fields=["expire_after", "on_expiry"])


def profile_agent(ops, stub: MisbehavingAgent, **kw):
    """An agent of ops' team on the loopback stub, speaking the profile, with a policy."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    policy(registered.agent, **kw)
    return registered


def ask(registered, *, at: int = 1, body=None) -> Interaction:
    body = body or status("AUTH_REQUIRED", at=at, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, body).status_code == 200
    return Interaction.objects.select_related("task__session__agent").get()


def later(hours: float = 4, minutes: float = 1):
    """The clock moved on from now, still ticking."""
    return time_machine.travel(timezone.now() + timedelta(hours=hours, minutes=minutes))


# -- deny, against the real agent -----------------------------------------------------------


def test_the_real_agent_receives_exactly_one_deny_from_the_expiry_and_the_record_says_so(
    onlooker,  # noqa: F811 - fixtures imported from test_a2a_peer
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer = start_peer()
    registration = add_agent(
        peer.card_url, "--team", "ops", "--expire-after", "4h", "--on-expiry", "deny"
    )
    task = wait_for_approval(peer, registration)
    interaction = Interaction.objects.get(task__task_id=task["id"])

    with time_machine.travel(timezone.now() + timedelta(hours=3, minutes=59)):
        assert expiry.expire_due() == 0  # not yet
    with later(4, 1):
        assert expiry.expire_due() == 1
        assert expiry.expire_due() == 0  # a round expires once

    wait_for_state(peer, registration, task, "TASK_STATE_REJECTED")
    seen = peer.get_task(task["id"])
    decisions = [  # what the agent received: its own messages ask, a person's decide
        m
        for m in seen.get("history", [])
        if m.get("role") == "ROLE_USER" and peer_module.INTERACTIONS in m.get("metadata", {})
    ]
    assert [m["metadata"][peer_module.INTERACTIONS]["approved"] for m in decisions] == [False]
    said = " ".join(part.get("text", "") for part in decisions[0]["parts"])
    assert FOUR_HOURS in said
    row = Decision.objects.get()
    assert (row.decision, row.via, row.by, row.by_pk) == ("deny", "expiry", "", None)
    assert (row.reason, row.sent) == (FOUR_HOURS, True)
    interaction.refresh_from_db()
    assert interaction.expired_at is not None and interaction.answered_by is None
    assert interaction.outcome == "Denied: no one answered within 4 h"

    alice = person("alice", ops, approvers)
    [shown] = alice.get("/api/decisions").json()["decisions"]
    assert (shown["decision"], shown["via"], shown["by"]) == ("deny", "expiry", None)
    assert shown["reason"] == FOUR_HOURS
    page = alice.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    line = re.search(r"<span class=\"decision-line\" data-decision-line>(.*?)</span></span>", page)
    assert line and "data-expired" in page
    words = html.unescape(re.sub(r"<[^>]+>", "", line[1]))
    assert words.startswith("Denied by the team's expiry policy, ")
    assert words.endswith(f"Reason: {FOUR_HOURS}")


# -- deny and leave, against a loopback agent -----------------------------------------------


def test_leave_sends_nothing_stops_reminders_and_people_may_still_answer(
    clock, ops, approvers, agent_stub, receiver
):
    registered = profile_agent(ops, agent_stub, after=timedelta(minutes=20), on_expiry="leave")
    channel, secret = webhook_channel(receiver, remind_after=timedelta(minutes=15))
    interaction = ask(registered)
    sender.send_due()
    clock.shift(timedelta(minutes=16))
    assert sender.send_due() == 1  # the first reminder: still open, not expired

    clock.shift(timedelta(minutes=5))
    assert expiry.expire_due() == 1
    assert sent_messages(agent_stub) == []  # the agent hears nothing: it keeps waiting
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN and interaction.expired_at is not None
    assert interaction.outcome == "Expired: no one answered within 20 min"
    row = Decision.objects.get()
    assert (row.decision, row.via, row.by, row.sent) == ("expired", "expiry", "", False)
    assert row.reason == "No one answered within 20 min"

    clock.shift(timedelta(hours=1))
    assert sender.send_due() == 0  # an expired question stops reminding
    assert set(
        Notification.objects.filter(kind=Notification.Kind.REMINDER, reminder__gt=1).values_list(
            "state", flat=True
        )
    ) == {"skipped"}

    alice = person("alice", ops, approvers)
    page = alice.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    assert "No one answered within 20 min; the agent still waits" in page
    inbox = alice.get("/").content.decode()
    assert 'data-expired title="No one answered within 20 min">Expired<' in inbox
    card = Session.objects.get().card
    assert card.question == {"kind": "approval", "prompt": "Ship v2?", "expired": True}
    words = [item.words for item in timeline.of_session(Session.objects.get()).items]
    assert "Expired: no one answered within 20 min; the agent still waits" in words

    code, data = answer(alice, interaction, decision="approve")  # late, but still asked
    assert code == 200, data
    [message] = sent_messages(agent_stub)
    assert message["metadata"][profile.INTERACTIONS] == {"interactionId": "i-1", "approved": True}
    assert sorted(Decision.objects.values_list("decision", "by")) == [
        ("approve", "alice"),
        ("expired", ""),
    ]
    assert sender.send_due() == 1
    assert verified(posts(receiver)[-1], secret)["type"] == "interaction.resolved"


def test_deny_denies_an_approval_once_and_says_why_to_people_and_receivers(
    clock, ops, approvers, agent_stub, receiver
):
    registered = profile_agent(ops, agent_stub)
    channel, secret = webhook_channel(receiver)
    interaction = ask(registered)
    sender.send_due()
    clock.shift(timedelta(hours=4, minutes=1))

    assert expiry.expire_due() == 1
    [message] = sent_messages(agent_stub)
    assert message["metadata"][profile.INTERACTIONS] == {"interactionId": "i-1", "approved": False}
    assert [part["text"] for part in message["parts"]] == [f"Denied: {FOUR_HOURS}", FOUR_HOURS]
    sender.send_due()
    resolved = verified(posts(receiver)[-1], secret)
    assert resolved["resolution"] == {
        "state": "answered",
        "by": None,
        "text": "Expired: no one answered within 4 h; denied on the team's behalf.",
    }
    alice = person("alice", ops, approvers)
    code, data = answer(alice, interaction, decision="approve")
    assert code == 409 and "Denied: no one answered within 4 h" in data["detail"]
    assert len(sent_messages(agent_stub)) == 1
    words = [item.words for item in timeline.of_session(Session.objects.get()).items]
    assert "Expired: no one answered within 4 h; denied on the team's behalf" in words


def test_a_question_under_deny_is_only_marked_since_no_answer_may_be_invented(
    clock, ops, agent_stub
):
    registered = profile_agent(ops, agent_stub)
    asked = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu", "us"]})
    interaction = ask(registered, body=status("INPUT_REQUIRED", at=1, metadata=asked))
    clock.shift(timedelta(hours=5))
    assert expiry.expire_due() == 1
    assert sent_messages(agent_stub) == []
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN and interaction.expired_at is not None
    assert Decision.objects.get().decision == "expired"


def test_a_policy_never_approves(ops, agent_stub):
    registered = profile_agent(ops, agent_stub)
    interaction = ask(registered)
    with pytest.raises(NotAllowed, match="never approves"):
        answers.answer_for_team(interaction, answers.Decision(approved=True), via="expiry")
    assert sent_messages(agent_stub) == []
    assert not Decision.objects.exists()


def test_an_agent_without_an_expiry_and_an_answered_question_never_expire(
    clock, ops, approvers, agent_stub
):
    registered = profile_agent(ops, agent_stub)
    Agent.objects.filter(pk=registered.agent.pk).update(expire_after=None)
    ask(registered)
    clock.shift(timedelta(days=40))
    assert expiry.expire_due() == 0

    policy(registered.agent)
    interaction = Interaction.objects.get()
    code, _ = answer(person("alice", ops, approvers), interaction, decision="deny")
    assert code == 200
    assert expiry.expire_due() == 0
    assert len(sent_messages(agent_stub)) == 1


def test_a_round_asked_anew_expires_from_when_it_was_asked(clock, ops, approvers, agent_stub):
    registered = profile_agent(ops, agent_stub, on_expiry="leave")
    interaction = ask(registered)
    clock.shift(timedelta(hours=1))
    assert answer(person("alice", ops, approvers), interaction, decision="deny")[0] == 200
    clock.shift(timedelta(hours=5))
    push(Client(), registered, status("WORKING", at=100))
    ask(registered, at=200)  # the agent asks again, six hours after the first round opened
    assert Interaction.objects.get().round == 2

    clock.shift(timedelta(hours=3, minutes=59))
    assert expiry.expire_due() == 0  # four hours from round 2, not from round 1
    clock.shift(timedelta(minutes=2))
    assert expiry.expire_due() == 1
    assert list(Decision.objects.order_by("at").values_list("round", "decision")) == [
        (1, "deny"),
        (2, "expired"),
    ]


def test_two_expirers_at_once_deny_once(ops):
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED, delay=0.3)  # a slow agent widens the race
        registered = profile_agent(ops, stub)
        ask(registered)
        results: list[int] = []
        start = threading.Barrier(4)

        def expirer() -> None:
            try:
                start.wait()
                results.append(expiry.expire_due())
            finally:
                connection.close()  # this thread's: left open, it outlives the test database

        with later(4, 1):
            threads = [threading.Thread(target=expirer) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert sorted(results) == [0, 0, 0, 1]
        assert len(sent_messages(stub)) == 1
        assert list(Decision.objects.values_list("decision", "via")) == [("deny", "expiry")]


def test_a_deny_the_agent_never_got_leaves_the_question_open_and_marked(ops, approvers):
    with MisbehavingAgent() as stub:
        stub.answer({"jsonrpc": "2.0", "error": {"code": -32603, "message": "busy"}})
        registered = profile_agent(ops, stub)
        interaction = ask(registered)
        with later(4, 1):
            assert expiry.expire_due() == 1
            assert expiry.expire_due() == 0  # a policy tries once
        interaction.refresh_from_db()
        assert interaction.state == Interaction.State.OPEN and interaction.expired_at is not None
        assert Decision.objects.get().decision == "expired"
        stub.answer(ACCEPTED)
        assert answer(person("alice", ops, approvers), interaction, decision="deny")[0] == 200


@pytest.mark.parametrize(
    ("delta", "words"),
    [
        (timedelta(hours=4), "4 h"),
        (timedelta(minutes=30), "30 min"),
        (timedelta(days=1, hours=2), "1 d 2 h"),
        (timedelta(minutes=90), "1 h 30 min"),
    ],
)
def test_the_reason_says_the_agents_expiry_in_words(delta, words):
    assert duration_words(delta) == words
    assert Agent(expire_after=delta).expiry_reason == f"No one answered within {words}"


def test_the_expirer_runs_in_the_background_and_stops(ops, agent_stub):
    registered = profile_agent(ops, agent_stub, on_expiry="leave")
    ask(registered)
    loop = expiry.Background(poll_seconds=0.05)
    with later(4, 1):
        loop.start()
        try:
            marked = Interaction.objects.filter(expired_at__isnull=False)
            wait_for(marked.exists, "the background expirer to mark the question")
        finally:
            loop.stop()
    assert not loop.running
