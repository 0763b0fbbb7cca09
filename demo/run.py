"""The scenario-facing side of the example agent: a `Run` says things about one task (plan,
notes, artifacts, questions, its end) as A2A events with Nylorun profile v2 metadata, and the
markdown helpers write the card notes (`<progress>` bars and small tables).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.tasks import TaskUpdater
from a2a.types import Artifact, Part, TaskArtifactUpdateEvent, TaskState

INTERACTIONS = "https://docs.nylorun.com/a2a/interactions/v1"
EFFECTS = "https://docs.nylorun.com/a2a/effects/v1"
PROGRESS = "https://docs.nylorun.com/a2a/progress/v1"
TELEMETRY = "https://docs.nylorun.com/a2a/telemetry/v1"
FILES = "https://docs.nylorun.com/a2a/files/v1"
EXTENSIONS = (INTERACTIONS, EFFECTS, PROGRESS, TELEMETRY, FILES)

ASK_AGAIN = {
    "approval": "A text reply is not an approval.",
    "connection": "A text reply does not connect an account.",
    "question": "That reply was not an answer to the question.",
}
USD_PER_TOKEN = 0.000003


@dataclass(frozen=True)
class Ask:
    """What a scenario waits for: an approval, a question or a connection (interactions/v1)."""

    kind: str
    prompt: str
    detail: dict | None = None

    @property
    def state(self) -> TaskState:
        if self.kind == "question":
            return TaskState.TASK_STATE_INPUT_REQUIRED
        return TaskState.TASK_STATE_AUTH_REQUIRED


@dataclass(frozen=True)
class Answer:
    """A person's typed answer: `approved` for approvals and connections, `value` for questions."""

    approved: bool | None = None
    value: str | None = None


class Stopped(Exception):  # noqa: N818 - it is a signal, not an error
    """The task was canceled while its scenario ran: nothing more may be said about it."""


class Run:
    """One task's work as a scenario sees it: its plan, notes, artifacts and ending."""

    def __init__(self, task_id: str, context_id: str, speed: float) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.speed = speed
        self.steps: list[dict[str, str]] = []
        self.tokens = 0
        self.trace_id = uuid.uuid4().hex
        self.canceled = False
        self.ended = False
        self.updater: TaskUpdater | None = None

    def interaction_id(self, ask: Ask) -> str:
        # One open interaction per task at a time; asking again reuses the same id.
        return f"{ask.kind}-{self.task_id}"

    # -- the plan -------------------------------------------------------------------------

    def plan(self, *labels: str) -> None:
        self.steps = [{"label": label, "state": "pending"} for label in labels]

    def mark(self, index: int, state: str, note: str | None = None) -> None:
        self.steps[index]["state"] = state
        if note:
            self.steps[index]["note"] = note

    @property
    def completed(self) -> int:
        return sum(step["state"] == "completed" for step in self.steps)

    def steps_bar(self) -> str:
        return bar("Steps", self.completed, len(self.steps))

    def progress(self) -> dict:
        return {"steps": [dict(step) for step in self.steps]}

    def telemetry(self) -> dict:
        return {
            "steps": self.completed,
            "tokens": self.tokens,
            "costUsd": round(self.tokens * USD_PER_TOKEN, 6),
            "traceId": self.trace_id,
        }

    # -- saying things --------------------------------------------------------------------

    async def pause(self, seconds: float) -> None:
        """Pretend to work for `seconds` (divided by the speed)."""
        self._check()
        await asyncio.sleep(seconds / self.speed)
        self._check()

    async def working(self, markdown: str, *, uncertain: str | None = None) -> None:
        """A WORKING status whose text is the card's note, with the plan (and an effect
        whose outcome was lost, when there is one)."""
        metadata: dict[str, Any] = {PROGRESS: self.progress()}
        if uncertain:
            metadata[EFFECTS] = {"uncertain": uncertain}
        await self.status(TaskState.TASK_STATE_WORKING, markdown, metadata)

    async def ask(self, ask: Ask, *, again: bool = False) -> None:
        interaction: dict[str, Any] = {
            "interactionId": self.interaction_id(ask),
            "kind": ask.kind,
            "prompt": ask.prompt,
        }
        if ask.detail:
            interaction["detail"] = ask.detail
        text = f"{ASK_AGAIN[ask.kind]} {ask.prompt}" if again else ask.prompt
        await self.status(
            ask.state,
            text,
            {PROGRESS: self.progress()},
            message_metadata={INTERACTIONS: interaction},
        )

    async def finish(self, state: TaskState, markdown: str) -> None:
        """The terminal status, with the final plan and the telemetry/v1 totals."""
        metadata = {PROGRESS: self.progress(), TELEMETRY: self.telemetry()}
        await self.status(state, markdown, metadata)
        self.ended = True

    async def status(
        self,
        state: TaskState,
        text: str,
        metadata: dict,
        *,
        message_metadata: dict | None = None,
    ) -> None:
        self._check()
        self.tokens += 120 + len(text) // 3  # what a model would have spent on it
        updater = self._updater()
        message = updater.new_agent_message([Part(text=text)], metadata=message_metadata)
        await updater.update_status(state, message=message, metadata=metadata)

    async def artifact(
        self, artifact_id: str, name: str, description: str, text: str, url: str, path: str
    ) -> None:
        """A markdown file and a link to where it is published, with files/v1 data that
        describe the text exactly (size and SHA-256 of its UTF-8 bytes)."""
        self._check()
        content = text.encode()
        files = {
            "kind": "markdown",
            "version": 1,
            "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest(),
            "path": path,
        }
        updater = self._updater()
        artifact = Artifact(
            artifact_id=artifact_id,
            name=name,
            description=description,
            parts=[
                Part(text=text, media_type="text/markdown", filename=path.rsplit("/", 1)[-1]),
                Part(url=url, media_type="text/html"),
            ],
            metadata={FILES: files},
            extensions=[FILES],
        )
        event = TaskArtifactUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, artifact=artifact
        )
        await updater.event_queue.enqueue_event(event)

    def _updater(self) -> TaskUpdater:
        if self.updater is None:
            raise RuntimeError("the run has no turn: the executor sets its updater")
        return self.updater

    def _check(self) -> None:
        # A canceled task's CANCELED status is already on its way: anything said after it
        # would be an event after a terminal state, which a2a-sdk refuses.
        if self.canceled:
            raise Stopped(self.task_id)


Scenario = Callable[[Run, str], AsyncGenerator[Ask, Answer]]


# -- markdown -------------------------------------------------------------------------------


def bar(label: str, value: int, maximum: int) -> str:
    return f'{label} <progress value="{value}" max="{maximum}"></progress> {value:,}/{maximum:,}'


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def note(title: str, *blocks: str) -> str:
    return "\n\n".join([f"**{title}**", *blocks])


def plain(text: str, limit: int = 120) -> str:
    """A person's words on one line, safe inside a table cell or a title."""
    text = " ".join(text.replace("|", "/").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
