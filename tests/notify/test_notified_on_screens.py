"""What a person sees of team channels (issue 14, "What a person sees"): under each question,
on the session page and in the monitoring screen's list, which of its team's channels were
told and when ("Notified ops: Slack 10:02 · webhook failing: could not reach … (retrying)"),
never a channel's URL path or secret; each of their teams' channels on the settings page;
the admin for channels and their outbox; and the demo's webhook channel.

State comes from real signed pushes (the outbox rows are queued by them); the sender is not
part of this, so what it would do to a row (sent, failing, given up) is written directly.
"""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.models import Group
from django.db import connection
from django.template.loader import render_to_string
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tasks.live import fanout
from tasks.management.commands import demo
from tasks.models import Interaction, Session
from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import channels, seen
from tests import listening
from tests.answering.test_answers import answer
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, make_agent, member, push
from tests.offline_names import names_under_test_resolve_to_nothing  # noqa: F401 - a fixture

TEN_OH_TWO = datetime(2026, 12, 1, 10, 2, 0, tzinfo=UTC)
SLACK_URL = "https://hooks.slack.test/services/T000/B000/slackpathsecret"
WEBHOOK_URL = "https://receiver.test/onlooker/hookpathsecret?token=querysecret"
Kind = Notification.Kind
State = Notification.State

# Channels here are made, never sent to: their .test names resolve to nothing, unasked.
pytestmark = pytest.mark.usefixtures("names_under_test_resolve_to_nothing")


@pytest.fixture(autouse=True)
def at_ten_oh_two():
    with time_machine.travel(TEN_OH_TWO, tick=False) as traveller:
        yield traveller


@pytest.fixture
def viewer(ops) -> Client:
    """alice, of team ops: she sees its sessions (and may not answer)."""
    client = Client()
    client.force_login(member("alice", ops))
    return client


@pytest.fixture
def agent(ops) -> RegisteredAgent:
    return make_agent(team=ops, signing=True)


def ask(agent: RegisteredAgent, n: int = 1, *, prompt: str = "Ship v2?") -> Interaction:
    """The agent waits for an approval in a session of its own (context c-n), by a signed
    push; the push queues the outbox rows of its team's channels."""
    body = status(
        "AUTH_REQUIRED", at=n, context=f"c-{n}", task=f"t-{n}", metadata=approval(f"i-{n}", prompt)
    )
    assert push(Client(), agent, body).status_code == 200
    return Interaction.objects.get(interaction_id=f"i-{n}")


def add(kind: str, target: str, team: str = "ops", **options) -> NotificationChannel:
    return channels.add(team, kind, target, **options).channel


def opening(interaction: Interaction, channel: NotificationChannel):
    return Notification.objects.filter(
        interaction=interaction, channel=channel, kind=Kind.OPENED, round=interaction.round
    )


def lines(page: str) -> dict[int, str]:
    """Each question's "Notified …" line as a person reads it, by interaction."""
    found = re.findall(r'<p class="notified" data-notified="(\d+)">(.*?)</p>', page, re.S)
    return {int(pk): html.unescape(re.sub(r"<[^>]+>", "", text)) for pk, text in found}


def session_page(client: Client, interaction: Interaction) -> str:
    session = interaction.task.session_id
    response = client.get(f"/sessions/{session}/")
    assert response.status_code == 200
    return response.content.decode()


def waiting_list(client: Client) -> str:
    response = client.get("/live/board/?waiting=1")
    assert response.status_code == 200
    return response.json()["waiting"]


# -- the session page and the monitoring screen's list -----------------------------------------


