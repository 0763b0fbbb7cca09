"""The session page as a person on a phone lives it (issue 33 §1, §4, §6): the question comes
first with Approve and Deny in view on load and nothing sticky over them, then the transcript,
then the timeline folded away (card revisions as one line, short ids that copy whole); the
header speaks no protocol; a deny's reason typed on the page is still there after a reload, on
the Decisions list and the timeline; a cancel says who asked. axe-core is clean at phone width
in both themes."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from tasks.models import Interaction
from tasks.wire import profile
from tests.answering.test_talking import task_json
from tests.browser.conftest import TIMEOUT_MS, caught_up
from tests.browser.test_accessibility import audit
from tests.builders import approval, progress, status
from tests.conftest import make_agent, member
from tests.live_server import push_http, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
TASK = "9b2f6c1e-4d3a-4f5b-8c7d-0e1f2a3b4c5d"
# A long detail: on a phone it scrolls in its own box, and the buttons stay in view.
DETAIL = {
    "service": "checkout",
    "version": "2.4.0",
    "environment": "production",
    "regions": ["eu-west-1", "us-east-1", "ap-south-1"],
    "change": "Moves payments to the new provider; " * 6,
    "rollback": "Automatic on a 2% error rate within 10 minutes",
    "owner": "payments team",
}


def story_session(server, stub, ops) -> int:
    """An agent that worked a while (two card revisions, a note in the transcript), then asks
    for an approval with a long detail."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    steps = progress(("Build", "completed"), ("Deploy", "in_progress"))
    for second, body in enumerate(
        [
            status("WORKING", at=1, task=TASK, text="Reading the logs", metadata=steps),
            status("WORKING", at=2, task=TASK, metadata=progress(("Build", "completed"))),
            status(
                "AUTH_REQUIRED",
                at=3,
                task=TASK,
                metadata=approval("i-1", "Deploy checkout 2.4 to production?", detail=DETAIL),
            ),
        ]
    ):
        assert push_http(server, registered, body).status_code == 200, second
    return Interaction.objects.get().task.session_id


def in_view_and_uncovered(page: Page, target: Locator) -> str:
    """'' when the whole of `target` is inside the window and its middle and the points near
    its corners are pressed as itself (no sticky bar on top); else what is wrong."""
    return page.evaluate(
        """(element) => {
            const box = element.getBoundingClientRect();
            if (box.top < 0 || box.left < 0 || box.bottom > innerHeight || box.right > innerWidth)
                return `out of view: ${JSON.stringify(box)} in ${innerWidth}x${innerHeight}`;
            // Its middle and four points near its corners (inside their rounding).
            const dx = box.width / 4, dy = box.height / 4;
            const points = [[box.left + box.width / 2, box.top + box.height / 2],
                [box.left + dx, box.top + dy], [box.right - dx, box.top + dy],
                [box.left + dx, box.bottom - dy], [box.right - dx, box.bottom - dy]];
            for (const [x, y] of points) {
                const hit = document.elementFromPoint(x, y);
                if (hit !== element && !element.contains(hit))
                    return `covered at ${x},${y} by ${hit?.outerHTML.slice(0, 120)}`;
            }
            return "";
        }""",
        target.element_handle(),
    )


def before(page: Page, first: str, second: str) -> bool:
    return page.evaluate(
        """([a, b]) => Boolean(document.querySelector(a).compareDocumentPosition(
            document.querySelector(b)) & Node.DOCUMENT_POSITION_FOLLOWING)""",
        [first, second],
    )


def test_on_a_phone_the_question_comes_first_in_reach_and_a_deny_keeps_its_reason(
    browser, server, agent_stub, ops, approvers
):
    session = story_session(server, agent_stub, ops)
    alice = member("alice", ops, approvers)
    context = browser.new_context(viewport=PHONE, bypass_csp=True)  # axe is injected
    context.set_default_timeout(TIMEOUT_MS)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    context.add_cookies([session_cookie(alice, server.url)])
    try:
        page = context.new_page()
        page.goto(f"{server.url}/sessions/{session}/")
        expect(page.locator("[data-live-status]")).to_have_text("live")
        caught_up(page)

        # On load, in both themes: Approve and Deny whole in the window, nothing over them.
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            for value in ("approve", "deny"):
                button = page.locator(f'[data-interaction] button[value="{value}"]')
                assert in_view_and_uncovered(page, button) == "", (scheme, value)
        page.emulate_media(color_scheme="light")

        # The question, then the transcript, then the folded timeline.
        assert before(page, "[data-interaction]", "ol.transcript")
        assert before(page, "ol.transcript", "[data-timeline]")
        head = page.locator(".session-meta")
        expect(head).not_to_contain_text("Tier")
        expect(head).not_to_contain_text("Profile v2")
        header_state = page.locator("[data-session-state]").inner_text()
        assert header_state == "Needs approval"

        fold = page.locator("[data-timeline-fold]")
        expect(fold).not_to_have_attribute("open", "")
        fold.locator("summary").click()
        rows = page.locator("[data-timeline-list] tbody tr")
        expect(rows.filter(has_text=re.compile(r"Card updated 2 times"))).to_have_count(1)
        expect(page.locator("[data-timeline-state]").last).to_have_text(header_state)
        short = page.locator("[data-timeline-list] [data-short-id]").first
        expect(short).to_have_text("9b2f6c1e…")
        expect(short).to_have_attribute("title", TASK)
        copy = page.locator(f'[data-timeline-task="{TASK}"] button[data-copy]')
        copy.click()
        expect(copy).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == TASK
        fold.locator("summary").click()  # folded again for the audit's first pass

        audit(page, "session page", widths=(PHONE,))
        page.set_viewport_size(PHONE)

        # A deny with its reason: after a reload, the Decisions list and the timeline say it.
        page.reload()
        caught_up(page)
        page.locator("[data-interaction] textarea[name=reason]").fill("Not on a Friday")
        page.locator('[data-interaction] button[value="deny"]').click()
        decisions = page.locator("[data-decisions]")
        expect(decisions).to_contain_text("Denied by alice", timeout=10_000)
        page.reload()
        caught_up(page)
        expect(decisions).to_contain_text(
            re.compile(r"Denied by alice, .+, on the page\. Reason: Not on a Friday")
        )
        expect(decisions.locator("[data-decision-reason] q")).to_have_text("Not on a Friday")
        page.locator("[data-timeline-fold] summary").click()
        expect(page.locator("[data-timeline-list] [data-decision-reason] q")).to_have_text(
            "Not on a Friday"
        )

        # A cancel says who asked for it.
        agent_stub.answer({"jsonrpc": "2.0", "result": task_json(TASK, "TASK_STATE_CANCELED")})
        page.get_by_text("Cancel task…").click()
        page.get_by_role("button", name="Cancel task", exact=True).click()
        expect(page.locator(".session-meta [data-cancelled-by]")).to_contain_text(
            "Cancelled by alice", timeout=10_000
        )
        expect(page.locator("[data-timeline-list] [data-cancelled-by]")).to_have_text(
            "Cancelled by alice"
        )
    finally:
        context.close()
