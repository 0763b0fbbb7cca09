"""Linking a Slack member to an Onlooker account, so their clicks on a channel's buttons
decide as that person (answering/slack.py).

A click from a member not linked yet gets, through Slack and shown only to them, a link
`/slack/link/<token>/` (`offer`). The token is random and kept only as its SHA-256 digest
(`SlackLinkRequest`): good for one POST, within 15 minutes. Its page (login required) shows
which Slack member is about to be linked to which account, and only its POST (CSRF-checked
by the view) links (`link`); a second POST by the person it linked (a double click) is told
it is linked, anyone else that it was used.

A member is linked to one account. The link's POST for a member already linked to the
account logged in changes nothing; for a member linked to another account it is refused,
changing nothing (409): whoever could click as that member could otherwise move their
decisions to another account, and a member who linked the wrong account asks an
administrator to remove the link (the admin's "Slack members"), then clicks again.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from tasks.models.notify import NotificationChannel, SlackLinkRequest, SlackMember

# Requests that ended this long ago are deleted when a new one is made: kept a while, a
# member who follows an old link hears it was used or expired rather than "unknown".
KEEP_ENDED = SlackLinkRequest.LIFETIME * 4 * 24  # a day


class LinkRefused(Exception):
    """Why a link cannot link, in words for the person who followed it; `status` is the
    HTTP status its page answers with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


UNKNOWN = "This link is not one Onlooker made, or it was cut: click the button in Slack again."
USED = "This link was used already. Click the button in Slack again if you still need one."
EXPIRED = "This link has expired (links work for 15 minutes): click the button in Slack again."
LINKED_ELSEWHERE = (
    "This Slack member is linked to another Onlooker account already, so nothing was changed. "
    "An administrator can remove that link (Slack members, in the admin); then click the "
    "button in Slack again."
)


@dataclass(frozen=True)
class Member:
    """Who clicked in Slack: their workspace, their member id and what Slack calls them."""

    team_id: str
    user_id: str
    name: str = ""


def linked(member: Member) -> SlackMember | None:
    """The link of this Slack member, with its account, if there is one."""
    return (
        SlackMember.objects.select_related("user")
        .filter(slack_team_id=member.team_id, slack_user_id=member.user_id)
        .first()
    )


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def offer(channel: NotificationChannel, member: Member) -> str:
    """A new one-time link for `member`, who clicked on `channel`'s message: its URL."""
    now = timezone.now()
    token = secrets.token_urlsafe(32)
    SlackLinkRequest.objects.filter(expires_at__lt=now - KEEP_ENDED).delete()
    SlackLinkRequest.objects.create(
        token_digest=_digest(token),
        channel=channel,
        slack_team_id=member.team_id,
        slack_user_id=member.user_id,
        slack_name=member.name[:200],
        created_at=now,
        expires_at=now + SlackLinkRequest.LIFETIME,
    )
    return settings.ONLOOKER_PUBLIC_URL.rstrip("/") + reverse("slack-link", args=(token,))


def pending(token: str) -> SlackLinkRequest:
    """The request `token` names, while it may still link; LinkRefused otherwise."""
    request = SlackLinkRequest.objects.filter(token_digest=_digest(token)).first()
    if request is None:
        raise LinkRefused(UNKNOWN, 404)
    if request.used_at is not None:
        raise LinkRefused(USED, 410)
    if request.expires_at <= timezone.now():
        raise LinkRefused(EXPIRED, 410)
    return request


def _linked_by(user, token: str) -> bool:
    """The token was used, by this very link: a second press of the page's button (a
    double click) hears it is linked, not that the link was used."""
    request = SlackLinkRequest.objects.filter(token_digest=_digest(token)).first()
    return (
        request is not None
        and request.used_at is not None
        and SlackMember.objects.filter(
            slack_team_id=request.slack_team_id,
            slack_user_id=request.slack_user_id,
            user=user,
        ).exists()
    )


def shown_name(request: SlackLinkRequest) -> str:
    """The Slack member as their link's page names them: "@bob", else their member id."""
    return f"@{request.slack_name}" if request.slack_name else request.slack_user_id


def link(user, token: str) -> SlackLinkRequest:
    """Link the Slack member `token` names to `user`'s account (logged in), and use the
    token up; the request it used. LinkRefused, changing nothing, when the token is
    unknown, used or expired, or the member is linked to another account."""
    now = timezone.now()
    if _linked_by(user, token):
        return SlackLinkRequest.objects.get(token_digest=_digest(token))
    try:
        with transaction.atomic():
            request = pending(token)
            # One POST uses it: of two at once, the second finds it used.
            used = SlackLinkRequest.objects.filter(
                pk=request.pk, used_at__isnull=True, expires_at__gt=now
            ).update(used_at=now)
            if not used:
                raise LinkRefused(USED, 410)
            member, made = SlackMember.objects.get_or_create(
                slack_team_id=request.slack_team_id,
                slack_user_id=request.slack_user_id,
                defaults={"user": user, "linked_at": now},
            )
            if not made and member.user_id != user.pk:
                raise LinkRefused(LINKED_ELSEWHERE, 409)
    except IntegrityError:
        # Linked by another request this very moment: refused as above, nothing kept.
        raise LinkRefused(LINKED_ELSEWHERE, 409) from None
    return request
