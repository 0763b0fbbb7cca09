"""Artifacts on the session page: versions grouped per artifact (latest first, older ones
folded), an artifact streamed in chunks says it is still arriving until its lastChunk,
text/markdown is rendered by the card's sanitizer, and each version's text, bytes or data
can be downloaded as a file that cannot run as a page."""

from __future__ import annotations

import base64
import re

import pytest

from tasks.models import Artifact, Session
from tasks.wire import profile
from tests.builders import artifact, status
from tests.conftest import make_agent, push


def send(client, registered, body) -> None:
    response = push(client, registered, body)
    assert response.status_code == 200, response.content


def update(artifact_id: str, parts: list[dict], *, name: str = "", files=None, **flags) -> dict:
    art: dict = {"artifactId": artifact_id, "parts": parts}
    if name:
        art["name"] = name
    if files is not None:
        art["metadata"] = {profile.FILES: files}
    return {"artifactUpdate": {"taskId": "task-1", "contextId": "ctx-1", "artifact": art, **flags}}


@pytest.fixture
def team_agent(ops):
    return make_agent(team=ops)


def page_of(client, user) -> str:
    client.force_login(user)
    return client.get(f"/sessions/{Session.objects.get().pk}/").content.decode()


def artifacts_section(page: str) -> str:
    return page[page.index('<ul class="artifacts">') :]


def test_versions_are_grouped_per_artifact_latest_first_with_older_ones_folded(
    client, alice, team_agent
):
    send(client, team_agent, status("WORKING", at=1))
    send(client, team_agent, artifact("report", "draft one", name="Report"))
    send(client, team_agent, artifact("log", "the log", name="Log"))
    send(client, team_agent, artifact("report", "draft two", name="Report"))
    send(client, team_agent, artifact("report", "final draft", name="Report"))

    section = artifacts_section(page_of(client, alice))
    groups = re.findall(r'<li class="artifact" data-artifact="([^"]+)"', section)
    assert groups == ["report", "log"]  # the artifact with the newest version first
    report = section[: section.index('data-artifact="log"')]
    assert report.count("<strong>Report</strong>") == 1
    latest, folded = report.split('<details class="artifact-older">')
    assert "final draft" in latest and "version 3" in latest and "draft two" not in latest
    assert "2 older versions" in folded
    assert folded.index("draft two") < folded.index("draft one")


def test_a_chunked_artifact_says_still_arriving_until_its_last_chunk(client, alice, team_agent):
    send(client, team_agent, status("WORKING", at=1))
    send(client, team_agent, artifact("log", "line 1\n", last_chunk=False))
    assert Artifact.objects.get().complete is False
    assert "(still arriving)" in artifacts_section(page_of(client, alice))

    send(client, team_agent, artifact("log", "line 2\n", append=True))
    assert "(still arriving)" in artifacts_section(page_of(client, alice))

    send(client, team_agent, artifact("log", "line 3\n", append=True, last_chunk=True))
    version = Artifact.objects.get()
    assert version.complete is True
    assert [p["text"] for p in version.parts] == ["line 1\n", "line 2\n", "line 3\n"]
    assert "still arriving" not in artifacts_section(page_of(client, alice))

    # A whole artifact in one chunk that says it is the last is complete at once, and so is
    # one that does not mention lastChunk at all (how many agents send whole artifacts).
    send(client, team_agent, artifact("summary", "all of it", last_chunk=True))
    send(client, team_agent, artifact("notes", "all of these"))
    assert Artifact.objects.get(artifact_id="summary").complete is True
    assert Artifact.objects.get(artifact_id="notes").complete is True
    assert "still arriving" not in artifacts_section(page_of(client, alice))

    # A stream that starts without saying so is arriving again from its first append.
    send(client, team_agent, artifact("trace", "t1\n"))
    send(client, team_agent, artifact("trace", "t2\n", append=True))
    assert Artifact.objects.get(artifact_id="trace").complete is False


HOSTILE_MARKDOWN = (
    "# Findings\n\n**6 hosts** ok <progress value=3 max=7></progress>\n\n"
    "<script>alert(1)</script><img src=x onerror=alert(2)> [x](javascript:alert(3))\n\n"
    '<div style="x" onclick="alert(4)">styled</div>\u202eevil'
)


