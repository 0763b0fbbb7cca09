"""The pages people read: the team monitoring screen and the session page, server-rendered
with the same partials the live socket sends."""

from __future__ import annotations

import re
from datetime import timedelta

import time_machine
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks.models import Session
from tests.builders import approval, status
from tests.conftest import NOW, make_agent, push


def send(client, registered, body):
    assert push(client, registered, body).status_code == 200


def tile_order(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-tile-session="(\d+)"', page)]


def test_overview_needs_login(client, db):
    assert client.get("/").status_code == 302


def test_overview_shows_visible_sessions_waiting_ones_first(client, alice, ops):
    team = make_agent(team=ops, name="Ops agent")
    hidden = make_agent(team=Group.objects.create(name="finance"), name="Finance agent")
    send(
        client,
        team,
        status("AUTH_REQUIRED", at=1, context="waiting", metadata=approval("i", "Deploy?")),
    )
    send(client, team, status("WORKING", at=2, context="busy", task="t2"))
    send(client, hidden, status("WORKING", at=3, context="secret"))
    client.force_login(alice)
    page = client.get("/").content.decode()
    by_context = {s.context_id: s.pk for s in Session.objects.all()}
    assert tile_order(page) == [by_context["waiting"], by_context["busy"]]
    assert "secret" not in page
    assert "Approval needed:</strong> Deploy?" in page
    assert f'data-sidebar-session="{by_context["waiting"]}"' in page


def test_counts_and_tab_title_tell_who_is_waiting(client, alice, ops):
    team = make_agent(team=ops)
    with time_machine.travel(NOW, tick=False):
        send(
            client, team, status("AUTH_REQUIRED", at=1, context="a", metadata=approval("i", "ok?"))
        )
        send(client, team, status("INPUT_REQUIRED", at=1, context="b", task="t2", text="which?"))
        send(client, team, status("WORKING", at=1, context="c", task="t3"))
        send(client, team, status("FAILED", at=1, context="d", task="t4"))
    with time_machine.travel(NOW - timedelta(days=1), tick=False):
        send(client, team, status("FAILED", at=1, context="e", task="t5"))
    client.force_login(alice)
    with time_machine.travel(NOW + timedelta(hours=1), tick=False):
        page = client.get("/").content.decode()
    assert "<title>(2) Onlooker</title>" in page
    assert '<strong data-count="waiting">2</strong>' in page
    assert '<strong data-count="working">1</strong>' in page
    assert '<strong data-count="failed-today">1</strong>' in page


def test_filters_live_in_the_url(client, alice, ops):
    first, second = make_agent(team=ops, name="First"), make_agent(team=ops, name="Second")
    send(client, first, status("WORKING", at=1, context="one"))
    send(client, second, status("COMPLETED", at=1, context="two"))
    client.force_login(alice)
    one, two = Session.objects.get(context_id="one").pk, Session.objects.get(context_id="two").pk
    assert tile_order(client.get(f"/?agent={second.agent.pk}").content.decode()) == [two]
    assert tile_order(client.get("/?state=TASK_STATE_WORKING").content.decode()) == [one]
    assert sorted(tile_order(client.get("/?state=nonsense&agent=x").content.decode())) == [one, two]


def test_wall_display_has_no_navigation(client, alice, ops):
    send(client, make_agent(team=ops), status("WORKING", at=1))
    client.force_login(alice)
    page = client.get("/?display=wall").content.decode()
    assert '<body class="wall"' in page
    assert "topbar" not in page and 'class="sidebar"' not in page
    assert "data-tile-session" in page


def test_overview_queries_do_not_grow_with_sessions(client, alice, ops):
    team = make_agent(team=ops)
    client.force_login(alice)

    def queries_for(count: int) -> int:
        for index in range(count):
            send(
                client,
                team,
                status(
                    "WORKING",
                    at=1,
                    context=f"ctx-{count}-{index}",
                    task=f"t-{count}-{index}",
                    text="busy",
                ),
            )
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/").status_code == 200
        return len(captured)

    assert queries_for(3) == queries_for(30)


def test_session_page_places_the_card_in_the_rail_and_the_composer_bar(client, alice, ops):
    """Two placements of the same card; CSS shows exactly one of them at any width (checked
    in a real browser by tests/browser)."""
    team = make_agent(team=ops)
    send(client, team, status("WORKING", at=1, text="Halfway there"))
    session = Session.objects.get()
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert page.count("data-live-card") == 2
    assert 'class="session-rail" data-live-card' in page
    assert 'class="composer-card" data-live-card' in page
    assert page.count(f'data-session="{session.pk}" data-revision="1"') == 2
    assert f'data-sidebar-session="{session.pk}"' in page
    assert "Halfway there" in page


def test_session_of_another_team_is_404(client, alice):
    other = make_agent(team=Group.objects.create(name="finance"))
    send(client, other, status("WORKING", at=1))
    client.force_login(alice)
    assert client.get(f"/sessions/{Session.objects.get().pk}/").status_code == 404
