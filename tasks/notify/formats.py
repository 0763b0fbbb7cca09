"""What each kind of channel receives for one outbox row: built from the row's `payload` (the
interaction and its session as they were when the event was queued, see outbox.py) and the
time it is sent, which only decides "waiting N min".

    slack(...)    a Slack-compatible incoming webhook's JSON: `text` (what a notification
                  shows) and `blocks` (the message)
    webhook(...)  the generic webhook's JSON body, exactly as documented (README, issue 14)
    email(...)    an EmailMessage for the channel's address

Agents write the prompt, the detail and their name: in Slack text those are escaped (`&`,
`<`, `>` are Slack's control characters: unescaped, an agent could make a link or mention
everyone), and everything is bounded so one large detail cannot make a message Slack
refuses (3,000 characters a section) or an email nobody reads.
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

Kind = Notification.Kind

PROMPT_CHARS = 300
DETAIL_LINES = 10
DETAIL_LINE_CHARS = 200
SUBJECT_CHARS = 150

# What the agent waits for, after its name: "alice-bot needs approval: Delete 3 builds?"
_ASKS = {
    "approval": "needs approval",
    "question": "asks",
    "connection": "needs you to connect",
    "text": "asks",
}


# -- the facts every format shares ----------------------------------------------------------


def _one_line(text: object, limit: int) -> str:
    cleaned = " ".join(str(text).split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def agent_name(payload: dict) -> str:
    return _one_line(payload["session"]["agent"].get("name") or "An agent", 100)


def prompt(payload: dict) -> str:
    interaction = payload["interaction"]
    return _one_line(interaction.get("prompt") or "(no question given)", PROMPT_CHARS)


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


# -- Slack-compatible incoming webhooks -----------------------------------------------------


def escape(text: str) -> str:
    """Slack mrkdwn's control characters, in text an agent or a person wrote."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(notification: Notification, *, at: datetime) -> dict:
    payload = notification.payload
    url = session_url(payload)
    link = f"<{url}|Open the session>"
    asks = _ASKS.get(payload["interaction"].get("kind"), "asks")
    head = f"*{escape(agent_name(payload))}* {asks}: {escape(prompt(payload))}"
    if notification.kind == Kind.RESOLVED:
        text = f"{escape(resolution_text(payload))} ({head})"
        blocks = [_section(text), _section(link)]
        return {"text": text, "blocks": blocks}
    waited = f"waiting {waiting(payload, at)}"
    if notification.kind == Kind.REMINDER:
        head = f"Still waiting ({waiting(payload, at)}): {head}"
    blocks = [_section(head)]
    lines = detail_lines(payload)
    if lines:
        blocks.append(_section("\n".join(escape(line) for line in lines)))
    title = session_title(payload)
    where = f" · {escape(title)}" if title else ""
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": waited + where}]})
    blocks.append(_section(link))
    return {"text": f"{head} ({waited}) {link}", "blocks": blocks}


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


# -- the generic signed webhook -------------------------------------------------------------


def webhook(notification: Notification) -> str:
    """The JSON body: `type`, `interaction` (as /api/sessions/<id> shows it), `session`, and
    `resolution` (resolved) or `reminder` (its number, 1–3)."""
    payload = notification.payload
    body: dict = {
        "type": notification.kind,
        "interaction": payload["interaction"],
        "session": payload["session"],
    }
    if notification.kind == Kind.RESOLVED:
        body["resolution"] = payload.get("resolution")
    elif notification.kind == Kind.REMINDER:
        body["reminder"] = notification.reminder
    return json.dumps(body, cls=DjangoJSONEncoder, ensure_ascii=False)


# -- email ----------------------------------------------------------------------------------


def _message_id(notification: Notification, kind: str, n: int = 0) -> str:
    host = urlsplit(settings.ONLOOKER_PUBLIC_URL).hostname or "onlooker.invalid"
    suffix = f".{n}" if n else ""
    name = {Kind.OPENED: "opened", Kind.REMINDER: "reminder", Kind.RESOLVED: "resolved"}[kind]
    return (
        f"<onl.{notification.interaction_id}.{notification.round}.{name}{suffix}"
        f".{notification.channel_id}@{host}>"
    )


def email(notification: Notification, *, at: datetime) -> EmailMessage:
    """Plain text to the channel's address. Reminders and the resolution reply to the
    opening's message (In-Reply-To), so mail programs keep one thread per question."""
    payload = notification.payload
    subject = _one_line(f"[Onlooker] {headline(payload)}", SUBJECT_CHARS)
    lines: list[str] = []
    if notification.kind == Kind.RESOLVED:
        subject = "Re: " + subject
        lines += [resolution_text(payload), "", headline(payload)]
    else:
        if notification.kind == Kind.REMINDER:
            lines += [f"Still waiting ({waiting(payload, at)}):", ""]
        lines.append(headline(payload))
        detail = detail_lines(payload)
        if detail:
            lines += ["", *detail]
        lines += ["", f"Waiting {waiting(payload, at)}."]
    title = session_title(payload)
    if title:
        lines += ["", f"Session: {title}"]
    lines += ["", f"Open the session: {session_url(payload)}", ""]
    headers = {"Message-ID": _message_id(notification, notification.kind, notification.reminder)}
    if notification.kind != Kind.OPENED:
        opening = _message_id(notification, Kind.OPENED)
        headers.update({"In-Reply-To": opening, "References": opening})
    return EmailMessage(
        subject=subject,
        body="\n".join(lines),
        to=[notification.channel.target],
        headers=headers,
    )
