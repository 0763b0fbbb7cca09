"""The design system in a real browser: the dark theme follows the system or a person's
choice (kept per browser), buttons read as what they do, agent text 300 characters long
without a space never widens the page, and the tab's icon counts what waits.

Markup hooks relied on: `[data-theme-toggle]` (theme.js), `link[data-favicon]` with
`data-favicon-count` (favicon.js), `[data-count="waiting"]`.
"""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from playwright.sync_api import Page, expect

from tasks.models import Session
from tasks.wire import profile
from tests.builders import approval, status
from tests.conftest import make_agent
from tests.live_server import LiveServer, push_http

pytestmark = pytest.mark.django_db(transaction=True)

# No spaces, no hyphens: nothing for the browser to break at unless the CSS lets it.
LONG_TITLE = "T" + "itle" * 50 + "x" * 99  # 300 characters
LONG_STEP = "S" * 300
LONG_STEP_NOTE = "n" * 300
LONG_NOTE = "N" * 300

OVERFLOW = "document.documentElement.scrollWidth - window.innerWidth"


def rgb(page: Page, selector: str, prop: str) -> tuple[int, int, int]:
    value = page.eval_on_selector(selector, f"e => getComputedStyle(e).{prop}")
    parts = value[value.index("(") + 1 : value.index(")")].replace(",", " ").split()
    return tuple(round(float(p)) for p in parts[:3])


def luminance(color: tuple[int, int, int]) -> float:
    """WCAG relative luminance, 0 (black) to 1 (white)."""

    def channel(c: int) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in color)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def is_dark(page: Page) -> bool:
    background, text = rgb(page, "body", "backgroundColor"), rgb(page, "body", "color")
    return luminance(background) < 0.05 and luminance(text) > 0.6


def is_light(page: Page) -> bool:
    background, text = rgb(page, "body", "backgroundColor"), rgb(page, "body", "color")
    return luminance(background) > 0.8 and luminance(text) < 0.05


def long_session(server: LiveServer, ops) -> Session:
    """A session whose title, plan step, step note and card note are each 300 characters
    with no place to break, pushed through the real push endpoint."""
    registered = make_agent(team=ops)
    person = {"messageId": "u-1", "role": "ROLE_USER", "parts": [{"text": LONG_TITLE}]}
    snapshot = {
        "task": {
            "id": "task-1",
            "contextId": "ctx-1",
            "status": {"state": "TASK_STATE_WORKING"},
            "history": [person],
        }
    }
    assert push_http(server, registered, snapshot).status_code == 200
    steps = [
        {"label": LONG_STEP, "state": "in_progress", "note": LONG_STEP_NOTE},
        {"label": "Then the rest", "state": "pending"},
    ]
    body = status("WORKING", at=2, text=LONG_NOTE, metadata={profile.PROGRESS: {"steps": steps}})
    assert push_http(server, registered, body).status_code == 200
    session = Session.objects.get(agent=registered.agent)
    # Onlooker keeps a title's first 200 characters (sessions/changes.py): still one long word.
    assert session.title == LONG_TITLE[:200]
    return session


# -- themes --------------------------------------------------------------------------------


def test_a_dark_system_gets_a_dark_page_with_light_text(server, page, login, open_live, alice):
    login(alice)
    page.emulate_media(color_scheme="light")
    open_live("/")
    assert is_light(page)

    page.emulate_media(color_scheme="dark")

    assert is_dark(page)
    # Surfaces and controls follow, not only the body.
    assert luminance(rgb(page, ".topbar", "backgroundColor")) < 0.05
    assert luminance(rgb(page, "[data-theme-toggle]", "color")) > 0.6


def test_the_toggle_overrides_the_system_and_is_kept_across_a_reload(server, page):
    # Logged out: the login page has the topbar and its toggle too.
    page.emulate_media(color_scheme="dark")
    page.goto(server.url + "/accounts/login/")
    toggle = page.locator("[data-theme-toggle]")
    expect(toggle).to_have_text("Theme: System")
    assert is_dark(page)

    toggle.click()
    expect(toggle).to_have_text("Theme: Light")
    assert is_light(page)
    page.reload()
    expect(toggle).to_have_text("Theme: Light")
    assert is_light(page)

    toggle.click()
    expect(toggle).to_have_text("Theme: Dark")
    page.emulate_media(color_scheme="light")
    page.reload()
    expect(toggle).to_have_text("Theme: Dark")
    assert is_dark(page)
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"

    toggle.click()
    expect(toggle).to_have_text("Theme: System")
    assert is_light(page)
    assert page.evaluate("localStorage.getItem('onlooker-theme')") is None


