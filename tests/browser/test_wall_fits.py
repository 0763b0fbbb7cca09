"""The wall display fits what it shows (issue 33): at 1920×1080 twelve sessions share one page
and fill the screen, each tile cut only between whole lines (never a line sliced by a tile's
edge), and no "More" link (the session page is a click away on the title, and a wall is not
clicked). Tiles hold what a busy session shows: a long question, a plan, a long note."""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import expect

from tests.browser.test_wall import WALL, open_wall, team_agent, wall_screen
from tests.builders import approval, progress, status
from tests.conftest import RegisteredAgent, push

pytestmark = pytest.mark.django_db(transaction=True)

LONG_NOTE = (
    "Rolled out to the canary hosts in eu-west and us-east; error rates are flat, latency is "
    "within two milliseconds of the previous release, and the database migration finished "
    "in four minutes. Waiting for the soak period before the remaining regions follow. "
) * 3
LONG_QUESTION = (
    "Deploy checkout 2.4 to all production regions now? The canary has run for an hour "
    "without errors, the rollback plan is ready and the on-call engineer has been told."
)


def busy(agent: RegisteredAgent, number: int) -> None:
    steps = progress(
        ("Read the issue", "completed"),
        (f"Write fix {number} for the flaky checkout test in the payments service", "in_progress"),
        ("Open the pull request", "pending"),
    )
    body = status(
        "WORKING", task=f"t-{number}", context=f"c-{number}", at=number, text=LONG_NOTE,
        metadata=steps,
    )  # fmt: skip
    assert push(Client(), agent, body).status_code == 200


def asking(agent: RegisteredAgent, number: int) -> None:
    body = status(
        "AUTH_REQUIRED", task=f"t-{number}", context=f"c-{number}", at=number,
        metadata=approval(f"i-{number}", LONG_QUESTION),
    )  # fmt: skip
    assert push(Client(), agent, body).status_code == 200


# Every line of text in a shown tile, against each box that clips it (the tile, a clamped
# paragraph, a note with a height): a line either shows whole or not at all.
CUT_LINES = """() => {
  const cut = [];
  for (const tile of document.querySelectorAll("[data-tile-session]")) {
    if (!tile.checkVisibility()) continue;
    const walker = document.createTreeWalker(tile, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.textContent.trim()) continue;
      const clips = [];
      for (let box = node.parentElement; box; box = box.parentElement) {
        if (getComputedStyle(box).overflowY !== "visible") clips.push(box.getBoundingClientRect());
        if (box === tile) break;
      }
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const line of range.getClientRects()) {
        if (line.height < 1) continue;
        const hidden = clips.some((c) => line.top >= c.bottom - 0.5 || line.bottom <= c.top + 0.5);
        const whole = clips.every((c) => line.top >= c.top - 0.5 && line.bottom <= c.bottom + 0.5);
        if (!hidden && !whole) {
          cut.push(`${tile.dataset.tileSession}: ${node.textContent.slice(0, 40)}`);
        }
      }
    }
  }
  return cut;
}"""


def test_twelve_busy_sessions_fill_one_wall_page_with_whole_lines_and_no_more_link(
    request, browser, server, alice, ops
):
    agent = team_agent(ops)
    for number in range(1, 10):
        busy(agent, number)
    for number in range(10, 13):
        asking(agent, number)
    wall = wall_screen(browser, server, alice, request)
    open_wall(wall, server)

    tiles = wall.locator("[data-tile-session]:visible")
    expect(tiles).to_have_count(12)
    expect(wall.locator("[data-wall-page]")).to_be_hidden()  # one page: nothing turns
    assert wall.locator("[data-tile-more]:visible").count() == 0, "a wall tile offers More"

    boxes = tiles.evaluate_all(
        "tiles => tiles.map(t => { const r = t.getBoundingClientRect(); "
        "return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; })"
    )
    assert max(box["bottom"] for box in boxes) <= WALL["height"], "a tile runs off the screen"
    # The grid is sized to its sessions: the tiles reach the bottom and the right edge, no
    # band of empty screen under or beside them.
    assert max(box["bottom"] for box in boxes) >= WALL["height"] * 0.9
    assert max(box["right"] for box in boxes) >= WALL["width"] * 0.95
    heights = {round(box["bottom"] - box["top"]) for box in boxes}
    assert max(heights) - min(heights) <= 2, f"tiles of unequal height: {sorted(heights)}"

    assert wall.evaluate(CUT_LINES) == [], "lines cut at a tile's edge"
    expect(wall.locator(".tile .card-question").first).to_be_visible()  # the question shows

    # A small screen holds four of the smallest tiles: the three waiting sessions stay and
    # the nine others take turns beside them; the lines are still whole.
    wall.set_viewport_size({"width": 800, "height": 450})
    expect(wall.locator("[data-wall-page]")).to_have_text("Page 1 of 9")
    expect(tiles).to_have_count(4)
    assert wall.evaluate(CUT_LINES) == []
