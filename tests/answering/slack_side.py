"""Slack's side, for the tests of answering from Slack: a loopback Slack that takes the
channel's incoming-webhook posts and the replies to clicks' response URLs (a real HTTP
server, tests/peers), and clicks as Slack makes them: a block_actions payload, form-encoded,
signed v0 with the app's signing secret (HMAC-SHA256 of `v0:{timestamp}:{body}`, which is
Slack's side of the signature; Onlooker checks it with slack_sdk's SignatureVerifier).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

from django.test import Client

from tasks.models.notify import NotificationChannel
from tasks.notify import channels, sender
from tests.peers.misbehaving_agent import MisbehavingAgent, Received

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # shaped like a Slack app's signing secret
WEBHOOK_PATH = "/services/T0001/B0002/webhooksecret"
RESPONSE_PATH = "/actions/T0001/1234/responsesecret"
WAIT_SECONDS = 20.0


class LoopbackSlack:
    """The Slack a channel posts to: every post it got, webhook messages and replies apart."""

    def __init__(self, peer: MisbehavingAgent) -> None:
        self.peer = peer

    @property
    def webhook_url(self) -> str:
        return self.peer.base_url + WEBHOOK_PATH

    @property
    def response_url(self) -> str:
        return self.peer.base_url + RESPONSE_PATH

    def messages(self) -> list[dict]:
        return [r.json() for r in self._posts() if r.path == WEBHOOK_PATH]

    def replies(self) -> list[dict]:
        return [r.json() for r in self._posts() if r.path == RESPONSE_PATH]

    def _posts(self) -> list[Received]:
        return [r for r in list(self.peer.requests) if r.method == "POST"]

    def wait_for_replies(self, count: int = 1) -> list[dict]:
        """The replies to clicks, once `count` of them have come (the worker posts them)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while len(self.replies()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {count} replies from Onlooker: {self.replies()}")
            time.sleep(0.02)
        return self.replies()

    def last_message(self) -> dict:
        """The channel's newest message, after the sender sent what is due."""
        sender.send_due()
        return self.messages()[-1]


def slack_channel(slack: LoopbackSlack, team: str = "ops", **options) -> NotificationChannel:
    """A Slack channel of `team` on the loopback Slack (a private address, allowed), with
    its app's signing secret unless told otherwise."""
    options.setdefault("slack_signing_secret", SECRET)
    return channels.add(team, "slack", slack.webhook_url, allow_private=True, **options).channel


def buttons(message: dict) -> list[dict]:
    """The buttons of a message's actions block (none when it has none)."""
    return [
        element
        for block in message["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
    ]


def button(message: dict, action_id: str) -> dict:
    [found] = [b for b in buttons(message) if b["action_id"] == action_id]
    return found


def click_payload(
    pressed: dict,
    response_url: str,
    *,
    user: str = "U0ALICE",
    team: str = "T0001",
    name: str = "alice.s",
) -> dict:
    """The block_actions payload Slack posts when `user` presses `pressed` (a button)."""
    action = {
        "type": "button",
        "action_id": pressed["action_id"],
        "block_id": "Yx1",
        "text": pressed["text"],
        "action_ts": f"{time.time():.6f}",
    }
    if "value" in pressed:
        action["value"] = pressed["value"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": name, "name": name, "team_id": team},
        "api_app_id": "A0APP",
        "token": "verification-token-unused",
        "container": {"type": "message", "message_ts": "1.2", "channel_id": "C0OPS"},
        "trigger_id": "1.2.3",
        "team": {"id": team, "domain": "acme"},
        "channel": {"id": "C0OPS", "name": "ops"},
        "response_url": response_url,
        "actions": [action],
    }


def signed(body: bytes, *, secret: str = SECRET, at: int | None = None) -> dict:
    """Slack's headers for `body`: its timestamp and v0 signature, as the test client's
    HTTP_ keyword arguments."""
    timestamp = str(int(time.time()) if at is None else at)
    base = b"v0:" + timestamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp,
        "HTTP_X_SLACK_SIGNATURE": f"v0={digest}",
    }


def form(payload: dict | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return urlencode({"payload": text}).encode()


def post_click(
    channel: NotificationChannel | int,
    body: bytes,
    *,
    headers: dict | None = None,
    content_type: str = "application/x-www-form-urlencoded",
):
    """POST `body` to the channel's interactions URL, signed unless `headers` are given."""
    channel_id = channel if isinstance(channel, int) else channel.pk
    return Client().post(
        f"/slack/{channel_id}/interactions",
        body,
        content_type=content_type,
        **(signed(body) if headers is None else headers),
    )


def press(channel: NotificationChannel, slack: LoopbackSlack, pressed: dict, **who):
    """A signed click on `pressed`, as Slack sends it; the response."""
    return post_click(channel, form(click_payload(pressed, slack.response_url, **who)))
