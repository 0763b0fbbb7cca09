"""Where Onlooker posts what a click did (answering/slack_replies.py): only to the channel's
own Slack, through the sender's public-only client, and never with the response URL (a
credential) in the log."""

from __future__ import annotations

import logging

import pytest

from tasks.answering import slack_replies
from tasks.models.notify import NotificationChannel
from tests.peers.misbehaving_agent import MisbehavingAgent

HOOK = "https://hooks.slack.com/services/T0001/B0002/webhooksecret"
REPLY = "https://hooks.slack.com/actions/T0001/1234/responsesecret"


def channel(target: str = HOOK, *, allow_private: bool = False) -> NotificationChannel:
    return NotificationChannel(pk=5, kind="slack", target=target, allow_private=allow_private)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        (REPLY, True),
        ("https://hooks.slack.com:443/actions/T/1/x", True),  # the same port, written out
        ("https://hooks.slack.com:8443/actions/T/1/x", False),  # another port
        ("http://hooks.slack.com/actions/T/1/x", False),  # not https
        ("https://hooks.slack.com.evil.test/actions/T/1/x", False),
        ("https://evil.test/actions/T/1/x", False),
        ("https://user@hooks.slack.com/actions/T/1/x", False),
        ("https://169.254.169.254/latest/meta-data/", False),
        ("hooks.slack.com/actions/T/1/x", False),
        ("https://hooks.slack.com/" + "x" * 2000, False),
        ("", False),
    ],
)
def test_a_public_channel_replies_only_over_https_to_its_webhooks_host(url, allowed):
    assert slack_replies.allowed(channel(), url) is allowed


def test_a_private_channel_replies_only_to_its_webhooks_scheme_host_and_port():
    private = channel("http://127.0.0.1:8400/services/T/B/x", allow_private=True)
    assert slack_replies.allowed(private, "http://127.0.0.1:8400/actions/T/1/x")
    assert not slack_replies.allowed(private, "http://127.0.0.1:8401/actions/T/1/x")
    assert not slack_replies.allowed(private, "https://127.0.0.1:8400/actions/T/1/x")
    assert not slack_replies.allowed(private, "http://localhost:8400/actions/T/1/x")


def test_a_reply_to_a_non_public_address_is_refused_at_the_connection_and_not_logged(caplog):
    """A channel that does not allow a private address, whose host is loopback (made before
    addresses were checked, say): the sender's client refuses to connect."""
    with MisbehavingAgent() as peer:
        port = peer.base_url.rsplit(":", 1)[1]
        public_only = channel(f"http://127.0.0.1:{port}/services/T/B/webhooksecret")
        url = f"https://127.0.0.1:{port}/actions/T0001/1234/responsesecret"
        with caplog.at_level(logging.INFO):
            assert slack_replies.post(public_only, url, {"text": "hi"}) is False
        assert peer.requests == []
    assert "a loopback address" in caplog.text
    assert "responsesecret" not in caplog.text and "webhooksecret" not in caplog.text


def test_a_reply_slack_refuses_is_logged_by_status_only(caplog):
    with MisbehavingAgent() as peer:
        peer.answer(b"expired_url", status=404, content_type="text/plain")
        private = channel(peer.base_url + "/services/T/B/webhooksecret", allow_private=True)
        url = peer.base_url + "/actions/T0001/1234/responsesecret"
        with caplog.at_level(logging.INFO):
            assert slack_replies.post(private, url, {"text": "hi"}) is False
        [request] = peer.requests
        assert request.json() == {"text": "hi"}
    assert "got HTTP 404" in caplog.text
    assert "responsesecret" not in caplog.text and "T0001" not in caplog.text
