"""What a page shows of an interaction's `detail` (interactions/v1: any JSON the agent sends
beside its prompt, e.g. `{"environment": "production", "hosts": 6}`): a small key/value table
a person reads before pressing Approve.

Bounded, since it is shown on the session page and, twenty at a time, on the monitoring
screen: at most DETAIL_CHARS characters of keys and values and DETAIL_ROWS rows, then "(cut)";
"show all" (tasks/sessions/activity.py question_text) has the rest. Objects and lists nest as tables
NESTED_TABLES deep, deeper values are compact JSON; a long value is folded under a short
summary. Every key and value is cleaned with the card's rule (cards.strip_invisible): an
agent must not reorder or hide what a person reads next to an answer button.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tasks.sessions.progress_card import strip_invisible
from tasks.wire import agent_text, choices

DETAIL_CHARS = 2_000  # of keys and values, summaries included, of one detail
DETAIL_ROWS = 40  # of one detail, nested rows included
KEY_CHARS = 100  # of one key
FOLD_CHARS = 120  # a longer value (or one of several lines) is folded
SUMMARY_CHARS = 60  # of a folded value's summary
NESTED_TABLES = 2  # the top table and one level of tables inside it


@dataclass
class Row:
    """One key and its value: `rows` for a nested object or list, else `text` (folded under
    `summary` when long). `cut`: the value is shown in part."""

    key: str
    text: str = ""
    summary: str = ""
    rows: list[Row] | None = None
    cut: bool = False

    @property
    def folded(self) -> bool:
        return bool(self.summary)


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)
    cut: bool = False  # some keys or values are not shown


@dataclass
class _Room:
    chars: int = DETAIL_CHARS
    rows: int = DETAIL_ROWS


class _Full(Exception):
    """No room left for another row."""


def offered_choices(detail: object) -> list[str]:
    """The choices an interaction's `detail` offers (`choices` or `options`: strings): the
    buttons the page shows, and the only values answering sends as a choice. Read as Slack's
    buttons read it (wire/choices.py), which name a choice by its index in this list."""
    return choices.offered(detail)


def connect_url(detail: object) -> str:
    """The link a connection asks a person to open: `detail.url` (or `detail` itself),
    http(s) only."""
    url = detail.get("url") if isinstance(detail, dict) else detail
    return agent_text.web_url(url)


def table(detail: Any) -> Table | None:
    """The table a page shows of `detail`, or None when there is nothing to show."""
    if detail is None or detail == {} or detail == []:
        return None
    shown = Table()
    items = _items(detail) if isinstance(detail, (dict, list)) else [("value", detail)]
    try:
        _fill(shown.rows, items, _Room(), depth=1)
    except _Full:
        shown.cut = True
    return shown


def _items(value: dict | list) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [(str(key), item) for key, item in value.items()]
    return [(str(index), item) for index, item in enumerate(value, start=1)]


def _fill(rows: list[Row], items: list[tuple[str, Any]], room: _Room, depth: int) -> None:
    for key, value in items:
        if room.rows <= 0 or room.chars <= 0:
            raise _Full
        room.rows -= 1
        key = _take(room, strip_invisible(key)[:KEY_CHARS])
        row = Row(key=key)
        rows.append(row)
        if isinstance(value, (dict, list)) and value and depth < NESTED_TABLES:
            row.rows = []
            _fill(row.rows, _items(value), room, depth + 1)
            continue
        text = strip_invisible(_text(value))
        row.text = _take(room, text)
        row.cut = len(row.text) < len(text)
        if len(text) > FOLD_CHARS or "\n" in row.text:
            first = row.text.split("\n", 1)[0][:SUMMARY_CHARS]
            row.summary = _take(room, f"{first}… ({len(text)} characters)")
        if row.cut:
            raise _Full


def _take(room: _Room, text: str) -> str:
    """As much of `text` as there is room for, taking that room."""
    shown = text[: max(room.chars, 0)]
    room.chars -= len(shown)
    return shown


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (ValueError, TypeError, RecursionError):  # huge numbers, very deep nesting
        return "(data that cannot be shown as text)"
