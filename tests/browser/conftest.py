"""Fixtures for real-browser tests: Playwright (sync API) driving Debian's chromium against a
real Daphne (`tests.live_server`) that serves the test database.

- `browser`: one chromium for the package. Missing /usr/bin/chromium skips the tests, unless
  ONLOOKER_REQUIRE_BROWSER=1 (CI), which fails them instead.
- `server`: one Daphne for the package (starting one costs 1-2 s), checked before each test.
  Named `server`, not `live_server`: pytest-django owns that name and its autouse helper
  would treat ours as its own WSGI live server.
- `page`: a fresh context and page per test (1280×800), logged in with `login(user)`.
- A failed test saves a screenshot of every page it had open to test-artifacts/ and adds the
  browser console and the server log of that test to the report.

Tests must be `@pytest.mark.django_db(transaction=True)` so the server sees their data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.live_server import LiveServer, session_cookie
from tests.processes import ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
]
ARTIFACTS = ROOT / "test-artifacts"
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 10_000  # Playwright actions and navigations; `expect` has its own (below)
EXPECT_TIMEOUT_MS = 5_000


@pytest.fixture(scope="package")
def browser(django_db_setup) -> Iterator[Browser]:
    """One chromium for every browser test.

    Playwright's sync API keeps an asyncio loop marked as running on this thread from start
    to stop. While it is, Django refuses ORM calls (SynchronousOnlyOperation) and asgiref's
    async_to_sync refuses to run. So: the test database is set up before (this fixture
    depends on it), DJANGO_ALLOW_ASYNC_UNSAFE (Django's documented escape hatch) is set for
    exactly as long as the loop runs, and package scope stops Playwright as soon as the
    browser tests are done, so the rest of the suite never runs beside that loop."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: apt-get install chromium to run the browser tests"
        if os.environ.get("ONLOOKER_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + " (ONLOOKER_REQUIRE_BROWSER=1)", pytrace=False)
        pytest.skip(reason)
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="package")
def _shared_server(django_db_setup) -> Iterator[LiveServer]:
    # After django_db_setup: the child is pointed at the test database, which must exist.
    with LiveServer() as live:
        yield live


@pytest.fixture
def server(_shared_server: LiveServer, request: pytest.FixtureRequest) -> LiveServer:
    """The package's Daphne, running (restarted if an earlier test stopped it). Safe to share:
    transactional tests empty the tables after each test, and ids are never reused, so
    nothing one test left in the server's memory matches the next test's sessions."""
    if not _shared_server.running:
        _shared_server.start()
    request.node.stash[LOG_START] = len(_shared_server.log())
    request.node.stash[SERVERS] = [_shared_server]
    return _shared_server


@pytest.fixture
def context(browser: Browser, request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(TIMEOUT_MS)
    console: list[str] = []
    request.node.stash[CONSOLE] = console

    def watch(page: Page) -> None:
        page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))

    ctx.on("page", watch)
    request.node.stash[CONTEXT] = ctx
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@pytest.fixture
def login(context: BrowserContext, server: LiveServer) -> Callable[..., None]:
    """`login(user)`: the context gets a session cookie for `user` (no login form). Cookies
    belong to a host, not a port, so it works for every server on 127.0.0.1."""

    def log_in(user: User, url: str | None = None) -> None:
        context.add_cookies([session_cookie(user, url or server.url)])

    return log_in


@pytest.fixture
def open_live(page: Page, server: LiveServer) -> Callable[[str], None]:
    """`open_live(path)`: load a page, wait until its socket says `live` (a push made after
    that is heard) and until the refetch the page makes on connecting is done (it replaces
    fragments, which would race with a test that starts interacting at once)."""

    def go(path: str) -> None:
        page.goto(server.url + path)
        expect(page.locator("[data-live-status]")).to_have_text("live")
        caught_up(page)

    return go


def caught_up(page: Page) -> None:
    """Wait until the page's refetch on connecting is done (static/js/live.js marks it on
    <html data-synced>): sooner than waiting for the network to be idle for half a second."""
    expect(page.locator("html[data-synced]")).to_be_attached()


# -- reporting failures -------------------------------------------------------------------

CONSOLE = pytest.StashKey[list]()
CONTEXT = pytest.StashKey[object]()
SERVERS = pytest.StashKey[list]()
LOG_START = pytest.StashKey[int]()


def remember_server(request: pytest.FixtureRequest, server: LiveServer) -> None:
    """Tests that start their own server call this so a failure shows its log too."""
    request.node.stash.setdefault(SERVERS, []).append(server)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "call" and report.failed:
        _attach_browser_evidence(item, report)
    return report


def _attach_browser_evidence(item: pytest.Item, report: pytest.TestReport) -> None:
    context = item.stash.get(CONTEXT, None)
    if context is not None:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name)
        saved = []
        for index, open_page in enumerate(getattr(context, "pages", [])):
            path = ARTIFACTS / (f"{name}.png" if index == 0 else f"{name}-{index + 1}.png")
            try:
                open_page.screenshot(path=str(path), full_page=True)
                saved.append(str(path))
            except Exception as error:  # noqa: BLE001 - evidence must not hide the failure
                saved.append(f"(no screenshot of page {index + 1}: {error})")
        if saved:
            print("screenshots: " + ", ".join(saved))
            report.sections.append(("browser screenshots", "\n".join(saved)))
    console = item.stash.get(CONSOLE, None)
    if console:
        report.sections.append(("browser console", "\n".join(console[-200:])))
    start = item.stash.get(LOG_START, 0)
    for index, live in enumerate(item.stash.get(SERVERS, [])):
        log = live.log()[start:] if index == 0 else live.log()
        if log.strip():
            report.sections.append((f"server log ({live.url})", log[-20_000:]))
