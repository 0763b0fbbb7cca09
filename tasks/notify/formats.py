"""What each kind of channel receives for one outbox row: built from the row's `payload` (the
interaction and its session as they were when the event was queued, see outbox.py) and the
time it is sent, which only decides "waiting N min".

    slack(...)          a Slack-compatible incoming webhook's JSON: `text` (what a
                        notification shows) and `blocks` (the message), with buttons on a
                        channel that has its Slack app's signing secret (below)
    slack_decided(...)  that message once decided, to replace it (the buttons gone)
    webhook(...)        the generic webhook's JSON body, exactly as documented (README,
                        issue 14)
    email(...)          an EmailMessage for the channel's address

An opening, a reminder and an escalation carry the question's answer links (`payload
["actions"]`, answer_links.py): the webhook passes them on as they are, email lists them.

Agents write the prompt, the detail, the choices and their name: in Slack text those are
escaped (`&`, `<`, `>` are Slack's control characters: unescaped, an agent could make a link
or mention everyone), and everything is bounded so one large detail cannot make a message
Slack refuses (3,000 characters a section, 75 a button) or an email nobody reads.

Buttons. A click comes back to /slack/<channel>/interactions (answering/slack.py), naming
the button by its `action_id` and the question by its `value`: "<interaction pk>:<round>"
for Approve and Deny, "<pk>:<round>:<index>" for a choice, its index in
wire.choices.offered(detail). Never the choice's text: the server reads the choice from the
question as stored, and checks everything again. Link buttons (an answer link, the session)
open a page; Slack reports their clicks too, which change nothing.
"""

from __future__ import annotations

import json
from datetime import datetime
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMessage
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.dateparse import parse_datetime

from tasks.models.notify import Notification
from tasks.wire import agent_text, choices

Kind = Notification.Kind

PROMPT_CHARS = 300
DETAIL_LINES = 10
DETAIL_LINE_CHARS = 200
SUBJECT_CHARS = 150
BUTTON_CHARS = 75  # Slack's limit for a button's text

# What the agent waits for, after its name: "alice-bot needs approval: Delete 3 builds?"
_ASKS = {
    "approval": "needs approval",
    "question": "asks",
    "connection": "needs you to connect",
    "text": "asks",
    "check": "needs a check",
}

# The buttons' action_ids: Approve and Deny, a choice (its index follows), and links.
APPROVE = "onlooker_approve"
DENY = "onlooker_deny"
CHOICE = "onlooker_choice_"
LINK = "onlooker_link_"
# The events whose message asks for an answer: the ones with buttons.
_ASKING = (Kind.OPENED, Kind.REMINDER, Kind.ESCALATED)


# -- the facts every format shares ----------------------------------------------------------


