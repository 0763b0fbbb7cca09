"""Lists of sessions reach every session: `/api/sessions` and the monitoring screen page by
cursor ("next" / "Older") to the last page, filter by finished and a date range, and leave
archived sessions (finished, untouched for ONLOOKER_ARCHIVE_AFTER_DAYS) off the live screens
while search and the "finished" filter still find them. Every new parameter refuses nonsense
with a 400 (API) or a message (pages), never a 500."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks.models import Session, TaskState
from tasks.sessions import board
from tests.builders import approval, status
from tests.conftest import NOW, make_agent, push
from tests.processes import ROOT, clean_environment

DAY = timedelta(days=1)


def send(client, registered, body) -> None:
    assert push(client, registered, body).status_code == 200


def send_at(client, registered, moment, body) -> None:
    with time_machine.travel(moment, tick=False):
        send(client, registered, body)


def tile_ids(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-tile-session="(\d+)"', page)]


def sidebar_ids(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-sidebar-session="(\d+)"', page)]


def older_link(page: str) -> str | None:
    found = re.search(r'<a href="([^"]*)" class="pager-older" rel="next" data-older>', page)
    return found[1].replace("&amp;", "&") if found else None


def ids_of(client, url: str) -> list[int]:
    response = client.get(url)
    assert response.status_code == 200, response.content
    return [s["id"] for s in response.json()["sessions"]]


def walk(client, url: str, limit: int) -> list[list[int]]:
    """Every page of an API list, following `next` until it is null."""
    pages, cursor = [], None
    while True:
        joiner = "&" if "?" in url else "?"
        page_url = f"{url}{joiner}limit={limit}" + (f"&before={cursor}" if cursor else "")
        response = client.get(page_url)
        assert response.status_code == 200, response.content
        data = response.json()
        pages.append([s["id"] for s in data["sessions"]])
        assert len(pages[-1]) <= limit
        cursor = data["next"]
        if cursor is None:
            return pages
        assert len(pages) < 50


@pytest.fixture
def team(ops):
    return make_agent(team=ops, name="Ops agent")


@pytest.fixture
def crowd(client, team, ops):
    """Eleven sessions of two agents: five updated in the same instant (ties), two waiting
    for a person, three finished."""
    other = make_agent(team=ops, name="Other agent")
    for i in range(5):  # the same instant: only the id tells them apart
        send_at(client, team, NOW, status("WORKING", at=1, context=f"tie-{i}", task=f"tie-{i}"))
    for i, state in enumerate(["COMPLETED", "FAILED", "CANCELED", "WORKING"]):
        send_at(
            client, other, NOW + i * DAY / 24, status(state, at=1, context=f"o-{i}", task=f"o-{i}")
        )
    for i in range(2):
        body = status("AUTH_REQUIRED", at=1, context=f"w-{i}", task=f"w-{i}")
        body["statusUpdate"]["metadata"] = approval(f"i-{i}", "Deploy?")
        send_at(client, team, NOW - DAY, body)
    return other


# -- pagination -----------------------------------------------------------------------------


@pytest.mark.parametrize("sort", ["updated", "attention"])
@pytest.mark.parametrize("limit", [1, 4])
def test_pages_lead_to_the_last_one_with_every_session_once(client, alice, crowd, sort, limit):
    client.force_login(alice)
    whole = ids_of(client, f"/api/sessions?sort={sort}&limit=1000")
    assert len(whole) == 11
    pages = walk(client, f"/api/sessions?sort={sort}", limit)
    assert [i for page in pages for i in page] == whole
    assert all(pages) and len(pages) == -(-11 // limit)  # no empty page at the end


@pytest.mark.parametrize("sort", ["updated", "attention"])
def test_pages_keep_the_filters(client, alice, team, crowd, sort):
    client.force_login(alice)
    for query in (f"agent={team.agent.pk}", "finished=0", f"finished=1&agent={crowd.agent.pk}"):
        whole = ids_of(client, f"/api/sessions?sort={sort}&{query}")
        pages = walk(client, f"/api/sessions?sort={sort}&{query}", 2)
        assert [i for page in pages for i in page] == whole, query
    assert len(whole) == 3


def test_next_is_null_when_everything_fits(client, alice, crowd):
    client.force_login(alice)
    data = client.get("/api/sessions?limit=11").json()
    assert len(data["sessions"]) == 11 and data["next"] is None
    assert client.get("/api/sessions?limit=10").json()["next"]


def test_a_session_updated_while_paging_is_not_shown_twice(client, alice, team, crowd):
    client.force_login(alice)
    first = client.get("/api/sessions?limit=6").json()
    # One already seen is updated again: it moves to the top, and is not shown again.
    [moved] = [s for s in first["sessions"] if s["agent"]["id"] == team.agent.pk][:1]
    context = moved["contextId"]
    send_at(client, team, NOW + DAY, status("WORKING", at=5, context=context, task=context))
    moved = moved["id"]
    rest = walk(client, f"/api/sessions?before={first['next']}", 100)
    seen = [s["id"] for s in first["sessions"]] + [i for page in rest for i in page]
    assert len(seen) == len(set(seen)) == 11 and moved in seen


@pytest.mark.parametrize(
    "query",
    [
        "before=",
        "before=garbage!",
        "before=%00",
        "before=%ED%A0%80",
        "before=" + "A" * 5000,
        "before=bm90IGpzb24",  # "not json"
        "before=WzEsMiwzXQ",  # [1,2,3]
        "before=eyJrIjoidXBkYXRlZCJ9",  # {"k":"updated"}: no keys
        "before=eyJrIjoidXBkYXRlZCIsImgiOjAsInQiOjEsImkiOjB9",  # id 0
        "before=eyJrIjoidXBkYXRlZCIsImgiOjAsInQiOjFlMzAwLCJpIjoxfQ",  # time a float
        "before=eyJrIjoidXBkYXRlZCIsImgiOjAsInQiOjk5OTk5OTk5OTk5OTk5OTk5OTk5LCJpIjoxfQ",  # year 3e9
        "before=eyJrIjoidXBkYXRlZCIsImgiOnRydWUsInQiOjEsImkiOiIxIn0",  # id a string
        "sort=attention&before=eyJrIjoidXBkYXRlZCIsImgiOjAsInQiOjEsImkiOjF9",  # other sort
        "q=deploy&before=eyJrIjoidXBkYXRlZCIsImgiOjAsInQiOjEsImkiOjF9",  # a list's, not a search's
        "finished=yes",
        "finished=%00",
        "archived=2",
        "from=yesterday",
        "from=2026-13-01",
        "from=9999-99-99",
        "from=0000-01-01",
        "to=2026-02-30",
        "to=20261130",
        "to=%ED%A0%80",
        "from=2026-12-01&to=2026-11-30",
        "q=a%00b",
        "q=" + "x" * 10_000,
        "agent=%C2%B2",  # "²" is a digit to str.isdigit, not to int()
        "limit=%C2%B2",
        "limit=1001",
    ],
)
def test_nonsense_in_any_parameter_is_a_400_that_says_what_is_wrong(client, alice, team, query):
    send(client, team, status("WORKING", at=1))
    client.force_login(alice)
    response = client.get(f"/api/sessions?{query}")
    assert response.status_code == 400, (query, response.content)
    body = response.json()
    assert body["error"].startswith("bad ") and body["detail"]


def test_an_agent_id_past_any_id_finds_nothing(client, alice, team):
    send(client, team, status("WORKING", at=1))
    client.force_login(alice)
    assert ids_of(client, "/api/sessions?agent=" + "9" * 40) == []
    assert tile_ids(client.get("/?agent=" + "9" * 40).content.decode()) == []


def test_a_cursor_of_one_sort_is_refused_by_the_other(client, alice, crowd):
    client.force_login(alice)
    cursor = client.get("/api/sessions?limit=2").json()["next"]
    assert client.get(f"/api/sessions?before={cursor}").status_code == 200
    refused = client.get(f"/api/sessions?sort=attention&before={cursor}")
    assert refused.status_code == 400
    assert "sorted by attention" in refused.json()["detail"]


# -- filters ----------------------------------------------------------------------------------


def test_finished_and_the_date_range_filter_the_api(client, alice, team):
    send_at(client, team, NOW - 3 * DAY, status("COMPLETED", at=1, context="old", task="a"))
    send_at(client, team, NOW - DAY, status("WORKING", at=1, context="mid", task="b"))
    send_at(client, team, NOW, status("FAILED", at=1, context="new", task="c"))
    client.force_login(alice)

    def contexts(query: str) -> list[str]:
        response = client.get(f"/api/sessions?{query}")
        assert response.status_code == 200, response.content
        return [s["contextId"] for s in response.json()["sessions"]]

    assert contexts("finished=1") == ["new", "old"]
    assert contexts("finished=0") == ["mid"]
    # UTC days, both ends included.
    assert contexts("from=2026-11-29&to=2026-11-29") == ["mid"]
    assert contexts("from=2026-11-29") == ["new", "mid"]
    assert contexts("to=2026-11-29") == ["mid", "old"]
    assert contexts("to=9999-12-31&from=0001-01-01") == ["new", "mid", "old"]
    assert contexts("finished=1&to=2026-11-29") == ["old"]
    assert contexts("q=&finished=&from=&to=") == ["new", "mid", "old"]  # empty is no filter


# -- archive ----------------------------------------------------------------------------------


@pytest.fixture
def archived_and_live(client, team):
    """A session finished ten days ago (archived), one finished yesterday and one working."""
    send_at(client, team, NOW - 10 * DAY, status("COMPLETED", at=1, context="archived", task="a"))
    send_at(client, team, NOW - DAY, status("COMPLETED", at=1, context="finished", task="b"))
    send_at(client, team, NOW - 20 * DAY, status("WORKING", at=1, context="stuck", task="c"))
    return {s.context_id: s.pk for s in Session.objects.all()}


@time_machine.travel(NOW, tick=False)
def test_archived_sessions_leave_the_live_screens(client, alice, archived_and_live):
    archived = archived_and_live["archived"]
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert archived not in tile_ids(page) and archived not in sidebar_ids(page)
    assert sorted(tile_ids(page)) == sorted(
        [archived_and_live["finished"], archived_and_live["stuck"]]
    )
    wall = client.get("/?display=wall").content.decode()
    assert archived not in tile_ids(wall)
    board_now = client.get("/live/board/?tiles=1").json()
    assert archived not in tile_ids(board_now["tiles"]) and board_now["total"] == 2
    assert f'data-sidebar-session="{archived}"' not in board_now["sidebar"]
    session_page = client.get(f"/sessions/{archived}/")
    assert session_page.status_code == 200
    assert f'data-sidebar-session="{archived}"' not in session_page.content.decode()
    assert client.get(f"/api/sessions/{archived}").status_code == 200


@time_machine.travel(NOW, tick=False)
def test_archived_sessions_are_found_by_the_finished_filter_and_dates(
    client, alice, archived_and_live
):
    archived = archived_and_live["archived"]
    client.force_login(alice)
    for url in ("/?finished=1", "/?finished=1&from=2026-11-19&to=2026-11-21"):
        assert archived in tile_ids(client.get(url).content.decode()), url
    board_now = client.get("/live/board/?tiles=1&finished=1&from=2026-11-19&to=2026-11-21").json()
    assert tile_ids(board_now["tiles"]) == [archived]
    assert archived not in tile_ids(client.get("/?finished=0").content.decode())
    # The API lists everything unless asked: scripts see what is kept.
    assert archived in ids_of(client, "/api/sessions")
    assert ids_of(client, "/api/sessions?archived=1") == [archived]
    assert archived not in ids_of(client, "/api/sessions?archived=0")
    assert len(ids_of(client, "/api/sessions?archived=0")) == 2


def test_a_finished_session_is_archived_seven_days_after_its_last_update(client, alice, team):
    send_at(client, team, NOW, status("COMPLETED", at=1, context="done", task="a"))
    send_at(client, team, NOW, status("WORKING", at=1, context="busy", task="b"))
    done = Session.objects.get(context_id="done").pk
    client.force_login(alice)

    def shown_at(moment) -> bool:
        with time_machine.travel(moment, tick=False):
            page = client.get("/").content.decode()
            return done in tile_ids(page) and done in sidebar_ids(page)

    assert shown_at(NOW + 7 * DAY - timedelta(seconds=1))
    assert shown_at(NOW + 7 * DAY)
    assert not shown_at(NOW + 7 * DAY + timedelta(seconds=1))
    # A new update brings it back: archiving is a condition, not a move.
    send_at(client, team, NOW + 8 * DAY, status("COMPLETED", at=9, context="done", task="a"))
    assert shown_at(NOW + 9 * DAY)


def test_the_archive_age_is_a_setting(client, alice, team, settings):
    settings.ONLOOKER_ARCHIVE_AFTER_DAYS = 1
    send_at(client, team, NOW - 2 * DAY, status("FAILED", at=1, context="done", task="a"))
    client.force_login(alice)
    with time_machine.travel(NOW, tick=False):
        assert tile_ids(client.get("/").content.decode()) == []
        settings.ONLOOKER_ARCHIVE_AFTER_DAYS = 3
        assert len(tile_ids(client.get("/").content.decode())) == 1


# -- the monitoring screen's pages -------------------------------------------------------------


@pytest.fixture
def many(client, team):
    """More sessions than the monitoring screen renders at once: three pushed (one waits for a
    person), the rest stored as a restored database would hold them (fragments not yet
    rendered), a few sharing one update time."""
    body = status("AUTH_REQUIRED", at=1, context="waiting", task="w")
    body["statusUpdate"]["metadata"] = approval("i-1", "Deploy?")
    send_at(client, team, NOW, body)
    for i in range(2):
        send_at(client, team, NOW, status("WORKING", at=1, context=f"pushed-{i}", task=f"p{i}"))
    Session.objects.bulk_create(
        Session(
            agent=team.agent,
            context_id=f"stored-{i}",
            title=f"Stored {i}",
            state=TaskState.WORKING,
            updated_at=NOW - timedelta(minutes=i // 3),
        )
        for i in range(board.OVERVIEW_LIMIT + 10)
    )
    return Session.objects.count()


def test_older_links_lead_through_every_session_once_within_the_bound(client, alice, many):
    client.force_login(alice)
    waiting = Session.objects.get(context_id="waiting").pk
    url, pages, queries = "/", [], []
    while url:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        assert response.status_code == 200
        page = response.content.decode()
        pages.append(tile_ids(page))
        queries.append(len(captured))
        assert len(pages[-1]) <= board.OVERVIEW_LIMIT
        if len(pages) > 1:
            assert "data-tiles" not in page and "data-waiting" not in page  # not live
            assert 'class="pager-newest" rel="first"' in page
        url = older_link(page)
        assert len(pages) < 5
    assert [len(p) for p in pages] == [board.OVERVIEW_LIMIT, many - 1 - board.OVERVIEW_LIMIT]
    shown = [i for p in pages for i in p]
    assert len(shown) == len(set(shown)) and set(shown) | {waiting} == set(
        Session.objects.values_list("pk", flat=True)
    )
    assert queries[1] <= queries[0]  # an older page costs no more than the first


def test_older_pages_keep_the_filters(client, alice, team, many):
    client.force_login(alice)
    page = client.get("/?finished=0&from=2026-11-30").content.decode()
    link = older_link(page)
    assert "finished=0" in link and "from=2026-11-30" in link and "before=" in link
    second = client.get(link).content.decode()
    assert older_link(second) is None
    assert len(tile_ids(page)) + len(tile_ids(second)) == many - 1


def test_the_board_refetch_gives_the_first_page_and_where_it_ends(client, alice, many):
    client.force_login(alice)
    page = client.get("/").content.decode()
    refetched = client.get("/live/board/?tiles=1&waiting=1").json()
    assert tile_ids(refetched["tiles"]) == tile_ids(page)
    assert f"before={refetched['next']}" in older_link(page)


@pytest.mark.parametrize(
    "query",
    [
        "before=garbage!",
        "before=%ED%A0%80",
        "before=eyJrIjoidXBkYXRlZCIsImgiOjAsInQiOjEsImkiOjF9",  # the API's other sort
        "from=9999-99-99",
        "from=0000-01-01&to=x",
        "to=%00",
        "finished=maybe",
        "q=%00",
        "q=" + "x" * 10_000,
        "from=2026-12-01&to=2026-11-01",
    ],
)
def test_a_page_opens_with_a_message_whatever_its_parameters(client, alice, team, query):
    send(client, team, status("WORKING", at=1))
    client.force_login(alice)
    response = client.get(f"/?{query}")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'class="flash filters-problems"' in page
    assert len(tile_ids(page)) == 1  # the newest page, the nonsense left out
    assert client.get(f"/live/board/?tiles=1&{query}").status_code == 200


# -- search -------------------------------------------------------------------------------------


def asked(client, registered, text, *, context, moment=NOW):
    """A task whose history holds the person's request: the session's title."""
    user = {"messageId": f"u-{context}", "role": "ROLE_USER", "parts": [{"text": text}]}
    body = {
        "id": f"task-{context}",
        "contextId": context,
        "status": {"state": "TASK_STATE_WORKING"},
        "history": [user],
    }
    send_at(client, registered, moment, {"task": body})


def said(client, registered, text, *, context, moment):
    """A line the agent says: the session's transcript."""
    body = {"messageId": f"m-{context}", "role": "ROLE_AGENT", "contextId": context}
    send_at(client, registered, moment, {"message": {**body, "parts": [{"text": text}]}})


