"""A session page has a size budget: it shows the newest messages and artifact versions that
fit, each long text cut with a link to all of it, and links to the earlier ones. Eight
900 KB pushes once made one session page 10.8 MB."""

from __future__ import annotations

import re

import pytest

from tasks.models import Artifact, Message, Session
from tests.builders import artifact, message, status
from tests.conftest import make_agent, push

BIG = 900 * 1024
PAGE_LIMIT = 1_000_000


def send(client, registered, body) -> None:
    assert push(client, registered, body).status_code == 200


def snapshot(history=(), artifacts=()) -> dict:
    return {
        "task": {
            "id": "task-1",
            "contextId": "ctx-1",
            "status": {"state": "TASK_STATE_WORKING"},
            "history": list(history),
            "artifacts": list(artifacts),
        }
    }


def links(page: str, marker: str) -> list[str]:
    return [href.replace("&amp;", "&") for href in re.findall(rf'href="([^"]+)" {marker}', page)]


def get_ok(client, url: str):
    response = client.get(url)
    assert response.status_code == 200, url
    return response


@pytest.fixture
def team_agent(ops):
    return make_agent(team=ops)


def test_eight_big_pushes_make_a_page_under_a_megabyte_with_all_of_it_one_link_away(
    client, alice, team_agent
):
    texts = [f"message {i} " + "m" * BIG + f" end of message {i}" for i in range(4)]
    for i, text in enumerate(texts):
        said = message(text, message_id=f"m{i}")  # said, not a card note (which is bounded)
        send(client, team_agent, {"message": {**said, "taskId": "task-1", "contextId": "ctx-1"}})
    versions = [
        [f"version {v} part {p} " + "a" * (BIG // 9) + f" end {v}.{p}" for p in range(9)]
        for v in range(3)
    ]
    for parts in versions:
        send(client, team_agent, artifact("report", *parts, name="Report"))
    data = {"artifactUpdate": {"taskId": "task-1", "contextId": "ctx-1", "artifact": {
        "artifactId": "table", "parts": [{"data": {"rows": ["d" * 1000] * 900}}]}}}  # fmt: skip
    send(client, team_agent, data)
    session = Session.objects.get()
    assert Message.objects.count() == 4 and Artifact.objects.count() == 4
    client.force_login(alice)

    assert len(get_ok(client, f"/sessions/{session.pk}/activity/").content) < PAGE_LIMIT
    # Every page, this one and those its "earlier" links lead to, stays under the limit;
    # together their "show all" links lead to every text whole.
    to_read, read, show_all = [f"/sessions/{session.pk}/"], set(), set()
    while to_read:
        url = to_read.pop()
        read.add(url)
        page = get_ok(client, url).content.decode()
        assert len(page.encode()) < PAGE_LIMIT, (url, len(page.encode()))
        show_all.update(links(page, "data-show-all"))
        earlier = links(page, "data-earlier-messages") + links(page, "data-earlier-artifacts")
        to_read += [link for link in earlier if link not in read]
    first = get_ok(client, f"/sessions/{session.pk}/").content.decode()
    for i in range(4):
        assert f"message {i} mmm" in first and f"end of message {i}" not in first

    shown = [get_ok(client, url) for url in show_all]
    assert all(r["Content-Type"] == "text/plain; charset=utf-8" for r in shown)
    whole = [r.content.decode() for r in shown]
    for text in texts:
        assert text in whole
    for parts in versions:
        assert any(all(part in body for part in parts) for body in whole)
    assert any('"rows": ["ddd' in body and body.count("d" * 1000) == 900 for body in whole)
    assert len(show_all) == 8  # every cut text, and nothing that was shown whole


def test_earlier_messages_lead_through_the_whole_transcript_once(client, alice, team_agent):
    # One snapshot brings them all in at once: they share a receipt time, so the order of
    # equal times decides where a page ends.
    history = [
        {"messageId": f"h{i}", "role": "ROLE_AGENT", "parts": [{"text": f"<{i}> " + "t" * 9000}]}
        for i in range(31)
    ]
    send(client, team_agent, snapshot(history=history))
    session = Session.objects.get()
    client.force_login(alice)

    url, pages = f"/sessions/{session.pk}/", []
    while url:
        page = get_ok(client, url).content.decode()
        pages.append([int(n) for n in re.findall(r"&lt;(\d+)&gt;", page)])
        earlier = links(page, "data-earlier-messages")
        url = earlier[0] if earlier else None
        assert len(pages) < 10
    assert len(pages) >= 3
    assert [n for page in reversed(pages) for n in page] == list(range(31))

    # Reading earlier messages, a live refetch of the activity keeps the place.
    second = links(get_ok(client, f"/sessions/{session.pk}/").content.decode(), "data-earlier")
    page = get_ok(client, second[0]).content.decode()
    activity_url = re.search(r'data-activity-url="([^"]+)"', page)[1].replace("&amp;", "&")
    assert "?before=" in activity_url
    fragment = get_ok(client, activity_url).content.decode()
    assert re.findall(r"&lt;(\d+)&gt;", fragment) == re.findall(r"&lt;(\d+)&gt;", page)
    assert "Back to the newest" in fragment


def test_earlier_artifact_versions_lead_through_every_version_once(client, alice, team_agent):
    artifacts = [
        {"artifactId": f"a{i:02}", "name": f"Artifact {i:02}", "parts": [{"text": "x" * 9000}]}
        for i in range(25)
    ]
    send(client, team_agent, snapshot(artifacts=artifacts))
    session = Session.objects.get()
    client.force_login(alice)

    url, seen, hops = f"/sessions/{session.pk}/", [], 0
    while url:
        page = get_ok(client, url).content.decode()
        seen += re.findall(r"<strong>Artifact (\d+)</strong>", page)
        earlier = links(page, "data-earlier-artifacts")
        url, hops = (earlier[0] if earlier else None), hops + 1
        assert hops < 10
    assert hops >= 2
    assert sorted(seen) == [f"{i:02}" for i in range(25)]


def test_anchors_that_name_nothing_in_the_session_are_refused(client, alice, ops, team_agent):
    send(client, team_agent, status("WORKING", at=1, text="here"))
    other = make_agent(team=ops, name="Other")
    send(client, other, status("WORKING", at=1, text="elsewhere", context="ctx-2"))
    send(client, other, artifact("x", "elsewhere", context="ctx-2"))
    session = Session.objects.get(context_id="ctx-1")
    elsewhere = Message.objects.get(session__context_id="ctx-2")
    client.force_login(alice)

    bad = {
        "before": ["", "abc", "-1", "1.0", "\u0661", "9" * 40, str(elsewhere.pk)],
        "artifacts_before": ["x", str(Artifact.objects.get().pk)],
    }
    for name, values in bad.items():
        for value in values:
            for path in ("", "activity/"):
                response = client.get(f"/sessions/{session.pk}/{path}", {name: value})
                assert response.status_code == 400, (name, value)
                assert response.content.decode().startswith(f"{name} must be the id of")
    artifact_pk = Artifact.objects.get().pk
    assert client.get(f"/sessions/{session.pk}/transcript/{elsewhere.pk}/").status_code == 404
    assert client.get(f"/sessions/{session.pk}/artifacts/{artifact_pk}/").status_code == 404
