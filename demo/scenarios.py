"""What the example agent does: three scenarios, each a script of plan steps, markdown notes,
artifacts and the questions it puts to a person.

A scenario is an async generator: it reports through its `Run` and, where it needs a person,
`yield`s an `Ask` and receives the person's typed `Answer` (the executor suspends the
generator between the two turns of the task). It ends by calling `run.finish(...)`.

- release (messages about a release, deploy or ship): five steps with test and rollout bars,
  an uncertain upload (effects/v1), release notes, then an **approval** before deploying.
  Approved: deploys, adds a deploy report, COMPLETED. Denied: the deploy and its check are
  skipped, no deploy report, and it still ends COMPLETED (the build and notes stand; the
  note says production was not touched).
- research (research, question, compare): asks a **question** with choices and writes its
  summary around the chosen focus.
- connect (connect, github, account): asks for a **connection**. Approved: reads the
  repository and opens a pull request. Declined: ends CANCELED, saying nothing was done.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncGenerator

from a2a.types import TaskState

from demo.run import Answer, Ask, Run, Scenario, bar, note, plain, table

# Messages a demo can send to show each scenario.
STARTERS = (
    "Ship release 2.5.0 of the checkout service",
    "Research: compare PostgreSQL and SQLite for a small team",
    "Connect the GitHub account and open the pull request",
)

# -- release --------------------------------------------------------------------------------

TESTS = 1204


async def release(run: Run, request: str) -> AsyncGenerator[Ask, Answer]:
    found = re.search(r"\b\d+\.\d+(?:\.\d+)?\b", request)
    version = found.group(0) if found else "2.5.0"
    service = "checkout"
    title = f"Release {service} {version}"
    run.plan(
        "Collect the changes",
        "Run the test suite",
        f"Build and upload {version}",
        "Deploy to production",
        "Verify the deploy",
    )
    run.mark(0, "in_progress")
    await run.working(note(f"{title}: collecting the changes", run.steps_bar()))
    await run.pause(2)
    run.mark(0, "completed", "12 pull requests merged since 2.4")
    run.mark(1, "in_progress")
    for passed in (402, 811, TESTS):
        suites = [("Unit", min(passed, 900), 0), ("Integration", max(0, passed - 900), 0)]
        await run.working(
            note(
                f"{title}: running the test suite",
                run.steps_bar(),
                bar("Tests", passed, TESTS),
                table(("Suite", "Passed", "Failed"), suites),
            )
        )
        await run.pause(1.5)
    run.mark(1, "completed", f"{TESTS:,} passed")
    run.mark(2, "in_progress")
    await run.working(note(f"{title}: building", run.steps_bar()))
    await run.pause(2)
    # The store never answered the upload: it may or may not have happened (effects/v1).
    bundle = f"{service}-{version}.tar.gz"
    await run.working(
        note(
            f"{title}: upload unconfirmed",
            run.steps_bar(),
            f"The upload of `{bundle}` timed out before the artifact store answered: it may "
            "or may not be there. The deploy checks its checksum before using it.",
            table(("File", "Size", "Stored"), [(bundle, "48 MB", "unknown")]),
        ),
        uncertain=f"upload:{bundle}",
    )
    await run.pause(1)
    await run.artifact(
        "release-notes",
        f"release-notes-{version}.md",
        f"What changed in {service} {version}",
        release_notes(service, version),
        f"https://example.com/releases/{service}/{version}",
        f"docs/releases/{version}.md",
    )
    run.mark(2, "completed", bundle)
    run.mark(3, "in_progress", "waiting for approval")
    answer = yield Ask(
        "approval",
        f"Deploy {service} {version} to production?",
        {"service": service, "version": version, "environment": "production", "hosts": 6},
    )
    if not answer.approved:
        run.mark(3, "skipped", "approval denied")
        run.mark(4, "skipped")
        await run.finish(
            TaskState.TASK_STATE_COMPLETED,
            note(
                f"{title}: not deployed",
                run.steps_bar(),
                "The deploy was **denied**, so production was not touched: it still runs the "
                f"previous release. The build `{bundle}` and its release notes are kept for a "
                "later deploy.",
            ),
        )
        return
    run.mark(3, "in_progress", "approved")
    for hosts in (0, 2, 4, 6):
        await run.working(
            note(
                f"{title}: deploying",
                run.steps_bar(),
                bar("Hosts", hosts, 6),
                table(("Environment", "Version", "Hosts"), [("production", version, f"{hosts}/6")]),
            )
        )
        await run.pause(1.5)
    run.mark(3, "completed", "6/6 hosts")
    run.mark(4, "in_progress")
    await run.working(note(f"{title}: verifying", run.steps_bar(), "Watching error rates."))
    await run.pause(2)
    run.mark(4, "completed", "error rate 0.02%")
    await run.artifact(
        "deploy-report",
        f"deploy-report-{version}.md",
        f"How {service} {version} reached production",
        deploy_report(service, version),
        f"https://example.com/deploys/{service}/{version}",
        f"reports/deploy-{service}-{version}.md",
    )
    await run.finish(
        TaskState.TASK_STATE_COMPLETED,
        note(
            f"{title} is live",
            run.steps_bar(),
            table(
                ("Check", "Result"),
                [("Hosts", "6/6"), ("Error rate", "0.02%"), ("p95 latency", "212 ms")],
            ),
        ),
    )


def release_notes(service: str, version: str) -> str:
    return (
        f"# {service} {version}\n\n"
        "- Faster checkout for returning customers\n"
        "- Card payments retry once on a network error\n"
        "- 12 pull requests, 1,204 tests passing\n"
    )


def deploy_report(service: str, version: str) -> str:
    return (
        f"# Deploy of {service} {version}\n\n"
        "| Host group | Hosts | Result |\n|---|---|---|\n"
        "| eu-west | 3 | healthy |\n| us-east | 3 | healthy |\n\n"
        "Error rate after the deploy: 0.02%.\n"
    )


# -- research -------------------------------------------------------------------------------

FOCUSES = ["Cost", "Speed", "Ease of setup"]


async def research(run: Run, request: str) -> AsyncGenerator[Ask, Answer]:
    topic = plain(re.sub(r"^\s*research\s*:?\s*", "", request, flags=re.IGNORECASE), 80)
    topic = topic or "the question"
    run.plan(
        "Read the question",
        "Gather sources",
        "Choose the focus",
        "Compare the options",
        "Write the summary",
    )
    run.mark(0, "in_progress")
    await run.working(note(f"Researching: {topic}", run.steps_bar()))
    await run.pause(1.5)
    run.mark(0, "completed")
    run.mark(1, "in_progress")
    sources = [("Documentation", 14, "yes"), ("Benchmarks", 6, "yes"), ("Forums", 31, "some")]
    for found in (1, 2, 3):
        await run.working(
            note(
                f"Researching: {topic}",
                run.steps_bar(),
                bar("Sources read", found, 3),
                table(("Source", "Pages", "Relevant"), sources[:found]),
            )
        )
        await run.pause(1.5)
    run.mark(1, "completed", "51 pages read")
    run.mark(2, "in_progress")
    answer = yield Ask(
        "question", "What should the comparison focus on?", {"choices": list(FOCUSES)}
    )
    focus = plain(answer.value or "", 80)
    run.mark(2, "completed", focus)
    run.mark(3, "in_progress")
    await run.working(note(f"Comparing, focused on {focus}", run.steps_bar()))
    await run.pause(2)
    run.mark(3, "completed")
    run.mark(4, "in_progress")
    await run.working(note(f"Writing the summary, focused on {focus}", run.steps_bar()))
    await run.pause(1.5)
    run.mark(4, "completed")
    slug = re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-")[:60] or "summary"
    await run.artifact(
        "summary",
        "summary.md",
        f"The comparison, focused on {focus}",
        f"# {topic}\n\nFocus: **{focus}**\n\n"
        f"Read 51 pages from 3 kinds of sources; the options differ most in {focus.lower()}.\n",
        f"https://example.com/research/{slug}",
        f"research/{slug}.md",
    )
    await run.finish(
        TaskState.TASK_STATE_COMPLETED,
        note(
            f"Summary ready, focused on {focus}",
            run.steps_bar(),
            table(("Topic", "Focus", "Sources"), [(topic, focus, 3)]),
        ),
    )


# -- connect --------------------------------------------------------------------------------


async def connect(run: Run, request: str) -> AsyncGenerator[Ask, Answer]:
    run.plan(
        "Check the GitHub connection",
        "Connect the account",
        "Read the repository",
        "Open the pull request",
    )
    run.mark(0, "in_progress")
    await run.working(note("Checking the GitHub connection", run.steps_bar()))
    await run.pause(1.5)
    run.mark(0, "completed", "no account connected")
    run.mark(1, "in_progress")
    answer = yield Ask(
        "connection",
        "Connect a GitHub account so I can read the repository and open the pull request.",
        {"url": "https://example.com/connect", "provider": "GitHub"},
    )
    if not answer.approved:
        run.mark(1, "failed", "declined")
        run.mark(2, "skipped")
        run.mark(3, "skipped")
        await run.finish(
            TaskState.TASK_STATE_CANCELED,
            note(
                "Stopped: no GitHub connection",
                "The connection was declined, so nothing was read and no pull request was opened.",
            ),
        )
        return
    run.mark(1, "completed", "connected")
    run.mark(2, "in_progress")
    files = [("src/", 48), ("tests/", 31), ("docs/", 9)]
    for read in (1, 2, 3):
        await run.working(
            note(
                "Reading the repository",
                run.steps_bar(),
                bar("Folders", read, 3),
                table(("Folder", "Files"), files[:read]),
            )
        )
        await run.pause(1.5)
    run.mark(2, "completed", "88 files")
    run.mark(3, "in_progress")
    await run.working(note("Opening the pull request", run.steps_bar()))
    await run.pause(1.5)
    run.mark(3, "completed", "#42")
    await run.artifact(
        "pull-request",
        "pull-request-42.md",
        "The pull request it opened",
        "# Update the dependencies\n\nBumps 3 packages; all 1,204 tests pass.\n",
        "https://example.com/pull/42",
        "pulls/42.md",
    )
    await run.finish(
        TaskState.TASK_STATE_COMPLETED,
        note(
            "Pull request #42 is open",
            run.steps_bar(),
            table(("Repository", "Pull request"), [("example/checkout", "#42")]),
        ),
    )


# -- picking one ----------------------------------------------------------------------------

SCENARIOS: dict[str, Scenario] = {"release": release, "research": research, "connect": connect}
KEYWORDS = {
    "release": ("release", "deploy", "ship"),
    "research": ("research", "question", "compare"),
    "connect": ("connect", "github", "account"),
}


class Picker:
    """Picks a scenario by the first keyword in a message; a message without one gets the
    next scenario in turn, so several demo sessions show all three."""

    def __init__(self) -> None:
        self._turns = itertools.cycle(SCENARIOS)

    def pick(self, text: str) -> str:
        found = [
            (match.start(), name)
            for name, words in KEYWORDS.items()
            for word in words
            # At a word's start: "shipping" ships, "relationship" does not.
            if (match := re.search(rf"\b{word}", text, flags=re.IGNORECASE))
        ]
        return min(found)[1] if found else next(self._turns)
