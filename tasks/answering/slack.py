"""Answering from Slack: a click on a button of a channel's message (notify/formats.py)
decides as the Slack member's linked Onlooker account, with the same checks as the session
page and the same one decision ever.

    authenticate(...)  the channel, if Slack signed the request with its app's secret
    parse_click(...)   the click, from the `payload` Slack posts
    accept(...)        queue the click for the worker; the view then answers Slack at once
    decide(...)        what a click does, and what Slack is told (the worker runs it)

Slack wants its answer within 3 seconds; an agent may take 15 to take a decision. So the
view answers 200 at once and a small pool of threads decides (bounded: past PENDING clicks
waiting, a click is refused with 503 and decides nothing). What the click did is posted to
the click's `response_url`: the message replaced by the question and who decided it, or, for
the clicker only (ephemeral), why nothing was decided or the link that links their account.

A process that dies mid-decision leaves what answers.py leaves: a decision claimed before the
call binds, and after Interaction.STALE_CLAIM the same button (or the page) sends that same
decision again; nothing else can be decided meanwhile. The person hears nothing from the dead
process and sees the buttons still there; a second click tells them where it stands.

Trust: whoever holds the channel's signing secret can send clicks as any Slack member. So a
click decides only what this channel was told of (a notification of that round was queued
for it), as the member's linked account, with that account's permissions; and replies go
only to the channel's own Slack (slack_replies.py).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.db import connections
from slack_sdk.signature import SignatureVerifier

from tasks.answering import answers, slack_members, slack_replies
from tasks.answering.rules import AlreadyAnswered, AnswerError
from tasks.models import Interaction
from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import formats
from tasks.wire import choices

log = logging.getLogger(__name__)

WORKERS = 4  # decisions at once: each mostly waits for an agent
PENDING = 64  # clicks accepted and not yet decided, at most
_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")  # Slack's team and member ids (T0123, U0123, W…)
_VALUE = re.compile(r"([1-9][0-9]{0,17}):([1-9][0-9]{0,8})(?::([0-9]{1,2}))?")
_CHOICE = re.compile(re.escape(formats.CHOICE) + r"([0-9]{1,2})")


class Refused(Exception):
    """A request Onlooker will not act on: `status` for the HTTP answer, the message for
    whoever sent it. Nothing was changed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Click:
    """One button pressed: who pressed it, which button (`action_id`), what it carries
    (`value`), and where Slack takes the answer (`response_url`)."""

    member: slack_members.Member
    action_id: str
    value: str
    response_url: str

    @property
    def opens_a_page(self) -> bool:
        """A link button: it opened a page in the browser, and decides nothing here."""
        return self.action_id.startswith(formats.LINK)


# -- the request ----------------------------------------------------------------------------


NO_APP = "This channel has no Slack app set up in Onlooker (no signing secret)."
BAD_SIGNATURE = (
    "The request's Slack signature does not match this channel's signing secret, or its "
    "timestamp is more than 5 minutes from now."
)


def authenticate(
    channel_id: int, body: bytes, timestamp: str | None, signature: str | None
) -> NotificationChannel:
    """The channel, if its Slack app signed `body` (v0, X-Slack-Request-Timestamp and
    X-Slack-Signature, within 5 minutes); Refused (401) otherwise, or (403) when the channel
    is turned off."""
    channel = NotificationChannel.objects.filter(
        pk=channel_id, kind=NotificationChannel.Kind.SLACK
    ).first()
    if channel is None or not channel.slack_signing_secret:
        raise Refused(401, NO_APP)
    if not timestamp or not signature:
        raise Refused(401, "Missing X-Slack-Request-Timestamp or X-Slack-Signature.")
    try:
        valid = SignatureVerifier(channel.slack_signing_secret).is_valid(body, timestamp, signature)
    except (ValueError, UnicodeDecodeError):  # a timestamp that is no number, a body not UTF-8
        valid = False
    if not valid:
        raise Refused(401, BAD_SIGNATURE)
    if not channel.enabled:
        raise Refused(403, "This channel is turned off in Onlooker: its buttons decide nothing.")
    return channel


