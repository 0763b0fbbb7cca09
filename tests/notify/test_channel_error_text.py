"""A failing receiver's own words (its answer's body, which may be an internal page) go to
the admin, on the channel's page, and to the log; the team sees only what happened: "HTTP
403", "could not connect", "timed out".

Real receivers on loopback (channels that allow a private address), the real sender, the
real /settings/ and session pages for a member, the real admin for a superuser.
"""

from __future__ import annotations

import html
import importlib
import logging
import uuid

import pytest
from django.apps import apps
from django.test import Client

from tasks.models import Interaction
from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import sender
from tasks.notify.channels import add
from tests.builders import approval, status
from tests.conftest import make_agent, member, push
from tests.notify.conftest import T0
from tests.peers.misbehaving_agent import MisbehavingAgent
from tests.processes import free_port

INTERNAL_PAGE = b"<h1>Grafana admin</h1><p>api key: sk-internal-7731</p>"


@pytest.fixture
def receiver():
    with MisbehavingAgent() as peer:
        yield peer


def ask(team) -> Interaction:
    registered = make_agent(team=team, signing=True)
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship?"))
    assert push(Client(), registered, body, msg_id=f"push-{uuid.uuid4().hex}").status_code == 200
    return Interaction.objects.get()


def page(user, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def settings_error(user) -> str:
    """The 'Last error' cell of the person's one channel on /settings/, as read."""
    shown = page(user, "/settings/")
    start = shown.index('<span class="team-channel-error">') + len(
        '<span class="team-channel-error">'
    )
    return html.unescape(shown[start : shown.index("</span>", start)])


def test_a_receivers_own_words_reach_the_admin_and_the_log_but_members_see_only_its_status(
    clock, ops, receiver, admin_client, caplog
):
    receiver.answer(INTERNAL_PAGE, status=403, content_type="text/html")
    channel = add("ops", "webhook", receiver.base_url + "/hook", allow_private=True).channel
    question = ask(ops)
    alice = member("alice", ops)

    with caplog.at_level(logging.WARNING, logger="tasks.notify.sender"):
        assert sender.send_due() == 0

    assert settings_error(alice) == "HTTP 403"
    for path in ("/settings/", f"/sessions/{question.task.session_id}/", "/"):
        shown = page(alice, path)
        assert "Grafana" not in shown and "sk-internal-7731" not in shown, path
    assert Notification.objects.get().last_error == "HTTP 403"
    # The admin reads it on the channel's page, not to be edited.
    change = admin_client.get(f"/admin/tasks/notificationchannel/{channel.pk}/change/")
    detail = change.content.decode()
    assert (
        "HTTP 403: &lt;h1&gt;Grafana admin&lt;/h1&gt;&lt;p&gt;api key: sk-internal-7731" in detail
    )
    assert "as the receiver said it" in detail and 'name="last_error_detail"' not in detail
    listed = admin_client.get("/admin/tasks/notificationchannel/").content.decode()
    assert "HTTP 403" in listed and "sk-internal-7731" not in listed
    # And the log.
    assert any("sk-internal-7731" in record.getMessage() for record in caplog.records)


def test_members_see_a_refused_connection_in_three_words(clock, ops):
    channel = add("ops", "slack", f"http://127.0.0.1:{free_port()}/s/T/B/x", allow_private=True)
    ask(ops)

    assert sender.send_due() == 0

    assert settings_error(member("alice", ops)) == "could not connect"
    channel = NotificationChannel.objects.get(pk=channel.channel.pk)
    assert channel.last_error_detail.startswith("could not connect: ")
    assert len(channel.last_error_detail) > len("could not connect: ")
    assert "/s/T/B/x" not in channel.last_error_detail


def test_an_error_kept_before_the_upgrade_shows_members_only_its_status(ops):
    # As the sender wrote failures before: the receiver's words after the status.
    said = NotificationChannel.objects.create(
        team=ops,
        kind="webhook",
        target="https://hooks.example.test/x",
        last_error="HTTP 403: <h1>Grafana admin</h1> sk-internal-7731",
        last_error_at=T0,
    )
    redirect = NotificationChannel.objects.create(
        team=ops,
        kind="webhook",
        target="https://hooks.example.test/y",
        last_error="HTTP 302: a redirect (not followed)",
        last_error_at=T0,
    )
    migration = importlib.import_module("tasks.migrations.0021_channel_private_targets")

    migration.keep_receivers_words_apart(apps, None)

    said.refresh_from_db()
    assert said.last_error == "HTTP 403"
    assert said.last_error_detail == "HTTP 403: <h1>Grafana admin</h1> sk-internal-7731"
    redirect.refresh_from_db()
    assert redirect.last_error == "HTTP 302: a redirect (not followed)"
    assert redirect.last_error_detail == ""
    assert "sk-internal-7731" not in page(member("alice", ops), "/settings/")
