"""Cost and usage: telemetry/v1 (cost, tokens, steps) summed per agent and UTC day, the
ledger (`UsageDay`). This module is its one writer and its read side: `/api/usage` and the
monitoring screen's usage panel.

A task reports its telemetry as running totals on its statuses (the latest is kept on
`Task.telemetry`, and is what the session page sums), so the ledger adds what a task's
telemetry *grew by* since the value stored before, on the UTC day the status was received.
The same telemetry again (a duplicate, a task re-applied by a GetTask sync) adds nothing;
a decrease or a dropped field is not subtracted: a day never goes below zero.

Applying a push only notes its growth (`Deltas.add`, no query); the applier writes a whole
batch's with one statement (`record`), an upsert that adds in the database, so two processes
applying different sessions of one agent never lose each other's sums.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.db import connection
from django.utils import timezone

from tasks.models import Agent, UsageDay

NANOS = 10**9  # the ledger keeps cost in whole nano-dollars
MAX_REPORT = 2**53 - 1  # what one report of a task counts for, at most (profile.MAX_NUMBER)
# What one agent-day holds, at most: below a 64-bit integer's limit with room for a report
# added, so adding in the database never overflows.
MAX_TOTAL = 2**62
MIN_DAYS, MAX_DAYS, DEFAULT_DAYS = 1, 366, 30
RANGES = ((1, "Today"), (7, "7 days"), (30, "30 days"))  # the panel's switch
NO_TEAM = "No team"
_DAYS = re.compile(r"[0-9]{1,3}")
_ROWS_PER_STATEMENT = 500

Amounts = tuple[int, int, int]  # cost in nano-dollars, tokens, steps


class BadDays(ValueError):
    """A `days` that is not a whole number from MIN_DAYS to MAX_DAYS."""


# -- what a telemetry value counts for -----------------------------------------------------


def _count(value: Any) -> int:
    """A count ≥ 0, capped; anything else (bools, NaN, text, negative) is 0. Telemetry is
    checked when it arrives (profile.read_telemetry), but stored values predate that."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return int(min(max(value, 0), MAX_REPORT))


def _nanos(value: Any) -> int:
    """A cost in US dollars as whole nano-dollars, from its shortest decimal form (0.1 is
    exactly 100,000,000, not the float's 0.1000000000000000055…)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value) or value <= 0:
        return 0
    if value >= MAX_REPORT / NANOS:
        return MAX_REPORT  # and no Decimal of a 400-digit int
    nanos = (Decimal(repr(value)) * NANOS).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
    return int(nanos)


def amounts(telemetry: Any) -> Amounts:
    """What a stored telemetry/v1 value counts for; zeros for anything that is not one."""
    if not isinstance(telemetry, dict):
        return (0, 0, 0)
    return (
        _nanos(telemetry.get("costUsd")),
        _count(telemetry.get("tokens")),
        _count(telemetry.get("steps")),
    )


def _add(a: Amounts, b: Amounts) -> Amounts:
    return tuple(min(x + y, MAX_TOTAL) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def utc_day(at: datetime) -> date:
    return at.astimezone(UTC).date()


# -- the write side -------------------------------------------------------------------------


class Deltas:
    """What applying pushes adds to the ledger, per (agent id, UTC day), kept in memory by
    the one applying them until `record` writes it in their transaction. Never raises: a
    push's telemetry cannot fail its apply."""

    def __init__(self) -> None:
        self.by_day: dict[tuple[int, date], Amounts] = {}

    def add(self, agent_id: int, at: datetime, before: Any, after: Any) -> None:
        """A task's stored telemetry went from `before` to `after` on a status received
        `at`: count what each number grew by."""
        old, new = amounts(before), amounts(after)
        grown: Amounts = tuple(max(n - o, 0) for n, o in zip(new, old, strict=True))  # type: ignore[assignment]
        if not any(grown):
            return
        key = (agent_id, utc_day(at))
        self.by_day[key] = _add(self.by_day.get(key, (0, 0, 0)), grown)

    def __bool__(self) -> bool:
        return bool(self.by_day)


def record(deltas: Iterable[Deltas]) -> None:
    """Add what these applies grew to the ledger, in the caller's transaction: one
    statement for them all (per 500 agent-days), none when there is nothing to add."""
    merged: dict[tuple[int, date], Amounts] = {}
    for delta in deltas:
        for key, grown in delta.by_day.items():
            merged[key] = _add(merged.get(key, (0, 0, 0)), grown)
    if not merged:
        return
    # In one order everywhere: two transactions adding to the same agent-days lock their
    # rows in the same order, so they wait for each other rather than deadlock.
    rows = sorted(merged.items())
    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
        _upsert(rows[start : start + _ROWS_PER_STATEMENT])