@pytest.fixture
def searchable(client, team):
    """Two sessions titled alike (an equal rank: the newer first), one that only says the
    word in its transcript (newest, ranked below a title), one without it."""
    asked(client, team, "Rotate the gateway certificates", context="older", moment=NOW)
    asked(client, team, "Rotate the gateway certificates", context="newer", moment=NOW + DAY)
    said(client, team, "the gateway is down again", context="chatter", moment=NOW + 2 * DAY)
    asked(client, team, "Clean up old builds", context="other", moment=NOW + 3 * DAY)
    return {s.context_id: s.pk for s in Session.objects.all()}


def test_the_api_searches_best_first_with_the_words_it_found(client, alice, searchable):
    client.force_login(alice)
    data = client.get("/api/sessions?q=gateway").json()
    assert [s["contextId"] for s in data["sessions"]] == ["newer", "older", "chatter"]
    assert data["next"] is None
    newer, _, chatter = data["sessions"]
    assert newer["match"]["field"] == "title"
    text, [[start, end]] = newer["match"]["text"], newer["match"]["highlights"]
    assert text[start:end].lower() == "gateway"
    assert chatter["match"]["field"] == "transcript"
    assert {"id", "agent", "title", "state", "updatedAt", "card"} <= set(newer)


def test_search_pages_lead_to_the_last_one_and_keep_the_filters(client, alice, team, searchable):
    client.force_login(alice)
    whole = ids_of(client, "/api/sessions?q=gateway")
    assert [i for page in walk(client, "/api/sessions?q=gateway", 1) for i in page] == whole
    assert [i for page in walk(client, "/api/sessions?q=gateway", 2) for i in page] == whole
    narrowed = ids_of(client, "/api/sessions?q=gateway&from=2026-12-01")
    assert narrowed == [searchable["newer"], searchable["chatter"]]
    cursor = client.get("/api/sessions?q=gateway&limit=1").json()["next"]
    other = client.get(f"/api/sessions?q=builds&before={cursor}")
    assert other.status_code == 400 and "another search" in other.json()["detail"]
    listed = client.get(f"/api/sessions?before={cursor}")
    assert listed.status_code == 400


