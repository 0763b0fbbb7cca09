"""Team channels hear of what agents wait for: the sender takes the outbox's due rows and
sends each to its channel exactly once after a 2xx, with backoff while a channel fails, in
order per question, without one channel ever holding up another.

Interactions are opened by real signed pushes and answered through the real view (the agent
a loopback stub); the channels are real HTTP receivers on loopback (tests/peers), one
failing first, one slow; signatures are checked with the Standard Webhooks library; email
goes through Django's locmem backend; time is moved with time-machine.

These commit for real (`transaction=True`): the sender's workers have connections of their
own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import connections
from django.test import Client
from standardwebhooks import Webhook

from tasks.models import Interaction
from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import answer_links, claims, sender, sending
from tasks.notify.channels import add
from tasks.wire import profile
from tests.builders import approval, status
from tests.conftest import make_agent, member, push
from tests.peers.misbehaving_agent import ACCEPTED, Answer, MisbehavingAgent
from tests.processes import ROOT, clean_environment

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "Delete 3 old builds?"
DETAIL = {"builds": ["b-17", "b-18", "b-19"], "older than": "30 days"}
URL = "http://127.0.0.1:8000/sessions/{}/"  # ONLOOKER_PUBLIC_URL's default


@pytest.fixture
def agent_stub():
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED)
        yield stub


@pytest.fixture
def bot(ops, agent_stub):
    """alice-bot, of team ops, speaking the profile; its JSON-RPC URL is the stub's."""
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


