"""Every page a person sees passes axe-core with no violations, in the light and the dark colour
scheme, at a desk width and a phone width.

axe-core comes from its maintained Python package (never copied into the repository) and is
injected by the test, so the context bypasses the page's CSP: the pages keep their strict policy
and the browser is the only thing told to look away. All of axe's default rules run (WCAG 2 A
and AA plus its best practices: unique landmarks, content inside landmarks, heading order).

The monitoring screen and a session page run with every test run; the other pages, with the
long checks (`-m slow`, which CI runs on PostgreSQL + Redis), to keep the default run inside its
time budget."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.contrib.auth.models import User
from django.contrib.auth.tokens import default_token_generator
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.browser.conftest import (
    CONSOLE,
    CONTEXT,
    TIMEOUT_MS,
    VIEWPORT,
    caught_up,
    remember_server,
)
from tests.builders import approval, artifact, message, progress, status
from tests.conftest import make_agent, member
from tests.live_server import LiveServer, push_http

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMES = ("light", "dark")
PHONE = {"width": 390, "height": 844}
TV = {"width": 1920, "height": 1080}
AXE = Axe()


@pytest.fixture
def context(browser: Browser, request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    """The shared `context`, bypassing CSP so the test can inject axe (tests only)."""
    ctx = browser.new_context(viewport=VIEWPORT, bypass_csp=True)
    ctx.set_default_timeout(TIMEOUT_MS)
    console: list[str] = []
    ctx.on("page", lambda page: page.on("pageerror", lambda error: console.append(str(error))))
    request.node.stash[CONSOLE] = console
    request.node.stash[CONTEXT] = ctx
    yield ctx
    ctx.close()


def settled(page: Page) -> None:
    """Nothing moving: colours are measured after transitions (a scheme switch) end. Endless
    animations (a pulse) are left running: they never finish."""
    page.evaluate(
        """() => Promise.all(document.getAnimations()
            .filter((a) => a.effect?.getComputedTiming().endTime !== Infinity)
            .map((a) => a.finished.catch(() => null)))"""
    )


def violations(page: Page, label: str) -> list[str]:
    """axe's violations, one line per rule and one per element: what, where and why."""
    settled(page)
    lines = []
    for rule in AXE.run(page).response["violations"]:
        lines.append(f"{label}: {rule['id']} ({rule['impact']}): {rule['help']}")
        for node in rule["nodes"]:
            why = node.get("failureSummary", "").replace("\n", " ")
            where = ", ".join(map(str, node["target"]))
            lines.append(f"    {where}: {node['html'][:200]}\n      {why}")
    return lines


def audit(page: Page, label: str, *, widths: tuple[dict, ...] = (VIEWPORT, PHONE)) -> None:
    """axe on the page as it stands, in each scheme and width, and then with every <details>
    open (what they fold away is checked too); every violation is listed."""
    found: list[str] = []
    for size in widths:
        page.set_viewport_size(size)
        for scheme in SCHEMES:
            page.emulate_media(color_scheme=scheme)
            found += violations(page, f"{label} ({scheme}, {size['width']}px wide)")
    page.set_viewport_size(VIEWPORT)
    if page.evaluate(
        "[...document.querySelectorAll('details:not([open])')].map((d) => d.open = true).length"
    ):
        for scheme in SCHEMES:
            page.emulate_media(color_scheme=scheme)
            found += violations(page, f"{label} ({scheme}, every <details> open)")
    page.emulate_media(color_scheme="light")
    assert not found, "axe-core found violations:\n" + "\n".join(found)


def said_by_a_person(text: str, *, context: str = "ctx-1") -> dict:
    said = message(text, message_id=f"said-{context}", role="ROLE_USER")
    return {"message": {**said, "contextId": context}}