@pytest.mark.parametrize("text", ["%ED%A0%80", "...", "%E2%80%8B"])
def test_a_search_without_words_is_a_400(client, alice, searchable, text):
    client.force_login(alice)
    response = client.get(f"/api/sessions?q={text}")
    assert response.status_code == 400 and response.json()["error"] == "bad query"
    page = client.get(f"/?q={text}")
    assert page.status_code == 200 and "Nothing was searched" in page.content.decode()


@time_machine.travel(NOW, tick=False)
def test_search_finds_archived_sessions(client, alice, team, archived_and_live):
    said(client, team, "the quarterly report", context="archived", moment=NOW - 10 * DAY)
    client.force_login(alice)
    assert ids_of(client, "/api/sessions?q=quarterly") == [archived_and_live["archived"]]
    page = client.get("/?q=quarterly").content.decode()
    assert f'data-result-session="{archived_and_live["archived"]}"' in page


def test_the_screen_shows_results_marked_and_escaped(client, alice, team, searchable):
    asked(client, team, "<script>alert(1)</script> gateway <b>bold</b>", context="evil")
    client.force_login(alice)
    page = client.get("/?q=gateway").content.decode()
    results = [int(i) for i in re.findall(r'data-result-session="(\d+)"', page)]
    # Titles before the transcript, equal titles newest first.
    assert results[-1] == searchable["chatter"]
    assert results.index(searchable["newer"]) < results.index(searchable["older"])
    assert "<script>alert" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; <mark>gateway</mark> &lt;b&gt;bold" in page
    assert "Rotate the <mark>gateway</mark> certificates" in page
    assert "4 sessions match “gateway”" in page
    assert "data-tiles" not in page and "data-waiting" not in page  # not replaced when live
    assert older_link(page) is None


