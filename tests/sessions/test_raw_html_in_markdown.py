"""Raw HTML an agent writes in markdown: only `<progress>` survives as markup (PROTOCOL.md §4;
seed 001: "other raw HTML is stripped by the Markdown sanitizer"). A tag written as HTML is
dropped and its text kept, even when the same element is allowed where markdown makes it
(`**bold**` is `<strong>`; `<strong>bold</strong>` is the word bold). A progress bar past its
max is full (issue 29 §6).

Through each writer of rendered markdown: the card API, the note an A2A status carries, and a
text/markdown artifact; every one stores the HTML it renders, so each is read back from the
database as a page would show it.
"""

from __future__ import annotations

import json

import pytest
from bleach._vendor import html5lib

from tasks.answering.agents import new_api_token
from tasks.models import Artifact, ProgressCard, digest
from tests.builders import status
from tests.conftest import make_agent, push


@pytest.fixture
def agent(db):
    registered = make_agent()
    token = new_api_token()
    registered.agent.api_token_digest = digest(token)
    registered.agent.save()
    registered.api_token = token
    return registered


def through_card_api(client, agent, markdown: str) -> str:
    response = client.post(
        "/api/progress-card",
        json.dumps({"sessionKey": "ctx-1", "markdown": markdown}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.api_token}",
    )
    assert response.status_code == 200, response.content
    return ProgressCard.objects.get().html


def through_a_status(client, agent, markdown: str) -> str:
    assert push(client, agent, status("WORKING", at=1, text=markdown)).status_code == 200
    return ProgressCard.objects.get().html


def through_an_artifact(client, agent, markdown: str) -> str:
    part = {"text": markdown, "mediaType": "text/markdown"}
    body = {
        "artifactUpdate": {
            "taskId": "task-1",
            "contextId": "ctx-1",
            "artifact": {"artifactId": "report", "parts": [part]},
        }
    }
    assert push(client, agent, status("WORKING", at=1)).status_code == 200
    assert push(client, agent, body).status_code == 200
    return Artifact.objects.get().markdown_html


WRITERS = [
    pytest.param(through_card_api, id="card-api"),
    pytest.param(through_a_status, id="status-note"),
    pytest.param(through_an_artifact, id="artifact"),
]


def parse(stored: str):
    return html5lib.parseFragment(stored, treebuilder="etree", namespaceHTMLElements=False)


def tags(stored: str) -> list[str]:
    return [el.tag for el in parse(stored).iter()][1:]


def text(stored: str) -> str:
    return "".join(parse(stored).itertext())


# Elements the card allows where markdown makes them, written as HTML instead; with the
# elements a browser would see and the text a person would read.
RAW = [
    pytest.param("Done: <strong>all</strong> of it", ["p"], "Done: all of it", id="strong"),
    pytest.param("<em>now</em> and <b>then</b>", ["p"], "now and then", id="em-and-b"),
    pytest.param(
        'See <a href="https://example.com/log" title="log">the log</a>.',
        ["p"],
        "See the log.",
        id="a",
    ),
    pytest.param(
        "<table><tr><td>cell</td><td>two</td></tr></table>", [], "celltwo", id="table-block"
    ),
    pytest.param("<h1>Title</h1>", [], "Title", id="heading-block"),
    pytest.param("<ul><li>one</li></ul>", [], "one", id="list-block"),
    pytest.param("<pre>kept\n  as text</pre>", [], "kept\n  as text", id="pre-block"),
    pytest.param("<blockquote>quoted</blockquote>", [], "quoted", id="blockquote-block"),
    pytest.param("a<br>b<hr>c", ["p"], "abc", id="br-and-hr-inline"),
    pytest.param("<hr>", [], "", id="hr-block"),
    pytest.param("<P>Fish &amp; chips</P>", [], "Fish & chips", id="upper-case-with-entity"),
    pytest.param(
        "<code>x = 1</code> <del>old</del> <s>gone</s>", ["p"], "x = 1 old gone", id="code"
    ),
]


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize(("markdown", "elements", "shown"), RAW)
def test_raw_html_other_than_progress_is_dropped_and_its_text_kept(
    client, agent, writer, markdown, elements, shown
):
    stored = writer(client, agent, markdown)
    assert tags(stored) == elements, stored
    assert text(stored).strip() == shown


@pytest.mark.parametrize("writer", WRITERS)
def test_markdown_inside_raw_html_is_still_markdown(client, agent, writer):
    markdown = "<blockquote>\n\n**Deploy** is [done](https://example.com)\n\n</blockquote>"
    stored = writer(client, agent, markdown)
    assert tags(stored) == ["p", "strong", "a"], stored
    assert text(stored).strip() == "Deploy is done"


@pytest.mark.parametrize("writer", WRITERS)
def test_a_progress_bar_is_the_only_html_that_survives(client, agent, writer):
    stored = writer(
        client, agent, 'Tests <progress value="3" max="7"></progress> <strong>ok</strong>'
    )
    assert tags(stored) == ["p", "progress"], stored
    [bar] = [el for el in parse(stored).iter() if el.tag == "progress"]
    assert (bar.get("value"), bar.get("max")) == ("3", "7")


@pytest.mark.parametrize("writer", WRITERS)
def test_a_progress_bar_past_its_max_is_full(client, agent, writer):
    stored = writer(client, agent, 'Deploy <progress value="9" max="7"></progress>')
    [bar] = [el for el in parse(stored).iter() if el.tag == "progress"]
    assert (bar.get("value"), bar.get("max")) == ("7", "7")
    assert bar.get("aria-label") == "Deploy: 7 of 7"
