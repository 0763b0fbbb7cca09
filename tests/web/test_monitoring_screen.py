"""The monitoring screen's parts issue 33 added, through HTTP: finished sessions apart from the
tiles (on the page and in the board a reconnecting page refetches), the "Recently decided"
strip of what this person may read, and a completed session that a person's refusal ended,
worded as that refusal wherever the session's state is shown."""

from __future__ import annotations

import re
from datetime import timedelta

from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from tasks.models import Interaction, Session
from tests.api.recorded import ask, on_record
from tests.builders import status
from tests.conftest import make_agent, push


def send(registered, body) -> None:
    assert push(Client(), registered, body).status_code == 200


def ids(html: str, marker: str = "data-tile-session") -> list[int]:
    return [int(n) for n in re.findall(rf'{marker}="(\d+)"', html)]


def part(page: str, start: str, end: str) -> str:
    at = page.index(start)
    return page[at : page.index(end, at)]


def refused(registered, task: str, *, approved: bool = False, kind: str = "approval") -> Session:
    """The agent asked, a person answered `approved`, then the agent completed its task."""
    interaction = ask(registered, task=task, interaction_id=f"i-{task}", kind=kind)
    Interaction.objects.filter(pk=interaction.pk).update(
        state=Interaction.State.ANSWERED,
        answer={"approved": approved},
        answered_at=timezone.now(),
    )
    send(registered, status("COMPLETED", task=task, context=f"ctx-{task}", at=2))
    return interaction.task.session


def test_finished_sessions_are_rows_apart_from_the_tiles_on_the_page_and_the_board(
    client, alice, ops
):
    team = make_agent(team=ops)
    send(team, status("WORKING", task="w", context="working", at=1))
    send(team, status("COMPLETED", task="d", context="done", at=1))
    send(team, status("FAILED", task="f", context="failed", at=1))
    by_context = {s.context_id: s.pk for s in Session.objects.all()}
    client.force_login(alice)

    page = client.get("/").content.decode()
    assert ids(part(page, "data-tiles", "data-finished")) == [by_context["working"]]
    rows = ids(part(page, "data-finished-rows", "tiles-archived"))
    assert sorted(rows) == sorted([by_context["done"], by_context["failed"]])

    board = client.get("/live/board/?tiles=1&finished_rows=1&waiting=1").json()
    assert ids(board["tiles"]) == [by_context["working"]]
    assert sorted(ids(board["finished"])) == sorted(rows)
    assert board["total"] == 3 and "data-decided" in board["decided"]
    # The wall asks without finished_rows: every session stays a tile there.
    board = client.get("/live/board/?tiles=1").json()
    assert len(ids(board["tiles"])) == 3 and "finished" not in board


def test_recently_decided_shows_the_last_decisions_this_person_may_read(client, alice, ops):
    team = make_agent(team=ops, name="Ops bot")
    other = make_agent(team=Group.objects.create(name="finance"), name="Finance bot")
    opened = timezone.now() - timedelta(minutes=10)
    asked = [
        ask(team, task=f"t{n}", interaction_id=f"i{n}", prompt=f"Ship v{n}?") for n in range(7)
    ]
    for n, interaction in enumerate(asked):
        made = "deny" if n == 6 else "approve"
        on_record(interaction, made, by=alice, at=opened + timedelta(minutes=n), reason=f"r{n}")
    dismissed = ask(team, task="t-x", interaction_id="ix", prompt="Forgotten?")
    on_record(dismissed, "dismiss", by=alice, at=opened + timedelta(minutes=8))
    secret = ask(other, task="t-s", interaction_id="is", prompt="Pay the invoice?")
    on_record(secret, "approve", at=opened + timedelta(minutes=9))
    Session.objects.filter(pk=asked[5].task.session_id).delete()  # gone: named, not linked
    client.force_login(alice)

    strip = part(client.get("/").content.decode(), "data-decided", "</section>")

    shown = re.findall(r"(?:Ship v\d\?|Forgotten\?|Pay the invoice\?|An approval)", strip)
    assert shown == ["Ship v6?", "An approval", "Ship v4?", "Ship v3?", "Ship v2?"]
    assert re.findall(r"data-decided-made>(\w+)<", strip) == ["Denied"] + ["Approved"] * 4
    assert 'class="pill pill-danger" data-decided-made>Denied' in strip
    assert strip.count("data-decided-by>alice<") == 5 and "<q" in strip and "r6" in strip
    assert f'href="/sessions/{asked[6].task.session_id}/"' in strip
    assert f'href="/sessions/{asked[5].task.session_id}/"' not in strip


def test_a_completed_session_a_person_refused_ends_as_the_refusal_not_done(client, alice, ops):
    team = make_agent(team=ops)
    denied = refused(team, "denied")
    declined = refused(team, "declined", kind="connection")
    approved = refused(team, "approved", approved=True)
    client.force_login(alice)
    page = client.get("/").content.decode()

    def ended(session: Session) -> str:
        tile = part(page, f'data-tile-session="{session.pk}"', "</section>")
        return re.search(r'class="pill pill-(\w+)" data-state-words>([^<]+)<', tile).groups()

    assert ended(denied) == ("danger", "Denied")
    assert ended(declined) == ("danger", "Declined")
    assert ended(approved) == ("ok", "Done")
    row = part(page, f'data-sidebar-session="{denied.pk}"', "</li>")
    assert "pill-danger" in row and ">Denied<" in row
    card = client.get(f"/sessions/{denied.pk}/card/").json()
    assert card["stateLabel"] == "Denied"
    # Its own card (the session page, the hovercard) ends as the denial too, never green.
    assert re.search(r'class="pill pill-danger" data-state-words>Denied<', card["html"]["card"])
    assert "card-finished" in card["html"]["card"]
    approved_card = client.get(f"/sessions/{approved.pk}/card/").json()["html"]["card"]
    assert 'class="pill pill-ok" data-state-words>Done<' in approved_card