def test_a_sent_notification_shows_its_channel_and_time_on_the_session_page_and_in_the_list(
    viewer, agent
):
    slack = add("slack", SLACK_URL, remind_after=timedelta(minutes=15))
    hook = add("webhook", WEBHOOK_URL)
    question = ask(agent)
    opening(question, slack).update(state=State.SENT, sent_at=TEN_OH_TWO, attempts=1)
    opening(question, hook).update(state=State.SENT, sent_at=TEN_OH_TWO, attempts=1)
    Notification.objects.filter(channel=slack, kind=Kind.REMINDER, reminder=1).update(
        state=State.SENT, sent_at=TEN_OH_TWO + timedelta(minutes=15)
    )
    expected = "Notified ops: Slack 10:02 (reminded once) · webhook 10:02"

    page = session_page(viewer, question)
    assert lines(page) == {question.pk: expected}
    assert '<time datetime="2026-12-01T10:02:00+00:00">10:02</time>' in page
    # The activity a live page refetches says the same.
    activity = viewer.get(f"/sessions/{question.task.session_id}/activity/").content.decode()
    assert lines(activity) == {question.pk: expected}
    # The monitoring screen, first load and the list a reconnecting page refetches.
    assert lines(viewer.get("/").content.decode()) == {question.pk: expected}
    assert lines(waiting_list(viewer)) == {question.pk: expected}


def test_a_failing_channel_says_it_could_not_be_reached_without_its_path_or_secret(
    viewer, agent, settings
):
    slack = add("slack", SLACK_URL)
    hook = add("webhook", WEBHOOK_URL)
    email = add("email", "oncall@example.test")
    question = ask(agent)
    # What the sender would leave: Slack sent, the webhook failing and retried, email given up.
    opening(question, slack).update(state=State.SENT, sent_at=TEN_OH_TWO, attempts=1)
    opening(question, hook).update(
        attempts=3, last_error=f"Server error '503 Service Unavailable' for url '{WEBHOOK_URL}'"
    )
    opening(question, email).update(state=State.FAILED, attempts=12, last_error="refused")

    for page in (session_page(viewer, question), waiting_list(viewer)):
        assert lines(page) == {
            question.pk: "Notified ops: Slack 10:02 · webhook failing: could not reach "
            "https://receiver.test/… (retrying) · email: could not reach oncall@example.test "
            "(gave up)"
        }
        for secret in ("slackpathsecret", "hookpathsecret", "querysecret", "whsec_", "503"):
            assert secret not in page


def test_a_channel_not_yet_tried_says_sending_and_a_skipped_one_not_sent(viewer, agent):
    slack = add("slack", SLACK_URL)
    hook = add("webhook", WEBHOOK_URL)
    question = ask(agent)
    opening(question, slack).update(state=State.SKIPPED)
    # Taken by the sender and being sent: no error yet, so not failing.
    opening(question, hook).update(attempts=1)
    assert lines(session_page(viewer, question)) == {
        question.pk: "Notified ops: Slack not sent · webhook sending…"
    }


def test_a_question_of_a_team_without_channels_says_nothing_about_notifying(agent, ops):
    """Someone on two teams: ops has a channel, design none. Only ops' question has a line."""
    design = Group.objects.create(name="design")
    client = Client()
    client.force_login(member("dana", ops, design))
    add("slack", SLACK_URL)
    told = ask(agent)
    untold = ask(make_agent(team=design, signing=True, name="Designer"), 2, prompt="Paint it?")
    opening(told, NotificationChannel.objects.get()).update(state=State.SENT, sent_at=TEN_OH_TWO)
    for page in (waiting_list(client), client.get("/").content.decode()):
        assert "Ship v2?" in page and "Paint it?" in page
        assert lines(page) == {told.pk: "Notified ops: Slack 10:02"}
    untold_page = session_page(client, untold)
    assert "Paint it?" in untold_page
    assert "data-notified" not in untold_page and "Notified" not in untold_page


def test_an_answered_question_keeps_its_line_on_the_session_page(ops, approver, team_agent):
    slack = add("slack", SLACK_URL)
    question = ask(team_agent)
    opening(question, slack).update(state=State.SENT, sent_at=TEN_OH_TWO, attempts=1)
    assert answer(approver, question, decision="approve")[0] == 200
    # The agent moves on: the question leaves the list and is one of the session's answers.
    push(Client(), team_agent, status("WORKING", at=5, context="c-1", task="t-1"))
    assert Interaction.objects.get(pk=question.pk).state != Interaction.State.OPEN
    page = session_page(approver, question)
    assert f'data-answered-interaction="{question.pk}"' in page
    assert lines(page) == {question.pk: "Notified ops: Slack 10:02"}
    assert lines(waiting_list(approver)) == {}


