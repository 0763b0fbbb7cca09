"""How a check (an uncertain effect a person must look at) reads on the pages, and the "Mark
checked" view (web/checks.py) answering a plain form post as it answers the page's script."""

from __future__ import annotations

import html
import re

from django.test import Client

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.answering.test_answers import person
from tests.builders import status
from tests.conftest import make_agent, push

PROMPT = "Upload of report.pdf unconfirmed"


def opened_check(ops) -> Interaction:
    agent = make_agent(team=ops)
    body = status("COMPLETED", at=1, metadata={profile.EFFECTS: {"uncertain": "upload:report.pdf"}})
    assert push(Client(), agent, body).status_code == 200
    return Interaction.objects.get(kind=Interaction.Kind.CHECK)


def text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page)))


def test_the_inbox_row_says_check_and_offers_mark_checked_to_an_approver(ops, approvers):
    check = opened_check(ops)
    page = person("alice", ops, approvers).get("/").content.decode()

    row = re.search(
        rf'<li class="inbox-row[^"]*" [^>]*data-interaction="{check.pk}".*?</li>', page, re.S
    )
    assert row is not None
    assert f"Check: {PROMPT}" in text(row.group(0))
    assert f'action="/interactions/{check.pk}/check/"' in row.group(0)
    assert "Mark checked" in row.group(0)
    assert "Dismiss" not in row.group(0)
    assert '<strong data-count="waiting">1</strong>' in page


def test_a_viewer_sees_the_check_without_the_button(ops):
    opened_check(ops)
    page = person("vic", ops).get("/").content.decode()
    assert f"Check: {PROMPT}" in text(page)
    assert "Mark checked" not in page


def test_the_session_page_shows_the_open_check_then_who_checked_it(ops, approvers):
    check = opened_check(ops)
    alice = person("alice", ops, approvers)
    session = f"/sessions/{check.task.session_id}/"
    page = alice.get(session).content.decode()
    assert f"Check: {PROMPT}" in text(page)
    assert "Mark checked" in page and "Needs checking" in page

    response = alice.post(f"/interactions/{check.pk}/check/")  # a plain form post

    assert (response.status_code, response["Location"]) == (302, session)
    page = alice.get(session).content.decode()
    assert "Mark checked" not in page and "Needs checking" not in page
    assert re.search(r"Checked by alice, \d\d:\d\d\.", text(page))


def test_a_plain_form_post_that_is_refused_says_why_on_the_session_page(ops):
    check = opened_check(ops)
    vic = person("vic", ops)
    response = vic.post(f"/interactions/{check.pk}/check/", follow=True)
    assert response.redirect_chain == [(f"/sessions/{check.task.session_id}/", 302)]
    assert "not mark it checked" in text(response.content.decode())
    assert Interaction.objects.get(pk=check.pk).state == Interaction.State.OPEN


def test_marking_needs_a_post_and_a_login(ops, approvers):
    check = opened_check(ops)
    url = f"/interactions/{check.pk}/check/"
    assert person("alice", ops, approvers).get(url).status_code == 405
    assert Client().post(url, HTTP_ACCEPT="application/json").status_code == 401
    assert Interaction.objects.get(pk=check.pk).state == Interaction.State.OPEN
    assert Session.objects.get().needs_human


def test_an_unknown_check_is_a_404(ops, approvers):
    response = person("alice", ops, approvers).post(
        "/interactions/999999/check/", HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 404
    assert "No such question" in response.json()["detail"]