@pytest.mark.parametrize(
    "part, files",
    [
        ({"text": HOSTILE_MARKDOWN, "mediaType": "text/markdown"}, None),
        ({"text": HOSTILE_MARKDOWN, "mediaType": "Text/Markdown; charset=utf-8"}, None),
        ({"text": HOSTILE_MARKDOWN}, {"kind": "report", "path": "out/findings.md"}),
    ],
    ids=["mediaType", "mediaType with parameters", "files/v1 path"],
)
def test_markdown_artifacts_are_rendered_by_the_cards_sanitizer(
    client, alice, team_agent, part, files
):
    send(client, team_agent, status("WORKING", at=1))
    send(client, team_agent, update("findings", [part], name="Findings", files=files))

    section = artifacts_section(page_of(client, alice))
    rendered = re.search(r'<div class="artifact-markdown note"[^>]*>(.*?)</div>\n', section, re.S)
    assert rendered, section
    html = rendered[1]
    assert "<h1>Findings</h1>" in html and "<strong>6 hosts</strong>" in html
    assert '<progress max="7" value="3" aria-label="6 hosts ok: 3 of 7">' in html
    for bad in ("<script", "alert(1)", "<img", "onerror", 'href="javascript', "onclick", "style="):
        assert bad not in html, bad
    assert "\u202e" not in html
    assert "<pre>" not in section[: section.index("</li>")]  # not shown twice, raw

    # Text that does not say it is markdown stays plain text.
    plain = [{"text": "**not bold**", "mediaType": "text/plain"}]
    send(client, team_agent, update("notes", plain, files={"path": "notes.md"}))
    section = artifacts_section(page_of(client, alice))
    notes = section[: section.index('data-artifact="findings"')]
    assert "<pre>**not bold**</pre>" in notes and "artifact-markdown" not in notes


def download_links(page: str) -> list[str]:
    return re.findall(r'href="([^"]+/download/)" download data-download', page)


def test_each_version_offers_its_text_bytes_and_data_as_attachments(client, alice, team_agent):
    html_bytes = b"<script>alert(1)</script>"
    parts = [
        {"text": "# Report\n", "mediaType": "text/markdown"},
        {
            "raw": base64.b64encode(html_bytes).decode(),
            "mediaType": "text/html",
            "filename": "page\u202egpj.html",
        },  # fmt: skip
        {"data": {"rows": [1, 2]}},
        {"url": "https://files.example/r.pdf", "filename": "r.pdf"},
    ]
    send(client, team_agent, status("WORKING", at=1))
    send(client, team_agent, update("report", parts, name="Report"))

    links = download_links(page_of(client, alice))
    assert len(links) == 3  # the link part is a link, not a file Onlooker keeps
    text, raw, data = (client.get(link) for link in links)
    for response in (text, raw, data):
        assert response.status_code == 200
        assert response["Content-Disposition"].startswith("attachment; ")
        assert response["X-Content-Type-Options"] == "nosniff"
    assert text["Content-Type"] == "text/plain; charset=utf-8"
    assert text.content == b"# Report\n"
    assert 'filename="Report-v1.md"' in text["Content-Disposition"]
    # Never the agent's media type: text/html from an agent would run as a page.
    assert raw["Content-Type"] == "application/octet-stream"
    assert raw.content == html_bytes
    assert "\u202e" not in raw["Content-Disposition"] and "gpj.html" in raw["Content-Disposition"]
    assert data["Content-Type"] == "application/json"
    assert data.json() == {"rows": [1, 2]}

    # A link, a part past the end and bytes that are not base64 are no file: a clear 404.
    send(client, team_agent, update("broken", [{"raw": "%%% not base64 %%%"}]))
    version = Artifact.objects.get(artifact_id="broken")
    base = links[0].rsplit("/parts/", 1)[0]
    for url in (f"{base}/parts/3/download/", f"{base}/parts/99999999999/download/"):
        assert client.get(url).status_code == 404, url
    broken = f"/sessions/{version.task.session_id}/artifacts/{version.pk}/parts/0/download/"
    refused = client.get(broken)
    assert refused.status_code == 404 and b"not valid base64" in refused.content


def test_downloads_are_only_for_people_who_may_see_the_session(client, alice, charlie, team_agent):
    send(client, team_agent, status("WORKING", at=1))
    send(client, team_agent, artifact("report", "secret figures", last_chunk=True))
    version = Artifact.objects.get()
    url = f"/sessions/{version.task.session_id}/artifacts/{version.pk}/parts/0/download/"

    assert client.get(url).status_code == 302  # to the login page
    client.force_login(charlie)  # on no team: the ops team's session is not his to see
    refused = client.get(url)
    assert refused.status_code == 404 and b"secret figures" not in refused.content
    client.force_login(alice)
    assert client.get(url).content == b"secret figures"