def test_every_team_told_of_a_teamless_agents_question_is_named(viewer, ops):
    """An agent without a team is everyone's: every team's channels are told."""
    everyone = make_agent(signing=True, name="Open")
    add("slack", SLACK_URL, team="design")
    add("email", "ops@example.test")
    question = ask(everyone)
    assert lines(session_page(viewer, question)) == {
        question.pk: "Notified design: Slack sending…; Notified ops: email sending…"
    }


def test_the_lines_cost_one_query_however_many_questions_are_shown(viewer, agent):
    add("slack", SLACK_URL)
    add("webhook", WEBHOOK_URL)

    def queries(asked: range) -> int:
        for n in asked:
            opening(ask(agent, n), NotificationChannel.objects.first()).update(
                state=State.SENT, sent_at=TEN_OH_TWO
            )
        with CaptureQueriesContext(connection) as captured:
            page = waiting_list(viewer)
        assert len(lines(page)) == asked.stop - 1
        return len(captured)

    assert queries(range(1, 3)) == queries(range(3, 9))
    shown = list(Interaction.objects.all())
    with CaptureQueriesContext(connection) as captured:
        told = seen.notified_for(shown)
    assert len(captured) == 1 and len(told) == 8


# -- live: the sender's hint --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_channel_layers")
def test_the_senders_hint_reaches_the_session_page_and_never_displaces_a_card_update(ops):
    from tests.live.test_live import ORIGIN, cookie_for, socket

    alice = member("alice", ops)
    registered = make_agent(team=ops)
    ask(registered)
    session = Session.objects.get()

    async def scenario():
        cookie = await sync_to_async(cookie_for)(alice)
        page = socket(ORIGIN, cookie, path=f"/ws/live/?session={session.pk}")
        assert (await page.connect())[0]
        # Two changes of the session within the coalescing interval, then the sender's hint:
        # the latest change and the hint both arrive.
        for second in (2, 3):
            body = status("WORKING", at=second, context="c-1", task="t-1", text=f"step {second}")
            await sync_to_async(push)(Client(), registered, body)
        await sync_to_async(seen.hint_sent)(session.pk, ops.pk)
        heard = [await page.receive_json_from(timeout=5)]
        while not await page.receive_nothing(timeout=0.3):
            heard.append(await page.receive_json_from(timeout=5))
        await page.disconnect()
        return heard

    heard = async_to_sync(scenario)()
    hints = [m for m in heard if "notified" in m]
    assert [m["session"] for m in hints] == [session.pk]
    assert "html" not in hints[0]
    cards = [m for m in heard if "html" in m]
    assert "step 3" in cards[-1]["html"]["card"]


def heard(groups: list[str], act) -> list[dict]:
    """What the channel layer delivers while `act` runs, as a process's listener would hand
    it to its sockets in `groups`: (group, message) pairs, the message decoded."""
    layer = get_channel_layer()

    async def scenario():
        name = await listening.join(layer)
        await sync_to_async(act)()
        got = []
        for wired in await listening.heard(layer, name, groups):
            message = json.loads(fanout.text_for(wired))
            got.extend((group, message) for group in wired["groups"] if group in groups)
        return got

    return async_to_sync(scenario)()


def test_a_hint_goes_to_the_sessions_team_and_page_groups_as_a_notice_not_a_snapshot(
    fresh_channel_layers,
):
    got = heard(["team.3", "session.7", "team.4"], lambda: seen.hint_sent(7, 3))
    assert [group for group, _ in got] == ["team.3", "session.7"]
    for _, message in got:
        assert message["session"] == 7 and message["notified"]
        assert "html" not in message


