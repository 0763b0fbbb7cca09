"""A person sees the whole question before answering, safely: the interaction's `detail` as a
small key/value table (nested values readable, long ones folded, the whole bounded, escaped)
on the session page and the monitoring screen's waiting list and in `/api/sessions/<id>`;
agent text near the buttons and in the transcript without invisible or bidi-control
characters; and how long each question has waited."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from tasks.models import Interaction, Session
from tests.builders import EPOCH, approval, artifact, message, status
from tests.conftest import push
from tests.processes import ROOT

pytestmark = pytest.mark.django_db

# Right-to-left override, zero-width space, left-to-right isolate, pop directional isolate.
HIDDEN = ("\u202e", "\u200b", "\u2066", "\u2069")


def send(registered, body) -> None:
    assert push(Client(), registered, body).status_code == 200


def ask(registered, prompt: str, detail=None, *, kind: str = "approval", text=None) -> Session:
    state = "AUTH_REQUIRED" if kind in ("approval", "connection") else "INPUT_REQUIRED"
    metadata = approval("i-1", prompt, kind=kind, detail=detail)
    send(registered, status(state, at=1, text=text, metadata=metadata))
    return Session.objects.get()


def shown(client: Client, session: Session) -> dict[str, str]:
    """The session page, its activity fragment, the monitoring screen and its waiting list."""
    pages = {}
    for url in (
        f"/sessions/{session.pk}/",
        f"/sessions/{session.pk}/activity/",
        "/",
        "/live/board/?waiting=1",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        pages[url] = response.json()["waiting"] if "waiting=1" in url else response.text
    return pages


def detail_html(page: str) -> str:
    """The detail block of the (only) open interaction on a page."""
    found = re.search(r'<div class="interaction-detail">(.*?)</div>', page, re.S)
    assert found, "no detail shown"
    return found.group(1)


def cells(page: str) -> list[tuple[str, str]]:
    """(key, value) of a detail table's top-level rows, tags stripped, whitespace squeezed."""
    block = detail_html(page)
    rows = re.findall(r'<th scope="row">(.*?)</th>\s*<td>(.*?)</td>\s*</tr>', block, re.S)
    return [(k, " ".join(re.sub(r"<[^>]+>", " ", v).split())) for k, v in rows]


def test_detail_is_a_key_value_table_wherever_the_question_is_shown(team_agent, approver):
    session = ask(team_agent, "Ship v2?", {"environment": "production", "hosts": 6})
    for url, page in shown(approver, session).items():
        # Sorted: PostgreSQL's jsonb keeps an object's keys in its own order, not the agent's.
        assert sorted(cells(page)) == [("environment", "production"), ("hosts", "6")], url


def test_nested_values_are_a_table_inside_and_deeper_ones_compact_json(team_agent, approver):
    detail = {"target": {"region": "eu-west", "zones": ["a", "b"]}, "flags": [True, None]}
    session = ask(team_agent, "Ship?", detail)
    page = approver.get(f"/sessions/{session.pk}/").text
    block = detail_html(page)
    assert block.count('<table class="detail-table">') == 3  # the detail, target, flags
    assert '<th scope="row">region</th>\n        <td>eu-west</td>' in block
    assert "<td>[&quot;a&quot;, &quot;b&quot;]</td>" in block
    assert '<th scope="row">1</th>\n        <td>true</td>' in block
    assert '<th scope="row">2</th>\n        <td>null</td>' in block


def test_a_long_value_is_folded_under_a_short_summary(team_agent, approver):
    plan = "Drain the pool, then restart every host. " * 10
    session = ask(team_agent, "Ship?", {"plan": plan, "note": "one\ntwo"})
    block = detail_html(approver.get(f"/sessions/{session.pk}/").text)
    summary = f"{plan[:60]}… ({len(plan)} characters)"
    assert f"<details><summary>{summary}</summary><pre>{plan}</pre></details>" in block
    assert "<details><summary>one… (7 characters)</summary><pre>one\ntwo</pre></details>" in block


def test_a_large_detail_is_cut_to_a_bound_and_says_so(team_agent, approver):
    detail = {f"key {n}": "x" * 300 for n in range(40)}  # 12 000 characters: loaded, not shown
    session = ask(team_agent, "Ship?", detail)
    for url, page in shown(approver, session).items():
        block = detail_html(page)
        assert len(block) < 6_000, url
        assert '<p class="detail-cut">(cut)</p>' in block, url
        assert "key 7" not in block, url


def test_many_small_keys_are_cut_to_a_number_of_rows(team_agent, approver):
    session = ask(team_agent, "Ship?", {f"k{n}": n for n in range(500)})
    block = detail_html(approver.get(f"/sessions/{session.pk}/").text)
    assert block.count("<tr>") == 40
    assert '<p class="detail-cut">(cut)</p>' in block


def test_a_megabyte_detail_is_not_loaded_and_says_it_is_cut(team_agent, approver):
    session = ask(team_agent, "Ship?", {"dump": "y" * 1_000_000})
    for url, page in shown(approver, session).items():
        assert "yyyyyyyyyy" not in page, url
        assert "characters, too large to show here (cut)." in page, url
        assert "Show all of this question" in page, url
    assert len(approver.get(f"/sessions/{session.pk}/").content) < 50_000