def parse_click(payload: str) -> Click:
    """The click in Slack's `payload` (a block_actions interaction); Refused (400) when it is
    not one Onlooker's buttons could have sent."""
    try:
        data = json.loads(payload)
    except ValueError:
        raise Refused(400, "The payload is not JSON.") from None
    if not isinstance(data, dict) or data.get("type") != "block_actions":
        raise Refused(400, "Only button clicks (a block_actions payload) are taken here.")
    actions, user = data.get("actions"), data.get("user")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise Refused(400, "The payload names no action.")
    if not isinstance(user, dict):
        raise Refused(400, "The payload names no Slack member (user).")
    team = data.get("team") if isinstance(data.get("team"), dict) else {}
    member = slack_members.Member(
        team_id=_text(team.get("id") or user.get("team_id")),
        user_id=_text(user.get("id")),
        name=_text(user.get("username") or user.get("name"))[:200],
    )
    if not (_ID.fullmatch(member.team_id) and _ID.fullmatch(member.user_id)):
        raise Refused(400, "The payload's user.id and team.id are not Slack ids.")
    action = actions[0]
    action_id, value = _text(action.get("action_id")), _text(action.get("value"))
    click = Click(member, action_id, value, _text(data.get("response_url")))
    if click.opens_a_page:
        return click
    if click.action_id not in (formats.APPROVE, formats.DENY) and not _CHOICE.fullmatch(
        click.action_id
    ):
        raise Refused(400, f"Unknown action {click.action_id[:80]!r}: not an Onlooker button.")
    if not _VALUE.fullmatch(click.value):
        raise Refused(400, "The button's value names no question of Onlooker's.")
    if not click.response_url:
        raise Refused(400, "The payload has no response_url.")
    return click


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


# -- the worker -----------------------------------------------------------------------------

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_slots = threading.BoundedSemaphore(PENDING)

BUSY = "Onlooker is busy with other clicks: nothing was decided, try again in a moment."


def accept(channel: NotificationChannel, click: Click) -> None:
    """Queue the click to be decided and answered through its `response_url`. Refused, with
    nothing queued, when Slack's answer could not go back to the channel's own Slack (400)
    or too many clicks wait already (503)."""
    if not slack_replies.allowed(channel, click.response_url):
        raise Refused(400, "The response_url is not on this channel's Slack.")
    if not _slots.acquire(blocking=False):
        raise Refused(503, BUSY)
    try:
        _workers().submit(_run, channel.pk, click)
    except RuntimeError:  # the interpreter is shutting down
        _slots.release()
        raise Refused(503, BUSY) from None


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="slack-click")
        return _pool


FAILED = (
    "Something went wrong in Onlooker while deciding this. Click again in a few minutes to "
    "see where it stands, or open the session."
)


def _run(channel_pk: int, click: Click) -> None:
    """One click, on a worker thread: decide, then tell Slack. Whatever happens, the slot
    and this thread's database connection are given back."""
    try:
        channel = NotificationChannel.objects.get(pk=channel_pk)
        try:
            reply = decide(channel, click)
        except Exception:
            log.exception("a Slack click on channel %s failed", channel_pk)
            reply = ephemeral(FAILED)
        slack_replies.post(channel, click.response_url, reply)
    except Exception:
        log.exception("a Slack click on channel %s could not be answered", channel_pk)
    finally:
        connections.close_all()
        _slots.release()


# -- deciding -------------------------------------------------------------------------------

NOT_TOLD = "This button is not one of this channel's questions, so nothing was sent."
ASKED_AGAIN = (
    "The agent has asked this again since, so nothing was sent: answer its newest message, "
    "or open the session."
)
NOT_THIS = "That button does not fit this question, so nothing was sent."


