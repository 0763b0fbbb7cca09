"""Where a list of sessions ends and its next page begins, which sessions are archived, and
a search hit's text cut into what is marked and what is not.

A page ends at a cursor: the sort keys of its last row (keyset pagination, so a deep page
costs what the first does, and a session that moves up while someone reads is never shown
twice), or for a search, how many hits came before. Clients see it as an opaque string,
urlsafe base64 of a small JSON object; everything read back from one is checked, and
anything wrong with it is a BadCursor (a 400 or a page message, never a 500).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from tasks.models import TERMINAL_STATES, Session
from tasks.sessions import search

SORTS = {
    "updated": ("-updated_at", "-id"),
    "attention": ("-needs_human", "-updated_at", "-id"),
}
SEARCH = "search"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_CURSOR_TEXT = re.compile(r"[A-Za-z0-9_-]{1,200}")
_MAX_ID = 2**63 - 1
# No search page starts beyond this many hits: tasks/sessions/search.py ranks about as many matches
# of a common word at most (its newest), and 200 pages of 50 is past what anyone reads.
MAX_OFFSET = 10_000


class BadCursor(ValueError):
    """`before` names no place in this list."""


@dataclass(frozen=True)
class Position:
    """The sort keys of the last row a page showed."""

    needs_human: bool
    updated_at: datetime
    id: int


def archived() -> Q:
    """Finished sessions nobody has touched for ONLOOKER_ARCHIVE_AFTER_DAYS: gone from the live
    screens, still found by search and by the "finished" filter. A condition, not a job: a
    session that changes again is simply not archived any more."""
    cutoff = timezone.now() - timedelta(days=settings.ONLOOKER_ARCHIVE_AFTER_DAYS)
    return Q(state__in=TERMINAL_STATES, updated_at__lt=cutoff)


def after(rows: QuerySet[Session], sort: str, position: Position | None) -> QuerySet[Session]:
    """`rows` in the order `sort` names, from just after `position` (from the top without)."""
    rows = rows.order_by(*SORTS[sort])
    if position is None:
        return rows
    moment, last = position.updated_at, position.id
    older = Q(updated_at__lt=moment) | Q(updated_at=moment, id__lt=last)
    if sort == "updated":
        return rows.filter(older)
    if position.needs_human:
        return rows.filter(Q(needs_human=False) | (Q(needs_human=True) & older))
    return rows.filter(older, needs_human=False)


def page(
    rows: QuerySet[Session], sort: str, position: Position | None, limit: int
) -> tuple[list[Session], str | None]:
    """One page of `rows` and the cursor of the next (None on the last page). One query: a
    row more than the page is read to tell whether another page follows."""
    found = list(after(rows, sort, position)[: limit + 1])
    if len(found) <= limit:
        return found, None
    shown = found[:limit]
    return shown, cursor(sort, shown[-1])


def cursor(sort: str, session: Session) -> str:
    moment = (session.updated_at - _EPOCH) // _MICROSECOND
    return _encode({"k": sort, "h": int(session.needs_human), "t": moment, "i": session.pk})


def read_cursor(text: str, sort: str) -> Position:
    """The position `text` (a cursor from `cursor`) names in a list sorted by `sort`."""
    data = _decode(text)
    if data.get("k") != sort:
        raise BadCursor(f"before is a cursor of another list: this one is sorted by {sort}")
    needs, moment, last = data.get("h"), data.get("t"), data.get("i")
    if needs not in (0, 1) or not _whole(moment) or not _whole(last) or not 0 < last <= _MAX_ID:
        raise BadCursor("before is not a cursor this list gave")
    try:
        updated_at = _EPOCH + moment * _MICROSECOND
    except OverflowError:
        raise BadCursor("before is not a cursor this list gave") from None
    return Position(bool(needs), updated_at, last)


def search_page(
    sessions: QuerySet[Session], text: str, offset: int, limit: int
) -> tuple[list[search.Hit], str | None]:
    """One page of the search for `text` among `sessions`, best first, and the cursor of the
    next page (None on the last). Raises search.BadQuery when `text` holds no word."""
    hits = search.find(sessions, text, offset=offset, limit=min(limit + 1, search.MAX_LIMIT))
    more = len(hits) > limit
    if not more and len(hits) == limit and limit + 1 > search.MAX_LIMIT:
        # The engine's largest page left no room for the row that tells: ask for it alone.
        more = bool(search.find(sessions, text, offset=offset + limit, limit=1))
    more = more and offset + limit < MAX_OFFSET
    return hits[:limit], search_cursor(text, offset + limit) if more else None


def search_cursor(text: str, offset: int) -> str:
    return _encode({"k": SEARCH, "o": offset, "q": _digest(text)})


def read_search_cursor(cursor_text: str, text: str) -> int:
    """How many hits of the search for `text` came before the page `cursor_text` names."""
    data = _decode(cursor_text)
    if data.get("k") != SEARCH:
        raise BadCursor("before is a cursor of a list, not of a search")
    if data.get("q") != _digest(text):
        raise BadCursor("before is a cursor of another search")
    offset = data.get("o")
    if not _whole(offset) or not 0 < offset <= MAX_OFFSET:
        raise BadCursor(f"before is not a cursor this search gave (at most {MAX_OFFSET} hits)")
    return offset


def _whole(value: object) -> bool:
    return type(value) is int  # not a bool, a float or a string of digits


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _encode(data: dict) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(text: str) -> dict:
    if not _CURSOR_TEXT.fullmatch(text):
        raise BadCursor("before must be the `next` cursor of a previous page, as given")
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):  # JSON and UTF-8 errors are ValueErrors
        raise BadCursor("before is not a cursor this list gave") from None
    if not isinstance(data, dict):
        raise BadCursor("before is not a cursor this list gave")
    return data


def segments(text: str, ranges) -> list[tuple[str, bool]]:
    """`text` cut at the matched `ranges` ([start, end) offsets) into (piece, marked) pairs, in
    order: a template marks the pieces and escapes every one. Ranges out of bounds, reversed or
    overlapping are clamped and merged, so a wrong offset can shift a mark, never break a page."""
    pieces, at = [], 0
    for start, end in sorted((max(0, s), min(len(text), e)) for s, e in ranges):
        start = max(start, at)
        if end <= start:
            continue
        if start > at:
            pieces.append((text[at:start], False))
        pieces.append((text[start:end], True))
        at = end
    if at < len(text):
        pieces.append((text[at:], False))
    return pieces