@pytest.mark.slow
def test_the_chosen_theme_is_set_before_the_page_is_painted(server, page):
    page.goto(server.url + "/accounts/login/")
    page.evaluate("localStorage.setItem('onlooker-theme', 'dark')")
    # Recorded by the first stylesheet-dependent frame: the attribute is there before the
    # body exists, so no frame shows the other theme.
    page.add_init_script(
        """document.addEventListener('readystatechange', () => {
            if (document.readyState === 'interactive')
                window.__themeAtParse = document.documentElement.dataset.theme;
        });"""
    )
    page.reload()
    assert page.evaluate("window.__themeAtParse") == "dark"
    assert is_dark(page)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_primary_danger_and_secondary_buttons_look_different(server, page, scheme):
    page.emulate_media(color_scheme=scheme)
    page.goto(server.url + "/accounts/login/")
    page.evaluate(
        """() => {
            for (const kind of ['', 'primary', 'danger']) {
                const button = document.createElement('button');
                button.textContent = kind || 'secondary';
                if (kind) button.className = kind;
                button.dataset.sample = kind || 'secondary';
                document.querySelector('main').append(button);
            }
        }"""
    )
    look = {
        kind: (
            rgb(page, f'[data-sample="{kind}"]', "backgroundColor"),
            rgb(page, f'[data-sample="{kind}"]', "color"),
        )
        for kind in ("secondary", "primary", "danger")
    }
    assert len(set(look.values())) == 3, look
    # Styled, not the browser's default grey button.
    assert look["secondary"][0] != (239, 239, 239)


# -- long text ---------------------------------------------------------------------------


@pytest.mark.slow  # the default run keeps its time budget; CI runs it with -m slow
def test_300_character_words_never_widen_the_page(server, page, login, open_live, alice, ops):
    """The monitoring screen and the session page, at a desk width and a phone width: one
    long session for the four (each check names the page and width that failed)."""
    session = long_session(server, ops)
    login(alice)
    for where, path in (("monitoring", "/"), ("session", f"/sessions/{session.pk}/")):
        for width in (1440, 390):
            shown = f"the {where} page at {width} px"
            page.set_viewport_size({"width": width, "height": 900})
            open_live(path)

            bar = page.locator("details.composer-card")
            if bar.is_visible():
                # Narrow session page: the card is folded beside the composer; open it as a
                # person would.
                bar.locator("summary").click()
            card = page.locator(f'article[data-session="{session.pk}"]:visible').first
            for text in (LONG_STEP, LONG_STEP_NOTE, LONG_NOTE):
                expect(card, f"{shown} lost a long word").to_contain_text(text)
            if where == "session":
                expect(page.locator("h1"), f"{shown}: title").to_have_text(LONG_TITLE[:200])
            overflow = page.evaluate(OVERFLOW)
            assert overflow <= 0, f"{shown} is {overflow} px too wide"


# -- favicon -------------------------------------------------------------------------------


def favicon_count(page: Page) -> str | None:
    return page.get_attribute("link[data-favicon]", "data-favicon-count")


def badge_text(page: Page) -> str:
    href = page.get_attribute("link[data-favicon]", "href")
    assert href.startswith("data:image/svg+xml,"), href
    return unquote(href)


def test_the_favicon_shows_a_badge_when_an_approval_waits(
    server, page, login, open_live, alice, ops
):
    registered = make_agent(team=ops)
    assert push_http(server, registered, status("WORKING", at=1)).status_code == 200
    session = Session.objects.get()
    login(alice)
    open_live("/")
    expect(page.locator("link[data-favicon]")).to_have_attribute("data-favicon-count", "0")
    assert "<text" not in badge_text(page)

    body = status("AUTH_REQUIRED", at=2, metadata=approval("i-1", "Ship it?"))
    assert push_http(server, registered, body).status_code == 200

    expect(page.locator('[data-count="waiting"]')).to_have_text("1")
    expect(page.locator("link[data-favicon]")).to_have_attribute("data-favicon-count", "1")
    assert ">1</text>" in badge_text(page)

    # Any page: the session page reads the count from the tab title.
    open_live(f"/sessions/{session.pk}/")
    expect(page).to_have_title(f"(1) {session.context_id} · Onlooker")
    expect(page.locator("link[data-favicon]")).to_have_attribute("data-favicon-count", "1")


# -- keyboard and touch --------------------------------------------------------------------


@pytest.mark.slow
def test_a_keyboard_focus_shows_a_ring(server, page):
    page.goto(server.url + "/accounts/login/")
    page.locator("[data-theme-toggle]").focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")  # focus by keyboard: :focus-visible applies
    focused = page.evaluate(
        """() => {
            const s = getComputedStyle(document.activeElement);
            return [document.activeElement.dataset.themeToggle !== undefined,
                    s.outlineStyle, parseFloat(s.outlineWidth)];
        }"""
    )
    assert focused[0] is True
    assert focused[1] == "solid" and focused[2] >= 2


@pytest.mark.slow
def test_touch_screens_get_44_px_targets(browser, server):
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True)
    try:
        page = context.new_page()
        page.goto(server.url + "/accounts/login/")
        assert page.evaluate("matchMedia('(pointer: coarse)').matches") is True
        for selector in ["[data-theme-toggle]", "button[type=submit]", "#id_username"]:
            box = page.locator(selector).bounding_box()
            assert box["height"] >= 44, (selector, box)
    finally:
        context.close()
