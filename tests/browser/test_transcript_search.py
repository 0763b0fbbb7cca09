"""An agent's markdown in a real browser: the session page's transcript shows it rendered (no
`**`, no `|---|`, a progress bar as the card draws it, a table whose words never break at
phone width), and the search page finds a word from a note the card no longer shows, with
excerpts in plain text."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.models import Session
from tests.builders import status
from tests.conftest import make_agent
from tests.live_server import push_http

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
MARKDOWN = """**Release {word} 2.4 is live**

| Check | Result | Duration | Environment | Reviewer |
|---|---|---|---|---|
| Smoke | passed | seconds | production | maintainers |

Rollout <progress value="3" max="4"></progress>"""

# Every word of the message's table cells, each on one line (not broken inside).
WORDS_WHOLE = """(table) => {
    const broken = [];
    const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of node.data.matchAll(/\\S+/g)) {
            const range = document.createRange();
            range.setStart(node, word.index);
            range.setEnd(node, word.index + word[0].length);
            const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
            if (lines.size > 1) broken.push(word[0]);
        }
    }
    return broken;
}"""


def send(server, registered, body) -> None:
    response = push_http(server, registered, body)
    assert response.status_code == 200, (response.status_code, response.text)


def test_the_transcript_shows_markdown_rendered_and_search_finds_a_replaced_note_in_plain_text(
    page, server, login, open_live, alice, ops
):
    team = make_agent(team=ops, name="Release bot")
    for at, text in ((1, MARKDOWN.format(word="quasar")), (2, "Now **watching** dashboards")):
        send(server, team, status("WORKING", task="t-1", context="rel", at=at, text=text))
    message = {"messageId": "m-1", "role": "ROLE_AGENT", "taskId": "t-1", "contextId": "rel"}
    said = MARKDOWN.format(word="zeppelin")
    send(server, team, {"message": {**message, "parts": [{"text": said}]}})
    session = Session.objects.get()

    login(alice)
    page.set_viewport_size(PHONE)
    open_live(f"/sessions/{session.pk}/")
    transcript = page.locator(".transcript")
    expect(transcript.locator("strong")).to_have_text("Release zeppelin 2.4 is live")
    expect(transcript.get_by_role("progressbar", name="Rollout: 3 of 4")).to_be_visible()
    shown = transcript.inner_text()
    for markup in ("**", "|---|", "| Check", "<progress"):
        assert markup not in shown
    # A table that scrolls sideways can be scrolled from the keyboard: its box takes focus.
    expect(transcript.get_by_role("group", name="Table")).to_have_attribute("tabindex", "0")
    table = transcript.locator("table")
    expect(table.get_by_role("columnheader", name="Environment")).to_be_visible()
    assert table.evaluate(WORDS_WHOLE) == []
    # The table scrolls inside the message; the page itself does not get wider.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

    # Search: the replaced note's word, and the message's, each excerpt plain text.
    page.set_viewport_size({"width": 1280, "height": 800})
    for word, field in (("quasar", "said earlier"), ("zeppelin", "transcript")):
        page.goto(f"{server.url}/?q={word}")
        snippet = page.locator(f"[data-result-session='{session.pk}'] .result-snippet")
        expect(snippet.locator("mark")).to_have_text(word)
        expect(snippet.locator(".result-field")).to_have_text(f"{field}:")
        text = snippet.inner_text()
        assert f"Release {word} 2.4 is live" in text
        for markup in ("**", "|---|", "| ", "<progress", "<"):
            assert markup not in text
