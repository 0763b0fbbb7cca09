"""A session's progress card as stored, and how its plan and facts read on the pages."""

from __future__ import annotations

from django.db import models

from tasks.models import states
from tasks.models.sessions import Session
from tasks.wire.stored_json import StoredJSONDecoder

STEP_WORDS = {
    "completed": "done",
    "in_progress": "in progress",
    "pending": "to do",
    "failed": "failed",
    "skipped": "skipped",
    "unfinished": "unfinished",
}


class ProgressCard(models.Model):
    """A session's progress card. Written only by `sessions/progress_card.py`; `html` is the
    sanitized rendering of `markdown`, made once at write time. A cleared card stays as a tombstone
    (no plan, no markdown) so its revisions continue."""

    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="card")
    revision = models.PositiveIntegerField()
    plan = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    markdown = models.TextField(blank=True)
    markdown_sha256 = models.CharField(max_length=64, blank=True)
    html = models.TextField(blank=True)
    # What an A2A session's card shows beside plan and note: state, the open question,
    # uncertain effects, cost and trace id.
    facts = models.JSONField(decoder=StoredJSONDecoder, null=True, blank=True)
    updated_at = models.DateTimeField()

    class Source(models.TextChoices):
        STATUS = "status", "from the agent's status"
        API = "api", "written through the card API"

    # Who wrote the plan and note the card shows, and when: the latest writer wins
    # (docs/agents.md, "Two writers, one card").
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.STATUS)
    source_at = models.DateTimeField(null=True, blank=True)
    # The digest of the plan and note the agent's statuses last gave: a push that does not
    # change them leaves a card-API write in place.
    status_digest = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"card of {self.session} (rev {self.revision})"

    @property
    def is_cleared(self) -> bool:
        return self.plan is None and not self.markdown and not self.facts

    # What the card partial shows beside plan and note (facts are written by
    # sessions/progress_card.py).
    @property
    def shown_state(self):
        """The state in people's words (tasks/models/states.py)."""
        return states.of_facts(self.facts)

    @property
    def finished(self) -> bool:
        return self.shown_state.finished

    @property
    def question(self) -> dict | None:
        # A finished session asks nothing, whatever an older version stored beside it.
        return None if self.finished else (self.facts or {}).get("question")

    @property
    def uncertain(self) -> list[str]:
        return (self.facts or {}).get("uncertain", [])

    @property
    def uncertain_lines(self) -> list[str]:
        return [states.uncertain_words(effect) for effect in self.uncertain]

    @property
    def uncertain_items(self) -> list[dict]:
        """Each uncertain effect as the card says it: its words, whether a person still has
        to check it (`needs_check`), and who did (`checked`: "Checked by alice, 10:02")."""
        facts = self.facts or {}
        unchecked = set(facts.get("unchecked", []))
        checked = facts.get("checked", {})
        return [
            {
                "words": states.uncertain_words(effect),
                "needs_check": effect in unchecked,
                "checked": checked.get(effect, "") if isinstance(checked, dict) else "",
            }
            for effect in self.uncertain
        ]

    @property
    def telemetry(self) -> dict | None:
        return (self.facts or {}).get("telemetry")

    @property
    def answer(self) -> dict | None:
        """Who answered, while the agent has not gone on: never once the session ended."""
        return None if self.finished else (self.facts or {}).get("answer")

    @property
    def steps(self) -> list[dict]:
        """The plan as shown: each step with its status in words. Once the session ended,
        a step still pending or in progress will not be done: it is marked unfinished, and
        its note (said while it was going, "waiting for approval") is dropped."""
        finished = self.finished
        shown = []
        for position, step in enumerate(self.plan or [], start=1):
            status = step["status"]
            note = step.get("note", "")
            if finished and status in ("pending", "in_progress"):
                status, note = "unfinished", ""
            shown.append(
                {
                    "position": position,
                    "step": step["step"],
                    "note": note,
                    "status": status,
                    "words": STEP_WORDS.get(status, status),
                }
            )
        return shown

    # At most this many steps on a monitoring tile: the one going on and those around it;
    # the session page shows them all.
    TILE_STEPS = 5

    @property
    def tile_steps(self) -> list[dict]:
        steps = self.steps
        if len(steps) <= self.TILE_STEPS:
            return steps
        current = self.current_step
        middle = current["position"] - 1 if current else 0
        start = max(0, min(middle - self.TILE_STEPS // 2, len(steps) - self.TILE_STEPS))
        return steps[start : start + self.TILE_STEPS]

    @property
    def hidden_tile_steps(self) -> int:
        return len(self.plan or []) - len(self.tile_steps)

    @property
    def step_count(self) -> str:
        """ "Step 2 of 5", from the plan (never from the agent's note); once the session
        ended, how many steps were done: "3 of 5 steps done"."""
        plan = self.plan or []
        if not plan:
            return ""
        if self.finished:
            done = sum(step["status"] == "completed" for step in plan)
            return f"{done} of {len(plan)} step{'s' if len(plan) != 1 else ''} done"
        current = self.current_step
        return f"Step {current['position']} of {current['total']}"

    @property
    def current_step(self) -> dict | None:
        """The step a collapsed card names: the one in progress, else the next pending one,
        else the last one done; with its 1-based position."""
        plan = self.plan or []
        for wanted in ("in_progress", "pending"):
            for position, step in enumerate(plan, start=1):
                if step["status"] == wanted:
                    return {"position": position, "total": len(plan), **step}
        if plan:
            return {"position": len(plan), "total": len(plan), **plan[-1]}
        return None

    def as_json(self) -> dict | None:
        if self.is_cleared:
            return None
        return {
            "revision": self.revision,
            "updatedAt": self.updated_at,
            "plan": self.plan,
            "markdown": self.markdown or None,
            "html": self.html,
        }