def _upsert(rows: list[tuple[tuple[int, date], Amounts]]) -> None:
    quote = connection.ops.quote_name
    table = quote(UsageDay._meta.db_table)
    columns = ("cost_nanos", "tokens", "steps")
    # Saturating addition: a sum past MAX_TOTAL stays there. MAX_TOTAL - excluded never
    # overflows, since what is added is at most MAX_TOTAL too.
    sets = ", ".join(
        f"{quote(c)} = CASE WHEN {table}.{quote(c)} > {MAX_TOTAL} - excluded.{quote(c)}"
        f" THEN {MAX_TOTAL} ELSE {table}.{quote(c)} + excluded.{quote(c)} END"
        for c in columns
    )
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    params: list[Any] = []
    for (agent_id, day), grown in rows:
        params += [agent_id, connection.ops.adapt_datefield_value(day), *grown]
    names = ", ".join(quote(c) for c in ("agent_id", "date", *columns))
    conflict = f"{quote('agent_id')}, {quote('date')}"
    # Only quoted names and our constants are spliced in; every value is a parameter.
    sql = f"INSERT INTO {table} ({names}) VALUES {values} ON CONFLICT ({conflict}) DO UPDATE SET {sets}"  # noqa: S608, E501
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


# -- the read side --------------------------------------------------------------------------


def parse_days(raw: str | None) -> int:
    """`days` as a client sends it: absent is DEFAULT_DAYS."""
    if raw is None:
        return DEFAULT_DAYS
    if not _DAYS.fullmatch(raw) or not MIN_DAYS <= int(raw) <= MAX_DAYS:
        raise BadDays(f"days is a whole number from {MIN_DAYS} to {MAX_DAYS}")
    return int(raw)


@dataclass
class Totals:
    cost_nanos: int = 0
    tokens: int = 0
    steps: int = 0

    def add(self, cost_nanos: int, tokens: int, steps: int) -> None:
        # Python integers: summing many capped days never overflows here.
        self.cost_nanos += cost_nanos
        self.tokens += tokens
        self.steps += steps

    @property
    def cost_usd(self) -> float:
        # Integer true division rounds once, to the float nearest the exact sum.
        return self.cost_nanos / NANOS

    def as_json(self) -> dict:
        return {"costUsd": self.cost_usd, "tokens": self.tokens, "steps": self.steps}


@dataclass
class Usage:
    """A range of UTC days ending today: `days` (every day, oldest first, zeros
    included), `agents` and `teams` (those with usage in the range, most costly first) and
    the range's `total`."""

    days: list[tuple[date, Totals]]
    agents: list[tuple[Agent, Totals]]
    teams: list[tuple[str, Totals]]
    total: Totals


def _costliest(item: tuple[Any, Totals], name: str) -> tuple:
    totals = item[1]
    return (-totals.cost_nanos, -totals.tokens, -totals.steps, name.casefold())


def usage(user, days: int, today: date | None = None) -> Usage:
    """The usage of the agents `user` may see over the `days` UTC days ending `today`."""
    today = today or utc_day(timezone.now())
    first = today - timedelta(days=days - 1)
    by_day = {first + timedelta(days=n): Totals() for n in range(days)}
    by_agent: dict[int, Totals] = {}
    total = Totals()
    rows = UsageDay.objects.filter(
        agent__in=Agent.objects.visible_to(user), date__gte=first, date__lte=today
    ).values_list("agent_id", "date", "cost_nanos", "tokens", "steps")
    for agent_id, day, *counted in rows:
        by_day[day].add(*counted)
        by_agent.setdefault(agent_id, Totals()).add(*counted)
        total.add(*counted)
    agents = Agent.objects.filter(pk__in=by_agent).select_related("team").only("name", "team__name")
    per_agent = sorted(
        ((a, by_agent[a.pk]) for a in agents), key=lambda i: _costliest(i, i[0].name)
    )
    by_team: dict[str, Totals] = {}
    for agent, totals in per_agent:
        team = by_team.setdefault(agent.team.name if agent.team else NO_TEAM, Totals())
        team.add(totals.cost_nanos, totals.tokens, totals.steps)
    teams = sorted(by_team.items(), key=lambda i: _costliest(i, i[0]))
    return Usage(list(by_day.items()), per_agent, teams, total)


def report(user, days: int) -> dict:
    """`/api/usage`'s answer (a contract: scripts depend on these names)."""
    found = usage(user, days)
    return {
        "days": [{"date": day.isoformat(), **totals.as_json()} for day, totals in found.days],
        "byAgent": [
            {"agent": {"id": agent.pk, "name": agent.name}, **totals.as_json()}
            for agent, totals in found.agents
        ],
    }


# -- the usage page (templates/tasks/usage.html) ----------------------------------------------

