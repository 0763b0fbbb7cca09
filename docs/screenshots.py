"""Refresh the README's screenshots: `.venv/bin/python docs/screenshots.py`.

It needs the test extra, for Playwright (`.venv/bin/pip install -e '.[test]'`; it includes
the demo's packages), and Debian's chromium at /usr/bin/chromium (or `CHROMIUM=/path`). It
runs `manage.py demo` in a throwaway data directory, logs in as the demo user in a real
browser, and photographs, with the example agent's approval waiting: the monitoring screen at
1440 px in the light and the dark theme, a session page at 1440 px and on a 390 px phone, and
the wall display at 1920 x 1080, and the session page again with desktop notifications
turned on and the demo team's webhook told (a loopback receiver stands in for it,
ONLOOKER_DEMO_WEBHOOK); then, once the demo's sessions have moved on, a search of the
monitoring screen, a session's timeline, the cost panel and an agent's page; overwriting
docs/{monitoring,monitoring-dark,session,phone,wall,notified,search,timeline,usage,agent}.png."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = (
    "monitoring.png",
    "monitoring-dark.png",
    "session.png",
    "phone.png",
    "wall.png",
    "notified.png",
    "search.png",
    "timeline.png",
    "usage.png",
    "agent.png",
)


class Receiver(BaseHTTPRequestHandler):
    """The demo team's webhook: takes every event."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> int:
    port, agent_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/hooks/onlooker"
    with tempfile.TemporaryDirectory(prefix="onlooker-shots-") as data:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))}
        env.update(
            ONLOOKER_DATA_DIR=data, ONLOOKER_PUBLIC_URL=url, DEBUG="1", ONLOOKER_DEMO_WEBHOOK=hook
        )
        log = Path(data) / "demo.log"
        with log.open("w") as out:
            demo = subprocess.Popen(  # noqa: S603 - our own program
                [sys.executable, "manage.py", "demo", "--port", str(port),
                 "--agent-port", str(agent_port), "--sessions", "4"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                deadline = time.monotonic() + 60
                while "Onlooker is running" not in log.read_text():
                    if demo.poll() is not None or time.monotonic() > deadline:
                        print(log.read_text(), file=sys.stderr)
                        return 1
                    time.sleep(0.2)
                password = re.search(r"with the password (\S+)", log.read_text())[1]
                shoot(url, password)
            finally:
                demo.send_signal(signal.SIGINT)
                demo.wait(timeout=20)
    print("wrote " + ", ".join(str(OUT / name) for name in SHOTS))
    return 0


def shoot(url: str, password: str) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless=new", "--no-sandbox", "--disable-gpu"]
        )
        light = browser.new_context(viewport={"width": 1440, "height": 900})
        page = light.new_page()
        page.goto(url + "/")
        page.fill("input[name=username]", "demo")
        page.fill("input[name=password]", password)
        page.click("button[type=submit], input[type=submit]")
        approve = page.locator('[data-waiting] button[value="approve"]').first
        expect(approve).to_be_visible(timeout=60_000)
        time.sleep(3)  # let the other sessions get a little further
        page.screenshot(path=OUT / "monitoring.png")
        row = page.locator("[data-inbox-row]").filter(has=page.locator('button[value="approve"]'))
        session_url = url + row.first.locator("[data-inbox-session]").get_attribute("href")
        logged_in = light.storage_state()

        page.goto(session_url)
        expect(page.locator('[data-answer-form] button[value="approve"]')).to_be_visible()
        page.screenshot(path=OUT / "session.png")

        dark = browser.new_context(
            viewport={"width": 1440, "height": 900}, color_scheme="dark", storage_state=logged_in
        )
        page = dark.new_page()
        page.goto(url + "/")
        expect(page.locator("[data-live-status]")).to_have_text("live")
        page.screenshot(path=OUT / "monitoring-dark.png")

        phone = browser.new_context(
            viewport={"width": 390, "height": 844},
            device_scale_factor=2,
            is_mobile=True,
            has_touch=True,
            storage_state=logged_in,
        )
        page = phone.new_page()
        page.goto(session_url)
        expect(page.locator('[data-answer-form] button[value="approve"]')).to_be_visible()
        page.screenshot(path=OUT / "phone.png")

        wall = browser.new_context(
            viewport={"width": 1920, "height": 1080}, storage_state=logged_in
        )
        page = wall.new_page()
        page.goto(url + "/?display=wall")
        expect(page.locator("[data-live-status]")).to_have_text("live")
        page.screenshot(path=OUT / "wall.png")

        told = browser.new_context(viewport={"width": 1440, "height": 900}, storage_state=logged_in)
        told.grant_permissions(["notifications"], origin=url)
        page = told.new_page()
        page.goto(session_url)
        page.click("[data-notify-toggle]")
        expect(page.locator("[data-notify-toggle]")).to_have_attribute("aria-pressed", "true")
        expect(page.locator("[data-notified] .notified-sent").first).to_be_visible(timeout=20_000)
        page.screenshot(path=OUT / "notified.png")

        # Approve the release, so it deploys, finishes and reports what it cost.
        page.locator('[data-answer-form] button[value="approve"]').first.click()
        history = browser.new_context(
            viewport={"width": 1440, "height": 900}, storage_state=logged_in
        )
        page = history.new_page()
        deadline = time.monotonic() + 60
        while True:
            page.goto(url + "/?usage=7")
            if "reported cost" not in page.locator("[data-usage]").inner_text():
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the approved release never reported its cost")
            time.sleep(1)
        page.locator("[data-usage]").screenshot(path=OUT / "usage.png")
        page.goto(url + "/?q=release+deploy")
        expect(page.locator(".results-list mark").first).to_be_visible()
        page.screenshot(path=OUT / "search.png")
        tall = browser.new_context(
            viewport={"width": 1440, "height": 2400}, storage_state=logged_in
        )
        page = tall.new_page()
        page.goto(session_url)
        timeline = page.locator("[data-timeline]")
        expect(timeline).to_be_visible()
        for attempt in range(10):  # a live refetch may replace it mid-shot: take it again
            try:
                timeline.screenshot(path=OUT / "timeline.png")
                break
            except PlaywrightError:
                if attempt == 9:
                    raise
                time.sleep(1)
        page.goto(session_url)
        page.locator("a[href^='/agents/']").first.click()
        expect(page.locator("[data-agent-page]")).to_be_visible()
        page.screenshot(path=OUT / "agent.png", full_page=True)
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
