"""`/usage/`: cost and usage on a page of its own (issue 33), for the agents a person may see:
a chart of cost per UTC day with its axes named and its values written (none at all when
nothing cost anything), the days, agents and teams that cost anything, and money as people
read it: "—" for none, "< $0.01" under a cent, dollars and cents otherwise, never "$0.0000"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.test import Client

from tasks.wire import profile
from tests.builders import status
from tests.conftest import make_agent, push

DAY = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Page(HTMLParser):
    """What the page shows of its usage: bars, axis names, ticks, values, ranges, table rows."""

    def __init__(self) -> None:
        super().__init__()
        self.bars: list[dict] = []
        self.ranges: dict[str, dict] = {}
        self.rows: dict[str, list[list[str]]] = {}
        self.texts: dict[str, list[str]] = {"name": [], "tick": [], "value": [], "title": []}
        self.charts = 0
        self._into: str | None = None
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        marks = {
            "data-usage-axis-name": "name",
            "data-usage-tick": "tick",
            "data-usage-value": "value",
        }
        if tag == "svg" and "data-usage-chart" in attrs:
            self.charts += 1
        elif tag == "g" and "data-date" in attrs:
            self.bars.append({"date": attrs["data-date"]})
        elif tag == "rect" and attrs.get("class") == "usage-bar":
            self.bars[-1]["height"] = int(attrs["height"])
        elif tag == "title" and self.bars:
            self._into, self._cell = "title", []
        elif tag == "text":
            self._into = next((name for mark, name in marks.items() if mark in attrs), None)
            self._cell = [] if self._into else None
        elif tag == "a" and "data-usage-range" in attrs:
            self.ranges[attrs["data-usage-range"]] = attrs
        elif tag == "table":
            self._table = next((a for a in attrs if a.startswith("data-usage-")), None)
            if self._table:
                self.rows[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("th", "td") and self._row is not None:
            self._cell = []

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("title", "text") and self._into:
            self.texts[self._into].append("".join(self._cell))
            self._into, self._cell = None, None
        elif tag in ("th", "td") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and self._row[0] not in ("Day", "Agent", "Team"):
                self.rows[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None


def telemetry(**values) -> dict:
    return {profile.TELEMETRY: values}


def finished(registered, task: str, *, when: datetime = DAY, **values) -> None:
    body = status("COMPLETED", task=task, context=f"ctx-{task}", at=1, metadata=telemetry(**values))
    with time_machine.travel(when, tick=False):
        assert push(Client(), registered, body).status_code == 200


def usage_page(user: User, query: str = "") -> tuple[Page, str]:
    client = Client()
    client.force_login(user)
    with time_machine.travel(DAY, tick=False):
        response = client.get(f"/usage/{query}")
    assert response.status_code == 200
    text = response.content.decode()
    page = Page()
    page.feed(text)
    return page, text


@pytest.fixture
def ops_agent(ops):
    return make_agent(signing=True, team=ops, name="Ops agent")


def test_the_page_needs_a_login(client, db):
    response = client.get("/usage/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_chart_names_its_axes_and_writes_its_values(alice, ops_agent):
    finished(ops_agent, "t1", costUsd=0.1, tokens=1000, steps=3)
    finished(ops_agent, "t2", costUsd=0.2, tokens=234, steps=4)
    finished(ops_agent, "t3", costUsd=0.15, when=DAY - timedelta(days=3))

    page, text = usage_page(alice)

    assert page.charts == 1 and len(page.bars) == 30
    assert page.bars[0]["date"] == "2026-11-03" and page.bars[-1]["date"] == "2026-12-02"
    heights = {bar["date"]: bar["height"] for bar in page.bars}
    assert heights["2026-12-02"] == 160  # the costliest day fills the chart
    assert heights["2026-11-29"] == 80  # half its cost, half its height
    assert page.texts["name"] == ["Cost (USD)", "Day (UTC)"]
    assert page.texts["tick"] == ["$0", "$0.15", "$0.30", "3 Nov", "18 Nov", "2 Dec"]
    # Thirty bars are too narrow for a value each: the costliest day says its own.
    assert page.texts["value"] == ["$0.30"]
    assert page.texts["title"][-1] == "Wed 2 Dec 2026: $0.30 · 1,234 tokens · 7 steps"
    assert page.texts["title"][0] == "Tue 3 Nov 2026: — · 0 tokens · 0 steps"
    assert page.rows["data-usage-days"] == [
        ["Wed 2 Dec", "$0.30", "1,234", "7"],
        ["Sun 29 Nov", "$0.15", "0", "0"],
    ]
    assert "$0.0000" not in text


def test_a_week_writes_the_value_of_every_day_that_cost_anything(alice, ops_agent):
    finished(ops_agent, "t1", costUsd=0.5)
    finished(ops_agent, "t2", costUsd=0.004, when=DAY - timedelta(days=2))

    page, _ = usage_page(alice, "?days=7")

    assert len(page.bars) == 7 and page.ranges["7"].get("aria-current") == "true"
    assert "aria-current" not in page.ranges["30"]
    assert page.texts["value"] == ["< $0.01", "$0.50"]


def test_money_reads_as_people_read_it_per_agent_and_per_team(alice, ops_agent):
    shared = make_agent(signing=True, name="Shared")
    free = make_agent(signing=True, team=ops_agent.agent.team, name="Free ops agent")
    finished(ops_agent, "t1", costUsd=1234.5, tokens=10, steps=1)
    finished(shared, "t1", costUsd=0.003, tokens=5)
    finished(free, "t1", costUsd=0, tokens=20000, steps=2)
    finished(make_agent(signing=True, team=Group.objects.create(name="finance")), "x", costUsd=9)

    page, text = usage_page(alice)

    assert page.rows["data-usage-agents"] == [
        ["Ops agent", "ops", "$1,234.50", "10", "1"],
        ["Shared", "No team", "< $0.01", "5", "0"],
        ["Free ops agent", "ops", "—", "20,000", "2"],
    ]
    assert page.rows["data-usage-teams"] == [
        ["ops", "$1,234.50", "20,010", "3"],
        ["No team", "< $0.01", "5", "0"],
    ]
    assert "$0.0000" not in text and "finance" not in text


def test_nothing_that_cost_anything_draws_no_chart_and_says_so(alice, ops_agent):
    page, text = usage_page(alice)
    assert page.charts == 0 and "<figure" not in text  # no empty chart, no blank space
    assert "No agent you may see reported cost, tokens or steps in this range." in text
    assert "Cost <strong>—</strong>" in text

    finished(ops_agent, "t1", tokens=50)  # tokens, no cost: still nothing to draw
    page, text = usage_page(alice)
    assert page.charts == 0 and page.rows["data-usage-agents"] == [
        ["Ops agent", "ops", "—", "50", "0"]
    ]


@pytest.mark.parametrize("value", ["abc", "0", "367", "%ED%A0%80", "%00", "9" * 5000])
def test_a_bad_range_shows_thirty_days(alice, ops_agent, value):
    finished(ops_agent, "t1", costUsd=0.5)
    page, _ = usage_page(alice, f"?days={value}")
    assert len(page.bars) == 30 and page.ranges["30"].get("aria-current") == "true"


def test_the_decisions_table_follows_the_range(alice, ops_agent):
    _, text = usage_page(alice, "?days=7")
    assert 'data-decisions-days="7"' in text
    assert text.index('id="usage-heading"') < text.index('id="decisions-heading"')


def test_the_monitoring_screen_links_here_and_no_longer_draws_usage(client, alice, ops_agent):
    finished(ops_agent, "t1", costUsd=0.5)
    client.force_login(alice)
    text = client.get("/").content.decode()
    assert 'href="/usage/"' in text
    assert "data-usage" not in text and "data-decisions-summary" not in text
    wall = client.get("/?display=wall").content.decode()
    assert "data-usage" not in wall and "data-decided" not in wall