# The chart, in SVG user units (its viewBox), drawn a unit to a pixel up to the page's width:
# a month's bars fill CHART_WIDTH, a week's are wider, up to a step of MAX_BAR_STEP. Around
# the bars, room for the axes' values and names.
CHART_HEIGHT = 160
CHART_WIDTH = 640
MIN_BAR_STEP, MAX_BAR_STEP = 4, 80
LEFT, TOP, BOTTOM, RIGHT = 84, 22, 44, 32
VALUES_FROM_STEP = 40  # bars at least this wide each say their cost; narrower, the highest
_CENT = Decimal("0.01")


def money(usd: Any) -> str:
    """A cost in US dollars as people read it: "—" for none, "< $0.01" under a cent, else
    dollars and cents with thousands separators ("$1,234.50"). Never "$0.0000"."""
    if isinstance(usd, bool) or not isinstance(usd, int | float | Decimal):
        return "—"
    if isinstance(usd, float) and not math.isfinite(usd) or usd <= 0:
        return "—"
    amount = Decimal(repr(usd)) if isinstance(usd, float) else Decimal(usd)
    if amount < _CENT:
        return "< $0.01"
    return f"${amount.quantize(_CENT, rounding=ROUND_HALF_EVEN):,}"


@dataclass
class Bar:
    day: date
    totals: Totals
    x: int
    y: int
    height: int
    value: str = ""  # the cost written above it, when it says one
    value_x: int = 0  # the middle of the bar


@dataclass(frozen=True)
class Tick:
    at: int  # y (a value) or x (a day), in user units
    text: str


def _bars(days: list[tuple[date, Totals]], step: int) -> list[Bar]:
    highest = max(t.cost_nanos for _, t in days)
    bars = []
    for index, (day, totals) in enumerate(days):
        # A day that cost anything shows at least a sliver of a bar.
        height = (
            max(1, round(totals.cost_nanos * CHART_HEIGHT / highest)) if totals.cost_nanos else 0
        )
        bars.append(Bar(day, totals, LEFT + index * step, TOP + CHART_HEIGHT - height, height))
    costly = [bar for bar in bars if bar.height]
    labelled = costly
    if step < VALUES_FROM_STEP and costly:  # no room for each: the costliest day says its own
        labelled = [max(costly, key=lambda bar: bar.totals.cost_nanos)]
    for bar in labelled:
        bar.value = money(bar.totals.cost_usd)
        bar.value_x = bar.x + max(step * 3 // 4, 1) // 2
    return bars


def _day_ticks(bars: list[Bar], bar_width: int) -> list[Tick]:
    """The first day, the last and one between: enough to read any bar's day off the axis."""
    picked = sorted({0, len(bars) // 2, len(bars) - 1})
    return [Tick(bars[i].x + bar_width // 2, f"{bars[i].day.day} {bars[i].day:%b}") for i in picked]


def chart(found: Usage) -> dict | None:
    """The SVG chart of cost per day: bars, the cost axis (nothing, half and the costliest
    day, in dollars), the day axis; None when nothing cost anything (no empty chart)."""
    if not found.total.cost_nanos:
        return None
    days = len(found.days)
    step = min(max(CHART_WIDTH // days, MIN_BAR_STEP), MAX_BAR_STEP)
    bar_width = max(step * 3 // 4, 1)
    bars = _bars(found.days, step)
    highest = max(t.cost_usd for _, t in found.days)
    bottom = TOP + CHART_HEIGHT
    return {
        "bars": bars,
        "bar_width": bar_width,
        "width": LEFT + days * step + RIGHT,
        "height": bottom + BOTTOM,
        "left": LEFT,
        "top": TOP,
        "bottom": bottom,
        "plot_height": CHART_HEIGHT,
        "right": LEFT + days * step,
        "cost_ticks": [
            Tick(bottom, "$0"),
            Tick(TOP + CHART_HEIGHT // 2, money(highest / 2)),
            Tick(TOP, money(highest)),
        ],
        "day_ticks": _day_ticks(bars, bar_width),
        "axis_middle": TOP + CHART_HEIGHT // 2,
        "days_middle": LEFT + days * step // 2,
    }


def page(user, raw_days: str | None) -> dict:
    """The usage page: the range `?days=` names (a bad one shows the default rather than an
    error: it is a switch on a page), the chart of cost per day, the days that cost
    anything, and the range's totals per agent and per team."""
    try:
        days = parse_days(raw_days)
    except BadDays:
        days = DEFAULT_DAYS
    found = usage(user, days)
    return {
        "days": days,
        "ranges": RANGES,
        "total": found.total,
        "agents": found.agents,
        "teams": found.teams,
        "chart": chart(found),
        "costly_days": [
            (day, totals)
            for day, totals in reversed(found.days)
            if any((totals.cost_nanos, totals.tokens, totals.steps))
        ],
        "first": found.days[0][0],
        "last": found.days[-1][0],
    }
