"""Making a team's notification channels: the only writer of new channels (the
`add_channel` command and the admin call `add`). Refuses, changing nothing, what could
never reach anyone: a URL that is not http(s), an address that is not one, email without email
settings, a reminder interval that is not a duration; and a URL whose host is, or resolves
to, a loopback, private, link-local or other non-public address, unless the channel allows
a private address (targets.py; the sender checks again at every connection)."""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.urls import reverse

from tasks.models.notify import NotificationChannel
from tasks.notify import targets

Kind = NotificationChannel.Kind

_DURATION = re.compile(r"(\d+)\s*([smhd])", re.IGNORECASE)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Shorter would be spam, longer is not a reminder any more.
SHORTEST_REMINDER = timedelta(minutes=1)
LONGEST_REMINDER = timedelta(days=7)
TEAM_NAME_CHARS = Group._meta.get_field("name").max_length


class ChannelError(ValueError):
    """What was wrong with a channel, in words for the person who asked for it."""


@dataclass(frozen=True)
class Added:
    channel: NotificationChannel
    # Shown once, to the person who made the channel: Onlooker never displays it again.
    signing_secret: str | None

    @property
    def interactions_url(self) -> str | None:
        """Where Slack posts the clicks on this channel's buttons, for the Slack app's
        Interactivity settings; None unless the channel has the app's signing secret."""
        return interactions_url(self.channel)


def interactions_url(channel: NotificationChannel) -> str | None:
    if channel.kind != Kind.SLACK or not channel.slack_signing_secret:
        return None
    path = reverse("slack-interactions", args=(channel.pk,))
    return settings.ONLOOKER_PUBLIC_URL.rstrip("/") + path


def check_slack_signing_secret(secret: str) -> str:
    """A Slack app's signing secret as Slack shows it (hex), refused when it cannot be one."""
    secret = secret.strip()
    if not re.fullmatch(r"[0-9A-Za-z]{16,128}", secret):
        raise ChannelError(
            "a Slack signing secret is the letters and digits Slack shows under Basic "
            "Information → App Credentials → Signing Secret"
        )
    return secret


def parse_interval(
    text: str, *, longest: timedelta = LONGEST_REMINDER, what: str = "a reminder interval"
) -> timedelta:
    """ "15m", "1h", "1h30m", "90s", "2d" → a timedelta from 1 minute to `longest`."""
    cleaned = text.strip().replace(" ", "")
    parts = _DURATION.findall(cleaned)
    if not cleaned or "".join(n + u for n, u in parts).lower() != cleaned.lower():
        raise ChannelError(f"{text!r} is not a duration: write e.g. 15m, 1h or 1h30m")
    # Compared as a number first: "99999999999d" is past what a timedelta can hold.
    seconds = sum(int(n) * _UNIT[u.lower()] for n, u in parts)
    if not SHORTEST_REMINDER.total_seconds() <= seconds <= longest.total_seconds():
        raise ChannelError(f"{what} is between 1 minute and {longest.days} days")
    return timedelta(seconds=seconds)


def email_configured() -> bool:
    """Whether Django can send mail: an SMTP host, or another backend (console, locmem)."""
    smtp = settings.EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend"
    return not smtp or bool(settings.EMAIL_HOST)


def new_signing_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _check_url(url: str, *, allow_private: bool) -> str:
    url = url.strip()
    if len(url) > 2000:
        raise ChannelError("the URL is over 2,000 characters")
    # Parsed as the sender's client parses it: the host checked is the host it connects to.
    try:
        parts = httpx.URL(url)
    except httpx.InvalidURL:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.host:
        raise ChannelError(f"{url!r} is not an http(s) URL")
    if not allow_private:
        try:
            targets.check_new(parts.host, parts.port or (443 if parts.scheme == "https" else 80))
        except targets.Refused as refused:
            raise ChannelError(
                f"{_shown(parts)} goes to {refused.address}, {refused.reason}: a channel "
                "posts only to public internet addresses unless it allows a private one "
                '(add_channel --allow-private, or "Allow a private address" in the admin)'
            ) from None
    return url


def _shown(parts: httpx.URL) -> str:
    # Scheme and host, as the channel is shown: the path may be a credential.
    return f"{parts.scheme}://{parts.netloc.decode('ascii', 'replace')}/…"


def add(
    team_name: str,
    kind: str,
    target: str,
    *,
    remind_after: timedelta | None = None,
    allow_private: bool = False,
    escalate_after: timedelta | None = None,
    slack_signing_secret: str = "",
) -> Added:
    """A new channel for the team (made if missing). A signed webhook gets a new secret.
    `allow_private` lets a webhook or Slack channel post to a non-public address;
    `escalate_after` makes it an escalation channel; `slack_signing_secret` (a Slack
    channel's app) lets its buttons decide."""
    if slack_signing_secret:
        if kind != Kind.SLACK:
            raise ChannelError("only a Slack channel has a Slack signing secret")
        slack_signing_secret = check_slack_signing_secret(slack_signing_secret)
    for text in (team_name, target):
        try:
            text.encode()
        except UnicodeEncodeError:
            # A lone surrogate (from a command line in another encoding, say): no database
            # stores it, and no receiver could be reached through it.
            raise ChannelError(f"{text!r} is not valid text (a lone surrogate)") from None
    if not team_name.strip():
        raise ChannelError("a channel belongs to a team: give its name")
    if len(team_name.strip()) > TEAM_NAME_CHARS:
        raise ChannelError(f"a team's name is at most {TEAM_NAME_CHARS} characters")
    if kind in (Kind.SLACK, Kind.WEBHOOK):
        target = _check_url(target, allow_private=allow_private)
    elif kind == Kind.EMAIL:
        target = target.strip()
        try:
            validate_email(target)
        except ValidationError:
            raise ChannelError(f"{target!r} is not an email address") from None
        if not email_configured():
            raise ChannelError(
                "email is not configured: set EMAIL_URL (or EMAIL_HOST and the other "
                "EMAIL_* variables) first"
            )
    else:
        raise ChannelError(f"unknown kind of channel {kind!r}")
    secret = new_signing_secret() if kind == Kind.WEBHOOK else None
    team, _ = Group.objects.get_or_create(name=team_name.strip())
    channel = NotificationChannel.objects.create(
        team=team,
        kind=kind,
        target=target,
        signing_secret=secret or "",
        remind_after=remind_after,
        allow_private=allow_private and kind != Kind.EMAIL,
        escalate_after=escalate_after,
        slack_signing_secret=slack_signing_secret,
    )
    return Added(channel, secret)
