"""Telling Slack what a click did, through the click's `response_url`.

A `response_url` comes in the signed click, so only Slack (or whoever holds the channel's
signing secret) names it. Still, Onlooker posts only where the channel itself posts: an
https URL on the host of the channel's incoming webhook (Slack's are both on
hooks.slack.com), or, for a channel that allows a private address, the very scheme, host
and port of its webhook. The post goes through the sender's HTTP client (notify/sending.py),
so the channel's public-address check (notify/targets.py) holds on every connection, no
redirect is followed, and it has the sender's timeouts.

A response URL is a credential (whoever has it may post into the conversation for 30
minutes): it is never logged, nor any error text that could hold it.
"""

from __future__ import annotations

import json
import logging

import httpx

from tasks.models.notify import NotificationChannel
from tasks.notify import sending, targets

log = logging.getLogger(__name__)

URL_CHARS = 2_000


def allowed(channel: NotificationChannel, url: str) -> bool:
    """Whether Onlooker may post a click's answer to `url` (see the module's docstring)."""
    if not url or len(url) > URL_CHARS:
        return False
    try:
        to, target = httpx.URL(url), httpx.URL(channel.target)
    except (httpx.InvalidURL, TypeError):
        return False
    if not to.host or to.userinfo:
        return False
    same_place = (to.host, to.port) == (target.host, target.port)
    if channel.allow_private:
        return same_place and to.scheme == target.scheme
    return same_place and to.scheme == "https"


def post(channel: NotificationChannel, url: str, body: dict) -> bool:
    """Post `body` (JSON) to the click's `url`; whether Slack took it. A failure is logged
    by kind only (never the URL), and changes nothing else: the decision stands."""
    if not allowed(channel, url):
        log.warning("a Slack reply for channel %s not sent: not its Slack", channel.pk)
        return False
    client = sending.http_client(allow_private=channel.allow_private)
    content = json.dumps(body, ensure_ascii=False)
    headers = {"content-type": "application/json"}
    try:
        with client.stream(
            "POST", url, content=content, headers=headers, timeout=sending.TIMEOUT
        ) as answer:
            status = answer.status_code
    except targets.Refused as refused:
        log.warning("a Slack reply for channel %s was refused: %s", channel.pk, refused.reason)
        return False
    except httpx.HTTPError as error:
        log.warning("a Slack reply for channel %s failed: %s", channel.pk, type(error).__name__)
        return False
    if not 200 <= status < 300:
        # Slack answers 404 once a response URL has expired (30 min) or been used 5 times.
        log.warning("a Slack reply for channel %s got HTTP %s", channel.pk, status)
        return False
    return True
