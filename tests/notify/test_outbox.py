"""The outbox is written with the change it reports: an interaction that opens queues an
opening (and its reminders) for each channel of the session's team, once however often the
push arrives; the ways it ends queue one resolution, only where the opening was queued.

Interactions are asked by real signed pushes through the receiver and answered through the
answer view against a loopback agent; the outbox rows are what is checked (the sender that
empties it has its own tests)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from tasks.models import Interaction
from tasks.models.notify import Notification, NotificationChannel
from tasks.notify.channels import ChannelError, add, parse_interval
from tests.builders import approval, status
from tests.conftest import make_agent, push
from tests.offline_names import names_under_test_resolve_to_nothing  # noqa: F401 - a fixture

Kind = Notification.Kind

# Channels here are made, never sent to: their .test names resolve to nothing, unasked.
pytestmark = pytest.mark.usefixtures("names_under_test_resolve_to_nothing")


@pytest.fixture
def ops_webhook(ops) -> NotificationChannel:
    return add(
        "ops",
        "webhook",
        "http://127.0.0.1:9/hook",
        remind_after=timedelta(minutes=15),
        allow_private=True,
    ).channel


@pytest.fixture
def ops_slack(ops) -> NotificationChannel:
    return add("ops", "slack", "https://hooks.example.test/services/T/B/secret").channel


def ask(registered, *, at: int = 1, interaction_id: str = "i-1", name: str | None = None):
    body = status(
        "AUTH_REQUIRED",
        at=at,
        text="Delete 3 old builds?",
        message_id=f"m-{at}",
        metadata=approval(interaction_id, "Delete 3 old builds?", detail={"builds": 3}),
    )
    assert push(Client(), registered, body, msg_id=name or f"ask-{at}").status_code == 200
    return Interaction.objects.get(interaction_id=interaction_id)


def events(**filters) -> list[tuple[str, int, int]]:
    rows = Notification.objects.filter(**filters).order_by(
        "channel_id", "kind", "reminder", "round"
    )
    return [(n.kind, n.reminder, n.round) for n in rows]


def test_an_opening_queues_the_event_and_its_reminders_for_each_team_channel(
    team_agent, ops_webhook, ops_slack
):
    interaction = ask(team_agent)

    assert events(channel=ops_webhook) == [
        (Kind.OPENED, 0, 1),
        (Kind.REMINDER, 1, 1),
        (Kind.REMINDER, 2, 1),
        (Kind.REMINDER, 3, 1),
    ]
    assert events(channel=ops_slack) == [(Kind.OPENED, 0, 1)]  # no reminders asked for
    reminders = Notification.objects.filter(channel=ops_webhook, kind=Kind.REMINDER)
    opened_at = Notification.objects.get(channel=ops_webhook, kind=Kind.OPENED).due_at
    assert sorted(r.due_at - opened_at for r in reminders) == [
        timedelta(minutes=15 * n) for n in (1, 2, 3)
    ]
    opened = Notification.objects.get(channel=ops_slack)
    assert opened.payload["interaction"]["prompt"] == "Delete 3 old builds?"
    assert opened.payload["interaction"]["detail"] == {"builds": 3}
    assert opened.payload["session"]["url"].endswith(f"/sessions/{interaction.task.session_id}/")
    assert opened.payload["session"]["agent"]["name"] == team_agent.agent.name
    assert opened.event_id == f"onl_{interaction.pk}_1_opened"


def test_a_repeated_push_and_a_repeated_status_queue_nothing_twice(team_agent, ops_slack):
    ask(team_agent, name="ask")
    ask(team_agent, name="ask")  # the same delivery again: a duplicate
    ask(team_agent, name="ask-again")  # the same status, another delivery: not asked anew
    assert events(channel=ops_slack) == [(Kind.OPENED, 0, 1)]


def test_only_the_sessions_team_hears_and_a_teamless_agent_is_everyones(db, ops, ops_slack):
    support = add("support", "slack", "https://hooks.example.test/support").channel
    ask(make_agent(team=Group.objects.get(name="support")), interaction_id="s-1")
    assert events(channel=ops_slack) == []
    assert events(channel=support) == [(Kind.OPENED, 0, 1)]

    ask(make_agent(name="Shared"), interaction_id="e-1")  # no team: every team sees it
    assert Notification.objects.filter(interaction__interaction_id="e-1").count() == 2


def test_a_disabled_channel_is_not_queued(team_agent, ops_slack):
    ops_slack.enabled = False
    ops_slack.save()
    ask(team_agent)
    assert not Notification.objects.exists()


def test_the_agent_moving_on_resolves_it_where_it_was_announced(team_agent, ops_slack):
    interaction = ask(team_agent)
    # Made after the opening.
    later = add("ops", "webhook", "http://127.0.0.1:9/later", allow_private=True).channel
    push(Client(), team_agent, status("WORKING", at=5), msg_id="working")

    assert events(channel=ops_slack) == [(Kind.OPENED, 0, 1), (Kind.RESOLVED, 0, 1)]
    assert events(channel=later) == []  # it never heard the question begin
    resolved = Notification.objects.get(kind=Kind.RESOLVED)
    assert resolved.payload["resolution"] == {
        "state": "closed",
        "by": None,
        "text": "Closed: the agent moved on without an answer.",
    }
    assert resolved.interaction_id == interaction.pk


def test_an_answer_resolves_it_with_who_and_what(team_agent, approver, ops_slack):
    interaction = ask(team_agent)
    response = approver.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": "approve"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200, response.content

    resolved = Notification.objects.get(kind=Kind.RESOLVED)
    assert resolved.payload["resolution"] == {
        "state": "answered",
        "by": "alice",
        "text": "Answered by alice: Approve.",
    }
    assert resolved.payload["interaction"]["answeredBy"] == "alice"
    # The agent's next status closes it too: still one resolution.
    push(Client(), team_agent, status("WORKING", at=5), msg_id="working")
    assert Notification.objects.filter(kind=Kind.RESOLVED).count() == 1


def test_asked_anew_is_a_new_round_with_its_own_events(team_agent, ops_slack):
    ask(team_agent, at=1)
    push(Client(), team_agent, status("WORKING", at=2), msg_id="working")
    ask(team_agent, at=3)  # a later status asks again: round 2
    assert events(channel=ops_slack) == [
        (Kind.OPENED, 0, 1),
        (Kind.OPENED, 0, 2),
        (Kind.RESOLVED, 0, 1),
    ]


def test_a_question_that_is_history_when_it_arrives_queues_nothing(team_agent, ops_slack):
    push(Client(), team_agent, status("WORKING", at=9), msg_id="working")
    ask(team_agent, at=1)  # older than what is known: history, closed at once
    assert not Notification.objects.exists()


def test_an_apply_that_fails_leaves_no_notification(team_agent, ops_slack):
    """The outbox rolls back with the change: a trigger refuses the card write, the apply
    fails, and nothing is queued for a question that was never stored."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "CREATE TRIGGER refuse_cards BEFORE INSERT ON tasks_progresscard "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        else:
            cursor.execute(
                "CREATE FUNCTION refuse_cards() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'refused'; END $$ LANGUAGE plpgsql;"
                "CREATE TRIGGER refuse_cards BEFORE INSERT ON tasks_progresscard "
                "FOR EACH ROW EXECUTE FUNCTION refuse_cards()"
            )
    body = status("AUTH_REQUIRED", at=1, text="?", metadata=approval("i-1", "Delete?"))
    push(Client(), team_agent, body, msg_id="ask")
    assert not Interaction.objects.exists()
    assert not Notification.objects.exists()


