"""The live views in a real browser: pushes over real HTTP to a real Daphne change what an
open page shows, without a reload, through the socket; the placement rules and the sidebar
hovercard hold; a page survives a server restart and catches up.

Markup hooks relied on (issue 4): `section[data-tile-session]` in `.tiles`,
`[data-count="waiting"]`, `[data-live-card]`, `article[data-session][data-revision]`,
`li[data-sidebar-session] a.sidebar-link`, `[role="dialog"][data-hovercard]`,
`[data-live-status]` saying `live` or `reconnecting`.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from django.test import Client
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

from tasks.answering.agents import new_api_token
from tasks.models import ProgressCard, Session, digest
from tests.browser.conftest import remember_server
from tests.builders import status
from tests.conftest import RegisteredAgent, make_agent, push
from tests.live_server import LiveServer, push_http

pytestmark = pytest.mark.django_db(transaction=True)

HOVERCARD = '[role="dialog"][data-hovercard]'
NO_RELOAD = "window.__noReload = true"


def send(server: LiveServer, registered: RegisteredAgent, body: dict) -> Session:
    """Push over HTTP to the server; return the session it changed (committed by then)."""
    response = push_http(server, registered, body)
    assert response.status_code == 200, (response.status_code, response.text, server.log())
    context = body["statusUpdate"]["contextId"]
    return Session.objects.get(agent=registered.agent, context_id=context)


def revision(session: Session) -> str:
    return str(ProgressCard.objects.get(session=session).revision)


def card_in(page: Page, scope: str, session: Session):
    return page.locator(f'{scope} article[data-session="{session.pk}"]')


def live_card(page: Page, session: Session):
    """The session's card in the visible live placement."""
    return card_in(page, "[data-live-card]:visible", session)


def tile_order(page: Page) -> list[int]:
    return page.eval_on_selector_all(
        ".tiles section[data-tile-session]", "tiles => tiles.map(t => +t.dataset.tileSession)"
    )


def expect_tile_order(page: Page, expected: list[int], timeout: float = 5_000) -> None:
    # On a timeout, the assertion below says what the order is instead.
    with contextlib.suppress(PlaywrightError):
        page.wait_for_function(
            """expected => {
                const tiles = document.querySelectorAll('.tiles section[data-tile-session]');
                const order = [...tiles].map(t => +t.dataset.tileSession);
                return order.join() === expected.join();
            }""",
            arg=expected,
            timeout=timeout,
        )
    assert tile_order(page) == expected


def expect_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__noReload") is True, "the page was reloaded"


# -- a, b: pushes change open pages ------------------------------------------------------


def test_push_updates_the_session_card_without_reload(server, page, login, open_live, alice, ops):
    agent = make_agent(team=ops, signing=True)
    session = send(server, agent, status("WORKING", at=1, text="Reading the logs"))
    login(alice)
    open_live(f"/sessions/{session.pk}/")
    expect(live_card(page, session)).to_contain_text("Reading the logs")
    page.evaluate(NO_RELOAD)

    send(server, agent, status("WORKING", at=2, text="Writing the fix"))

    card = live_card(page, session)
    expect(card).to_contain_text("Writing the fix")
    expect(card).to_have_attribute("data-revision", revision(session))
    expect(card).not_to_contain_text("Reading the logs")
    expect_not_reloaded(page)