def test_the_sender_can_hint_by_the_interactions_it_changed(agent, ops, fresh_channel_layers):
    """One hint per session, to its team's group and its page's, found in one query."""
    design = Group.objects.create(name="design")
    first, second = ask(agent, 1), ask(agent, 2)
    other = ask(make_agent(team=design, signing=True, name="Designer"), 3)
    sessions = {q.pk: q.task.session_id for q in (first, second, other)}
    groups = [f"team.{ops.pk}", f"team.{design.pk}"] + [
        f"session.{sessions[q.pk]}" for q in (first, second, other)
    ]
    queries = []

    def hint():
        with CaptureQueriesContext(connection) as captured:
            seen.hint_interactions([first.pk, second.pk, other.pk, first.pk])
        queries.extend(captured)

    got = heard(groups, hint)
    assert len(queries) == 1
    assert sorted((group, m["session"]) for group, m in got) == sorted(
        [
            (f"team.{ops.pk}", sessions[first.pk]),
            (f"session.{sessions[first.pk]}", sessions[first.pk]),
            (f"team.{ops.pk}", sessions[second.pk]),
            (f"session.{sessions[second.pk]}", sessions[second.pk]),
            (f"team.{design.pk}", sessions[other.pk]),
            (f"session.{sessions[other.pk]}", sessions[other.pk]),
        ]
    )


# -- the settings page's team channels ---------------------------------------------------------


def team_channels(user) -> str:
    return render_to_string(
        "tasks/_team_channels.html", {"team_channels": seen.channels_for_user(user)}
    )


def rows(partial: str) -> list[str]:
    found = re.findall(r"<tr data-team-channel=\"\d+\">(.*?)</tr>", partial, re.S)
    return [" | ".join(re.findall(r"<td>(.*?)</td>", row, re.S)) for row in found]


def test_settings_list_the_channels_of_a_persons_teams_only(ops, django_user_model):
    design = Group.objects.create(name="design")
    slack = add("slack", SLACK_URL, remind_after=timedelta(minutes=15))
    add("webhook", WEBHOOK_URL, team="design")
    NotificationChannel.objects.filter(pk=slack.pk).update(
        last_success_at=TEN_OH_TWO,
        last_error_at=TEN_OH_TWO - timedelta(hours=1),
        last_error=f"Client error '404 Not Found' for url '{SLACK_URL}'",
    )
    alice = member("alice", ops)
    with CaptureQueriesContext(connection) as captured:
        listed = seen.channels_for_user(alice)
    assert len(captured) == 1 and [c.pk for c in listed] == [slack.pk]

    partial = team_channels(alice)
    assert rows(partial) == [
        "ops | Slack | <code>https://hooks.slack.test/…</code> | every 15 min, at most 3 | on | "
        '<time datetime="2026-12-01T10:02:00+00:00">2026-12-01 10:02</time> | '
        '<time datetime="2026-12-01T09:02:00+00:00">2026-12-01 09:02</time>: '
        '<span class="team-channel-error">Client error &#x27;404 Not Found&#x27; for url '
        "&#x27;https://hooks.slack.test/…&#x27;</span>"
    ]
    assert "slackpathsecret" not in partial and "receiver.test" not in partial
    # Someone outside ops sees none of its channels; a superuser sees every team's.
    bob = member("bob", design)
    assert "hooks.slack.test" not in team_channels(bob)
    assert "https://receiver.test/…" in team_channels(bob)
    assert "None of your teams has a channel" in team_channels(member("carol"))
    boss = django_user_model.objects.create_superuser("boss")
    assert len(rows(team_channels(boss))) == 2
    assert "whsec_" not in team_channels(boss) and "hookpathsecret" not in team_channels(boss)


# -- the admin -------------------------------------------------------------------------------


def test_adding_a_webhook_in_the_admin_shows_its_secret_once_and_never_again(admin_client):
    response = admin_client.post(
        "/admin/tasks/notificationchannel/add/",
        {"team": "ops", "kind": "webhook", "target": WEBHOOK_URL, "remind_after": "15m"},
    )
    assert response.status_code == 200
    channel = NotificationChannel.objects.get()
    assert (channel.team.name, channel.kind, channel.target) == ("ops", "webhook", WEBHOOK_URL)
    assert channel.remind_after == timedelta(minutes=15)
    assert channel.signing_secret.startswith("whsec_")
    assert channel.signing_secret in response.content.decode()
    assert "no-store" in response["Cache-Control"]

    changelist = admin_client.get("/admin/tasks/notificationchannel/").content.decode()
    change = admin_client.get(f"/admin/tasks/notificationchannel/{channel.pk}/change/")
    for page in (changelist, change.content.decode()):
        assert "https://receiver.test/…" in page
        for secret in (channel.signing_secret, "whsec_", "hookpathsecret", "querysecret"):
            assert secret not in page