def test_the_screen_pages_through_search_results_within_its_bound(client, alice, team):
    """More matches than a page shows: the transcript lines are stored as a restored database
    holds them (the index follows the rows)."""
    from tasks.models import Message

    said(client, team, "the gateway, once", context="pushed", moment=NOW)
    sessions = Session.objects.bulk_create(
        Session(agent=team.agent, context_id=f"s-{i}", updated_at=NOW - timedelta(minutes=i))
        for i in range(board.SEARCH_PAGE + 5)
    )
    Message.objects.bulk_create(
        Message(session=s, role="ROLE_AGENT", text=f"gateway line {i}", at=NOW)
        for i, s in enumerate(sessions)
    )
    client.force_login(alice)
    url, pages = "/?q=gateway", []
    while url:
        page = client.get(url).content.decode()
        pages.append([int(i) for i in re.findall(r'data-result-session="(\d+)"', page)])
        assert len(pages[-1]) <= board.SEARCH_PAGE
        url = older_link(page)
        assert len(pages) < 5
    shown = [i for p in pages for i in p]
    assert [len(p) for p in pages] == [board.SEARCH_PAGE, 6]
    assert sorted(shown) == sorted(Session.objects.values_list("pk", flat=True))
    assert (
        "51–56"
        in client.get(older_link(client.get("/?q=gateway").content.decode())).content.decode()
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [("0", "at least 1"), ("100000", "at most 36500"), ("seven", "whole number")],
)
def test_an_archive_age_that_means_nothing_stops_the_start(tmp_path, value, said):
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=clean_environment(ONLOOKER_DATA_DIR=str(tmp_path), ONLOOKER_ARCHIVE_AFTER_DAYS=value),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured: ")
    assert "ONLOOKER_ARCHIVE_AFTER_DAYS" in last_line and said in last_line


def test_search_and_filtered_pages_cost_the_same_queries_however_many_match(client, alice, team):
    from tasks.models import Message

    client.force_login(alice)
    said(client, team, "the gateway, once", context="pushed", moment=NOW)

    def queries_for(count: int) -> list[int]:
        sessions = Session.objects.bulk_create(
            Session(
                agent=team.agent,
                context_id=f"{count}-{i}",
                state=TaskState.COMPLETED,
                updated_at=NOW - timedelta(minutes=i),
            )
            for i in range(count)
        )
        Message.objects.bulk_create(
            Message(session=s, role="ROLE_AGENT", text="gateway", at=NOW) for s in sessions
        )
        spent = []
        for url in ("/?q=gateway", "/?finished=1&from=2026-11-01", "/api/sessions?q=gateway"):
            with CaptureQueriesContext(connection) as captured:
                assert client.get(url).status_code == 200
            spent.append(len(captured))
        return spent

    assert queries_for(2) == queries_for(40)