@pytest.fixture
def locmem(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox = []


def webhook_channel(peer: MisbehavingAgent, **options):
    # The receivers are on loopback: a channel may post there only when it says so.
    added = add("ops", "webhook", peer.base_url + "/hooks/onlooker", allow_private=True, **options)
    return added.channel, added.signing_secret


def ask(
    bot,
    *,
    task: str = "task-1",
    interaction_id: str = "i-1",
    prompt: str = PROMPT,
    at: int = 1,
    **kw,
):
    """The agent waits for approval (each push a delivery of its own), asking at `at` s."""
    body = status(
        "AUTH_REQUIRED",
        task=task,
        at=at,
        metadata=approval(interaction_id, prompt, detail=kw.get("detail", DETAIL)),
    )
    msg_id = kw.get("msg_id") or f"push-{uuid.uuid4().hex}"
    assert push(Client(), bot, body, msg_id=msg_id).status_code == 200
    return Interaction.objects.get(interaction_id=interaction_id, task__task_id=task)


def approve(interaction: Interaction, ops, approvers) -> None:
    client = Client()
    client.force_login(member("alice", ops, approvers))
    response = client.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": "approve"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200, response.content


def posts(peer: MisbehavingAgent) -> list:
    return [r for r in peer.requests if r.method == "POST"]


def verified(request, secret: str) -> dict:
    """The body, after a real Standard Webhooks check of its signature."""
    headers = {name: request.headers[name] for name in request.headers}
    return Webhook(secret).verify(request.body, headers)


def row(kind: str = Notification.Kind.OPENED, **filters) -> Notification:
    return Notification.objects.get(kind=kind, **filters)


def states() -> list[tuple[str, int, str]]:
    return sorted(Notification.objects.values_list("kind", "reminder", "state"))


# -- the signed webhook ----------------------------------------------------------------------


def test_an_opening_reaches_the_webhook_signed_and_verifiable(clock, bot, receiver):
    channel, secret = webhook_channel(receiver)
    interaction = ask(bot)

    assert sender.send_due() == 1

    [request] = posts(receiver)
    assert request.path == "/hooks/onlooker"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == row().event_id
    body = verified(request, secret)
    session = interaction.task.session
    assert body == {
        "type": "interaction.opened",
        "interaction": {
            "interactionId": "i-1",
            "taskId": "task-1",
            "kind": "approval",
            "prompt": PROMPT,
            "detail": DETAIL,
            "state": "open",
            "answer": None,
            "reason": None,
            "answeredBy": None,
            "answeredAt": None,
        },
        "session": {
            "id": session.pk,
            "url": URL.format(session.pk),
            "title": session.title,
            "agent": {"id": bot.agent.pk, "name": "alice-bot"},
        },
        # The answer links as queued (a token carries the time it was made).
        "actions": row().payload["actions"],
    }
    assert [action["name"] for action in body["actions"]] == ["approve", "deny"]
    for action in body["actions"]:
        link = answer_links.read(action["url"].rstrip("/").rsplit("/", 1)[-1])
        assert (link.interaction_pk, link.round, link.action) == (
            interaction.pk,
            interaction.round,
            action["name"],
        )
    sent = row()
    assert (sent.state, sent.attempts) == ("sent", 1) and sent.sent_at is not None
    channel.refresh_from_db()
    assert channel.last_success_at == sent.sent_at and channel.last_error == ""
    # Sent is sent: looking again sends nothing.
    assert sender.send_due() == 0 and len(posts(receiver)) == 1


def test_a_webhook_that_fails_first_gets_the_same_event_after_a_backoff(clock, bot, receiver):
    answers = iter([Answer(status=500, body=b"upstream down", content_type="text/plain")])
    receiver.answer_each(lambda _request: next(answers, Answer(body=b"ok")))
    channel, secret = webhook_channel(receiver)
    ask(bot)

    assert sender.send_due() == 0
    failed = row()
    assert (failed.state, failed.attempts) == ("pending", 1)
    assert failed.last_error == "HTTP 500"  # the receiver's words are the admin's
    channel.refresh_from_db()
    assert channel.last_error == "HTTP 500" and channel.last_error_at is not None
    assert channel.last_error_detail == "HTTP 500: upstream down"
    assert channel.last_success_at is None

    assert sender.send_due() == 0  # not retried hot
    assert len(posts(receiver)) == 1
    clock.shift(timedelta(seconds=5))
    assert sender.send_due() == 1

    first, second = posts(receiver)
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == row().event_id
    assert verified(first, secret) == verified(second, secret)
    assert row().state == "sent"
    channel.refresh_from_db()
    assert channel.last_success_at is not None


def test_an_error_names_no_part_of_the_channels_secret_url(clock, bot, receiver):
    receiver.answer(b"no_service", status=404, content_type="text/plain")
    path = "/services/T0001/B0002/s3cr3tTOKENxyz"
    add("ops", "slack", receiver.base_url + path, allow_private=True)
    ask(bot)

    sender.send_due()

    channel = NotificationChannel.objects.get()
    assert row().last_error == channel.last_error == "HTTP 404"
    assert channel.last_error_detail == "HTTP 404: no_service"
    refused = add(
        "ops", "slack", f"http://127.0.0.1:{free_port()}{path}", allow_private=True
    ).channel
    clock.shift(timedelta(seconds=1))
    ask(bot, task="task-2")
    sender.send_due()
    refused.refresh_from_db()
    assert refused.last_error.startswith("could not connect")
    for text in (refused.last_error, refused.last_error_detail):
        assert "s3cr3t" not in text and "T0001" not in text


def test_a_redirect_is_a_failure_and_is_not_followed(clock, bot, receiver, other_receiver):
    receiver.answer(b"", status=302, headers={"Location": other_receiver.base_url + "/"})
    channel, _ = webhook_channel(receiver)
    ask(bot)

    assert sender.send_due() == 0

    assert posts(other_receiver) == []
    assert row().last_error == "HTTP 302: a redirect (not followed)"


def test_an_email_channel_whose_server_is_down_is_retried(clock, bot, settings, locmem):
    add("ops", "email", "ops@example.test")
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    ask(bot)

    assert sender.send_due() == 0
    failed = row()
    assert failed.state == "pending" and failed.last_error.startswith("could not connect")
    assert failed.next_attempt_at > datetime.now(UTC)

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    clock.shift(timedelta(seconds=5))
    assert sender.send_due() == 1 and len(mail.outbox) == 1


def free_port() -> int:
    from tests.processes import free_port as port

    return port()


# -- Slack ----------------------------------------------------------------------------------


def test_slack_hears_who_waits_for_what_and_then_who_answered_what(
    clock, bot, receiver, ops, approvers
):
    add("ops", "slack", receiver.base_url + "/services/T1/B2/xyz", allow_private=True)
    interaction = ask(bot)
    url = URL.format(interaction.task.session_id)
    clock.shift(timedelta(minutes=2))

    assert sender.send_due() == 1

    message = posts(receiver)[0].json()
    assert message["text"].startswith(f"*alice-bot* needs approval: {PROMPT} (waiting 2 min)")
    assert f"<{url}|Open the session>" in message["text"]
    shown = [block["text"]["text"] for block in message["blocks"] if block["type"] == "section"]
    assert shown == [
        f"*alice-bot* needs approval: {PROMPT}",
        "builds: b-17, b-18, b-19\nolder than: 30 days",
        f"<{url}|Open the session>",
    ]
    assert "waiting 2 min" in json.dumps(message["blocks"])

    approve(interaction, ops, approvers)
    assert sender.send_due() == 1
    follow_up = posts(receiver)[1].json()
    assert follow_up["text"].startswith("Answered by alice: Approve.")
    assert follow_up["blocks"][0]["text"]["text"] == follow_up["text"]
    assert states() == [("interaction.opened", 0, "sent"), ("interaction.resolved", 0, "sent")]


def test_slack_hears_when_the_agent_moved_on_without_an_answer(clock, bot, receiver):
    add("ops", "slack", receiver.base_url + "/services/T1/B2/xyz", allow_private=True)
    ask(bot)
    sender.send_due()

    assert push(Client(), bot, status("WORKING", at=2)).status_code == 200
    assert sender.send_due() == 1

    assert (
        posts(receiver)[1]
        .json()["text"]
        .startswith(
            f"Closed: the agent moved on without an answer. (*alice-bot* needs approval: {PROMPT})"
        )
    )


def test_slack_text_from_agents_cannot_mention_or_link(clock, bot, receiver):
    add("ops", "slack", receiver.base_url + "/services/T1/B2/xyz", allow_private=True)
    ask(bot, prompt="Ship <!channel> & <http://evil.test|this>?", detail={"<b>": "a & b"})

    sender.send_due()

    text = json.dumps(posts(receiver)[0].json())
    assert "<!channel>" not in text and "<http://evil.test" not in text
    assert "Ship &lt;!channel&gt; &amp; &lt;http://evil.test|this&gt;?" in text
    assert "&lt;b&gt;: a &amp; b" in text


# -- email ----------------------------------------------------------------------------------


def test_email_tells_the_address_and_replies_with_the_answer(clock, bot, ops, approvers, locmem):
    add("ops", "email", "ops@example.test")
    interaction = ask(bot)
    url = URL.format(interaction.task.session_id)
    clock.shift(timedelta(minutes=3))

    assert sender.send_due() == 1

    [opened] = mail.outbox
    assert opened.to == ["ops@example.test"]
    assert opened.subject == f"[Onlooker] alice-bot needs approval: {PROMPT}"
    assert f"Open the session: {url}" in opened.body
    assert "builds: b-17, b-18, b-19" in opened.body and "Waiting 3 min." in opened.body

    approve(interaction, ops, approvers)
    assert sender.send_due() == 1
    _, resolved = mail.outbox
    assert resolved.subject == f"Re: [Onlooker] alice-bot needs approval: {PROMPT}"
    assert resolved.body.startswith("Answered by alice: Approve.\n")
    assert resolved.extra_headers["In-Reply-To"] == opened.extra_headers["Message-ID"]
    channel = NotificationChannel.objects.get()
    assert channel.last_success_at is not None


# -- reminders ------------------------------------------------------------------------------


def test_reminders_one_per_interval_at_most_three(clock, bot, receiver):
    channel, secret = webhook_channel(receiver, remind_after=timedelta(minutes=15))
    ask(bot)
    assert sender.send_due() == 1

    clock.shift(timedelta(minutes=14))
    assert sender.send_due() == 0  # not before the interval
    for n in (1, 2, 3):
        clock.shift(timedelta(minutes=2 if n == 1 else 15))
        assert sender.send_due() == 1
        assert sender.send_due() == 0
        body = verified(posts(receiver)[-1], secret)
        assert (body["type"], body["reminder"]) == ("interaction.reminder", n)
    clock.shift(timedelta(hours=2))
    assert sender.send_due() == 0
    ids = [request.headers["webhook-id"] for request in posts(receiver)]
    assert len(ids) == len(set(ids)) == 4


def test_no_reminder_after_the_answer(clock, bot, receiver, ops, approvers):
    add(
        "ops",
        "slack",
        receiver.base_url + "/s",
        remind_after=timedelta(minutes=15),
        allow_private=True,
    )
    interaction = ask(bot)
    sender.send_due()
    clock.shift(timedelta(minutes=16))
    assert sender.send_due() == 1
    assert (
        posts(receiver)[-1]
        .json()["text"]
        .startswith(f"Still waiting (16 min): *alice-bot* needs approval: {PROMPT}")
    )

    approve(interaction, ops, approvers)
    clock.shift(timedelta(hours=1))
    assert sender.send_due() == 1  # the resolution; reminders 2 and 3 are dropped
    assert posts(receiver)[-1].json()["text"].startswith("Answered by alice: Approve.")
    assert len(posts(receiver)) == 3
    assert states() == [
        ("interaction.opened", 0, "sent"),
        ("interaction.reminder", 1, "sent"),
        ("interaction.reminder", 2, "skipped"),
        ("interaction.reminder", 3, "skipped"),
        ("interaction.resolved", 0, "sent"),
    ]


def test_a_sender_back_after_hours_sends_one_reminder_not_three(clock, bot, receiver):
    webhook_channel(receiver, remind_after=timedelta(minutes=15))
    ask(bot)
    sender.send_due()
    clock.shift(timedelta(hours=2))

    assert sender.send_due() == 1
    assert json.loads(posts(receiver)[-1].body)["reminder"] == 3
    assert [state for kind, _, state in states() if kind == "interaction.reminder"] == [
        "skipped",
        "skipped",
        "sent",
    ]


def test_a_question_asked_anew_is_a_new_event_and_ends_the_old_rounds_reminders(
    clock, bot, receiver, ops, approvers
):
    channel, secret = webhook_channel(receiver, remind_after=timedelta(minutes=15))
    interaction = ask(bot)
    sender.send_due()
    approve(interaction, ops, approvers)
    sender.send_due()
    clock.shift(timedelta(minutes=10))
    ask(bot, at=600)  # the agent asks again: round 2

    clock.shift(timedelta(minutes=6))  # round 1's first reminder is due, round 2's is not
    assert sender.send_due() == 1
    asked_again = verified(posts(receiver)[-1], secret)
    assert asked_again["type"] == "interaction.opened"
    assert asked_again["interaction"]["state"] == "open"
    first, _, second = [r.headers["webhook-id"] for r in posts(receiver)]
    assert first != second
    clock.shift(timedelta(minutes=10))
    assert sender.send_due() == 1  # round 2's first reminder only
    assert verified(posts(receiver)[-1], secret)["reminder"] == 1
    clock.shift(timedelta(minutes=30))  # every reminder of both rounds is due
    assert sender.send_due() == 1
    assert verified(posts(receiver)[-1], secret)["reminder"] == 3
    old_round = Notification.objects.filter(round=1, kind="interaction.reminder")
    assert set(old_round.values_list("state", flat=True)) == {"skipped"}


# -- order per question ---------------------------------------------------------------------


def test_an_opening_that_never_went_out_is_not_sent_once_answered_nor_its_answer(
    clock, bot, receiver, ops, approvers
):
    receiver.answer(b"down", status=503, content_type="text/plain")
    webhook_channel(receiver)
    interaction = ask(bot)
    sender.send_due()  # fails: the opening waits for its retry
    receiver.answer(b"ok", content_type="text/plain")

    approve(interaction, ops, approvers)
    clock.shift(timedelta(minutes=1))
    assert sender.send_due() == 0

    assert len(posts(receiver)) == 1  # the failed attempt only
    assert states() == [
        ("interaction.opened", 0, "skipped"),
        ("interaction.resolved", 0, "skipped"),
    ]


# -- backoff and giving up ------------------------------------------------------------------


def test_a_failing_channel_backs_off_exponentially_then_gives_up_after_a_day(clock, bot, receiver):
    receiver.answer(b"down", status=500, content_type="text/plain")
    channel, _ = webhook_channel(receiver)
    ask(bot)
    ask(bot, task="task-2")  # a second row of the same channel: it waits with the first
    started = row(interaction__task__task_id="task-1").due_at

    gaps: list[float] = []
    while len(gaps) < 60:  # a day of hourly retries is ~35 attempts
        tried_at = datetime.now(UTC)
        sender.send_due()
        first = row(interaction__task__task_id="task-1")
        if first.state != "pending":
            break
        gaps.append((first.next_attempt_at - tried_at).total_seconds())
        later = row(interaction__task__task_id="task-2")
        assert later.next_attempt_at >= first.next_attempt_at  # not tried in between
        clock.move_to(first.next_attempt_at)

    # 5 s, doubling (less up to a fifth of jitter), capped at an hour.
    for n, gap in enumerate(gaps[:10]):
        assert 0.8 * 5 * 2**n - 0.5 <= gap <= 5 * 2**n + 0.5, (n, gaps)
    assert all(0.8 * 3600 - 0.5 <= gap <= 3600.5 for gap in gaps[10:])
    assert first.state == "failed" and first.last_error.startswith("gave up after")
    assert datetime.now(UTC) >= started + Notification.GIVE_UP_AFTER
    assert datetime.now(UTC) < started + Notification.GIVE_UP_AFTER + timedelta(hours=1)
    # One attempt per retry interval for the whole channel, not one per row.
    attempts = sum(Notification.objects.values_list("attempts", flat=True))
    assert len(posts(receiver)) == attempts == len(gaps) + 1


def test_what_is_queued_for_a_failing_channel_waits_for_its_retry(clock, bot, receiver):
    """A channel that is down is tried once per backoff interval, not once per new event."""
    receiver.answer(b"down", status=500, content_type="text/plain")
    webhook_channel(receiver)
    ask(bot)
    assert sender.send_due() == 0 and len(posts(receiver)) == 1
    retry_at = row(interaction__task__task_id="task-1").next_attempt_at

    ask(bot, task="task-2")  # queued during the backoff, due at once by itself
    assert sender.send_due() == 0 and len(posts(receiver)) == 1
    queued = row(interaction__task__task_id="task-2")
    assert (queued.state, queued.attempts) == ("pending", 0)

    receiver.answer(b"ok", content_type="text/plain")
    clock.move_to(retry_at)
    assert sender.send_due() == 2  # in order: the first, then the one queued since
    assert [verified_id(r) for r in posts(receiver)[1:]] == [
        row(interaction__task__task_id=task).event_id for task in ("task-1", "task-2")
    ]


def verified_id(request) -> str:
    return request.headers["webhook-id"]


# -- exactly once ---------------------------------------------------------------------------


def test_an_event_that_got_a_2xx_is_never_sent_again_even_by_two_senders_at_once(
    clock, bot, receiver
):
    receiver.answer(b"ok", content_type="text/plain", delay=0.05)
    webhook_channel(receiver)
    for n in range(6):
        ask(bot, task=f"task-{n}")

    barrier = threading.Barrier(2)
    results = []

    def run():
        barrier.wait()
        try:
            results.append(sender.send_due())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)

    assert sum(results) == 6
    ids = [request.headers["webhook-id"] for request in posts(receiver)]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 6
    assert sender.send_due() == 0 and len(posts(receiver)) == 6