# -- making channels ----------------------------------------------------------------------


def test_add_channel_prints_json_with_a_secret_only_for_webhooks(db, capsys):
    call_command("add_channel", "--team", "ops", "--webhook", "https://hooks.test/x", "--json")
    made = json.loads(capsys.readouterr().out)
    channel = NotificationChannel.objects.get(pk=made["channel"])
    assert made["kind"] == "webhook" and made["signing_secret"].startswith("whsec_")
    assert channel.signing_secret == made["signing_secret"] and channel.team.name == "ops"

    call_command(
        "add_channel",
        "--team",
        "ops",
        "--slack",
        "https://hooks.test/y",
        "--remind-after",
        "1h30m",
        "--json",
    )
    made = json.loads(capsys.readouterr().out)
    assert (made["kind"], made["signing_secret"]) == ("slack", None)
    assert NotificationChannel.objects.get(pk=made["channel"]).remind_after == timedelta(minutes=90)


def test_a_team_name_that_cannot_be_stored_is_refused(db):
    with pytest.raises(CommandError, match="at most 150 characters"):
        call_command("add_channel", "--team", "t" * 151, "--slack", "https://h.test/x")
    with pytest.raises(CommandError, match="lone surrogate"):
        call_command("add_channel", "--team", "ops\udcff", "--slack", "https://h.test/x")
    assert not NotificationChannel.objects.exists() and not Group.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--webhook", "ftp://hooks.test/x"], "is not an http"),
        (["--slack", "not a url"], "is not an http"),
        (["--email", "nobody"], "is not an email address"),
        (["--email", "ops@example.test"], "email is not configured"),
        (["--webhook", "https://h.test/", "--remind-after", "soon"], "is not a duration"),
        (["--webhook", "https://h.test/", "--remind-after", "10s"], "between 1 minute"),
        (["--webhook", "https://h.test/", "--remind-after", "9" * 30 + "d"], "between 1 minute"),
        (["--webhook", "https://h.test/\udcff"], "lone surrogate"),
    ],
)
def test_add_channel_refuses_what_could_never_deliver(db, settings, args, message):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = ""
    with pytest.raises(CommandError, match=message):
        call_command("add_channel", "--team", "ops", *args)
    assert not NotificationChannel.objects.exists()


