"""The XSS corpus of tests/sessions/test_progress_card_rendering.py, written through the real card
API and rendered by a real browser: on the first page load (every vector as its own card on the
overview, and the session page) and through live swaps. Nothing may run: no dialog, no
request to another host, no global set by a payload, no script the CSP had to block, no
element or attribute that can run code left in a card after the browser parsed it."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect

from tasks.answering.agents import new_api_token
from tasks.models import ProgressCard, Session, digest
from tests.conftest import RegisteredAgent, make_agent
from tests.live_server import LiveServer
from tests.sessions.test_progress_card_rendering import CORPUS

pytestmark = pytest.mark.django_db(transaction=True)

MAX_MARKDOWN_BYTES = 8192
# The overview shows at most 300 tiles: the corpus is split across agents, one overview each
# (one place left for the session that gets the whole corpus).
PER_AGENT = 299
# Payloads whose proof is a global, not a dialog (the corpus's code calls alert()).
GLOBAL = "__xss"
OWN_VECTORS = [
    f"<img src=x onerror=window.{GLOBAL}=1>",
    f"<svg onload=window.{GLOBAL}=1>",
    f"<details open ontoggle=window.{GLOBAL}=1>x</details>",
    f"<input autofocus onfocus=window.{GLOBAL}=1>",
    f'<iframe srcdoc="<script>parent.{GLOBAL}=1</script>"></iframe>',
    f"<math><mtext><table><mglyph><style><img src=x onerror=window.{GLOBAL}=1>",
    f'<noscript><p title="</noscript><img src=x onerror=window.{GLOBAL}=1>">',
    f"<form><math><mtext></form><form><mglyph><style></math><img src onerror=window.{GLOBAL}=1>",
    f"<svg><style><img src=x onerror=window.{GLOBAL}=1></style></svg>",
    f'<a href="javascript:window.{GLOBAL}=1">x</a> [y](javascript:window.{GLOBAL}=1)',
    f'<object data="javascript:window.{GLOBAL}=1"></object>',
    f"<embed src=javascript:window.{GLOBAL}=1>",
    f'<progress value="1" max="2" onmouseover="window.{GLOBAL}=1"></progress>',
]
# Recorded from the first script that runs in every document of the page.
WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', e =>
    window.__violations.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline')));
"""
# What the browser made of the cards: anything able to run code is a failure.
AUDIT = """
() => {
  const found = [];
  const allowed = new Set(['http:', 'https:', 'mailto:']);
  for (const card of document.querySelectorAll('article[data-session]')) {
    // The markdown's part of the card when the partial marks it, else the whole card.
    const note = card.querySelector('.note') || card;
    for (const el of note.querySelectorAll('*')) {
      const tag = el.tagName.toLowerCase();
      if (['script', 'iframe', 'object', 'embed', 'img', 'svg', 'math', 'style', 'form',
           'input', 'button', 'textarea', 'select', 'base', 'meta', 'link', 'frame',
           'frameset', 'video', 'audio', 'source'].includes(tag))
        found.push(`<${tag}> in card ${card.dataset.session}`);
      for (const name of el.getAttributeNames())
        if (name.startsWith('on') || name === 'style' || name === 'srcdoc' ||
            name === 'formaction' || name === 'src')
          found.push(`<${tag} ${name}> in card ${card.dataset.session}`);
      if (tag === 'a' && el.hasAttribute('href') && !allowed.has(el.protocol))
        found.push(`<a href="${el.getAttribute('href')}"> in card ${card.dataset.session}`);
    }
  }
  return found;
}
"""


class Watch:
    """Everything on a page that would show a payload ran."""

    def __init__(self, page: Page, server: LiveServer) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        page.add_init_script(WATCH)
        page.on("dialog", self._dialog)
        page.on("request", self._request)
        page.on("websocket", lambda socket: self._check_url(socket.url))
        # Requests elsewhere are recorded (above) and never leave the machine.
        page.route(
            "**/*",
            lambda route: (
                route.continue_()
                if urlsplit(route.request.url).hostname == "127.0.0.1"
                else route.abort()
            ),
        )

    def _dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def _request(self, request) -> None:
        self._check_url(request.url)

    def _check_url(self, url: str) -> None:
        if urlsplit(url).hostname != "127.0.0.1":
            self.foreign.append(url)

    def assert_nothing_ran(self, where: str) -> None:
        assert self.dialogs == [], f"{where}: a payload opened a dialog"
        assert self.foreign == [], f"{where}: a request left 127.0.0.1"
        assert self.page.evaluate(f"typeof window.{GLOBAL}") == "undefined", (
            f"{where}: a payload set window.{GLOBAL}"
        )
        violations = [
            v for v in self.page.evaluate("window.__violations") if v.startswith("script-src")
        ]
        assert violations == [], f"{where}: the CSP blocked a script in the page"
        assert self.page.evaluate(AUDIT) == [], f"{where}: the browser's DOM of a card can run code"