def test_a_duplicate_push_queues_nothing_twice(clock, bot, receiver):
    webhook_channel(receiver, remind_after=timedelta(minutes=15))
    ask(bot, msg_id="push-once")
    ask(bot, msg_id="push-once")  # the same delivery again
    ask(bot)  # the same status, another delivery id: the agent repeated itself

    assert Notification.objects.count() == 4  # the opening and three reminders
    assert sender.send_due() == 1 and len(posts(receiver)) == 1


# -- channels apart -------------------------------------------------------------------------


def test_a_slow_channel_does_not_delay_another(clock, bot, receiver, other_receiver, monkeypatch):
    # Margins wide enough for a loaded machine: one at a time, the fast channel would wait
    # the slow one's whole 2 s timeout.
    monkeypatch.setattr(sending, "TIMEOUT", sending.httpx.Timeout(2.0, connect=2.0))
    receiver.answer(b"ok", content_type="text/plain", delay=4.0)  # slower than its timeout
    slow, _ = webhook_channel(receiver)  # made first: sent to first, were it one at a time
    webhook_channel(other_receiver)
    ask(bot)

    def send_due_in_a_thread():
        try:
            sender.send_due()
        finally:
            connections.close_all()  # a thread hands back its own: else it outlives the test

    started = time.monotonic()
    done = threading.Thread(target=send_due_in_a_thread)
    done.start()
    while not posts(other_receiver):
        assert time.monotonic() - started < 1.5, "the fast channel waited for the slow one"
        time.sleep(0.01)
    done.join(10)
    assert time.monotonic() - started < 3.8

    slow.refresh_from_db()
    assert slow.last_error.startswith("no answer within 2 s") and slow.last_success_at is None
    assert NotificationChannel.objects.exclude(pk=slow.pk).get().last_success_at is not None