def _one_line(text: object, limit: int) -> str:
    cleaned = " ".join(str(text).split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def agent_name(payload: dict) -> str:
    return _one_line(payload["session"]["agent"].get("name") or "An agent", 100)


def prompt(payload: dict) -> str:
    interaction = payload["interaction"]
    text = interaction.get("prompt") or "(no question given)"
    if interaction.get("kind") == "check":
        # Its prompt reads "Check: …" on the page; after "needs a check:" that is one too many.
        text = text.removeprefix("Check: ")
    return _one_line(text, PROMPT_CHARS)


def headline(payload: dict) -> str:
    """ "alice-bot needs approval: Delete 3 old builds?" (not escaped)."""
    asks = _ASKS.get(payload["interaction"].get("kind"), "asks")
    return f"{agent_name(payload)} {asks}: {prompt(payload)}"


def waiting_minutes(payload: dict, at: datetime) -> int:
    opened = parse_datetime(payload.get("openedAt") or "")
    if opened is None:
        return 0
    # To the nearest minute: an agent that asked 1 min 59 s ago has waited about 2.
    return max(0, int((at - opened).total_seconds() + 30) // 60)


def waiting(payload: dict, at: datetime) -> str:
    """ "3 min", "2 h 5 min": how long the agent has waited when this is sent."""
    minutes = waiting_minutes(payload, at)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def still_waiting(notification: Notification, at: datetime) -> str:
    """What a reminder or an escalation says first ("Still waiting after 30 min"), or ""."""
    if notification.kind == Kind.REMINDER:
        return f"Still waiting ({waiting(notification.payload, at)})"
    if notification.kind == Kind.ESCALATED:
        return f"Still waiting after {waiting(notification.payload, at)}"
    return ""


def detail_lines(payload: dict) -> list[str]:
    """The interaction's detail as compact `key: value` lines, at most DETAIL_LINES."""
    detail = payload["interaction"].get("detail")
    if detail in (None, "", {}, []):
        return []
    if isinstance(detail, dict):
        items = [(str(key), value) for key, value in detail.items()]
    else:
        items = [("", detail)]
    lines = []
    for key, value in items[:DETAIL_LINES]:
        shown = _value(value)
        lines.append(_one_line(f"{key}: {shown}" if key else shown, DETAIL_LINE_CHARS))
    if len(items) > DETAIL_LINES:
        lines.append(f"… and {len(items) - DETAIL_LINES} more")
    return lines


def _value(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return ", ".join(str(v) for v in value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), cls=DjangoJSONEncoder)


def resolution_text(payload: dict) -> str:
    resolution = payload.get("resolution") or {}
    return _one_line(resolution.get("text") or "Closed.", 300)


def session_url(payload: dict) -> str:
    return payload["session"]["url"]


def session_title(payload: dict) -> str:
    return _one_line(payload["session"].get("title") or "", 200)


def answer_links(payload: dict) -> list[tuple[str, str]]:
    """(name, url) of each answer link the event carries: approve, deny or answer."""
    found = []
    for action in payload.get("actions") or []:
        if isinstance(action, dict) and action.get("name") and action.get("url"):
            found.append((str(action["name"]), str(action["url"])))
    return found


# -- Slack-compatible incoming webhooks -----------------------------------------------------


def escape(text: str) -> str:
    """Slack mrkdwn's control characters, in text an agent or a person wrote."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(notification: Notification, *, at: datetime) -> dict:
    payload = notification.payload
    url = session_url(payload)
    link = f"<{url}|Open the session>"
    head = _slack_head(payload)
    if notification.kind == Kind.RESOLVED:
        text = f"{escape(resolution_text(payload))} ({head})"
        blocks = [_section(text), _section(link)]
        return {"text": text, "blocks": blocks}
    waited = f"waiting {waiting(payload, at)}"
    first = still_waiting(notification, at)
    if first:
        head = f"{first}: {head}"
    blocks = [_section(head), *_slack_detail(payload)]
    title = session_title(payload)
    where = f" · {escape(title)}" if title else ""
    blocks.append(_context(waited + where))
    buttons = _buttons(notification) if _has_buttons(notification) else []
    blocks.append({"type": "actions", "elements": buttons} if buttons else _section(link))
    return {"text": f"{head} ({waited}) {link}", "blocks": blocks}


def slack_decided(notification: Notification, outcome: str) -> dict:
    """The message `notification` posted, once decided: the question kept, the buttons
    gone, `outcome` ("Approved by alice, 10:02") under it."""
    payload = notification.payload
    head = _slack_head(payload)
    link = f"<{session_url(payload)}|Open the session>"
    blocks = [_section(head), *_slack_detail(payload), _context(escape(outcome)), _section(link)]
    return {"text": f"{escape(outcome)}: {head}", "blocks": blocks}


def _slack_head(payload: dict) -> str:
    asks = _ASKS.get(payload["interaction"].get("kind"), "asks")
    return f"*{escape(agent_name(payload))}* {asks}: {escape(prompt(payload))}"


def _slack_detail(payload: dict) -> list[dict]:
    lines = detail_lines(payload)
    return [_section("\n".join(escape(line) for line in lines))] if lines else []


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _has_buttons(notification: Notification) -> bool:
    channel = notification.channel
    return notification.kind in _ASKING and bool(channel.slack_signing_secret)


def button_value(interaction_pk: int, round_: int, index: int | None = None) -> str:
    """What a button sends back: the question and its round, and a choice's index."""
    value = f"{interaction_pk}:{round_}"
    return value if index is None else f"{value}:{index}"


def _buttons(notification: Notification) -> list[dict]:
    """Approve and Deny; a question's choices, when every one fits on a button; then a link
    to answer otherwise (the answer link, or the session) and one to the session. At most
    20 choices and 2 links: Slack takes 25 elements in an actions block."""
    payload = notification.payload
    pk, round_ = notification.interaction_id, notification.round
    kind = payload["interaction"].get("kind")
    links = dict(answer_links(payload))
    buttons = []
    if kind == "approval":
        buttons.append(_button("Approve", APPROVE, button_value(pk, round_), "primary"))
        buttons.append(_button("Deny", DENY, button_value(pk, round_), "danger"))
    elif kind != "check":
        # Only a question takes a choice: a connection is answered "I've connected" or not.
        offered = (
            choices.offered(payload["interaction"].get("detail")) if kind == "question" else []
        )
        shown = [_label(choice) for choice in offered]
        if offered and all(shown):
            for index, label in enumerate(shown):
                action = f"{CHOICE}{index}"
                buttons.append(_button(label, action, button_value(pk, round_, index)))
        other = "Other answer…" if buttons else "Answer…"
        buttons.append(_link(other, f"{LINK}answer", links.get("answer") or session_url(payload)))
    buttons.append(_link("Open the session", f"{LINK}session", session_url(payload)))
    return buttons


def _label(choice: str) -> str:
    """A choice as its button's text, or "" when a button cannot show it as the agent
    wrote it: too long once escaped, over several lines, or with invisible characters
    (a person must read what the agent will receive)."""
    if any(agent_text.hidden(char) or (char.isspace() and char != " ") for char in choice):
        return ""
    shown = escape(choice)
    return shown if len(shown) <= BUTTON_CHARS else ""


def _button(text: str, action_id: str, value: str, style: str = "") -> dict:
    # plain_text: Slack shows it as it is, no mrkdwn, no mentions; emoji codes as written.
    button = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text, "emoji": False},
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _link(text: str, action_id: str, url: str) -> dict:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text, "emoji": False},
        "url": url,
    }


