"""The progress card: one durable, sanitized status card per session. The only writer of cards.

Rules (PROTOCOL.md §4): limits in UTF-8 bytes measured before stripping (8,192 markdown, 512
per step, 50 steps), at most one step in progress, every write replaces the whole card, an
empty write clears it (the row stays as a tombstone so revisions continue), the revision goes
up by exactly one per write. Markdown is rendered and sanitized here, once, when it is
written; pages and live messages show the stored HTML.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import bleach
from bleach import html5lib_shim
from django.db import transaction
from django.db.models.functions import Coalesce
from django.utils import timezone
from markdown_it import MarkdownIt

from tasks.json_safety import cut
from tasks.models import INTERRUPTED_STATES, Card, Interaction, Session, Task

MAX_MARKDOWN_BYTES = 8192
MAX_STEP_BYTES = 512
MAX_STEPS = 50
# Of an open question's prompt: the card is a glance; the session page shows it all.
MAX_QUESTION_CHARS = 1_000
STEP_STATUSES = ("pending", "in_progress", "completed", "failed", "skipped")

# Invisible and bidi-control characters: zero-width, embeddings and overrides, invisible
# operators, the bidi isolates (U+2066–U+2069), deprecated format controls, BOM, tag
# characters, Arabic letter mark, soft hyphen, Mongolian vowel separator.
_INVISIBLE_RANGES = (
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x2069),
    (0x206A, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xE0000, 0xE007F),
    (0x061C, 0x061C),
    (0x00AD, 0x00AD),
    (0x180E, 0x180E),
)
INVISIBLE = frozenset(c for low, high in _INVISIBLE_RANGES for c in range(low, high + 1))
_STRIP_TABLE = dict.fromkeys(INVISIBLE)


class CardError(ValueError):
    """A card write broke a rule; `field` names where (`plan[3].step`, `markdown`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def strip_invisible(text: str) -> str:
    return text.translate(_STRIP_TABLE)


def _no_nul(field: str, text: str) -> str:
    # PostgreSQL cannot store U+0000 in text; a card has no use for it either.
    if "\x00" in text:
        raise CardError(field, f"{field} must not contain U+0000 (NUL)")
    return text


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


# -- validation -------------------------------------------------------------------------


def normalize(plan: Any, markdown: Any) -> tuple[list[dict] | None, str | None]:
    """Check a write and return what is stored: (plan or None, markdown or None)."""
    return _normalize_plan(plan), _normalize_markdown(markdown)


def _normalize_markdown(markdown: Any) -> str | None:
    if markdown is None:
        return None
    if not isinstance(markdown, str):
        raise CardError("markdown", "markdown must be a string")
    if _utf8_len(markdown) > MAX_MARKDOWN_BYTES:
        raise CardError("markdown", f"markdown must be at most {MAX_MARKDOWN_BYTES} UTF-8 bytes")
    markdown = strip_invisible(_no_nul("markdown", markdown))
    return markdown if markdown.strip() else None


def _normalize_plan(plan: Any) -> list[dict] | None:
    if plan is None:
        return None
    if not isinstance(plan, list):
        raise CardError("plan", "plan must be a list of steps")
    if len(plan) > MAX_STEPS:
        raise CardError("plan", f"plan can contain at most {MAX_STEPS} steps")
    steps = [_normalize_step(index, step) for index, step in enumerate(plan)]
    if sum(step["status"] == "in_progress" for step in steps) > 1:
        raise CardError("plan", "plan can contain at most one in_progress step")
    return steps or None


def _normalize_step(index: int, step: Any) -> dict:
    where = f"plan[{index}]"
    if not isinstance(step, dict):
        raise CardError(where, f"{where} must be an object with step and status")
    unknown = sorted(set(step) - {"step", "status", "note"})
    if unknown:
        raise CardError(f"{where}.{unknown[0]}", f"{where}.{unknown[0]} is not a step field")
    text = _step_text(f"{where}.step", step.get("step"))
    if not text.strip():
        raise CardError(f"{where}.step", f"{where}.step must not be empty")
    status = step.get("status")
    if status not in STEP_STATUSES:
        raise CardError(
            f"{where}.status", f"{where}.status must be one of {', '.join(STEP_STATUSES)}"
        )
    normalized = {"step": text, "status": status}
    if step.get("note") is not None:
        note = _step_text(f"{where}.note", step["note"])
        if note.strip():
            normalized["note"] = note
    return normalized


def _step_text(field: str, value: Any) -> str:
    """A step's text or note: a string of at most 512 UTF-8 bytes as sent, then stripped."""
    if not isinstance(value, str):
        raise CardError(field, f"{field} must be a string")
    if _utf8_len(value) > MAX_STEP_BYTES:
        raise CardError(field, f"{field} must be at most {MAX_STEP_BYTES} UTF-8 bytes")
    return strip_invisible(_no_nul(field, value))


def step_counts(plan: list[dict] | None) -> dict | None:
    if not plan:
        return None
    return {"completed": sum(s["status"] == "completed" for s in plan), "total": len(plan)}


def receipt(card: Card | None) -> str:
    if card is None or card.is_cleared:
        return "Progress card cleared"
    counts = step_counts(card.plan)
    if counts is None:
        return f"Progress card updated (rev {card.revision})"
    return (
        f"Progress card updated (rev {card.revision}, {counts['completed']}/{counts['total']} done)"
    )


# -- rendering --------------------------------------------------------------------------

ALLOWED_TAGS = frozenset(
    [
        "p",
        "br",
        "hr",
        "strong",
        "em",
        "del",
        "s",
        "code",
        "pre",
        "blockquote",
        "ul",
        "ol",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "a",
        "progress",
    ]
)
ALLOWED_ATTRIBUTES = {"a": ["href", "title"], "progress": ["value", "max"]}
ALLOWED_PROTOCOLS = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"
_NUMBER = re.compile(r"^\s*[0-9]+(?:\.[0-9]+)?\s*$")
# Elements whose content is code or raw text: stripping only their tags would leave the code
# on the card as visible junk, so they go with everything inside them. An unclosed raw-text
# element runs to the end, as in a browser; foreign content (svg, math, …) only when closed,
# so prose that merely names such a tag keeps the rest of the card.
_RAW_TEXT = re.compile(
    r"<(script|style|textarea|title|noscript|noembed|noframes|iframe|xmp)\b[^>]*>.*?(?:</\1\s*>|\Z)"
    r"|<(template|svg|math|object|select)\b[^>]*>.*?</\2\s*>",
    re.IGNORECASE | re.DOTALL,
)

_markdown = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


class _CardHtmlFilter(html5lib_shim.Filter):
    """After sanitizing: links get rel, and a progress bar keeps value/max only when they
    are numbers with 0 ≤ value ≤ max and max > 0. Each bar gets an accessible name made here,
    never taken from the agent: the text before it in its block (what a sighted reader sees
    as its label) and its value."""

    def __iter__(self):
        context = ""  # text seen since the last block boundary
        for token in super().__iter__():
            kind = token["type"]
            if kind in ("Characters", "SpaceCharacters"):
                context = (context + token["data"])[-_LABEL_CONTEXT:]
            elif kind in ("StartTag", "EmptyTag", "EndTag") and token["name"] in _BLOCKS:
                context = ""
            elif kind in ("StartTag", "EmptyTag"):
                if token["name"] == "a":
                    attrs = dict(token["data"])
                    attrs[(None, "rel")] = LINK_REL
                    token["data"] = attrs
                elif token["name"] == "progress":
                    attrs = _progress_attributes(dict(token["data"]))
                    attrs[(None, "aria-label")] = _progress_label(context, attrs)
                    token["data"] = attrs
            yield token


_LABEL_CONTEXT = 80
_BLOCKS = frozenset(
    # Cells are not boundaries: a bar's label is usually in the cell before it.
    [
        "p",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "blockquote",
        "pre",
        "ul",
        "ol",
        "table",
        "tr",
        "thead",
        "tbody",
        "br",
        "hr",
    ]
)


def _progress_attributes(attrs: dict) -> dict:
    value, maximum = attrs.get((None, "value")), attrs.get((None, "max"))
    kept = {}
    max_number = float(maximum) if maximum is not None and _NUMBER.match(maximum) else None
    if max_number is not None and max_number > 0:
        kept[(None, "max")] = maximum.strip()
    if value is not None and _NUMBER.match(value):
        limit = max_number if (None, "max") in kept else 1.0  # HTML's default max is 1
        if float(value) <= limit:
            kept[(None, "value")] = value.strip()
    return kept


def _progress_label(context: str, attrs: dict) -> str:
    name = " ".join(context.split()).rstrip(" :·-–—") or "Progress"
    value, maximum = attrs.get((None, "value")), attrs.get((None, "max"))
    if value is None:
        return f"{name}: in progress"
    if maximum is None:
        return f"{name}: {round(float(value) * 100)}%"
    return f"{name}: {value} of {maximum}"


_cleaner = bleach.Cleaner(
    tags=ALLOWED_TAGS,
    attributes=ALLOWED_ATTRIBUTES,
    protocols=ALLOWED_PROTOCOLS,
    strip=True,
    strip_comments=True,
    filters=[_CardHtmlFilter],
)


@functools.lru_cache(maxsize=256)
def render(markdown: str) -> str:
    """Markdown → sanitized HTML. Cached by content: identical markdown renders once."""
    html = _markdown.render(markdown)
    html = _RAW_TEXT.sub("", html)
    return _cleaner.clean(html).strip()


def markdown_digest(markdown: str | None) -> str:
    return hashlib.sha256((markdown or "").encode()).hexdigest()


# -- writing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    card: Card | None
    changed: bool


def write(session: Session, *, plan: Any = None, markdown: Any = None) -> Written:
    """A direct write (the card API): validate, then replace the whole card. Every write is
    a revision, even one that repeats the card."""
    plan, markdown = normalize(plan, markdown)
    return store(session, plan, markdown, facts=None, only_if_changed=False)


def store(
    session: Session,
    plan: list[dict] | None,
    markdown: str | None,
    facts: dict | None,
    *,
    only_if_changed: bool,
) -> Written:
    """Replace the session's card with already-normalized content. Clearing a card that
    never existed writes nothing; with `only_if_changed`, neither does a write that would
    show exactly what the card shows now.

    The caller holds the session's row lock (select_for_update) in its transaction: that
    lock is what keeps two writers from reusing a revision."""
    with transaction.atomic():
        card = Card.objects.filter(session=session).first()
        if card is None:
            if plan is None and markdown is None and not facts:
                return Written(None, changed=False)
            card = Card(session=session, revision=0)
        elif only_if_changed and (card.plan, card.markdown or None, card.facts) == (
            plan,
            markdown,
            facts,
        ):
            return Written(card, changed=False)
        digest = markdown_digest(markdown)
        if markdown is None:
            html = ""
        elif card.pk and card.markdown_sha256 == digest:
            html = card.html
        else:
            html = render(markdown)
        card.revision += 1
        card.plan, card.markdown, card.facts = plan, markdown or "", facts
        card.html, card.markdown_sha256 = html, digest
        card.updated_at = timezone.now()
        card.save()
    return Written(card, changed=True)


# -- cards of A2A sessions --------------------------------------------------------------

_NO_TIME = datetime.min.replace(tzinfo=UTC)


RECENT_TASKS = 20


def recent_tasks(session: Session) -> list[Task]:
    """The session's newest tasks (turns), newest first: everything its card shows."""
    return list(
        session.tasks.annotate(at=Coalesce("status_timestamp", "status_received_at")).order_by(
            "-at", "-id"
        )[:RECENT_TASKS]
    )


def from_session(session: Session, tasks: list[Task]) -> Written:
    """Recompute an A2A session's card from what ingest stored; `tasks` newest first.

    Plan: the latest progress/v1 plan. Note: the latest status message that is not a
    question (a question is the interaction's prompt). Beside them: state, the open
    question, uncertain effects and, once the newest task ended, its cost and trace id.
    """
    planned = max(
        (t for t in tasks if t.plan),
        key=lambda t: (t.plan_timestamp or _NO_TIME, t.pk),
        default=None,
    )
    noted = max(
        (t for t in tasks if t.note),
        key=lambda t: (t.note_timestamp or _NO_TIME, t.pk),
        default=None,
    )
    plan = _agent_plan(planned.plan) if planned else None
    markdown = _bounded_note(noted.note) if noted else None
    facts: dict[str, Any] = {"state": session.state} if session.state else {}
    question = None
    if session.needs_human:
        question = (
            Interaction.objects.filter(task__session=session, state=Interaction.State.OPEN)
            .order_by("-opened_at", "-id")
            .first()
        )
    if question is not None:
        prompt = cut(strip_invisible(question.prompt), MAX_QUESTION_CHARS)
        facts["question"] = {"kind": question.kind, "prompt": prompt}
    elif session.state in INTERRUPTED_STATES:
        # Answered in Onlooker, and the agent has not gone on yet: say who answered.
        answered = (
            Interaction.objects.filter(
                task__session=session,
                state__in=[
                    Interaction.State.ANSWERING,
                    Interaction.State.SENT,
                    Interaction.State.ANSWERED,
                ],
            )
            .select_related("answered_by")
            .order_by("-answered_at", "-id")
            .first()
        )
        if answered is not None:
            facts["answer"] = {"kind": answered.kind, "text": answered.outcome}
    newest = tasks[0] if tasks else None
    if newest is not None and newest.uncertain_effects:
        facts["uncertain"] = list(newest.uncertain_effects)
    if newest is not None and newest.is_terminal and newest.telemetry:
        facts["telemetry"] = newest.telemetry
    return store(session, plan, markdown, facts or None, only_if_changed=True)


def _truncate(text: str, limit: int) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", errors="ignore")


def _bounded_note(note: str) -> str | None:
    note = strip_invisible(_truncate(note, MAX_MARKDOWN_BYTES))
    return note if note.strip() else None


def _agent_plan(steps: list[dict]) -> list[dict] | None:
    """An agent's plan is shown, not refused: text is bounded and the first step in
    progress wins (the card allows one)."""
    plan, in_progress = [], False
    for step in steps[:MAX_STEPS]:
        text = strip_invisible(_truncate(step["label"], MAX_STEP_BYTES))
        if not text.strip():
            continue
        status = step["state"]
        if status == "in_progress":
            status, in_progress = ("pending", True) if in_progress else ("in_progress", True)
        entry = {"step": text, "status": status}
        note = strip_invisible(_truncate(step.get("note", ""), MAX_STEP_BYTES))
        if note.strip():
            entry["note"] = note
        plan.append(entry)
    return plan or None