def test_the_background_sender_keeps_sending_to_others_while_one_channel_hangs(
    clock, bot, receiver, other_receiver
):
    released = threading.Event()  # the slow channel answers when the test says

    def hang(_request):
        released.wait(10)
        return Answer(body=b"ok")

    receiver.answer_each(hang)
    receiver_channel, _ = webhook_channel(receiver)
    webhook_channel(other_receiver)
    worker = sender.Background(poll_seconds=0.05)
    worker.start()
    try:
        ask(bot)
        wait_for(lambda: len(posts(receiver)) == 1 and len(posts(other_receiver)) == 1)
        # The slow channel is still busy with the first; the other hears the next at once.
        started = time.monotonic()
        ask(bot, task="task-2")
        wait_for(lambda: len(posts(other_receiver)) == 2, timeout=3.0)
        assert len(posts(receiver)) == 1 and time.monotonic() - started < 3.0
    finally:
        stopping = threading.Thread(target=worker.stop)
        stopping.start()
        time.sleep(0.1)
        released.set()
        stopping.join(10)
    # Stopping let the send in flight finish and be recorded, and took nothing more.
    assert not worker.running and len(posts(receiver)) == 1
    slow = row(channel_id=receiver_channel.pk, interaction__task__task_id="task-2")
    assert (slow.state, slow.attempts, slow.claimed_until) == ("pending", 0, None)
    assert row(channel_id=receiver_channel.pk, interaction__task__task_id="task-1").state == "sent"