def test_push_reorders_the_overview_and_updates_the_tab_title(
    server, page, login, open_live, alice, ops
):
    agent = make_agent(team=ops)
    older = send(server, agent, status("WORKING", at=1, context="older", text="Compiling"))
    newer = send(server, agent, status("WORKING", at=1, context="newer", task="t2", text="Tests"))
    login(alice)
    open_live("/")
    expect_tile_order(page, [newer.pk, older.pk])
    expect(page).to_have_title("Onlooker")
    expect(page.locator('[data-count="waiting"]')).to_have_text("0")
    page.evaluate(NO_RELOAD)

    send(server, agent, status("WORKING", at=2, context="older", text="Linking"))

    expect_tile_order(page, [older.pk, newer.pk])  # the most recently updated first
    tile = page.locator(f'.tiles section[data-tile-session="{older.pk}"]')
    expect(tile.locator(f'article[data-session="{older.pk}"]')).to_have_attribute(
        "data-revision", revision(older)
    )
    expect(tile).to_contain_text("Linking")

    send(server, agent, status("INPUT_REQUIRED", at=3, context="older", text="Which branch?"))

    # Needing a person, it moves from the tiles to the list above them (issue 12).
    expect_tile_order(page, [newer.pk])
    row = page.locator(f'[data-waiting] [data-waiting-session="{older.pk}"]')
    expect(row).to_contain_text("Which branch?")
    expect(page).to_have_title("(1) Onlooker")
    expect(page.locator('[data-count="waiting"]')).to_have_text("1")
    # Told to screen readers too, not only shown.
    expect(page.locator("[data-live-announce]")).to_have_text("older: needs an answer")
    expect_not_reloaded(page)


# -- c: placement ------------------------------------------------------------------------


def expect_one_live_card(page: Page, session: Session, *, wide: bool) -> None:
    expect(page.locator("[data-live-card]:visible")).to_have_count(1)
    shown, hidden = "aside.session-rail", "details.composer-card"
    if not wide:
        shown, hidden = hidden, shown
    expect(page.locator(f"{shown}[data-live-card]")).to_be_visible()
    expect(page.locator(f"{hidden}[data-live-card]")).to_be_hidden()
    expect(card_in(page, f"{shown}[data-live-card]", session)).to_have_count(1)


def test_exactly_one_live_card_is_visible_at_wide_and_narrow_widths(
    server, context, page, login, alice, ops
):
    agent = make_agent(team=ops)
    session = send(server, agent, status("WORKING", at=1, text="Halfway"))
    login(alice)
    url = f"{server.url}/sessions/{session.pk}/"

    page.goto(url)
    expect_one_live_card(page, session, wide=True)
    page.set_viewport_size({"width": 600, "height": 800})
    expect_one_live_card(page, session, wide=False)
    page.set_viewport_size({"width": 1280, "height": 800})
    expect_one_live_card(page, session, wide=True)

    narrow = context.new_page()
    narrow.set_viewport_size({"width": 600, "height": 800})
    narrow.goto(url)
    expect_one_live_card(narrow, session, wide=False)
    # A live update lands in the visible placement, and still only one is shown.
    expect(narrow.locator("[data-live-status]")).to_have_text("live")
    send(server, agent, status("WORKING", at=2, text="Almost done"))
    expect(card_in(narrow, "details.composer-card[data-live-card]", session)).to_have_attribute(
        "data-revision", revision(session)
    )
    expect_one_live_card(narrow, session, wide=False)


# -- d, e, f: the sidebar hovercard ------------------------------------------------------


def two_sessions(server: LiveServer, ops) -> tuple[RegisteredAgent, Session, Session]:
    agent = make_agent(team=ops)
    here = send(server, agent, status("WORKING", at=1, context="here", text="This one"))
    other = send(
        server, agent, status("WORKING", at=1, context="other", task="t2", text="Other plan")
    )
    return agent, here, other


def test_hovercard_opens_on_hover_shows_the_other_sessions_card_and_updates_live(
    server, page, login, open_live, alice, ops
):
    agent, here, other = two_sessions(server, ops)
    login(alice)
    open_live(f"/sessions/{here.pk}/")
    expect(page.locator(HOVERCARD)).to_be_hidden()

    page.locator(f'li[data-sidebar-session="{other.pk}"]').hover()

    hovercard = page.locator(HOVERCARD)
    expect(hovercard).to_be_visible()
    card = card_in(page, HOVERCARD, other)
    expect(card).to_contain_text("Other plan")
    expect(card).to_have_attribute("data-revision", revision(other))
    expect(card_in(page, HOVERCARD, here)).to_have_count(0)

    send(server, agent, status("WORKING", at=2, context="other", task="t2", text="Replanned"))

    expect(card).to_contain_text("Replanned")
    expect(card).to_have_attribute("data-revision", revision(other))
    expect(hovercard).to_be_visible()