def test_an_email_channel_needs_email_settings(db, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    channel = add("ops", "email", "ops@example.test").channel
    assert channel.kind == "email" and channel.signing_secret == ""


def test_a_channel_never_shows_a_webhooks_path(db):
    channel = add("ops", "slack", "https://user:pw@hooks.test/services/T0/B0/s3cret").channel
    assert "s3cret" not in str(channel) and "pw" not in str(channel)
    assert channel.shown_target == "https://hooks.test/…"


@pytest.mark.parametrize(
    ("text", "minutes"), [("15m", 15), ("1h", 60), ("1h30m", 90), ("2d", 2880), ("90S", 1.5)]
)
def test_reminder_intervals_read_as_people_write_them(text, minutes):
    assert parse_interval(text) == timedelta(minutes=minutes)


def test_an_interval_with_stray_text_is_refused():
    with pytest.raises(ChannelError):
        parse_interval("15m and then some")


def test_a_huge_question_is_bounded_in_each_event(team_agent, ops_webhook):
    """A push may carry a 1 MB prompt or detail, and an event is kept per channel and per
    reminder: events carry a cut prompt and no detail beyond what a channel could show."""
    detail = {"log": "x" * 200_000}
    body = status(
        "AUTH_REQUIRED",
        at=1,
        text="?",
        metadata=approval("i-1", "Delete? " + "y" * 100_000, detail=detail),
    )
    assert push(Client(), team_agent, body, msg_id="huge").status_code == 200

    rows = Notification.objects.filter(channel=ops_webhook)
    assert rows.count() == 4
    for row in rows:
        shown = row.payload["interaction"]
        assert len(shown["prompt"]) == 4_000 and shown["prompt"].endswith("…")
        assert shown["detail"] is None and shown["detailOmitted"] is True
        assert len(json.dumps(row.payload)) < 6_000
    assert Interaction.objects.get().detail == detail  # the session keeps it whole