def decide(channel: NotificationChannel, click: Click) -> dict:
    """Decide what `click` asks, as its member's account; what to post to `response_url`:
    the message replaced (decided), or a reply for the clicker only."""
    member = slack_members.linked(click.member)
    if member is None:
        return _link_offer(channel, click)
    user = member.user
    if not user.is_active:
        return ephemeral("The Onlooker account linked to you is turned off: nothing was sent.")
    pk, round_, index = _button(click.value)
    told = _told(channel, pk, round_)
    if told is None:
        return ephemeral(NOT_TOLD)
    try:
        interaction = answers.visible(user, pk)
        if interaction.round != round_:
            return ephemeral(ASKED_AGAIN)
        decision = _decision(click, interaction, index)
        done = answers.answer(user, interaction, decision, via="slack", round_=round_)
    except AlreadyAnswered as refused:
        return ephemeral(_already(pk, str(refused)))
    except answers.RoundClosed:
        return ephemeral(ASKED_AGAIN)
    except AnswerError as refused:
        return ephemeral(str(refused))
    log.info("%s decided interaction %s from Slack: %s", user, pk, done.decision_name)
    return {"replace_original": True, **formats.slack_decided(told, done.outcome)}


def _button(value: str) -> tuple[int, int, int | None]:
    pk, round_, index = _VALUE.fullmatch(value).groups()
    return int(pk), int(round_), int(index) if index is not None else None


def _told(channel: NotificationChannel, pk: int, round_: int) -> Notification | None:
    """The message this channel was sent of that round of the question (its opening, or its
    escalation), or None: a button names only what its channel was told."""
    return (
        Notification.objects.filter(
            channel=channel,
            interaction_id=pk,
            round=round_,
            kind__in=[Notification.Kind.OPENED, Notification.Kind.ESCALATED],
        )
        .select_related("channel")
        .first()
    )


def _decision(click: Click, interaction: Interaction, index: int | None) -> answers.Decision:
    """The decision the button stands for. A choice is read from the question as stored, by
    its index (answers.py checks it again under the claim's lock); the button's text is
    never read."""
    approves = {formats.APPROVE: True, formats.DENY: False}.get(click.action_id)
    if approves is not None:
        if interaction.kind != Interaction.Kind.APPROVAL or index is not None:
            raise AnswerError(NOT_THIS)
        return answers.Decision(approved=approves)
    chosen = _CHOICE.fullmatch(click.action_id)
    offered = choices.offered(interaction.detail)
    if (
        interaction.kind != Interaction.Kind.QUESTION
        or index is None
        or int(chosen.group(1)) != index
        or index >= len(offered)
    ):
        raise AnswerError(NOT_THIS)
    return answers.Decision(value=offered[index], chosen=True)


def _already(pk: int, refusal: str) -> str:
    """ "Already decided: Approved by alice, 10:02", or why else nothing can be decided."""
    current = Interaction.objects.select_related("answered_by", "dismissed_by", "task__agent")
    current = current.get(pk=pk)
    if current.state == Interaction.State.ANSWERED:
        return f"Already decided: {current.outcome}"
    return refusal


def _link_offer(channel: NotificationChannel, click: Click) -> dict:
    url = slack_members.offer(channel, click.member)
    name = f"@{click.member.name}" if click.member.name else "your Slack account"
    return ephemeral(
        f"Your Slack account is not linked to Onlooker yet, so nothing was decided. "
        f"<{url}|Link {formats.escape(name)} to your Onlooker account> (this link works "
        "once, for 15 minutes), then click the button again.",
        escaped=True,
    )


def ephemeral(text: str, *, escaped: bool = False) -> dict:
    """A reply only the clicker sees, the message left as it is. Text from an agent (its
    error) or a person is escaped unless the caller built the mrkdwn itself."""
    return {
        "response_type": "ephemeral",
        "replace_original": False,
        "text": text if escaped else formats.escape(text),
    }
