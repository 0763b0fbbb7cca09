"""Display helpers for the templates. `ago` and `waiting` must read exactly as
static/js/times.js writes, since the script takes over ticking the same text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import strip_tags

from tasks.sessions import question_detail
from tasks.sessions.progress_card import strip_invisible
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
    (tasks/sessions/question_detail.py)."""
    return question_detail.table(detail)


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


@register.filter
def receipt_runs(messages: Iterable) -> list[dict]:
    """The transcript in reading order, with each run of two or more card receipts in a row
    as one entry, so a chatty card does not bury the conversation: entries are
    `{"message": m}`, `{"receipt": m}` (a receipt alone) or `{"receipts": [m, ...]}`."""
    entries: list[dict] = []
    run: list = []

    def close_run() -> None:
        if len(run) == 1:
            entries.append({"receipt": run[0]})
        elif run:
            entries.append({"receipts": list(run)})
        run.clear()

    for message in messages:
        if getattr(message, "card_update", False):
            run.append(message)
            continue
        close_run()
        entries.append({"message": message})
    close_run()
    return entries