def test_an_open_hovercard_fetches_a_card_only_for_a_message_newer_than_it_shows(
    server, page, login, open_live, alice, ops
):
    """The hovercard fetches the card as it opens. The socket's message for that same
    revision, arriving after (it was on its way), fetches nothing more; a newer one does."""
    agent, here, other = two_sessions(server, ops)
    routes, held, holding = [], [], [True]

    def through(ws) -> None:  # the real server behind; messages about `other` held back
        def from_server(message) -> None:
            if holding[0] and json.loads(message).get("session") == other.pk:
                held.append(message)
            else:
                ws.send(message)

        ws.connect_to_server().on_message(from_server)
        routes.append(ws)

    page.route_web_socket("**/ws/live/**", through)
    fetched = []
    card_url = f"/sessions/{other.pk}/card/"
    page.on("request", lambda request: request.url.endswith(card_url) and fetched.append(1))
    login(alice)
    open_live(f"/sessions/{here.pk}/")
    send(server, agent, status("WORKING", at=2, context="other", task="t2", text="Replanned"))
    for _ in range(100):  # until its message is here, held
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the message about the other session never came"

    page.locator(f'li[data-sidebar-session="{other.pk}"]').hover()
    card = card_in(page, HOVERCARD, other)
    expect(card).to_contain_text("Replanned")
    assert len(fetched) == 1

    holding[0] = False
    for message in held:  # now the page hears what it shows already
        routes[-1].send(message)
    send(server, agent, status("WORKING", at=3, context="other", task="t2", text="Third"))

    # Heard in order: once the newer one's card is shown, the held one was handled before.
    expect(card).to_contain_text("Third")
    assert len(fetched) == 2, "a message no newer than the open card fetched it again"


def test_a_hovercard_opened_by_keyboard_focus_stays_current_through_a_refetch_until_escape(
    server, page, login, open_live, alice, ops
):
    """Keyboard focus on a sidebar row opens its hovercard; a refetch keeps the row focused
    and the open hovercard current; Escape closes it and leaves the focus on the row."""
    agent, here, other = two_sessions(server, ops)
    login(alice)
    open_live(f"/sessions/{here.pk}/")
    link = page.locator(f'li[data-sidebar-session="{other.pk}"] a.sidebar-link')
    link.focus()
    expect(page.locator(HOVERCARD), "keyboard focus did not open the hovercard").to_be_visible()
    expect(card_in(page, HOVERCARD, other)).to_contain_text("Other plan")
    # Changed in this process, so no live message tells the page (this thread cannot reach
    # the channel layer while Playwright's loop runs, and the server's layer is its own):
    # only a refetch can. The page refetches on every reconnect and when its tab becomes
    # visible again; the latter is what this dispatches.
    body = status("WORKING", at=2, context="other", task="t2", text="Replanned meanwhile")
    assert push(Client(), agent, body).status_code == 200
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    expect(page.locator(f'li[data-sidebar-session="{other.pk}"]')).to_have_attribute(
        "data-revision", revision(other)
    )

    expect(link, "a refetch took the focus from the sidebar row").to_be_focused()
    expect(page.locator(HOVERCARD), "a refetch closed the open hovercard").to_be_visible()
    expect(card_in(page, HOVERCARD, other)).to_contain_text("Replanned meanwhile")

    page.keyboard.press("Escape")
    expect(page.locator(HOVERCARD), "Escape did not close the hovercard").to_be_hidden()
    expect(link, "Escape did not leave the focus on the row").to_be_focused()


