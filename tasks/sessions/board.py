"""What the monitoring screen and the sidebar show: visible sessions in attention order (those
waiting for a human first, then the most recently updated), the filters from the URL, and the
counts. The pages render it; the board endpoint sends the same thing to a reconnecting page."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import urlencode

from django.db.models import Count, Q, QuerySet
from django.http import QueryDict
from django.utils import timezone

from tasks.models import TERMINAL_STATES, Agent, Decision, Interaction, Session, TaskState
from tasks.notify import seen
from tasks.sessions import activity, decision_record, fragments, listing, search
from tasks.sessions.progress_card import strip_invisible
from tasks.wire.json_safety import cut
from tasks.wire.numbers import whole_number

OVERVIEW_LIMIT = 300
SIDEBAR_LIMIT = 100
SEARCH_PAGE = 50  # results on one page of the monitoring screen's search
MAX_QUERY_CHARS = 500
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def attention_order(sessions: QuerySet[Session]) -> QuerySet[Session]:
    return sessions.order_by(*listing.SORTS["attention"])


class BadFilter(ValueError):
    """A filter a script sent that means nothing: `error` names which kind, the message says
    what would be right."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error


@dataclass(frozen=True)
class Filters:
    """What a list is narrowed to. `finished` is "1" (finished sessions only, archived ones
    included), "0" (unfinished only) or "" (both); `updated_from` and `updated_to` are UTC
    days, both included; `q` is a search (tasks/sessions/search.py)."""

    agent: str = ""
    state: str = ""
    finished: str = ""
    updated_from: date | None = None
    updated_to: date | None = None
    q: str = ""

    @classmethod
    def from_query(cls, query: QueryDict) -> Filters:
        """Unknown values are ignored rather than refused: a stale bookmark still opens."""
        return cls.read(query)[0]

    @classmethod
    def read(cls, query: QueryDict, *, strict: bool = False) -> tuple[Filters, list[str]]:
        """The filters in `query` and, for a page to show, what was wrong with the ones left
        out. `strict` (the API) raises BadFilter at the first wrong one instead."""
        problems: list[str] = []

        def wrong(error: str, detail: str) -> None:
            if strict:
                raise BadFilter(error, detail)
            problems.append(detail)

        found: dict = {}
        agent, state = query.get("agent"), query.get("state")
        agent_id = whole_number(agent or "")
        if agent_id is not None:
            found["agent"] = str(agent_id)
        elif agent is not None and strict:  # a page ignores these silently, as it always did
            wrong("bad filter", "agent must be an agent id (a number)")
        if state is not None and state in TaskState.values:
            found["state"] = state
        elif state is not None and strict:
            wrong("bad filter", f"state must be one of {', '.join(TaskState.values)}")
        finished = query.get("finished", "")
        if finished in ("0", "1"):
            found["finished"] = finished
        elif finished:
            wrong("bad filter", "finished is 1 (finished sessions only) or 0 (unfinished only)")
        for name, key in (("from", "updated_from"), ("to", "updated_to")):
            day = _day(query.get(name, ""))
            if isinstance(day, str):
                wrong("bad filter", f"{name} {day}")
            elif day is not None:
                found[key] = day
        start, end = found.get("updated_from"), found.get("updated_to")
        if start and end and start > end:
            wrong("bad filter", "from is a later day than to: nothing could match")
            del found["updated_from"], found["updated_to"]
        text = query.get("q", "")
        problem = _query_problem(text)
        if problem:
            wrong("bad query", problem)
        elif text.strip():
            found["q"] = text.strip()
        return cls(**found), problems

    @property
    def active(self) -> bool:
        return any((self.agent, self.state, self.finished, self.updated_from, self.updated_to))

    @property
    def shows_archived(self) -> bool:
        """Asked for finished work: old finished sessions are what is wanted (a search finds
        them whatever the filters)."""
        return self.finished == "1"

    def apply(self, rows: QuerySet, to: str = "") -> QuerySet:
        """Filter sessions, or rows reaching their session through `to` (e.g. "task__session__").
        Not the search: tasks/sessions/search.py ranks what these let through."""
        if self.agent:
            rows = rows.filter(**{f"{to}agent_id": int(self.agent)})
        if self.state:
            rows = rows.filter(**{f"{to}state": self.state})
        if self.finished:
            finished = Q(**{f"{to}state__in": TERMINAL_STATES})
            rows = rows.filter(finished if self.finished == "1" else ~finished)
        start, end = self.bounds
        if start is not None:
            rows = rows.filter(**{f"{to}updated_at__gte": start})
        if end is not None:
            rows = rows.filter(**{f"{to}updated_at__lt": end})
        return rows

    @property
    def bounds(self) -> tuple[datetime | None, datetime | None]:
        """The date range as instants: from the first day's midnight (UTC), to before the
        midnight after the last day (none after the last day there is)."""
        start = end = None
        if self.updated_from:
            start = datetime.combine(self.updated_from, time.min, UTC)
        if self.updated_to and self.updated_to < date.max:
            end = datetime.combine(self.updated_to + timedelta(days=1), time.min, UTC)
        return start, end

    def query(self, **extra: str) -> str:
        """These filters as a URL query (with `extra`), for links that keep them."""
        pairs = {
            "q": self.q,
            "agent": self.agent,
            "state": self.state,
            "finished": self.finished,
            "from": self.updated_from.isoformat() if self.updated_from else "",
            "to": self.updated_to.isoformat() if self.updated_to else "",
            **extra,
        }
        return urlencode({key: value for key, value in pairs.items() if value})


