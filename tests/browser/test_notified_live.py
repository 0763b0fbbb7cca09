"""The "Notified …" line under a question follows the sender live, in a real browser: the
server's own sender posts to a team's webhook (a loopback receiver that holds the request
until the test lets it answer), and when the send is recorded its hint reaches the page, which
refetches: "sending…" becomes the time it was sent, with no reload, on the session page and
in the monitoring screen's list."""

from __future__ import annotations

import threading

import pytest
from playwright.sync_api import expect

from tasks.models import Interaction
from tasks.models.notify import Notification
from tasks.notify import channels
from tests.builders import approval, status
from tests.conftest import make_agent, member
from tests.live_server import push_http
from tests.peers.misbehaving_agent import Answer, MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def held_receiver():
    """A webhook receiver that answers 204 once `release` is set (at most 20 s)."""
    release = threading.Event()

    def answer(received) -> Answer:
        release.wait(20)
        return Answer(status=204, body=b"")

    with MisbehavingAgent() as peer:
        peer.answer_each(answer)
        peer.release = release
        yield peer
        release.set()


@pytest.mark.parametrize("path", ["session", "overview"])
def test_sending_becomes_sent_when_the_sender_records_it(
    page, login, server, ops, held_receiver, path
):
    channels.add("ops", "webhook", held_receiver.base_url + "/hooks/pathsecret", allow_private=True)
    registered = make_agent(team=ops)
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push_http(server, registered, body).status_code == 200
    question = Interaction.objects.get()
    session = question.task.session_id

    login(member("alice", ops))
    page.goto(server.url + (f"/sessions/{session}/" if path == "session" else "/"))
    line = page.locator(f'[data-notified="{question.pk}"]')
    expect(line).to_have_text("Notified ops: webhook sending…")
    expect(page.locator("html")).to_have_attribute("data-synced", "1")

    held_receiver.release.set()
    expect(line.locator('[data-notified-state="sent"] time')).to_be_visible(timeout=10_000)
    sent = Notification.objects.get(kind=Notification.Kind.OPENED)
    assert sent.state == Notification.State.SENT
    shown = line.locator("time").get_attribute("datetime")
    assert shown.startswith(sent.sent_at.strftime("%Y-%m-%dT%H:%M")), shown
    assert "pathsecret" not in page.content()