def wait_for(check, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not sent in time"
        time.sleep(0.01)


def test_a_disabled_channel_sends_nothing_until_enabled(clock, bot, receiver):
    channel, _ = webhook_channel(receiver)
    ask(bot)
    channel.enabled = False
    channel.save()

    assert sender.send_due() == 0
    assert posts(receiver) == [] and row().state == "pending"

    channel.enabled = True
    channel.save()
    assert sender.send_due() == 1 and len(posts(receiver)) == 1


# -- restarts -------------------------------------------------------------------------------


def test_what_a_crashed_sender_held_is_sent_by_the_next_once_its_lease_ends(clock, bot, receiver):
    webhook_channel(receiver)
    ask(bot)
    # A sender took it and died before sending: its lease is in the database.
    now = datetime.now(UTC)
    claimed = claims.claim_next(NotificationChannel.objects.get().pk, now, set())
    assert claimed is not None and row().claimed_until == now + claims.LEASE

    worker = sender.Background(poll_seconds=0.05)
    worker.start()
    try:
        time.sleep(0.3)
        assert posts(receiver) == []  # still leased
        clock.shift(claims.LEASE + timedelta(seconds=1))
        deadline = time.monotonic() + 5
        while row().state != "sent":
            assert time.monotonic() < deadline, "the next sender did not send it"
            time.sleep(0.02)
    finally:
        worker.stop()
    assert not worker.running
    assert len(posts(receiver)) == 1 and row().claimed_until is None


def test_send_notifications_once_sends_what_is_due(clock, bot, receiver, capsys):
    webhook_channel(receiver)
    ask(bot)

    call_command("send_notifications", "--once")

    assert capsys.readouterr().out.strip() == "Sent 1 notification."
    assert len(posts(receiver)) == 1


def test_a_misspelt_notifier_setting_stops_the_start(tmp_path):
    environment = clean_environment(ONLOOKER_DATA_DIR=str(tmp_path), ONLOOKER_NOTIFIER="sometimes")
    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert "ONLOOKER_NOTIFIER must be background or external, not 'sometimes'" in started.stderr


def test_a_send_tells_the_pages_showing_the_question(clock, bot, receiver, fresh_channel_layers):
    """The "Notified ops: webhook 12:00" line is rendered per request: after recording a
    send, the sender hints the session's page and its team's screens to refetch it."""
    from tests.notify.test_notified_on_screens import heard

    webhook_channel(receiver)
    interaction = ask(bot)
    session_id = interaction.task.session_id
    team = f"team.{bot.agent.team_id}"
    got = heard([team, f"session.{session_id}"], sender.send_due)

    assert row().state == Notification.State.SENT
    assert sorted(group for group, _ in got) == sorted([team, f"session.{session_id}"])
    assert all(m["session"] == session_id and m["notified"] for _, m in got)
