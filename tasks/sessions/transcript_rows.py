"""The transcript's rows as the session page shows them, each rendered once per process.

A live session page refetches its activity whenever its session changes: once a second
while an agent streams (static/js/activity.js), for every person who has the page open. The
transcript is most of that activity, up to 500 rows, and rendering them through the
template every time cost ~100 ms of CPU per refetch (`python -m tests.benchmarks
activity`), so ten people watching a busy session took a core. A row depends only on what
its message holds, its template and the time zone; nothing in it is a viewer's (their
buttons are elsewhere on the page). So each row is rendered once and kept here under
everything it is made from: the same message loaded again is the same markup, a message
whose time moved (`transcript.before_first_dated`) is a new key, and so is a template read
again. Keys hold the values themselves, not a digest of them, so two messages can never
share a row.

Kept in this process only, least recently shown dropped first, within KEPT_CHARS; a
restart (a deploy) starts empty.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connections
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast, Length, Substr
from django.template.loader import get_template
from django.utils import timezone
from django.utils.safestring import SafeString

from tasks.models import Message

# Of keys and rows together, in this process: ~40 busy pages, ~20 MiB of English text. A
# row is bounded by what the page shows of a message (its first 10,000 characters, its
# markdown rendered from as many, its parts cut when stored), so no one message takes much.
KEPT_CHARS = 16_000_000

ROW_TEMPLATE = "tasks/_transcript_row.html"
RUN_TEMPLATE = "tasks/_receipt_run.html"
# What a row is made from, as `rows` reads it: with its template and the time zone, the key
# it is kept under.
_FIELDS = ("pk", "session_id", "role", "at", "card_update", "html", "shown_text", "length")
_ROLES = dict(Message.Role.choices)


@dataclass(frozen=True, slots=True)
class Row:
    """One message of the transcript, rendered: what the page groups rows by, and its `<li>`."""

    pk: int
    at: datetime
    role: str
    card_update: bool
    markup: SafeString

    @property
    def role_label(self) -> str:
        return _ROLES.get(self.role, self.role)


def rows(messages: QuerySet, *, cut_at: int) -> list[Row]:
    """The rows of `messages` (a queryset of Message, in the order the page shows them),
    each showing the first `cut_at` characters of its text."""
    loaded = list(
        messages.annotate(
            shown_text=Substr("text", 1, cut_at),
            length=Length("text"),
            # As text, so the key can hold it; decoded only for a row not rendered yet.
            parts_text=Cast("parts", TextField()),
        ).values_list(*_FIELDS, "parts_text")
    )
    template = get_template(ROW_TEMPLATE)
    # The loader's template itself is in the key: a template edited under a development
    # server (which empties the loader's cache rather than restarting) makes new keys.
    made_with = (template.template, timezone.get_current_timezone_name())
    keys = [(*made_with, *values) for values in loaded]
    shown = _kept(keys)
    made = {key: _render(template, key, messages.db, cut_at) for key in keys if key not in shown}
    _keep(made)
    shown.update(made)
    return [
        Row(pk=pk, at=at, role=role, card_update=card_update, markup=shown[key])
        for key, (pk, _session_id, role, at, card_update, *_shown) in zip(keys, loaded, strict=True)
    ]


def markup(rows: list[Row]) -> SafeString:
    """The transcript's list items, in order, each run of two or more card receipts in a row
    folded into one item, so a chatty card does not bury the conversation."""
    parts: list[str] = []
    run: list[Row] = []
    for row in [*rows, None]:
        if row is not None and row.card_update:
            run.append(row)
            continue
        if len(run) > 1:
            parts.append(_run(run))
        elif run:
            parts.append(run[0].markup)
        run = []
        if row is not None:
            parts.append(row.markup)
    return SafeString("".join(parts))


# -- the rows kept --------------------------------------------------------------------------

_lock = threading.Lock()  # views run in several threads
_rows: OrderedDict[tuple, SafeString] = OrderedDict()
_chars = 0


def _size(key: tuple, markup: str) -> int:
    # A run's rows are counted where they are kept themselves.
    return len(markup) + sum(len(value) for value in key if isinstance(value, str))


def _kept(keys: Iterable[tuple]) -> dict[tuple, SafeString]:
    found = {}
    with _lock:
        for key in keys:
            markup = _rows.get(key)
            if markup is not None:
                _rows.move_to_end(key)
                found[key] = markup
    return found


def _keep(made: dict[tuple, SafeString]) -> None:
    global _chars
    with _lock:
        for key, markup in made.items():
            if key in _rows:  # another thread made it too
                continue
            _rows[key] = markup
            _chars += _size(key, markup)
        while _chars > KEPT_CHARS and _rows:
            key, markup = _rows.popitem(last=False)
            _chars -= _size(key, markup)


def _run(rows: list[Row]) -> SafeString:
    """A run of receipts, kept like a row: under its rows, themselves keyed by their content."""
    template = get_template(RUN_TEMPLATE)
    key = (template.template, timezone.get_current_timezone_name(), *rows)
    kept = _kept([key])
    if key in kept:
        return kept[key]
    made = SafeString(template.render({"receipts": rows}))
    _keep({key: made})
    return made


def _render(template, key: tuple, alias: str, cut_at: int) -> SafeString:
    _made_with, _zone, pk, session_id, role, at, card_update, html, shown_text, length, parts = key
    connection = connections[alias]
    parts = Message._meta.get_field("parts").from_db_value(parts, None, connection)
    message = Message(
        pk=pk, session_id=session_id, role=role, at=at, card_update=card_update, html=html,
        parts=parts,
    )  # fmt: skip
    message.shown_text, message.length = shown_text, length
    message.cut = length > cut_at
    return SafeString(template.render({"message": message}))