def api_agent(ops) -> tuple[RegisteredAgent, str]:
    registered = make_agent(team=ops)
    token = new_api_token()
    registered.agent.api_token_digest = digest(token)
    registered.agent.save()
    return registered, token


def chunks(markdowns: list[str]) -> list[str]:
    """The vectors joined into as few cards as the markdown limit allows."""
    out, current = [], ""
    for markdown in markdowns:
        joined = f"{current}\n\n{markdown}" if current else markdown
        if len(joined.encode()) > MAX_MARKDOWN_BYTES:
            out.append(current)
            joined = markdown
        current = joined
    return [*out, current] if current else out


@pytest.mark.slow
def test_hostile_card_markdown_executes_nothing_in_a_real_browser(server, page, login, alice, ops):
    vectors = [v.markdown for v in CORPUS if not v.may_refuse] + OWN_VECTORS
    agents = [api_agent(ops) for _ in range(-(-len(vectors) // PER_AGENT))]
    with httpx.Client(base_url=server.url, timeout=10) as http:

        def write(token: str, key: str, markdown: str) -> int:
            response = http.post(
                "/api/progress-card",
                content=json.dumps({"sessionKey": key, "markdown": markdown}),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            assert response.status_code == 200, (key, response.text)
            return response.json()["revision"]

        # Every vector as its own card, so none hides another (an unclosed tag would).
        for index, markdown in enumerate(vectors):
            _, token = agents[index // PER_AGENT]
            write(token, f"vector-{index}", markdown)
        batches = chunks(vectors)
        (_, token) = agents[0]
        write(token, "all", batches[0])
        everything = Session.objects.get(agent=agents[0][0].agent, context_id="all")

        login(alice)
        watch = Watch(page, server)
        for registered, _ in agents:
            page.goto(f"{server.url}/?agent={registered.agent.pk}")
            # Live, so the page's own script has also swapped in the refetched fragments.
            expect(page.locator("[data-live-status]")).to_have_text("live")
            shown = page.locator(".tiles article[data-session]").count()
            assert shown == Session.objects.filter(agent=registered.agent).count()
            watch.assert_nothing_ran(f"overview of {registered.agent.name}")

        page.goto(f"{server.url}/sessions/{everything.pk}/")
        expect(page.locator("[data-live-status]")).to_have_text("live")
        watch.assert_nothing_ran("session page")
        # The rest of the corpus arrives through the socket, swapped in by the page's script.
        for markdown in batches[1:]:
            new_revision = write(token, "all", markdown)
            expect(
                page.locator(f'[data-live-card]:visible article[data-session="{everything.pk}"]')
            ).to_have_attribute("data-revision", str(new_revision))
            watch.assert_nothing_ran(f"live swap to revision {new_revision}")
        assert ProgressCard.objects.get(session=everything).revision == len(batches)


# Markup an agent wrote as HTML (issue 29): none of it is markup on the page, its words are,
# and a bar past its max is full.
RAW_HTML_NOTE = (
    'Deploy <progress value="9" max="7"></progress>\n\n'
    'Read <a href="https://example.com/phish" title="t">the log</a> <strong>now</strong>\n\n'
    "<table><tr><td>cell</td></tr></table>\n\n"
    "<h1>Heading</h1>"
)


def test_raw_html_in_a_card_is_no_markup_in_the_browser_and_a_bar_past_its_max_is_full(
    server, page, login, alice, ops
):
    registered, token = api_agent(ops)
    response = httpx.post(
        f"{server.url}/api/progress-card",
        content=json.dumps({"sessionKey": "raw", "markdown": RAW_HTML_NOTE}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    session = Session.objects.get(agent=registered.agent)

    login(alice)
    watch = Watch(page, server)
    page.goto(f"{server.url}/sessions/{session.pk}/")
    expect(page.locator("[data-live-status]")).to_have_text("live")
    note = page.locator(f'[data-live-card]:visible article[data-session="{session.pk}"] .note')
    elements = note.evaluate("n => [...n.querySelectorAll('*')].map(e => e.localName)")
    assert elements == ["p", "progress", "p"]
    # position is -1 for a bar that does not say how far (no value), else value / max.
    assert note.locator("progress").evaluate("bar => bar.position") == 1
    for words in ("Deploy", "Read the log now", "cell", "Heading"):
        expect(note).to_contain_text(words)
    watch.assert_nothing_ran("a card of raw HTML")
