"""Links, files and data in the transcript (A2A 1.0 url, raw and data parts), in and out:
kept bounded, shown safely, raw files downloaded from Onlooker only by people who may see
the session, and people's links sent as url parts (issue 11 §3)."""

from __future__ import annotations

import base64
import html

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from tasks.models import Message, Session
from tasks.wire import message_parts
from tests.answering.test_profile_client import send
from tests.answering.test_talking import person
from tests.builders import status
from tests.conftest import make_agent, push
from tests.peers.misbehaving_agent import ACCEPTED

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def agent_message(*parts: dict, message_id: str = "m-1") -> dict:
    return {
        "message": {
            "messageId": message_id,
            "role": "ROLE_AGENT",
            "contextId": "ctx-1",
            "parts": list(parts),
        }
    }


def raw(content: bytes, filename: str, media_type: str) -> dict:
    return {
        "raw": base64.b64encode(content).decode(),
        "filename": filename,
        "mediaType": media_type,
    }


@pytest.fixture
def session_with_parts(ops):
    registered = make_agent(team=ops)
    assert push(Client(), registered, status("WORKING", at=1)).status_code == 200
    body = agent_message(
        {"text": "Here is what I found."},
        {"url": "https://example.com/report.pdf", "filename": "report.pdf",
         "mediaType": "application/pdf"},
        {"url": "javascript:alert(document.cookie)", "filename": "click me"},
        raw(PNG, "chart.png", "image/png"),
        raw(b"<script>alert(1)</script>", "page.html", "text/html"),
        {"data": {"hosts": 6, "note": "<b>bold</b>\u202ehidden"}},
    )  # fmt: skip
    assert push(Client(), registered, body).status_code == 200
    return Session.objects.get()


def page(client: Client, session: Session) -> str:
    return client.get(f"/sessions/{session.pk}/").content.decode()


def test_url_parts_are_links_only_when_they_are_web_links(session_with_parts, alice):
    client = Client()
    client.force_login(alice)
    shown = page(client, session_with_parts)
    assert (
        '<a href="https://example.com/report.pdf" rel="noopener noreferrer nofollow" '
        'target="_blank">report.pdf</a> <span class="part-type">application/pdf</span>'
    ) in shown
    assert "<code>javascript:alert(document.cookie)</code> (not a web link)" in shown
    assert 'href="javascript:' not in shown


def test_data_parts_are_folded_escaped_json(session_with_parts, alice):
    client = Client()
    client.force_login(alice)
    shown = page(client, session_with_parts)
    assert "<details><summary>Data</summary><pre>{" in shown
    assert "&lt;b&gt;bold&lt;/b&gt;" in shown and "<b>bold</b>" not in shown
    assert "\u202e" not in shown and "\\u202e" in shown  # seen as an escape, never applied


def test_raw_parts_are_downloads_with_safe_headers(session_with_parts, alice):
    client = Client()
    client.force_login(alice)
    message = Message.objects.get(message_id="m-1")
    shown = page(client, session_with_parts)
    png_url = f"/sessions/{session_with_parts.pk}/transcript/{message.pk}/files/0/"
    assert f'<a href="{png_url}" download>chart.png</a>' in shown

    response = client.get(png_url)
    assert response.status_code == 200 and response.content == PNG
    assert response["Content-Type"] == "image/png"
    assert response["Content-Disposition"] == 'attachment; filename="chart.png"'
    assert response["X-Content-Type-Options"] == "nosniff"

    # HTML is never served as itself: it would run at Onlooker's origin.
    response = client.get(png_url.replace("/files/0/", "/files/1/"))
    assert response.content == b"<script>alert(1)</script>"
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"] == 'attachment; filename="page.html"'
    assert "sandbox" in response["Content-Security-Policy"]

    assert client.get(png_url.replace("/files/0/", "/files/2/")).status_code == 404


