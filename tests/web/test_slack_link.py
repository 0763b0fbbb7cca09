"""Linking a Slack member to an account (/slack/link/<token>/), and the admin of a channel's
Slack app: the link needs a login, its GET only shows who is about to be linked to whom,
its POST links once within 15 minutes; the signing secret is typed and never shown back.

Through the real views with the test client; time moved with time-machine.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from tasks.answering import slack_members
from tasks.models.notify import NotificationChannel, SlackLinkRequest, SlackMember
from tasks.notify import channels

NOON = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOB = slack_members.Member(team_id="T0001", user_id="U0BOB", name="bob")


@pytest.fixture(autouse=True)
def at_noon():
    with time_machine.travel(NOON, tick=False) as traveller:
        yield traveller


@pytest.fixture
def channel(db) -> NotificationChannel:
    added = channels.add(
        "ops", "slack", "https://hooks.slack.example/services/T/B/x", slack_signing_secret=SECRET
    )
    return added.channel


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_user("alice", password="correct horse")


def logged_in(user: User, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def offered(channel, member=BOB) -> str:
    """A link as a click of `member` gets it: its path."""
    url = slack_members.offer(channel, member)
    return "/" + url.split("/", 3)[3]


def test_the_token_is_kept_only_as_its_digest(channel):
    path = offered(channel)
    token = path.split("/")[3]
    [request] = SlackLinkRequest.objects.all()
    assert request.token_digest == hashlib.sha256(token.encode()).hexdigest()
    assert len(token) >= 40


def test_the_link_needs_a_login_and_comes_back_after_it(channel):
    path = offered(channel)

    response = Client().get(path)

    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={path}"
    posted = Client().post(path)
    assert posted.status_code == 302 and not SlackMember.objects.exists()


def test_the_get_shows_who_is_linked_to_whom_and_changes_nothing(channel, alice):
    path = offered(channel)

    page = logged_in(alice).get(path)

    assert page.status_code == 200
    text = page.content.decode()
    assert "Link Slack member @bob to your Onlooker account alice?" in text
    assert 'name="csrfmiddlewaretoken"' in text and 'method="post"' in text
    assert page["Referrer-Policy"] == "strict-origin"
    assert "no-cache" in page["Cache-Control"] or "max-age=0" in page["Cache-Control"]
    assert not SlackMember.objects.exists()
    assert SlackLinkRequest.objects.get().used_at is None


def test_the_post_links_the_member_once(channel, alice):
    path = offered(channel)
    client = logged_in(alice, enforce_csrf_checks=True)
    page = client.get(path)
    csrf = page.cookies["csrftoken"].value

    linked = client.post(path, {"csrfmiddlewaretoken": csrf})

    assert linked.status_code == 200, linked.content.decode()
    assert "Slack member <strong>@bob</strong> is linked" in linked.content.decode()
    member = SlackMember.objects.get()
    assert (member.slack_team_id, member.slack_user_id, member.user) == ("T0001", "U0BOB", alice)
    assert SlackLinkRequest.objects.get().used_at == NOON

    # A double click: the second press hears it is linked; anyone else that it was used.
    again = client.post(path, {"csrfmiddlewaretoken": csrf})
    assert again.status_code == 200 and "is linked" in again.content.decode()
    carol = logged_in(User.objects.create_user("carol")).post(path)
    assert carol.status_code == 410
    assert "This link was used already" in carol.content.decode()
    assert logged_in(alice).get(path).status_code == 410
    assert SlackMember.objects.get().user == alice


def test_a_post_without_the_csrf_token_links_nothing(channel, alice):
    path = offered(channel)
    refused = logged_in(alice, enforce_csrf_checks=True).post(path)
    assert refused.status_code == 403
    assert not SlackMember.objects.exists()
    assert SlackLinkRequest.objects.get().used_at is None


def test_the_link_expires_after_15_minutes(channel, alice, at_noon):
    path = offered(channel)
    at_noon.shift(timedelta(minutes=14, seconds=59))
    assert logged_in(alice).get(path).status_code == 200

    at_noon.shift(timedelta(seconds=1))

    for response in (logged_in(alice).get(path), logged_in(alice).post(path)):
        assert response.status_code == 410
        assert "This link has expired" in response.content.decode()
    assert not SlackMember.objects.exists()
    assert SlackLinkRequest.objects.get().used_at is None


def test_an_unknown_token_is_404(channel, alice):
    offered(channel)
    for response in (
        logged_in(alice).get("/slack/link/not-a-token/"),
        logged_in(alice).post("/slack/link/not-a-token/"),
    ):
        assert response.status_code == 404
        assert "not one Onlooker made" in response.content.decode()
    assert not SlackMember.objects.exists()


def test_a_member_linked_to_another_account_stays_linked_to_it(channel, alice):
    carol = User.objects.create_user("carol")
    SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0BOB", user=carol, linked_at=NOON
    )
    path = offered(channel)

    refused = logged_in(alice).post(path)

    assert refused.status_code == 409
    assert "linked to another Onlooker account already" in refused.content.decode()
    assert SlackMember.objects.get().user == carol
    assert SlackLinkRequest.objects.get().used_at is None


def test_linking_the_account_it_is_linked_to_already_is_fine(channel, alice):
    SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0BOB", user=alice, linked_at=NOON
    )
    assert logged_in(alice).post(offered(channel)).status_code == 200
    assert SlackMember.objects.get().user == alice


def test_the_same_member_id_in_another_workspace_is_another_member(channel, alice):
    carol = User.objects.create_user("carol")
    SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0BOB", user=carol, linked_at=NOON
    )
    other = slack_members.Member(team_id="T0002", user_id="U0BOB", name="bob")
    assert logged_in(alice).post(offered(channel, other)).status_code == 200
    assert SlackMember.objects.get(slack_team_id="T0002").user == alice


# -- the admin -------------------------------------------------------------------------------


def change_url(channel: NotificationChannel) -> str:
    return f"/admin/tasks/notificationchannel/{channel.pk}/change/"


def test_the_admin_shows_the_interactions_url_and_never_the_secret(admin_client, channel):
    page = admin_client.get(change_url(channel)).content.decode()
    assert f"/slack/{channel.pk}/interactions" in page
    assert SECRET not in page
    assert 'name="new_slack_signing_secret"' in page and 'type="password"' in page


def test_the_admin_sets_keeps_and_removes_the_signing_secret(admin_client, db):
    channel = channels.add("ops", "slack", "https://hooks.slack.example/services/T/B/x").channel
    assert "set the Slack signing secret" in admin_client.get(change_url(channel)).content.decode()
    fields = {"enabled": "on", "remind_after": ""}

    bad = admin_client.post(change_url(channel), {**fields, "new_slack_signing_secret": "no!"})
    assert bad.status_code == 200 and "App Credentials" in bad.content.decode()
    channel.refresh_from_db()
    assert channel.slack_signing_secret == ""

    assert (
        admin_client.post(
            change_url(channel), {**fields, "new_slack_signing_secret": SECRET}
        ).status_code
        == 302
    )
    channel.refresh_from_db()
    assert channel.slack_signing_secret == SECRET
    page = admin_client.get(change_url(channel)).content.decode()
    assert SECRET not in page and f"/slack/{channel.pk}/interactions" in page

    assert admin_client.post(change_url(channel), fields).status_code == 302  # blank keeps it
    channel.refresh_from_db()
    assert channel.slack_signing_secret == SECRET

    removed = admin_client.post(
        change_url(channel), {**fields, "remove_slack_signing_secret": "on"}
    )
    assert removed.status_code == 302
    channel.refresh_from_db()
    assert channel.slack_signing_secret == ""


def test_the_admin_refuses_a_slack_secret_for_another_kind_of_channel(admin_client, db, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    channel = channels.add("ops", "email", "ops@example.test").channel
    fields = {"enabled": "on", "remind_after": "", "new_slack_signing_secret": SECRET}
    refused = admin_client.post(change_url(channel), fields)
    assert refused.status_code == 200
    assert "Only a Slack channel has a Slack signing secret" in refused.content.decode()
    channel.refresh_from_db()
    assert channel.slack_signing_secret == ""


def test_the_admin_adds_a_slack_channel_with_its_apps_secret(admin_client, db):
    fields = {
        "team": "ops",
        "kind": "slack",
        "target": "https://hooks.slack.example/services/T/B/x",
        "remind_after": "",
        "slack_signing_secret": SECRET,
    }
    added = admin_client.post("/admin/tasks/notificationchannel/add/", fields, follow=True)
    channel = NotificationChannel.objects.get()
    assert channel.slack_signing_secret == SECRET
    page = added.content.decode()
    assert f"interactions URL: http://127.0.0.1:8000/slack/{channel.pk}/interactions" in page
    assert SECRET not in page


def test_the_admin_lists_linked_members_and_may_only_remove_them(admin_client, alice):
    member = SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0BOB", user=alice, linked_at=NOON
    )
    listed = admin_client.get("/admin/tasks/slackmember/").content.decode()
    assert "U0BOB" in listed
    assert admin_client.get("/admin/tasks/slackmember/add/").status_code == 403
    deleted = admin_client.post(f"/admin/tasks/slackmember/{member.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not SlackMember.objects.exists()
