"""The monitoring screen as an inbox (issue 12): what waits for a person is one list on top,
one row per interaction with its answer actions, and is not shown again as a tile; the
filters apply to the list, the tiles and the counts alike, and an empty screen says why."""

from __future__ import annotations

import re

from django.test import Client

from tasks.models import Session
from tests.builders import approval, status
from tests.conftest import make_agent, member, push


def send(registered, body) -> None:
    assert push(Client(), registered, body).status_code == 200


def tile_order(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-tile-session="(\d+)"', page)]


def listed(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-waiting-session="(\d+)"', page)]


def waiting_list(page: str) -> str:
    return page[page.index("data-waiting") : page.index("data-tiles")]


def two_agents(ops):
    """Each of two agents of team ops has one session waiting for an approval and one working."""
    first, second = make_agent(team=ops, name="First"), make_agent(team=ops, name="Second")
    for registered, name in ((first, "first"), (second, "second")):
        ask = approval(f"i-{name}", f"Deploy {name}?")
        send(registered, status("AUTH_REQUIRED", at=1, context=f"{name}-w", metadata=ask))
        send(registered, status("WORKING", at=2, context=f"{name}-b", task="t-busy"))
    return first, second


def pk(context: str) -> int:
    return Session.objects.get(context_id=context).pk


def test_a_waiting_session_is_a_row_of_the_list_and_not_a_tile(client, alice, ops):
    two_agents(ops)
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert sorted(listed(page)) == sorted([pk("first-w"), pk("second-w")])
    assert sorted(tile_order(page)) == sorted([pk("first-b"), pk("second-b")])
    # A reconnecting monitoring screen gets the same split; the wall (no list) every tile.
    board = client.get("/live/board/?tiles=1&waiting=1").json()
    assert sorted(tile_order(board["tiles"])) == sorted([pk("first-b"), pk("second-b")])
    assert board["total"] == 2
    assert len(tile_order(client.get("/live/board/?tiles=1").json()["tiles"])) == 4


def test_filters_apply_to_the_list_and_the_counts(client, alice, ops):
    first, _ = two_agents(ops)
    client.force_login(alice)
    page = client.get(f"/?agent={first.agent.pk}").content.decode()
    assert listed(page) == [pk("first-w")]
    assert "Deploy first?" in page and "Deploy second?" not in page
    assert tile_order(page) == [pk("first-b")]
    assert '<strong data-count="waiting">1</strong>' in page
    assert '<strong data-count="working">1</strong>' in page

    board = client.get(f"/live/board/?waiting=1&tiles=1&agent={first.agent.pk}").json()
    assert board["counts"] == {"waiting": 1, "working": 1, "failed_today": 0}
    assert listed(board["waiting"]) == [pk("first-w")]

    working = client.get("/?state=TASK_STATE_WORKING").content.decode()
    assert listed(working) == [] and "Deploy" not in waiting_list(working)
    assert '<strong data-count="waiting">0</strong>' in working
    assert '<strong data-count="working">2</strong>' in working
    unfiltered = client.get("/live/board/").json()["counts"]
    assert unfiltered == {"waiting": 2, "working": 2, "failed_today": 0}


def test_an_empty_filter_says_so_and_offers_to_clear_it(client, alice, ops):
    client.force_login(alice)
    # Someone who sees no session at all learns how to add one, filters or not.
    for url in ("/", "/?state=TASK_STATE_FAILED"):
        page = client.get(url).content.decode()
        assert "Register an agent" in page and "match these filters" not in page, url

    two_agents(ops)
    page = client.get("/?state=TASK_STATE_FAILED").content.decode()
    assert "No sessions match these filters" in page
    assert '<a href="/">Clear filters</a>' in page
    assert "Register an agent" not in page
    page = client.get("/").content.decode()
    assert "Register an agent" not in page and "match these filters" not in page


def test_only_waiting_sessions_leave_no_tiles_and_no_empty_message(client, alice, ops):
    send(make_agent(team=ops), status("AUTH_REQUIRED", at=1, metadata=approval("i", "Ship?")))
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert listed(page) == [Session.objects.get().pk] and tile_order(page) == []
    assert "tiles-empty" not in page


def test_approve_is_the_primary_action_and_a_viewer_sees_who_is_needed(
    client, alice, ops, approvers
):
    send(make_agent(team=ops), status("AUTH_REQUIRED", at=1, metadata=approval("i", "Ship?")))
    session = Session.objects.get()
    approver = Client()
    approver.force_login(member("bob", ops, approvers))
    for url in ("/", f"/sessions/{session.pk}/"):
        page = approver.get(url).content.decode()
        assert '<button type="submit" class="primary" name="decision" value="approve"' in page, url
        assert '<button type="submit" name="decision" value="deny"' in page, url

    client.force_login(alice)  # sees the session, may not answer
    row = waiting_list(client.get("/").content.decode())
    assert "Needs an approver" in row and "<button" not in row