def test_the_api_lists_a_messages_parts_with_each_kept_files_download(session_with_parts, alice):
    client = Client()
    client.force_login(alice)
    message = Message.objects.get(message_id="m-1")
    data = client.get(f"/api/sessions/{session_with_parts.pk}").json()
    [parts] = [m["parts"] for m in data["messages"] if m["parts"]]
    files = [part for part in parts if part["kind"] == "file"]
    download = f"/sessions/{session_with_parts.pk}/transcript/{message.pk}/files/0/"
    assert files[0]["filename"] == "chart.png" and files[0]["download"] == download
    assert "file" not in files[0]
    assert client.get(download).content == PNG


def test_a_file_download_needs_the_right_to_see_the_session(session_with_parts, alice):
    message = Message.objects.get(message_id="m-1")
    url = f"/sessions/{session_with_parts.pk}/transcript/{message.pk}/files/0/"
    teammate = Client()
    teammate.force_login(alice)
    assert teammate.get(url).status_code == 200
    outsider = person("mallory", Group.objects.create(name="finance"))
    assert outsider.get(url).status_code == 404
    assert Client().get(url).status_code == 302  # to the login page


def test_a_file_over_the_cap_keeps_its_name_and_says_too_large(ops, alice, monkeypatch):
    monkeypatch.setattr(message_parts, "MAX_RAW_BYTES", 1_000)
    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1))
    body = agent_message(raw(b"x" * 1_001, "big.bin", "application/zip"), message_id="m-big")
    assert push(Client(), registered, body).status_code == 200
    message = Message.objects.get(message_id="m-big")
    assert message.files == []
    assert message.parts[0]["size"] == 1_001 and "file" not in message.parts[0]
    client = Client()
    client.force_login(alice)
    shown = page(client, Session.objects.get())
    assert 'big.bin <span class="part-type">application/zip, 1001' in html.unescape(shown)
    assert "too large to keep (over 1 MB)" in shown
    assert "/files/" not in shown


def test_a_messages_files_and_data_are_bounded_together(ops, alice, monkeypatch):
    monkeypatch.setattr(message_parts, "MAX_RAW_BYTES", 1_000)
    monkeypatch.setattr(message_parts, "MAX_MESSAGE_BYTES", 1_500)
    registered = make_agent(team=ops)
    push(Client(), registered, status("WORKING", at=1))
    body = agent_message(
        raw(b"a" * 800, "one.txt", "text/plain"),
        raw(b"b" * 800, "two.txt", "text/plain"),
        {"data": {"rows": ["x" * 100] * 100}},
        message_id="m-many",
    )
    assert push(Client(), registered, body).status_code == 200
    message = Message.objects.get(message_id="m-many")
    assert len(message.files) == 1
    assert "not kept: the message's other files took the room" in message.parts[1]["note"]
    data = message.parts[2]
    assert data["cut"] and len(data["json"]) == message_parts.MAX_DATA_CHARS
    client = Client()
    client.force_login(alice)
    assert "<summary>Data (cut to fit the page)</summary>" in page(client, Session.objects.get())


def test_attached_links_are_sent_as_url_parts(stub_session, ops, approvers):
    stub, session, _ = stub_session
    stub.answer(ACCEPTED)
    links = "https://example.com/spec\n  http://example.org/a?b=c  \n"
    code, _ = send(person("alice", ops, approvers), session, links=links)
    assert code == 200
    [params] = stub.calls("SendMessage")
    assert params["message"]["parts"] == [
        {"text": "Go on"},
        {"url": "https://example.com/spec"},
        {"url": "http://example.org/a?b=c"},
    ]


@pytest.mark.parametrize(
    ("links", "words"),
    [
        ("javascript:alert(1)", "links must be http:// or https:// URLs"),
        ("ftp://example.com/file", "links must be http:// or https:// URLs"),
        ("https://", "links must be http:// or https:// URLs"),
        ("https://example.com/" + "a" * 2_000, "a link has at most 2000 characters"),
        ("\n".join(f"https://example.com/{i}" for i in range(6)), "attach at most 5 links"),
    ],
)
def test_bad_links_are_refused_and_nothing_is_sent(
    stub_session,
    ops,
    approvers,
    links,
    words,
):
    stub, session, _ = stub_session
    messages_before = Message.objects.count()
    code, data = send(person("alice", ops, approvers), session, links=links)
    assert code == 400 and words in data["detail"]
    assert stub.calls("SendMessage") == []
    assert Message.objects.count() == messages_before
