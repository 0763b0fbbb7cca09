"""The "Notified …" line under a question follows the sender live, in a real browser: when the
sender's hint (tasks/notify/seen.hint_sent) reaches a page, the session page refetches its
activity and the monitoring screen its list, and "sending…" becomes the time it was sent.

The sender is not part of this: the test changes the outbox row as it would, and delivers
its hint into the page's real socket (Playwright's WebSocket route passes everything else
through to the server untouched). That the hint reaches a socket from the server is
tests/test_notified_on_screens.py's."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from tasks.models import Interaction
from tasks.notify import channels
from tasks.notify.models import Notification
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import push_http

pytestmark = pytest.mark.django_db(transaction=True)

SENT_AT = datetime(2026, 12, 1, 10, 2, tzinfo=UTC)


def hint_of(session_id: int) -> str:
    """What seen.hint_sent puts on the wire, as a socket forwards it (broadcast.wire)."""
    return json.dumps({"session": session_id, "notified": datetime.now(UTC).isoformat()})


@pytest.mark.parametrize("path", ["session", "overview"])
def test_sending_becomes_sent_when_the_senders_hint_arrives(page, login, server, ops, path):
    channels.add("ops", "slack", "https://hooks.slack.test/services/T0/B0/pathsecret")
    registered = make_agent(team=ops)
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push_http(server, registered, body).status_code == 200
    question = Interaction.objects.get()
    session = question.task.session_id

    sockets = []

    def through(ws) -> None:
        ws.connect_to_server()  # everything passes through, both ways
        sockets.append(ws)

    page.route_web_socket(re.compile(r"/ws/live/"), through)
    login(member("alice", ops))
    page.goto(server.url + (f"/sessions/{session}/" if path == "session" else "/"))
    line = page.locator(f'[data-notified="{question.pk}"]')
    expect(line).to_have_text("Notified ops: Slack sending…")
    # Connected, and the refetch every (re)connect makes is done.
    expect(page.locator("html")).to_have_attribute("data-synced", "1")

    Notification.objects.filter(kind=Notification.Kind.OPENED).update(
        state=Notification.State.SENT, sent_at=SENT_AT, attempts=1
    )
    page.wait_for_timeout(800)  # nothing else makes the page look again
    expect(line).to_have_text("Notified ops: Slack sending…")

    sockets[-1].send(hint_of(session))
    expect(line.locator('[data-notified-state="sent"] time')).to_have_attribute(
        "datetime", "2026-12-01T10:02:00+00:00"
    )
    assert "pathsecret" not in page.content()