# -- the generic signed webhook -------------------------------------------------------------


def webhook(notification: Notification) -> str:
    """The JSON body: `type`, `interaction` (as /api/sessions/<id> shows it), `session`,
    `actions` (an opening's, a reminder's or an escalation's answer links), and `resolution`
    (resolved) or `reminder` (its number, 1–3)."""
    payload = notification.payload
    body: dict = {
        "type": notification.kind,
        "interaction": payload["interaction"],
        "session": payload["session"],
    }
    if "actions" in payload:
        body["actions"] = payload["actions"]
    if notification.kind == Kind.RESOLVED:
        body["resolution"] = payload.get("resolution")
    elif notification.kind == Kind.REMINDER:
        body["reminder"] = notification.reminder
    return json.dumps(body, cls=DjangoJSONEncoder, ensure_ascii=False)


# -- email ----------------------------------------------------------------------------------

_MESSAGE_NAMES = {
    Kind.OPENED: "opened",
    Kind.REMINDER: "reminder",
    Kind.RESOLVED: "resolved",
    Kind.ESCALATED: "escalated",
}


def _message_id(notification: Notification, kind: str, n: int = 0) -> str:
    host = urlsplit(settings.ONLOOKER_PUBLIC_URL).hostname or "onlooker.invalid"
    suffix = f".{n}" if n else ""
    return (
        f"<onl.{notification.interaction_id}.{notification.round}.{_MESSAGE_NAMES[kind]}{suffix}"
        f".{notification.channel_id}@{host}>"
    )


def email(notification: Notification, *, at: datetime) -> EmailMessage:
    """Plain text to the channel's address. Reminders and the resolution reply to the
    first message the channel had of the question (In-Reply-To: the opening, or on an
    escalation channel the escalation), so mail programs keep one thread per question."""
    payload = notification.payload
    first = still_waiting(notification, at)
    subject = headline(payload)
    if notification.kind == Kind.ESCALATED:
        subject = f"{first}: {subject}"
    subject = _one_line(f"[Onlooker] {subject}", SUBJECT_CHARS)
    if notification.kind == Kind.RESOLVED:
        subject = "Re: " + subject
        lines = [resolution_text(payload), "", headline(payload)]
    else:
        lines = [f"{first}:", ""] if first else []
        lines.append(headline(payload))
        detail = detail_lines(payload)
        if detail:
            lines += ["", *detail]
        lines += ["", f"Waiting {waiting(payload, at)}."]
        links = answer_links(payload)
        if links:
            lines += ["", *(f"{name.capitalize()}: {url}" for name, url in links)]
    title = session_title(payload)
    if title:
        lines += ["", f"Session: {title}"]
    lines += ["", f"Open the session: {session_url(payload)}", ""]
    headers = {"Message-ID": _message_id(notification, notification.kind, notification.reminder)}
    root = Kind.ESCALATED if notification.channel.escalate_after else Kind.OPENED
    if notification.kind != root:
        opening = _message_id(notification, root)
        headers.update({"In-Reply-To": opening, "References": opening})
    return EmailMessage(
        subject=subject,
        body="\n".join(lines),
        to=[notification.channel.target],
        headers=headers,
    )
