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
from tests.builders import approval, progress, status
from tests.conftest import NOW, make_agent, push
from tests.processes import ROOT


def send(client, registered, body):
    assert push(client, registered, body).status_code == 200


def tile_order(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-tile-session="(\d+)"', page)]


def test_overview_needs_login(client, db):
    assert client.get("/").status_code == 302


def test_overview_lists_waiting_sessions_above_and_the_rest_as_tiles(client, alice, ops):
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
    assert tile_order(page) == [by_context["busy"]]
    assert f'data-waiting-session="{by_context["waiting"]}"' in page
    assert "secret" not in page
    assert "Approval</strong>: Deploy?" in page
    assert f'data-sidebar-session="{by_context["waiting"]}"' in page
    # The wall has no list: there the waiting session is a tile, first.
    wall = client.get("/?display=wall").content.decode()
    assert tile_order(wall) == [by_context["waiting"], by_context["busy"]]
    assert "Approval needed:</strong> Deploy?" in wall


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


def test_board_endpoint_sends_counts_rows_and_filtered_tiles_to_the_team_only(
    client, alice, charlie, ops
):
    team = make_agent(team=ops)
    send(client, team, status("WORKING", context="a", task="ta", at=1))
    send(client, team, status("INPUT_REQUIRED", context="b", task="tb", at=2, text="Which db?"))
    working, waiting = Session.objects.order_by("context_id")
    assert client.get("/live/board/").status_code == 401

    client.force_login(alice)
    board = client.get("/live/board/?tiles=1&state=TASK_STATE_WORKING").json()
    assert board["counts"] == {"waiting": 0, "working": 1, "failed_today": 0}  # filtered
    rows = re.findall(r'data-sidebar-session="(\d+)"', board["sidebar"])
    assert rows == [str(waiting.pk), str(working.pk)]
    assert tile_order(board["tiles"]) == [working.pk] and board["total"] == 1
    assert "tiles" not in client.get("/live/board/").json()

    client.force_login(charlie)
    board = client.get("/live/board/?tiles=1").json()
    assert board["counts"]["waiting"] == 0 and "data-sidebar-session" not in board["sidebar"]
    assert tile_order(board["tiles"]) == []


def test_session_page_shows_receipts_artifacts_and_what_the_agent_waits_for(client, alice, ops):
    team = make_agent(team=ops)
    send(client, team, status("WORKING", at=1, text="Reading the logs"))
    files = {"kind": "report", "version": 2, "size": 2048, "sha256": "ab" * 32, "path": "out/r.md"}
    parts = [
        {"text": "Summary: all green"},
        {"url": "https://files.example/r.md", "filename": "r.md"},
        {"url": "javascript:alert(1)", "filename": "evil"},
    ]
    update = {"artifactUpdate": {"taskId": "task-1", "contextId": "ctx-1", "artifact": {
        "artifactId": "report", "name": "Report", "parts": parts,
        "metadata": {"https://docs.nylorun.com/a2a/files/v1": files}}}}  # fmt: skip
    send(client, team, update)
    send(client, team, status("AUTH_REQUIRED", at=3, metadata=approval("i-1", "Deploy to prod?")))
    client.force_login(alice)
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()

    receipt = page[page.index('class="message message-receipt"') :]
    assert "Progress card updated (rev 1)" in receipt[: receipt.index("</li>")]
    assert "<strong>Approval</strong>: Deploy to prod?" in page
    assert "version 2" in page and "out/r.md" in page and "ab" * 32 in page
    assert "2.0\xa0KB (2,048 bytes)" in page and "Summary: all green" in page
    assert (
        '<a href="https://files.example/r.md" rel="noopener noreferrer nofollow" '
        'target="_blank">r.md</a>' in page
    )
    assert 'href="javascript:' not in page and "<code>javascript:alert(1)</code>" in page


def test_session_activity_fragment_is_what_the_page_shows(client, alice, charlie, ops):
    team = make_agent(team=ops)
    send(client, team, status("WORKING", at=1, text="Step one"))
    session = Session.objects.get()
    url = f"/sessions/{session.pk}/activity/"
    assert client.get(url).status_code == 401
    client.force_login(charlie)
    assert client.get(url).status_code == 404
    client.force_login(alice)
    fragment = client.get(url).content.decode()
    assert fragment.lstrip().startswith('<div class="session-activity" data-session-activity')
    assert fragment.strip() in client.get(f"/sessions/{session.pk}/").content.decode()


def test_collapsed_card_names_the_current_step(client, alice, ops):
    team = make_agent(team=ops)
    plan = progress(("Build", "completed"), ("Test", "in_progress"), ("Ship", "pending"))
    send(client, team, status("WORKING", at=1, metadata=plan))
    client.force_login(alice)
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()
    assert '<span class="summary-step">Step 2 of 3 · Test</span>' in page


@time_machine.travel(NOW, tick=False)
def test_relative_times_read_as_the_script_writes_them(client, alice, ops):
    from tasks.templatetags.onlooker import ago

    cases = {0: "just now", 12: "12 s ago", 185: "3 min ago", 7300: "2 h ago", 200_000: "2 d ago"}
    for seconds, text in cases.items():
        assert ago(NOW - timedelta(seconds=seconds)) == text
    script = (ROOT / "static/js/times.js").read_text()
    for unit in ('"d", 86_400', '"h", 3_600', '"min", 60', "s`", " ago`", "just now"):
        assert unit in script


def test_fragments_are_rendered_when_a_session_changes_and_read_as_stored(client, alice, ops):
    from tasks.models import SessionFragments

    send(client, make_agent(team=ops), status("WORKING", at=1, text="Halfway"))
    session = Session.objects.get()
    view = SessionFragments.objects.get(session=session)
    assert "Halfway" in view.card and f'data-tile-session="{session.pk}"' in view.tile
    client.force_login(alice)
    # Pages show what was stored at write time, not a new rendering...
    SessionFragments.objects.filter(pk=view.pk).update(tile=view.tile.replace("Halfway", "Stored"))
    assert "Stored" in client.get("/").content.decode()
    # ...unless older templates stored it: then they render afresh.
    SessionFragments.objects.filter(pk=view.pk).update(version="older-templates")
    page = client.get("/").content.decode()
    assert "Halfway" in page and "Stored" not in page


def test_a_receipt_reads_as_one_plain_line(client, alice, ops):
    note = (
        "**Release 2.4:** tests\n\n| a | b |\n|---|---|\n<progress value=1 max=2></progress> `done`"
    )
    send(client, make_agent(team=ops), status("WORKING", at=1, text=note))
    client.force_login(alice)
    page = client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()
    transcript = page[page.index('<ol class="transcript"') :]
    transcript = transcript[: transcript.index("</ol>")]
    # The receipt, OpenClaw's line; the note itself is on the card, not copied here.
    assert ">Progress card updated (rev 1)</span></li>" in transcript
    assert "Release 2.4" not in transcript and "Release 2.4" in page