def test_detail_keys_and_values_are_escaped_text(team_agent, approver):
    detail = {"<b>key</b>": "<script>alert(1)</script>", "nested": {"<i>": "<img src=x>"}}
    session = ask(team_agent, "Ship?", detail)
    for url, page in shown(approver, session).items():
        block = detail_html(page)
        assert "<script>alert" not in block and "<b>key" not in block, url
        assert "<img" not in block and "<i>" not in block, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in block, url
        assert "&lt;b&gt;key&lt;/b&gt;" in block, url


def test_the_api_returns_the_detail_as_the_agent_sent_it(team_agent, approver):
    detail = {"environment": "production", "hosts": 6, "nested": {"a": [1, 2]}}
    session = ask(team_agent, "Ship?", detail)
    [interaction] = approver.get(f"/api/sessions/{session.pk}").json()["interactions"]
    assert interaction["detail"] == detail


def test_invisible_and_bidi_characters_never_reach_the_page(team_agent, approver):
    rlo, zwsp, lri, pdi = HIDDEN
    detail = {f"env{lri}": f"prod{rlo}uction", "choices": [f"stag{zwsp}ing", "eu-west"]}
    ask(team_agent, f"Deploy {rlo}?noitcudorp ot", detail, kind="question",
        text=f"I will deploy{pdi} now")  # fmt: skip
    send(team_agent, artifact("a1", f"log{zwsp} line", name=f"report{rlo}.txt"))
    session = Session.objects.get()
    for url, page in shown(approver, session).items():
        for hidden in HIDDEN:
            assert hidden not in page, (url, hex(ord(hidden)))
        assert "Deploy ?noitcudorp ot" in page, url
        assert ("env", "production") in cells(page), url
    page = approver.get(f"/sessions/{session.pk}/").text
    assert "I will deploy now" in page
    assert "report.txt" in page and "log line" in page


def test_the_table_leaves_out_what_the_form_already_shows(team_agent, approver):
    """Choices that are all buttons, and a connection's page that is the link, are not
    repeated in the table; everything else the agent sent is."""
    detail = {"choices": ["eu-west", "us-east"], "why": "latency"}
    session = ask(team_agent, "Where?", detail, kind="question")
    assert cells(approver.get(f"/sessions/{session.pk}/").text) == [("why", "latency")]

    Session.objects.all().delete()
    url = "https://example.com/connect"
    session = ask(team_agent, "Connect?", {"url": url, "provider": "GitHub"}, kind="connection")
    page = approver.get(f"/sessions/{session.pk}/").text
    assert cells(page) == [("provider", "GitHub")]
    assert f'href="{url}"' in page


def test_session_titles_are_cleaned_wherever_they_are_shown(team_agent, approver):
    """A title comes from the first user message an agent's task history holds: agent text."""
    rlo = HIDDEN[0]
    said = message(f"Release {rlo}2.4 notes", message_id="m-1", role="ROLE_USER")
    send(team_agent, {"message": {**said, "contextId": "ctx-1"}})
    session = ask(team_agent, "Ship?")
    assert session.title == f"Release {rlo}2.4 notes"
    board = approver.get("/live/board/?tiles=1").json()
    pages = {
        "session page": approver.get(f"/sessions/{session.pk}/").text,
        "monitoring screen": approver.get("/").text,
        "board sidebar": board["sidebar"],
    }
    for where, page in pages.items():
        assert rlo not in page, where
        assert "Release 2.4 notes" in page, where


def test_a_choice_that_reads_differently_cleaned_is_no_button_the_rest_send_as_offered(
    team_agent, approver
):
    """A button's label is exactly what the agent receives: a choice hiding characters is
    shown cleaned in the detail, not offered as a button."""
    ask(team_agent, "Where?", {"choices": ["prod\u202euction", "staging"]}, kind="question")
    page = approver.get(f"/sessions/{Session.objects.get().pk}/").text
    buttons = re.findall(r'<button type="submit" name="choice" value="([^"]*)"', page)
    assert buttons == ["staging"]
    assert "Show all of this question" in page
    assert "production" in detail_html(page)


def test_answered_prompts_and_values_are_cleaned_in_the_answers_list(
    team_agent, approver, agent_stub
):
    ask(team_agent, "Pick\u202e one", {"choices": ["eu-west"]}, kind="question")
    interaction = Interaction.objects.get()
    url = f"/interactions/{interaction.pk}/answer/"
    answered = approver.post(url, {"value": "eu\u200bwest"}, HTTP_ACCEPT="application/json")
    assert answered.status_code == 200, answered.content
    page = approver.get(f"/sessions/{Session.objects.get().pk}/").text
    assert "Pick one" in page and "<q>euwest</q>" in page
    assert "\u202e" not in page and "\u200b" not in page


def test_each_open_question_says_how_long_it_has_waited(team_agent, approver):
    session = ask(team_agent, "Ship?")
    opened = EPOCH + timedelta(seconds=1)
    with time_machine.travel(opened + timedelta(minutes=14, seconds=20), tick=False):
        pages = shown(approver, session)
    stamp = html.escape(opened.isoformat())
    for url, page in pages.items():
        assert f'<time datetime="{stamp}" data-waited-since>waiting 14 min</time>' in page, url


@time_machine.travel(EPOCH, tick=False)
def test_waiting_reads_as_the_script_writes_it(db):
    from tasks.templatetags.onlooker import waiting

    cases = {0: "waiting 0 s", 12: "waiting 12 s", 185: "waiting 3 min", 7300: "waiting 2 h"}
    for seconds, text in cases.items():
        assert waiting(EPOCH - timedelta(seconds=seconds)) == text
    script = (ROOT / "static/js/times.js").read_text()
    assert "time[data-waited-since]" in script and "`waiting ${" in script
