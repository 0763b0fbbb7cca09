"""The events of an opening carry its answer links: `interaction.opened` and its reminders, as
queued (Notification.payload) and as the sender posts them to a webhook (verified with the
Standard Webhooks library), have `actions` whose URLs lead to the link's confirm page, for
the round they were made in.

Questions are asked by real signed pushes; the webhook is a real receiver on loopback; the
clock is moved with time-machine. These commit for real (`transaction=True`): the sender's
workers have connections of their own.
"""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.urls import resolve
from standardwebhooks import Webhook

from tasks.models import Decision, Interaction
from tasks.models.notify import Notification
from tasks.notify import sender
from tasks.notify.channels import add
from tasks.web.answer_links import answer_link
from tasks.wire import profile
from tests.builders import approval, status
from tests.conftest import make_agent, member, push

pytestmark = pytest.mark.django_db(transaction=True)

PUBLIC = "http://127.0.0.1:8000"  # ONLOOKER_PUBLIC_URL's default


@pytest.fixture
def bot(ops, agent_stub):
    registered = make_agent(team=ops, name="ops-bot")
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def webhook(receiver):
    added = add(
        "ops",
        "webhook",
        receiver.base_url + "/hooks/onlooker",
        remind_after=timedelta(minutes=15),
        allow_private=True,
    )
    return added.signing_secret


def ask(bot, metadata=None, *, at: int = 1) -> Interaction:
    metadata = metadata or approval("i-1", "Delete 3 old builds?", detail={"builds": 3})
    body = status("AUTH_REQUIRED" if at != 2 else "WORKING", at=at, metadata=metadata)
    assert push(Client(), bot, body, msg_id=f"push-{at}").status_code == 200
    return Interaction.objects.get()


def path_of(url: str) -> str:
    """The link's path, after checking it is a URL of this Onlooker that the confirm page
    answers."""
    assert url.startswith(PUBLIC + "/answer/"), url
    path = urlsplit(url).path
    assert resolve(path).func is answer_link
    return path


def last_body(receiver, secret: str) -> dict:
    """The last post, after a real Standard Webhooks check of its signature (made now: the
    check refuses a timestamp five minutes old)."""
    [*_, request] = [request for request in receiver.requests if request.method == "POST"]
    return Webhook(secret).verify(request.body, dict(request.headers))


def test_an_opening_and_its_reminders_carry_approve_and_deny_links(bot, webhook, ops, approvers):
    interaction = ask(bot)

    rows = Notification.objects.filter(interaction=interaction).order_by("kind", "reminder")
    assert [(row.kind, row.reminder) for row in rows] == [
        ("interaction.opened", 0),
        ("interaction.reminder", 1),
        ("interaction.reminder", 2),
        ("interaction.reminder", 3),
    ]
    alice = Client()
    alice.force_login(member("alice", ops, approvers))
    for row in rows:
        actions = row.payload["actions"]
        assert [action["name"] for action in actions] == ["approve", "deny"]
        pages = [alice.get(path_of(action["url"])) for action in actions]
        assert [page.status_code for page in pages] == [200, 200]
        assert "Approve this?" in pages[0].content.decode()
        assert "Deny this?" in pages[1].content.decode()
    assert Decision.objects.count() == 0


def test_a_question_carries_one_answer_link(bot, webhook):
    question = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu"]})
    ask(bot, question)
    [opened] = Notification.objects.filter(kind="interaction.opened")
    [action] = opened.payload["actions"]
    assert action["name"] == "answer"
    path_of(action["url"])


def test_the_webhook_body_carries_the_links_and_a_reminders_deny_link_decides(
    clock, bot, webhook, receiver, agent_stub, ops, approvers
):
    ask(bot)
    assert sender.send_due() == 1
    opened = last_body(receiver, webhook)
    clock.shift(timedelta(minutes=16))
    assert sender.send_due() == 1
    reminder = last_body(receiver, webhook)

    assert (opened["type"], reminder["type"]) == ("interaction.opened", "interaction.reminder")
    assert opened["actions"] == reminder["actions"]
    deny = {action["name"]: action["url"] for action in reminder["actions"]}["deny"]

    alice = Client()
    alice.force_login(member("alice", ops, approvers))
    response = alice.post(path_of(deny), {"decision": "deny", "reason": "Keep b-17"})

    assert response.status_code == 200 and "Denied by alice" in response.content.decode()
    [row] = Decision.objects.all()
    assert (row.decision, row.by, row.via, row.reason) == ("deny", "alice", "link", "Keep b-17")
    [sent] = [json.loads(r.body) for r in agent_stub.requests]
    assert sent["params"]["message"]["metadata"][profile.INTERACTIONS]["approved"] is False


def test_a_round_asked_anew_has_new_links_and_the_old_ones_stop(bot, webhook, ops, approvers):
    ask(bot, at=1)
    ask(bot, at=2)  # the agent moved on: closed
    interaction = ask(bot, at=3)  # and asks again: round 2
    assert interaction.round == 2
    first, second = (
        Notification.objects.get(kind="interaction.opened", round=n).payload["actions"]
        for n in (1, 2)
    )
    assert first != second
    alice = Client()
    alice.force_login(member("alice", ops, approvers))
    assert alice.get(path_of(first[0]["url"])).status_code == 410
    assert alice.get(path_of(second[0]["url"])).status_code == 200
