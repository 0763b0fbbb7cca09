"""The monitoring screen's "Decisions" table, under its cost and usage: per agent and per
person over the usage panel's days, the figures `/api/decisions/summary` gives, rendered on
the server for what this person may read, with no script of its own."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest
import time_machine
from django.contrib.auth.models import Group

from tests.api.recorded import OPENED, ask, on_record, reader
from tests.conftest import make_agent, member

TODAY = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)


class Tables(HTMLParser):
    """The rows of each table marked `data-decisions-…`, as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.current: str | None = None
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.section = False

    def handle_starttag(self, tag, attrs):
        names = dict(attrs)
        if tag == "section" and "data-decisions-summary" in names:
            self.section = True
        if tag == "table" and self.section:
            self.current = next(n for n in names if n.startswith("data-decisions-"))
            self.tables[self.current] = []
        elif tag == "tr" and self.current:
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row.append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables[self.current].append(self.row)
            self.row = None
        elif tag == "table":
            self.current = None
        elif tag == "section":
            self.section = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def screen(user, query: str = "") -> str:
    with time_machine.travel(TODAY, tick=False):
        response = reader(user).get(f"/usage/{query}")
    assert response.status_code == 200
    return response.content.decode()


def tables(page: str) -> dict[str, list[list[str]]]:
    parser = Tables()
    parser.feed(page)
    return parser.tables


@pytest.fixture
def decided(ops, alice):
    """Ops bot's question answered by alice after 30 s, 2 min and 1 h (one of them 2 days
    ago), denied by its expiry once; a dev agent's answer by bob."""
    ops_agent = make_agent(team=ops, name="Ops bot")
    interaction = ask(ops_agent)
    for n, (wait, made) in enumerate([(30, "approve"), (120, "deny"), (3600, "approve")], 1):
        on_record(interaction, made, by=alice, at=OPENED + timedelta(seconds=wait), round_=n)
    on_record(interaction, "deny", via="expiry", at=TODAY - timedelta(hours=1), round_=9)
    dev = Group.objects.create(name="dev")
    dev_agent = make_agent(team=dev, name="Dev bot")
    on_record(ask(dev_agent), "approve", by=member("bob2", dev), round_=1)
    return ops_agent


def test_the_screen_shows_decisions_per_agent_and_per_person_under_usage(decided, alice):
    page = screen(alice)

    assert page.index('id="usage-heading"') < page.index('id="decisions-heading"')
    found = tables(page)
    header, *agents = found["data-decisions-agents"]
    assert header == [
        "Agent",
        "Decisions",
        "Approved",
        "Denied",
        "p50",
        "p90",
        "Escalations",
        "Expiries",
    ]
    assert agents == [["Ops bot", "3", "2", "1", "2 min", "1 h", "0", "1"]]
    assert found["data-decisions-people"][1:] == [["alice", "3", "2", "1", "2 min", "1 h"]]
    assert f'href="/agents/{decided.agent.pk}/"' in page


def test_the_days_follow_the_usage_switch(decided, alice):
    page = screen(alice, "?days=1")
    assert 'data-decisions-days="1"' in page
    [_, agent] = tables(page)["data-decisions-agents"]
    assert agent == ["Ops bot", "0", "0", "0", "–", "–", "0", "1"]  # only today's expiry


def test_the_section_adds_no_script_and_another_teams_agents_are_absent(decided, alice):
    page = screen(alice)
    start = page.index("data-decisions-summary")
    section = page[start : page.index("</section>", start)]
    assert "<script" not in section and "style=" not in section
    assert re.search(r"\son[a-z]+=", section) is None  # no inline handlers
    assert "Dev bot" not in page and "bob2" not in page


def test_with_nothing_decided_it_says_so(alice):
    page = screen(alice)
    assert "No decisions, escalations or expiries on agents you may see in this range." in page