@pytest.fixture
def busy_team(server: LiveServer, agent_stub, ops) -> Session:
    """A team whose agent has said things, written its card, kept an artifact and waits for an
    approval in one session; waits for an answer to a question in a second; failed a third. The
    first and the third have the same title."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    steps = progress(
        ("Read the logs", "completed"), ("Deploy", "in_progress"), ("Check", "pending")
    )
    files = {"kind": "report", "version": 2, "size": 2048, "sha256": "ab" * 32, "path": "out/r.md"}
    region = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu", "us"]})
    for body in (
        # Two sessions a person started with the same words: the same title twice.
        said_by_a_person("Deploy the site"),
        said_by_a_person("Deploy the site", context="ctx-3"),
        status("WORKING", at=1, text="Reading the logs"),
        status("WORKING", at=2, text="Plan ready", metadata=steps),  # a card receipt
        artifact("report", "Summary: all green", name="Report", files=files),
        status("WORKING", at=3, text="Tests pass"),
        status("AUTH_REQUIRED", at=4, metadata=approval("i-1", "Ship v2?", detail={"to": "prod"})),
        status("INPUT_REQUIRED", context="ctx-2", task="task-2", at=5, metadata=region),
        status("FAILED", context="ctx-3", task="task-3", at=6, text="Out of memory"),
    ):
        assert push_http(server, registered, body).status_code == 200
    return Interaction.objects.get(interaction_id="i-1").task.session


@pytest.fixture
def approver_page(page: Page, login, busy_team, ops, approvers) -> Page:
    login(member("alice", ops, approvers))
    return page


@pytest.fixture
def opened(approver_page: Page, server: LiveServer) -> Callable[[str], Page]:
    def go(path: str) -> Page:
        approver_page.goto(server.url + path)
        expect(approver_page.locator("[data-live-status]")).to_have_text("live")
        caught_up(approver_page)
        return approver_page

    return go


def test_the_monitoring_screen_and_a_session_page_have_no_violations(opened, busy_team):
    """The two pages every run audits, on one busy team (set up once for both)."""
    page = opened("/")
    expect(page.locator("[data-waiting] [data-interaction]")).to_have_count(2)
    expect(page.locator("[data-tile-session]")).to_have_count(1)  # waiting ones are rows
    # The same title twice on one screen: a row and a tile.
    names = page.locator("[data-inbox-session], .tile-title a", has_text="Deploy the site")
    expect(names).to_have_count(2)
    audit(page, "monitoring screen")

    page = opened(f"/sessions/{busy_team.pk}/")
    expect(page.locator("[data-interaction]")).to_have_count(1)
    expect(page.locator("[data-receipt]")).not_to_have_count(0)
    expect(page.locator("[data-artifact]")).to_have_count(1)
    audit(page, "session page")


@pytest.mark.slow
def test_the_monitoring_screen_with_the_keys_dialog_open_has_no_violations(opened):
    page = opened("/")
    page.keyboard.press("?")
    expect(page.locator("[data-keys-help]")).to_be_visible()
    audit(page, "monitoring screen, keys dialog open", widths=(VIEWPORT,))


@pytest.mark.slow
def test_the_wall_display_has_no_violations(opened):
    page = opened("/?display=wall")
    expect(page.locator("[data-tile-session]")).to_have_count(3)
    audit(page, "wall display", widths=(VIEWPORT, PHONE, TV))


@pytest.mark.slow
def test_the_session_page_of_a_question_has_no_violations(opened):
    question = Interaction.objects.get(interaction_id="q-1")
    page = opened(f"/sessions/{question.task.session_id}/")
    expect(page.locator("[data-interaction] button", has_text="eu")).to_be_visible()
    audit(page, "session page, a question with choices")


@pytest.mark.slow
def test_a_session_page_with_a_sidebar_hovercard_open_has_no_violations(opened, busy_team):
    page = opened(f"/sessions/{busy_team.pk}/")
    other = page.locator("[data-sidebar-session][data-has-card=true] a").filter(
        has_not=page.locator(f'[href="/sessions/{busy_team.pk}/"]')
    )
    other.first.focus()
    expect(page.locator("[data-hovercard]")).to_be_visible()
    audit(page, "session page, hovercard open", widths=(VIEWPORT,))


@pytest.mark.slow
def test_the_raw_deliveries_page_has_no_violations(opened, busy_team):
    """Every push of the waiting task as received: long bodies scroll in a box a keyboard can
    reach (scrollable-region-focusable)."""
    task = Interaction.objects.get(interaction_id="i-1").task
    page = opened(f"/sessions/{busy_team.pk}/tasks/{task.pk}/deliveries/")
    expect(page.locator("[data-delivery-body]")).not_to_have_count(0)
    audit(page, "raw deliveries")


@pytest.mark.slow
def test_the_agent_page_and_the_usage_page_have_no_violations(opened, busy_team):
    page = opened(f"/agents/{busy_team.agent_id}/")
    expect(page.locator("h1")).to_be_visible()
    audit(page, "agent page")
    page = opened("/usage/")
    audit(page, "usage page")


@pytest.mark.slow
def test_the_settings_page_has_no_violations(opened):
    page = opened("/settings/")
    expect(page.locator("main [data-notify-toggle]")).to_have_text("Notifications: off")
    audit(page, "settings")


@pytest.mark.slow
def test_a_session_page_seen_by_a_viewer_has_no_violations(page, login, server, busy_team, ops):
    login(member("victor", ops))  # may follow, may not answer: no forms
    page.goto(f"{server.url}/sessions/{busy_team.pk}/")
    expect(page.locator("[data-live-status]")).to_have_text("live")
    caught_up(page)
    audit(page, "session page (viewer)")


@pytest.mark.slow
def test_the_not_found_page_has_no_violations(page, login, server, ops):
    page.goto(server.url + "/no-such-page/")
    audit(page, "404 (logged out)")
    login(member("alice", ops))
    response = page.goto(server.url + "/sessions/999999/")
    assert response is not None and response.status == 404
    audit(page, "404 (logged in)")


@pytest.mark.slow
def test_the_login_page_has_no_violations(page, server, db):
    page.goto(server.url + "/accounts/login/")
    audit(page, "login")
    page.locator("#id_username").fill("nobody")
    page.locator("#id_password").fill("wrong")
    page.locator("form button[type=submit]").click()
    expect(page.locator("[role=alert]")).to_be_visible()
    audit(page, "login, refused")
    for _ in range(4):  # the fifth failure in all is locked out (AXES_FAILURE_LIMIT)
        page.locator("#id_username").fill("nobody")
        page.locator("#id_password").fill("wrong")
        page.locator("form button[type=submit]").click()
    expect(page).to_have_title(re.compile("Too many failed logins"))
    audit(page, "login, locked out")


class MailingServer(LiveServer):
    """A server configured for email, so the password reset pages are routed (no mail is
    sent: the test never posts an address)."""

    def environment(self) -> dict[str, str]:
        return super().environment() | {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": "9"}


@pytest.fixture
def mailing_server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    with MailingServer() as server:
        remember_server(request, server)
        yield server


@pytest.mark.slow
def test_the_password_reset_pages_have_no_violations(page, mailing_server, db):
    base = mailing_server.url + "/accounts"
    page.goto(base + "/login/")
    page.get_by_role("link", name="Forgot your password?").click()
    expect(page).to_have_url(base + "/password_reset/")
    audit(page, "password reset form")
    page.goto(base + "/password_reset/done/")
    audit(page, "password reset sent")
    person = User.objects.create_user("dora", email="dora@example.test", password="old-pass-1")
    uid = urlsafe_base64_encode(force_bytes(person.pk))
    page.goto(f"{base}/reset/{uid}/{default_token_generator.make_token(person)}/")
    expect(page.locator("input[type=password]")).to_have_count(2)
    audit(page, "password reset, new password")
    page.goto(f"{base}/reset/{uid}/not-a-token/")
    audit(page, "password reset, link no longer valid")
    page.goto(base + "/reset/done/")
    audit(page, "password reset complete")