def _day(text: str) -> date | str | None:
    """A UTC day written YYYY-MM-DD, None when not given, or what is wrong with it."""
    if not text:
        return None
    if not _DATE.fullmatch(text):
        return "must be a day written YYYY-MM-DD"
    try:
        return date.fromisoformat(text)
    except ValueError:
        return "is not a day of the calendar (YYYY-MM-DD, years 1 to 9999)"


def _query_problem(text: str) -> str:
    if len(text) > MAX_QUERY_CHARS:
        return f"q is at most {MAX_QUERY_CHARS} characters"
    if "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text):
        return "q holds a character that cannot be searched (a NUL or a lone surrogate)"
    return ""


NO_FILTERS = Filters()


def live(user, filters: Filters = NO_FILTERS) -> QuerySet[Session]:
    """The sessions the live screens show: what the user may see and the filters let through,
    without the archived ones unless the filters ask for finished work."""
    shown = filters.apply(Session.objects.visible_to(user))
    return shown if filters.shows_archived else shown.exclude(listing.archived())


def counts(user, filters: Filters = NO_FILTERS) -> dict[str, int]:
    """Waiting for a human, working, failed today: over everything the user may see that
    the filters let through, so the line above a filtered screen describes that screen."""
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    return live(user, filters).aggregate(
        waiting=Count("pk", filter=Q(needs_human=True)),
        working=Count("pk", filter=Q(state__in=[TaskState.SUBMITTED, TaskState.WORKING])),
        failed_today=Count("pk", filter=Q(state=TaskState.FAILED, updated_at__gte=today)),
    )


def _with_fragments(sessions: QuerySet[Session]) -> QuerySet[Session]:
    return sessions.select_related("fragments", "card", "agent")


def sidebar(user) -> list[str]:
    """The sidebar's rows, as stored HTML (fragments.py): never archived sessions."""
    visible = _with_fragments(live(user))
    return fragments.many(list(attention_order(visible)[:SIDEBAR_LIMIT]), "sidebar")


@dataclass(frozen=True)
class Tiles:
    html: list[str]
    total: int  # how many sessions match in all, on every page
    next: str | None  # the cursor of the page after this one
    # With `split_finished`: the page's finished sessions, apart from `html` (the rest).
    finished: list[str] = field(default_factory=list)


def tiles(
    user,
    filters: Filters,
    *,
    include_waiting: bool = True,
    before: listing.Position | None = None,
    split_finished: bool = False,
) -> Tiles:
    """One page of the monitoring screen's tiles (at most OVERVIEW_LIMIT, after `before`), as
    stored HTML. Without `include_waiting`, sessions that need a person are left out: the
    screen lists them above the tiles (`waiting`), and one session shown twice pushes the
    tiles below the fold. With `split_finished`, the page's finished sessions come apart
    (`finished`): the screen shows them as one-line rows under the tiles of the rest, in
    the same order, so a page still ends where its cursor says."""
    shown = live(user, filters)
    if not include_waiting:
        shown = shown.filter(needs_human=False)
    chosen, following = listing.page(_with_fragments(shown), "attention", before, OVERVIEW_LIMIT)
    rendered = zip(chosen, fragments.many(chosen, "tile"), strict=True)
    going: list[str] = []
    ended: list[str] = []
    for session, html in rendered:
        finished = split_finished and session.state in TERMINAL_STATES
        (ended if finished else going).append(html)
    return Tiles(going, shown.count(), following, ended)


@dataclass(frozen=True)
class Result:
    session: Session
    field: str = ""  # where the words were found
    pieces: tuple[tuple[str, bool], ...] = ()  # (text, marked)


@dataclass(frozen=True)
class Results:
    found: list[Result]
    total: int
    next: str | None


