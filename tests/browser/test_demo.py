"""The first run, end to end and from the outside: `manage.py demo` in its own data directory,
a person logging in with the password it printed, answering the example agent's approval in
a real browser, and the agent finishing with its cost on the card; "New session" offering what
the agent does. Then Ctrl-C, and a second run that reuses what the first made, its sessions
included."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.processes import ROOT, clean_environment, free_port

START_TIMEOUT = 60.0


class Demo:
    def __init__(self, data_dir: Path, ports: tuple[int, int] | None = None) -> None:
        self.port, self.agent_port = ports or (free_port(), free_port())
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data_dir / f"demo-{self.port}.log"
        env = clean_environment(
            ONLOOKER_DATA_DIR=str(data_dir), ONLOOKER_PUBLIC_URL=self.url, DEBUG="1"
        )
        env.pop("DJANGO_SETTINGS_MODULE")
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--port", str(self.port),
             "--agent-port", str(self.agent_port), "--sessions", "2"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_until_running(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while "Onlooker is running" not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the demo did not start:\n{self.output()}")
            time.sleep(0.2)
        return self.output()

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        try:
            return self.process.wait(timeout=20)
        finally:
            self.log.close()


def log_in(page: Page, demo: Demo, password: str) -> None:
    page.goto(demo.url + "/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", password)
    page.click("button[type=submit], input[type=submit]")
    expect(page.locator("[data-live-status]")).to_have_text("live")


@pytest.mark.slow
def test_the_demo_shows_a_real_agent_at_work_and_an_answer_finishes_it(
    browser: Browser, tmp_path: Path
):
    demo_dir = tmp_path
    demo = Demo(demo_dir)
    try:
        output = demo.wait_until_running()
        password = re.search(r"Log in as 'demo' with the password (\S+)", output)
        assert password, output
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        log_in(page, demo, password[1])

        # "New session" offers what the example agent does (its card's skills); one click
        # puts an example in the message field.
        page.locator(".new-session > summary").click()
        examples = page.locator("[data-session-example]:visible")
        expect(examples).to_have_count(3)
        example = examples.first.get_attribute("data-session-example")
        examples.first.click()
        expect(page.locator("textarea[name=text]")).to_have_value(example or "")
        page.locator(".new-session > summary").click()

        # The example agent's sessions arrive by themselves, one waiting for an approval (a
        # row of the list of what waits for a person, the other a tile).
        shown = page.locator("[data-tile-session], [data-inbox-row]")
        expect(shown).to_have_count(2, timeout=30_000)
        approve = page.locator('[data-waiting] button[value="approve"]').first
        expect(approve).to_be_visible(timeout=30_000)
        has_approve = page.locator('button[value="approve"]')
        approval = page.locator("[data-inbox-row]").filter(has=has_approve).first
        approval.locator("[data-inbox-session]").click()  # the agent name links elsewhere
        page.locator('[data-answer-form] button[value="approve"]').first.click()

        card = page.locator("[data-live-card]:visible article")
        # telemetry/v1 at the end: the demo's run costs under a cent, said so, never "$0.0000"
        expect(card).to_contain_text(re.compile(r"Cost (< )?\$\d"), timeout=60_000)
        expect(page.locator("[data-session-state]")).to_have_text("Done")
        context.close()
    finally:
        code = demo.interrupt()
    assert code == 0, demo.output()
    assert "Stopping the dashboard and the example agent" in demo.output()

    # The same data directory and ports: the user and the agent are reused.
    again = Demo(demo_dir, (demo.port, demo.agent_port))
    try:
        output = again.wait_until_running()
        assert "Log in as 'demo' (password as printed before)" in output, output
        assert "Registered the example agent" not in output, output
        # Its sessions are the first run's, not started a second time.
        assert "Kept 2 sessions from an earlier run" in output, output
    finally:
        assert again.interrupt() == 0, again.output()
