"""Display helpers for the templates. `ago` and `waiting` must read exactly as
static/js/times.js writes, since the script takes over ticking the same text."""

from __future__ import annotations

import re
from datetime import datetime

from django import template
from django.template.defaultfilters import filesizeformat
from django.utils import timezone
from django.utils.html import format_html, strip_tags
from django.utils.safestring import SafeString

from tasks.sessions import question_detail
from tasks.sessions.progress_card import strip_invisible
from tasks.sessions.usage import money
from tasks.wire import agent_text

register = template.Library()


def _seconds_since(moment: datetime) -> int:
    return max(0, int((timezone.now() - moment).total_seconds()))


def _duration(seconds: int) -> str:
    """'12 s', '3 min', '2 h', '4 d': the largest whole unit."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


@register.filter
def ago(moment: datetime | None) -> str:
    """'just now', '12 s ago', '3 min ago', '2 h ago', '4 d ago'."""
    if moment is None:
        return ""
    seconds = _seconds_since(moment)
    return "just now" if seconds < 5 else f"{_duration(seconds)} ago"


@register.filter
def waiting(moment: datetime | None) -> str:
    """How long an interaction has waited for a person: 'waiting 14 min'."""
    if moment is None:
        return ""
    return f"waiting {_duration(_seconds_since(moment))}"


@register.filter
def visible_text(text: object) -> object:
    """Agent text without invisible and bidi-control characters (the card's rule), so what
    a person reads is what is there: a U+202E cannot reverse the words beside a button."""
    return strip_invisible(text) if isinstance(text, str) else text


@register.filter
def detail_table(detail: object) -> question_detail.Table | None:
    """An interaction's detail as a bounded, cleaned key/value table
    (tasks/sessions/question_detail.py), its whole numbers shown whole: an SDK that carries
    JSON numbers as doubles (protobuf's Struct) turns `"hosts": 6` into 6.0."""
    return question_detail.table(_whole(detail, question_detail.NESTED_TABLES))


def _whole(value: object, depth: int) -> object:
    if _is_whole_float(value):
        return int(value)
    if depth <= 0:
        return value
    if isinstance(value, dict):
        return {key: _whole(item, depth - 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item, depth - 1) for item in value]
    return value


# Beyond 2**53 a double no longer holds every whole number: such a float is shown as it is.
_EXACT = 2**53


def _is_whole_float(value: object) -> bool:
    return isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT


EXAMPLES = 4  # buttons under "New session", per agent


@register.filter
def skill_examples(agent: object) -> list[dict]:
    """What an agent offers to do, as first messages for "New session": each skill's first
    example message when its card gives one (kept by answering/agent_card.py), else the
    skill's name; at most EXAMPLES, each once. `{"text", "skill"}`."""
    found: list[dict] = []
    for skill in getattr(agent, "skills", None) or []:
        if not isinstance(skill, dict):
            continue
        examples = skill.get("examples") if isinstance(skill.get("examples"), list) else []
        text = next((e for e in examples if isinstance(e, str) and e.strip()), skill.get("name"))
        if isinstance(text, str) and text.strip() and all(e["text"] != text for e in found):
            found.append({"text": text.strip(), "skill": skill.get("name") or ""})
    return found[:EXAMPLES]


@register.filter
def usd(value: object) -> str:
    """Money as people read it (tasks/sessions/usage.py `money`): "—" for no cost, "< $0.01"
    under a cent, else dollars and cents; never "$0.0000"."""
    return money(value)


@register.filter
def number(value: object) -> object:
    """A count as people read it: thousands separators ('9,147') and a whole number without
    '.0' ('6', not '6.0'); anything that is not a number, as it is."""
    if _is_whole_float(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return f"{value:,}"


@register.filter
def counted(value: object, words: str) -> str:
    """A count and its noun, agreeing: `{{ n|counted:"session" }}` is '1 session' or
    '9,147 sessions'; an irregular plural is given after a comma ('match,matches')."""
    one, _, many = words.partition(",")
    amount = int(value) if _is_whole_float(value) else value
    return f"{number(amount)} {one if amount == 1 else (many or one + 's')}"


@register.filter
def byte_size(size: object) -> str:
    """'146 bytes', or '2.0 KB (2,048 bytes)': the exact count only when the short form
    rounds it."""
    short = filesizeformat(size)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1024:
        return short
    return f"{short} ({size:,} bytes)"


@register.filter
def local_time(moment: datetime | None, seconds: str = "") -> SafeString | str:
    """A moment as a <time> that static/js/times.js writes in the viewer's own format (their
    zone, their locale's 12 or 24 hours), like every other time on the pages:
    `{{ at|local_time }}`, `{{ at|local_time:"seconds" }}`. The text inside is what a page
    shows before the script runs."""
    if not isinstance(moment, datetime):
        return ""
    shown = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return format_html(
        '<time datetime="{}"{}>{}</time>',
        moment.isoformat(),
        SafeString(" data-seconds") if seconds else "",
        shown.strftime("%H:%M:%S" if seconds else "%H:%M"),
    )


@register.filter
def web_url(url: object) -> str:
    return agent_text.web_url(url)


@register.filter
def choices(detail: object) -> list[str]:
    return question_detail.offered_choices(detail)


@register.filter
def connect_url(detail: object) -> str:
    return question_detail.connect_url(detail)


_MARKUP = re.compile(r"[*_`#>|~\[\]]+|-{2,}")


@register.filter
def plain_line(markdown: str) -> str:
    """A note as one plain line for a receipt: no tags, no markdown marks, one space."""
    return " ".join(_MARKUP.sub(" ", strip_tags(markdown)).split())