def test_no_hovercard_for_a_session_without_a_card(server, page, login, open_live, alice, ops):
    agent = make_agent(team=ops)
    token = new_api_token()
    agent.agent.api_token_digest = digest(token)
    agent.agent.save()
    # A session the card API created without ever writing its card.
    response = Client().post(
        "/api/progress-card",
        json.dumps({"sessionKey": "cardless"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    cardless = Session.objects.get(context_id="cardless")
    assert not ProgressCard.objects.filter(session=cardless).exists()
    with_card = send(server, agent, status("WORKING", at=1, context="carded", text="Has one"))
    # A third session's page: the page's own session never gets a hovercard.
    host = send(server, agent, status("WORKING", at=1, context="host", task="t3", text="Host"))
    login(alice)
    open_live(f"/sessions/{host.pk}/")

    # The control: on this page, hovering a row with a card opens its hovercard.
    page.locator(f'li[data-sidebar-session="{with_card.pk}"]').hover()
    expect(card_in(page, HOVERCARD, with_card)).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator(HOVERCARD)).to_be_hidden()

    page.locator(f'li[data-sidebar-session="{cardless.pk}"]').hover()
    # A negative needs a bound: three times the ~350 ms hover delay the control just met.
    page.wait_for_timeout(1_000)
    expect(page.locator(f"{HOVERCARD}:visible")).to_have_count(0)
    expect(card_in(page, HOVERCARD, cardless)).to_have_count(0)


# -- g: reconnecting ---------------------------------------------------------------------


@pytest.mark.slow
def test_page_reconnects_after_a_server_restart_and_shows_what_changed_meanwhile(
    request, page, login, alice, ops
):
    agent = make_agent(team=ops)
    with LiveServer() as own:
        remember_server(request, own)
        session = send(own, agent, status("WORKING", at=1, text="Before the restart"))
        login(alice, own.url)
        page.goto(f"{own.url}/sessions/{session.pk}/")
        status_indicator = page.locator("[data-live-status]")
        expect(status_indicator).to_have_text("live")
        page.evaluate(NO_RELOAD)

        own.stop()
        expect(status_indicator).to_have_text("reconnecting")
        # Changed while the server is down, through the real receiver in this process: only
        # the refetch on reconnect can tell the page.
        response = push(Client(), agent, status("WORKING", at=2, text="Changed while away"))
        assert response.status_code == 200, response.content
        own.start()

        expect(status_indicator).to_have_text("live", timeout=30_000)
        card = live_card(page, session)
        expect(card).to_contain_text("Changed while away")
        expect(card).to_have_attribute("data-revision", revision(session))
        expect_not_reloaded(page)


# -- stale and repeated messages -----------------------------------------------------------


def test_a_stale_or_repeated_message_never_replaces_a_newer_card(
    server, page, login, open_live, alice, ops
):
    """Messages may arrive late, twice, or out of order (two groups, two processes, a
    refetch racing the socket): the page keeps the newest revision it has shown."""
    routes = []

    def through(ws) -> None:  # the real server behind, plus a hand to inject messages
        ws.connect_to_server()
        routes.append(ws)

    page.route_web_socket("**/ws/live/**", through)
    agent = make_agent(team=ops)
    session = send(server, agent, status("WORKING", at=1, text="First"))
    login(alice)
    open_live(f"/sessions/{session.pk}/")
    send(server, agent, status("WORKING", at=2, text="Second"))
    card = live_card(page, session)
    expect(card).to_contain_text("Second")
    current = int(revision(session))

    stale = Client()
    stale.force_login(alice)
    snapshot = stale.get(f"/sessions/{session.pk}/card/").json()
    old_html = snapshot["html"]["card"].replace("Second", "Stale text")
    page.evaluate(
        """() => new MutationObserver(() => {
            if (document.body.textContent.includes("Stale text")) window.__sawStale = true;
        }).observe(document.body, {subtree: true, childList: true, characterData: true})"""
    )
    for injected in (current - 1, current):  # older, then a repeat of the same revision
        message = {
            **snapshot,
            "revision": injected,
            "html": {**snapshot["html"], "card": old_html.replace(
                f'data-revision="{current}"', f'data-revision="{injected}"'
            )},
        }  # fmt: skip
        routes[-1].send(json.dumps(message))
    # A marker message with a newer revision proves the injected ones were processed first.
    newer = {**snapshot, "revision": current + 1, "updatedAt": snapshot["updatedAt"]}
    newer["html"] = {**snapshot["html"], "card": snapshot["html"]["card"].replace(
        f'data-revision="{current}"', f'data-revision="{current + 1}"'
    ).replace("Second", "Newest")}  # fmt: skip
    routes[-1].send(json.dumps(newer))

    expect(card).to_contain_text("Newest")
    assert page.evaluate("window.__sawStale") is None, "a stale message was shown"
