"""Numbers and words as people read them, the same on every page (issue 33): a count agrees
with its noun and verb ("1 session matches", "2 sessions match"), large numbers have
thousands separators ("9,147 tokens"), a whole number is whole ("hosts 6", never "6.0" from an
SDK that carries numbers as doubles), a size says its bytes once ("146 bytes", not "146 bytes
(146 bytes)"), and a time is a <time> that static/js/times.js writes in the viewer's format."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.template import Context, Template

from tasks.models import Session
from tasks.wire import profile
from tests.builders import approval, artifact, message, status
from tests.conftest import make_agent, push


def send(client, registered, body) -> None:
    assert push(client, registered, body).status_code == 200


def said(text: str, context: str) -> dict:
    return {
        "message": {
            **message(text, message_id=f"u-{context}", role="ROLE_USER"),
            "contextId": context,
        }
    }


def plain(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_a_search_heading_agrees_with_its_count(client, alice, ops):
    team = make_agent(team=ops)
    send(client, team, said("Restart the gateway", "one"))
    client.force_login(alice)
    assert "1 session matches “gateway”" in plain(client.get("/?q=gateway").content.decode())

    send(client, team, said("Patch the gateway", "two"))
    assert "2 sessions match “gateway”" in plain(client.get("/?q=gateway").content.decode())


def test_tokens_have_thousands_separators_and_one_step_is_a_step(client, alice, ops):
    team = make_agent(team=ops)
    telemetry = {profile.TELEMETRY: {"tokens": 9147, "steps": 1, "costUsd": 0.5}}
    send(client, team, status("COMPLETED", at=1, metadata=telemetry))
    client.force_login(alice)
    page = plain(client.get(f"/sessions/{Session.objects.get().pk}/").content.decode())
    assert "9,147 tokens · 1 step" in page
    assert "9147" not in page


def test_a_detail_shows_whole_numbers_whole_and_keeps_text_as_sent(client, alice, ops):
    team = make_agent(team=ops)
    detail = {"hosts": 6.0, "version": "2.0", "share": 0.5, "ids": [1.0, 2.5]}
    send(client, team, status("AUTH_REQUIRED", at=1, metadata=approval("i", "Go?", detail=detail)))
    client.force_login(alice)
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()
    cells = dict(re.findall(r'<th scope="row">([^<]+)</th>\s*<td>([^<]*)</td>', page))
    assert cells["hosts"] == "6"
    assert cells["version"] == "2.0"  # text, as the agent wrote it
    assert cells["share"] == "0.5"


def test_a_size_says_its_bytes_once(client, alice, ops):
    team = make_agent(team=ops)
    small = {"kind": "report", "version": 1, "size": 146, "path": "out/a.md"}
    large = {"kind": "report", "version": 1, "size": 2048, "path": "out/b.md"}
    send(client, team, artifact("a", "short", name="A", files=small))
    send(client, team, artifact("b", "long", name="B", files=large))
    client.force_login(alice)
    page = plain(client.get(f"/sessions/{Session.objects.get().pk}/").content.decode())
    assert "Size 146 bytes " in page and "146 bytes (146 bytes)" not in page
    assert "Size 2.0 KB (2,048 bytes)" in page  # plain() makes the no-break space a space


def test_filters_for_counts_and_times():
    def render(text: str, **values) -> str:
        return Template("{% load onlooker %}" + text).render(Context(values))

    assert render('{{ n|counted:"session" }}', n=1) == "1 session"
    assert render('{{ n|counted:"session" }}', n=9147) == "9,147 sessions"
    assert render('{{ n|counted:"match,matches" }}', n=2.0) == "2 matches"
    assert render("{{ n|number }}", n=6.0) == "6"
    assert render("{{ n|number }}", n=1234.5) == "1,234.5"
    assert render("{{ n|number }}", n=None) == "None"
    at = datetime(2026, 12, 5, 15, 43, 31, tzinfo=UTC)
    assert render("{{ at|local_time }}", at=at) == (
        '<time datetime="2026-12-05T15:43:31+00:00">15:43</time>'
    )
    assert render('{{ at|local_time:"seconds" }}', at=at) == (
        '<time datetime="2026-12-05T15:43:31+00:00" data-seconds>15:43:31</time>'
    )
    assert render("{{ at|local_time }}", at=None) == ""