def results(user, filters: Filters, offset: int = 0, limit: int = SEARCH_PAGE) -> Results:
    """One page of the search `filters.q` over the sessions the user may see that the other
    filters let through, archived ones included: best first, newest first on ties. Raises
    search.BadQuery when the text holds no word to search for."""
    sessions = filters.apply(Session.objects.visible_to(user))
    hits, following = listing.search_page(sessions, filters.q, offset, limit)
    loaded = Session.objects.select_related("agent", "card").in_bulk([h.session_id for h in hits])
    found = [
        Result(
            loaded[hit.session_id],
            hit.snippet.field if hit.snippet else "",
            tuple(listing.segments(hit.snippet.text, hit.snippet.ranges)) if hit.snippet else (),
        )
        for hit in hits
        if hit.session_id in loaded
    ]
    return Results(found, search.count(sessions, filters.q), following)


WAITING_LIMIT = 20


def anything_visible(user) -> bool:
    """Whether the person may see any session at all (else the screen says how to add one)."""
    return Session.objects.visible_to(user).exists()


def waiting(user, filters: Filters = NO_FILTERS) -> list[Interaction]:
    """The open questions of every session the user may see that the filters let through,
    oldest first: who has waited longest is answered first. Each within the page's budget
    (activity.questions), with which team channels were told of it (`notified`, one query
    for all: tasks/notify/seen.py)."""
    rows = filters.apply(Interaction.objects.all(), to="task__session__")
    found = activity.questions(
        rows.filter(
            state__in=Interaction.LISTED,
            task__agent__in=Agent.objects.visible_to(user),
        )
        .select_related("task__session__agent", "answered_by")
        # The list names the session; its task's texts, as large as a push, are not shown.
        .defer("task__status_message", "task__note", "task__plan", "task__telemetry")
        .order_by("opened_at", "id")[:WAITING_LIMIT]
    )
    seen.attach(found)
    return found


# -- recently decided: the monitoring screen's strip ----------------------------------------

DECIDED_LIMIT = 5
DECIDED_PROMPT_CHARS = 120
Made = Decision.Made
# What a row of the record says, in words and a pill's tone (onlooker.css): a denial is never
# drawn in the colour of a success.
_MADE = {
    Made.APPROVE: ("Approved", "ok"),
    Made.CONNECT: ("Connected", "ok"),
    Made.CHECKED: ("Checked", "ok"),
    Made.ANSWER: ("Answered", "info"),
    Made.DENY: ("Denied", "danger"),
    Made.DECLINE: ("Declined", "danger"),
}
_SHOWN_MADE = list(_MADE)  # not dismissals, nor the marks of an expiry passing
# What a decision was about once its session (and question) is deleted: the record keeps
# the kind, not the words.
_UNNAMED = {
    Interaction.Kind.APPROVAL: "An approval",
    Interaction.Kind.CONNECTION: "A connection",
    Interaction.Kind.CHECK: "A check",
}


@dataclass(frozen=True)
class Decided:
    """One decision as the strip shows it: what was asked, what was made, by whom, when."""

    made: str
    tone: str
    what: str
    by: str  # a username; "" for the team's expiry policy
    at: datetime
    reason: str
    session_id: int | None  # when the person may still open the session


def recently_decided(user, limit: int = DECIDED_LIMIT) -> list[Decided]:
    """The last decisions of the record this person may read (decision_record.visible), newest
    first, with the question each was about (the interaction, while it is kept) and a link to
    its session while they may see it. Three queries, whatever the limit."""
    rows = list(
        decision_record.visible(user)
        .filter(decision__in=_SHOWN_MADE)
        .order_by("-at", "-id")
        .only("interaction_pk", "session_pk", "kind", "decision", "by", "at", "reason")[:limit]
    )
    prompts = dict(
        Interaction.objects.filter(pk__in=[r.interaction_pk for r in rows]).values_list(
            "pk", "prompt"
        )
    )
    openable = set(
        Session.objects.visible_to(user)
        .filter(pk__in=[r.session_pk for r in rows])
        .values_list("pk", flat=True)
    )
    found = []
    for row in rows:
        made, tone = _MADE[row.decision]
        prompt = strip_invisible(prompts.get(row.interaction_pk) or "").strip()
        if row.kind == Interaction.Kind.CHECK and prompt.startswith("Check: "):
            prompt = prompt[len("Check: ") :]  # the strip says "Checked" already
        found.append(
            Decided(
                made=made,
                tone=tone,
                what=cut(prompt, DECIDED_PROMPT_CHARS) or _UNNAMED.get(row.kind, "A question"),
                by=row.by,
                at=row.at,
                reason=cut(strip_invisible(row.reason), DECIDED_PROMPT_CHARS),
                session_id=row.session_pk if row.session_pk in openable else None,
            )
        )
    return found
