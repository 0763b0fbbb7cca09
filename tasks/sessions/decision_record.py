"""Reading the record of decisions (tasks/models/decisions.py) as a person may: `/api/decisions`
reads it through here, a page or a whole range at a time.

A person reads the rows whose `team_pk` (the agent's team when the decision was made) is a
team of theirs, and the rows of agents without a team; a superuser reads every row, as
`Agent.objects.visible_to` lets them see every agent. Rows come in the order they were made,
(at, id) ascending, and a page ends at a cursor naming the last row shown (keyset paging: a
deep page costs what the first does). The cursor is signed: anything but a cursor this list
gave is a BadQuery.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core import signing
from django.db.models import Exists, OuterRef, Q, QuerySet

from tasks.models import Agent, Decision, DecisionConfirmation
from tasks.wire.numbers import whole_number

MAX_LIMIT, DEFAULT_LIMIT = 1000, 100
BATCH = 500  # rows per query when a whole range is streamed
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_CURSOR_SALT = "onlooker.decisions.cursor"
_CURSOR_LENGTH = 300
MOMENT_FORMAT = (
    "an ISO 8601 date (2026-12-01) or date and time (2026-12-01T10:00:00Z), in UTC unless "
    "it names an offset (write + as %2B in a URL)"
)


class BadQuery(ValueError):
    """A parameter that names nothing this list can give; `error` is its short name."""

    def __init__(self, error: str, detail: str, status: int = 400) -> None:
        super().__init__(detail)
        self.error = error
        self.status = status


@dataclass(frozen=True)
class Position:
    """The last row a page showed."""

    at: datetime
    id: int


@dataclass(frozen=True)
class Query:
    since: datetime | None = None
    until: datetime | None = None
    agent: int | None = None


def visible(user) -> QuerySet[Decision]:
    """The rows `user` may read, each with `confirmed` (the agent's reply came for its round)."""
    rows = Decision.objects.all()
    if not user.is_superuser:
        rows = rows.filter(Q(team_pk__isnull=True) | Q(team_pk__in=user.groups.values("pk")))
    confirmation = DecisionConfirmation.objects.filter(
        interaction_pk=OuterRef("interaction_pk"), round=OuterRef("round")
    )
    return rows.annotate(confirmed=Exists(confirmation))


# -- reading what a client asks for -------------------------------------------------------


def moment(name: str, raw: str | None) -> datetime | None:
    """`raw` (a query parameter called `name`) as an aware UTC datetime; None when absent."""
    if not raw:
        return None
    try:
        found = datetime.fromisoformat(raw)
        if found.tzinfo is None:
            found = found.replace(tzinfo=UTC)
        return found.astimezone(UTC)
    except (ValueError, OverflowError):
        # A '+' in a URL's query is a space: an offset must be written %2B (or use Z).
        raise BadQuery(f"bad {name}", f"{name} is {MOMENT_FORMAT}") from None


def read_query(user, since: str | None, until: str | None, agent: str | None) -> Query:
    """The range and agent a client asks for. An agent is one `user` may see, or one that
    is gone but whose rows they may read."""
    query = Query(moment("since", since), moment("until", until))
    if query.since and query.until and query.since > query.until:
        raise BadQuery("bad range", "since is later than until")
    if not agent:
        return query
    agent_id = whole_number(agent)
    if agent_id is None:
        raise BadQuery("bad agent", "agent is an agent's id, a whole number")
    if not (
        Agent.objects.visible_to(user).filter(pk=agent_id).exists()
        or visible(user).filter(agent_pk=agent_id).exists()
    ):
        raise BadQuery("unknown agent", f"no agent {agent_id} that you may see", status=404)
    return Query(query.since, query.until, agent_id)


def read_limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    limit = whole_number(raw)
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise BadQuery("bad limit", f"limit is a number from 1 to {MAX_LIMIT}")
    return limit


def cursor(position: Position) -> str:
    return signing.dumps(
        [(position.at - _EPOCH) // _MICROSECOND, position.id], salt=_CURSOR_SALT, compress=True
    )


def read_cursor(raw: str | None) -> Position | None:
    """The position a `next` link's `after` names; None when absent."""
    if raw is None:
        return None
    refused = BadQuery("bad cursor", "after is the cursor of a `next` link, as given")
    if len(raw) > _CURSOR_LENGTH:
        raise refused
    try:
        micros, last = signing.loads(raw, salt=_CURSOR_SALT)
        return Position(_EPOCH + micros * _MICROSECOND, last)
    except (signing.BadSignature, ValueError, TypeError, OverflowError):
        raise refused from None


# -- the rows ---------------------------------------------------------------------------


def rows(user, query: Query, after: Position | None = None) -> QuerySet[Decision]:
    """The rows `user` may read in `query`'s range, in the order they were made, from just
    after `after`."""
    found = visible(user)
    if query.since is not None:
        found = found.filter(at__gte=query.since)
    if query.until is not None:
        found = found.filter(at__lt=query.until)  # until is exclusive
    if query.agent is not None:
        found = found.filter(agent_pk=query.agent)
    if after is not None:
        found = found.filter(Q(at__gt=after.at) | Q(at=after.at, id__gt=after.id))
    return found.order_by("at", "id")


def page(
    user, query: Query, after: Position | None, limit: int
) -> tuple[list[Decision], Position | None]:
    """One page and the position of the next (None on the last). One query: a row more than
    the page tells whether another follows."""
    found = list(rows(user, query, after)[: limit + 1])
    if len(found) <= limit:
        return found, None
    shown = found[:limit]
    return shown, Position(shown[-1].at, shown[-1].id)


def batch(user, query: Query, after: Position | None) -> list[Decision]:
    """The next BATCH rows after `after` (all of a range, one query per batch, when streamed:
    no transaction or server-side cursor held open while a slow client reads)."""
    return list(rows(user, query, after)[:BATCH])


def every(user, query: Query, after: Position | None = None) -> Iterator[Decision]:
    """Every row of the range, a batch at a time."""
    while True:
        found = batch(user, query, after)
        yield from found
        if len(found) < BATCH:
            return
        after = Position(found[-1].at, found[-1].id)


def when(moment_: datetime) -> str:
    """ISO 8601 in UTC, 'Z' for the offset."""
    return moment_.astimezone(UTC).isoformat().replace("+00:00", "Z")


def row_json(row: Decision) -> dict:
    """One row as `/api/decisions` gives it (a contract: scripts depend on these names).
    `confirmed` is null for what never goes to the agent (a dismissal, a mark of expiry, a
    check)."""
    waited = max(int((row.at - row.opened_at).total_seconds()), 0)
    return {
        "id": row.pk,
        "interaction": row.interaction_id,
        "round": row.round,
        "session": row.session_pk,
        "taskId": row.task_id,
        "agent": {"id": row.agent_pk, "name": row.agent_name},
        "kind": row.kind,
        "decision": row.decision,
        "value": row.value,
        "reason": row.reason or None,
        "by": row.by or None,
        "via": row.via,
        "at": when(row.at),
        "openedAt": when(row.opened_at),
        "waitedSeconds": waited,
        "requestDigest": row.request_digest,
        "confirmed": row.confirmed if row.sent else None,
    }