def test_the_admin_refuses_a_channel_that_could_never_deliver(admin_client):
    response = admin_client.post(
        "/admin/tasks/notificationchannel/add/",
        {"team": "ops", "kind": "slack", "target": "ftp://nowhere.test/x", "remind_after": ""},
    )
    assert response.status_code == 200
    assert "is not an http(s) URL" in html.unescape(response.content.decode())
    assert not NotificationChannel.objects.exists()


def test_editing_a_channel_in_the_admin_changes_only_whether_it_is_on_and_its_reminders(
    admin_client,
):
    channel = add("slack", SLACK_URL)
    url = f"/admin/tasks/notificationchannel/{channel.pk}/change/"
    response = admin_client.post(
        url, {"enabled": "", "remind_after": "1h30m", "target": "https://evil.test/", "team": "x"}
    )
    assert response.status_code == 302, response.content.decode()[-1500:]
    channel.refresh_from_db()
    assert channel.enabled is False and channel.remind_after == timedelta(hours=1, minutes=30)
    assert (channel.target, channel.team.name) == (SLACK_URL, "ops")
    assert 'value="1h30m"' in admin_client.get(url).content.decode()
    refused = admin_client.post(url, {"enabled": "on", "remind_after": "10 years"})
    assert refused.status_code == 200 and "is not a duration" in refused.content.decode()


def test_the_outbox_in_the_admin_is_read_only_and_filterable(admin_client, agent):
    hook = add("webhook", WEBHOOK_URL)
    question = ask(agent)
    opening(question, hook).update(
        attempts=2, last_error=f"Server error '503' for url '{WEBHOOK_URL}'"
    )
    page = admin_client.get("/admin/tasks/notification/?state__exact=pending").content.decode()
    assert "Server error &#x27;503&#x27; for url &#x27;https://receiver.test/…&#x27;" in page
    assert "https://receiver.test/…" in page
    assert "hookpathsecret" not in page and "querysecret" not in page
    assert admin_client.get("/admin/tasks/notification/add/").status_code == 403
    row = Notification.objects.get()
    detail = admin_client.get(f"/admin/tasks/notification/{row.pk}/change/").content.decode()
    assert "hookpathsecret" not in detail and 'name="state"' not in detail
    assert admin_client.post(f"/admin/tasks/notification/{row.pk}/change/", {}).status_code == 403
    sent = admin_client.get("/admin/tasks/notification/?state__exact=sent").content.decode()
    assert "0 notifications" in sent


# -- the demo --------------------------------------------------------------------------------


def test_the_demo_webhook_variable_makes_one_signed_channel_and_prints_its_secret_once(
    db, monkeypatch
):
    monkeypatch.setenv(demo.WEBHOOK_VARIABLE, "http://127.0.0.1:9/demo-hook")
    printed = []
    for _ in range(2):
        command = demo.Command(stdout=StringIO())
        command._webhook_channel()
        printed.append(command.stdout.getvalue())
    channel = NotificationChannel.objects.get()
    assert (channel.team.name, channel.kind, channel.target) == (
        "demo",
        "webhook",
        "http://127.0.0.1:9/demo-hook",
    )
    assert channel.signing_secret.startswith("whsec_")
    assert channel.signing_secret in printed[0]
    assert channel.signing_secret not in printed[1] and "whsec_" not in printed[1]
    # Called directly, as the demo does: found again, never a second secret.
    assert demo.webhook_channel("http://127.0.0.1:9/demo-hook") == (channel, None)


def test_the_demo_makes_no_channel_without_the_variable_and_refuses_a_bad_url(db, monkeypatch):
    monkeypatch.delenv(demo.WEBHOOK_VARIABLE, raising=False)
    demo.Command(stdout=StringIO())._webhook_channel()
    assert not NotificationChannel.objects.exists()
    monkeypatch.setenv(demo.WEBHOOK_VARIABLE, "not a url")
    with pytest.raises(demo.CommandError, match="ONLOOKER_DEMO_WEBHOOK"):
        demo.Command(stdout=StringIO())._webhook_channel()
