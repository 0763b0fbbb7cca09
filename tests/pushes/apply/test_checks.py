"""An uncertain effect (effects/v1) opens a check a person must look at (pushes/apply/checks.py):
one per effect however often it is pushed, notified like a question, and left open by the
agent's next statuses (only a person ends it). All through the real view."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from tasks.models import Delivery, Interaction, Session
from tasks.models.notify import Notification
from tasks.notify import channels
from tasks.pushes import applier
from tasks.sessions import board
from tasks.wire import profile
from tests.builders import EPOCH, approval, status
from tests.conftest import make_agent, push
from tests.pushes.sending import send, task

EFFECT = "upload:report.pdf"
WEBHOOK_URL = "https://receiver.test/onlooker/hook"


def uncertain(effect: str = EFFECT) -> dict:
    return {profile.EFFECTS: {"uncertain": effect}}


def checks() -> list[Interaction]:
    return list(Interaction.objects.filter(kind=Interaction.Kind.CHECK).order_by("id"))


def mark(check: Interaction, username: str = "alice") -> None:
    """A person marks it checked (the transition answering/checks.py makes)."""
    user = User.objects.get_or_create(username=username)[0]
    assert Interaction.objects.mark_checked(check, by=user, at=timezone.now())


def test_an_uncertain_effect_opens_one_open_check_in_peoples_words(client, token_agent):
    send(client, token_agent, status("WORKING", at=3, text="Uploading", metadata=uncertain()))

    (check,) = checks()
    assert re.fullmatch(r"effect:[0-9a-f]{16}", check.interaction_id)
    assert check.prompt == "Check: Upload of report.pdf unconfirmed"
    assert check.detail == {"effect": EFFECT}
    assert check.state == Interaction.State.OPEN
    assert check.task == task()
    # Opened when the status says it happened (the agent's time), like a question.
    assert check.opened_at == EPOCH.replace(second=3)


def test_the_same_effect_pushed_again_or_replayed_is_still_one_check(client, token_agent):
    body = status("WORKING", at=1, metadata=uncertain())
    send(client, token_agent, body, msg_id="push-1")
    assert send(client, token_agent, body, msg_id="push-1") == "duplicate"
    send(client, token_agent, body, msg_id="push-2")  # a replay under another key
    send(client, token_agent, status("WORKING", at=2, metadata=uncertain()))

    assert len(checks()) == 1
    assert task().uncertain_effects == [EFFECT]


def test_two_effects_open_two_checks(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, metadata=uncertain("charge:order-7")))
    send(client, token_agent, status("WORKING", at=2, metadata=uncertain()))
    assert [c.prompt for c in checks()] == [
        "Check: Charge of order-7 unconfirmed",
        "Check: Upload of report.pdf unconfirmed",
    ]


def test_the_agents_next_statuses_leave_the_check_open_and_the_session_needing_a_person(
    client, token_agent
):
    send(client, token_agent, status("WORKING", at=1, metadata=uncertain()))
    send(client, token_agent, status("WORKING", at=2, text="Moving on"))
    send(client, token_agent, status("COMPLETED", at=3, text="Done"))

    (check,) = checks()
    assert check.state == Interaction.State.OPEN
    session = Session.objects.get()
    # The agent waits for nothing: the state is its task's, and still a person is needed.
    assert (session.state, session.needs_human) == ("TASK_STATE_COMPLETED", True)


def test_a_check_from_an_earlier_turn_leaves_the_state_to_the_newest_turn(client, token_agent):
    send(client, token_agent, status("COMPLETED", task="turn-1", at=1, metadata=uncertain()))
    send(client, token_agent, status("WORKING", task="turn-2", at=5, text="Next"))

    session = Session.objects.select_related("card").get()
    assert (session.state, session.needs_human) == ("TASK_STATE_WORKING", True)
    assert session.card.shown_state.words == "Working"
    assert "question" not in session.card.facts


def test_an_open_check_counts_in_needs_you(client, ops):
    agent = make_agent(team=ops)
    alice = User.objects.create_user("alice")
    alice.groups.add(ops)
    send(client, agent, status("COMPLETED", at=1, metadata=uncertain()))
    assert board.counts(alice)["waiting"] == 1
    assert [i.kind for i in board.waiting(alice)] == ["check"]


def test_a_replay_of_a_checked_effects_push_opens_nothing(client, token_agent):
    body = status("COMPLETED", at=1, metadata=uncertain())
    send(client, token_agent, body, msg_id="push-1")
    mark(checks()[0])
    send(client, token_agent, body, msg_id="push-2")
    assert [c.state for c in checks()] == ["answered"]


def test_a_question_asked_beside_an_effect_is_the_question_and_its_answer_leaves_the_check(
    client, token_agent
):
    body = status(
        "AUTH_REQUIRED", at=1, metadata={**approval("i-1", "Retry the upload?"), **uncertain()}
    )
    send(client, token_agent, body)

    session = Session.objects.select_related("card").get()
    assert (session.state, session.needs_human) == ("TASK_STATE_AUTH_REQUIRED", True)
    assert session.card.facts["question"] == {"kind": "approval", "prompt": "Retry the upload?"}
    assert session.card.facts["unchecked"] == [EFFECT]

    send(client, token_agent, status("WORKING", at=2, text="Retrying"))
    states = dict(Interaction.objects.values_list("kind", "state"))
    assert states == {"approval": "closed", "check": "open"}
    assert Session.objects.get().needs_human


def test_a_check_newer_than_the_open_question_does_not_hide_the_question(client, token_agent):
    asking = approval("q-1", "Which bucket?", kind="question")
    send(client, token_agent, status("INPUT_REQUIRED", at=1, metadata=asking))
    send(client, token_agent, status("INPUT_REQUIRED", at=2, metadata={**asking, **uncertain()}))

    session = Session.objects.select_related("card").get()
    assert session.card.facts["question"] == {"kind": "question", "prompt": "Which bucket?"}
    assert session.card.shown_state.words == "Needs an answer"
    assert session.card.facts["unchecked"] == [EFFECT]


def test_the_same_effect_in_a_later_turn_while_it_is_open_is_the_same_check(client, token_agent):
    send(client, token_agent, status("COMPLETED", task="turn-1", at=1, metadata=uncertain()))
    send(client, token_agent, status("COMPLETED", task="turn-2", at=5, metadata=uncertain()))

    (check,) = checks()
    assert check.task.task_id == "turn-1"


def test_the_same_effect_in_a_later_turn_after_it_was_checked_is_a_new_check(client, token_agent):
    send(client, token_agent, status("COMPLETED", task="turn-1", at=1, metadata=uncertain()))
    mark(checks()[0])
    send(client, token_agent, status("COMPLETED", task="turn-2", at=5, metadata=uncertain()))

    assert [(c.task.task_id, c.state) for c in checks()] == [
        ("turn-1", "answered"),
        ("turn-2", "open"),
    ]


def test_an_older_status_carrying_an_effect_still_opens_its_check(client, token_agent):
    send(client, token_agent, status("WORKING", at=5))
    assert send(client, token_agent, status("WORKING", at=2, metadata=uncertain())) == "stale"
    assert [c.state for c in checks()] == ["open"]


def test_an_effect_after_the_task_ended_opens_nothing(client, token_agent):
    send(client, token_agent, status("COMPLETED", at=5))
    assert send(client, token_agent, status("WORKING", at=9, metadata=uncertain())) == (
        "after_terminal"
    )
    assert checks() == []


def test_the_team_hears_of_a_check_like_a_question(client, ops):
    channel = channels.add("ops", "webhook", WEBHOOK_URL).channel
    agent = make_agent(team=ops)
    send(client, agent, status("WORKING", at=1, metadata=uncertain()))
    send(client, agent, status("WORKING", at=2, metadata=uncertain()))

    (check,) = checks()
    (opened,) = Notification.objects.filter(kind=Notification.Kind.OPENED)
    assert (opened.channel, opened.interaction, opened.round) == (channel, check, 1)
    assert opened.payload["interaction"]["kind"] == "check"
    assert opened.payload["interaction"]["prompt"] == "Check: Upload of report.pdf unconfirmed"
    # The agent's next status closes its questions, and the channel hears of those: not this.
    send(client, agent, status("COMPLETED", at=3))
    assert not Notification.objects.filter(kind=Notification.Kind.RESOLVED).exists()


def test_an_agents_question_under_a_checks_id_does_not_take_the_check_over(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, metadata=uncertain()))
    (check,) = checks()
    mark(check)

    body = status("AUTH_REQUIRED", at=2, metadata=approval(check.interaction_id, "Approve?"))
    send(client, token_agent, body)

    check.refresh_from_db()
    assert (check.kind, check.state, check.round) == ("check", "answered", 1)
    assert "is the id of an uncertain effect's check" in Delivery.objects.latest("id").warnings[0]


def checks_in_two_sessions() -> list[dict]:
    """A question beside an effect in one session, an effect a later turn passed in another."""
    asking = approval("q-1", "Which bucket?", kind="question")
    return [
        status("INPUT_REQUIRED", task="a-1", context="a", at=1, metadata=asking),
        status("INPUT_REQUIRED", task="a-1", context="a", at=2, metadata={**asking, **uncertain()}),
        status("COMPLETED", task="b-1", context="b", at=1, metadata=uncertain("pay:7")),
        status("WORKING", task="b-2", context="b", at=5, text="Next"),
    ]


def derived(agent) -> dict:
    return {
        s.context_id: (s.state, s.needs_human, s.card.facts)
        for s in Session.objects.filter(agent=agent).select_related("card")
    }


def test_a_batch_derives_checks_as_its_pushes_applied_one_by_one_would(db, settings):
    settings.ONLOOKER_APPLIER = "external"  # nothing applies until the test says so
    one_by_one, batched = make_agent(name="One by one"), make_agent(name="Batched")
    for body in checks_in_two_sessions():
        push(Client(), one_by_one, body)
        assert applier.apply_batch(seconds=60.0).applied == 1
    for body in checks_in_two_sessions():
        push(Client(), batched, body)

    batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (4, 2)
    assert derived(batched.agent) == derived(one_by_one.agent)
    a, b = derived(batched.agent)["a"], derived(batched.agent)["b"]
    assert (a[0], a[1], a[2]["question"]["kind"], a[2]["unchecked"]) == (
        "TASK_STATE_INPUT_REQUIRED",
        True,
        "question",
        [EFFECT],
    )
    assert (b[0], b[1], b[2]["unchecked"]) == ("TASK_STATE_WORKING", True, ["pay:7"])
