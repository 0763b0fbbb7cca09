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
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import bleach
from bleach import html5lib_shim
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone
from markdown_it import MarkdownIt

from tasks.models import (
    INTERRUPTED_STATES,
    NOT_READ,
    Interaction,
    ProgressCard,
    Session,
    Task,
    TaskState,
)
from tasks.runtime import prepared
from tasks.runtime.prepared import Prepared
from tasks.sessions import decision_words, effect_checks, raw_html
from tasks.wire.json_safety import cut

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


def receipt(card: ProgressCard | None) -> str:
    """The one line a card write leaves (OpenClaw's receipt): it names the revision and the
    plan's count, never the note, which the card itself shows."""
    if card is None or (card.plan is None and not card.markdown):
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
_NUMBER = re.compile(r"^\s*-?[0-9]+(?:\.[0-9]+)?\s*$")


def _raw_html(self, tokens, idx, _options, _env) -> str:
    return raw_html.drop_tags(tokens[idx].content)


# Raw HTML is still read as HTML (so a `<script>` goes with its code rather than showing as
# text), but each tag of it but <progress> is dropped before the allowlist sees it.
_markdown = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
_markdown.add_render_rule("html_block", _raw_html)
_markdown.add_render_rule("html_inline", _raw_html)


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
    """value and max written out as the bar should show: a value past either end is clamped
    to it (9 of 7 is a full bar, not an unknown one); without max the scale is HTML's, 0 to 1.
    A value or max that is not a plain number (NaN, 1e9, 0x3, a max of 0 or less) says
    nothing certain about how far the work is: neither is kept, and the bar says "in
    progress" rather than guess."""
    value, maximum = attrs.get((None, "value")), attrs.get((None, "max"))
    limit, limit_text = 1.0, "1"
    if maximum is not None:
        limit = _number(maximum)
        if limit is None or not math.isfinite(limit) or limit <= 0:
            return {}
        limit_text = maximum.strip()
    kept = {(None, "max"): limit_text} if maximum is not None else {}
    number = _number(value)
    if number is not None:
        kept[(None, "value")] = (
            limit_text if number > limit else "0" if number < 0 else value.strip()
        )
    return kept


def _number(text: str | None) -> float | None:
    """A plain decimal (too many digits for a double: ±infinity); None for anything else."""
    return float(text) if text is not None and _NUMBER.match(text) else None


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
    html = raw_html.drop_code_elements(html)
    return _cleaner.clean(html).strip()


def markdown_digest(markdown: str | None) -> str:
    return hashlib.sha256((markdown or "").encode()).hexdigest()


# -- writing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    card: ProgressCard | None
    changed: bool
    # The plan or note changed (or who wrote them): the write leaves a transcript receipt.
    content_changed: bool = False


def write(session: Session, *, plan: Any = None, markdown: Any = None) -> Written:
    """A direct write (the card API): validate, then replace the whole card. Every write is
    a revision, even one that repeats the card."""
    plan, markdown = normalize(plan, markdown)
    return store_written(session, plan, markdown)


def store_written(session: Session, plan: list[dict] | None, markdown: str | None) -> Written:
    """A card-API write of already-normalized content: it replaces the plan and note and
    becomes the card's source until the agent's statuses give a new plan or note. What the
    session's tasks say beside them (state, the open question, cost) stays."""
    with transaction.atomic():
        card = ProgressCard.objects.filter(session=session).first()
        facts = card.facts if card is not None else None
        digest = card.status_digest if card is not None else ""
        return store(
            session,
            plan,
            markdown,
            facts,
            only_if_changed=False,
            source=ProgressCard.Source.API,
            status_digest=digest,
            current=card,
        )


def store(
    session: Session,
    plan: list[dict] | None,
    markdown: str | None,
    facts: dict | None,
    *,
    only_if_changed: bool,
    source: str = ProgressCard.Source.STATUS,
    status_digest: str = "",
    current: Any = NOT_READ,
    save: Callable[[ProgressCard], None] = prepared.update,
) -> Written:
    """Replace the session's card with already-normalized content. Clearing a card that
    never existed writes nothing; with `only_if_changed`, neither does a write that would
    show exactly what the card shows now.

    The caller holds the session's row lock (select_for_update) in its transaction: that
    lock is what keeps two writers from reusing a revision. `current` is the session's card
    (or None) when the caller has just read it under that lock. `save` writes the card as
    save() would (its UPDATE compiled once): now, or with the applier's batch's writes."""
    # Joined to the caller's transaction (it holds the lock), without a savepoint of its own.
    with transaction.atomic(savepoint=False):
        card = (
            ProgressCard.objects.filter(session=session).first() if current is NOT_READ else current
        )
        if card is None:
            if plan is None and markdown is None and not facts:
                return Written(None, changed=False)
            card = ProgressCard(session=session, revision=0)
        elif only_if_changed and (card.plan, card.markdown or None, card.facts, card.source) == (
            plan,
            markdown,
            facts,
            source,
        ):
            if card.status_digest != status_digest:
                card.status_digest = status_digest
                card.save(update_fields=["status_digest"])
            return Written(card, changed=False)
        content_changed = (
            card.pk is None
            or (card.plan, card.markdown or None, card.source) != (plan, markdown, source)
            or not only_if_changed
        )
        digest = markdown_digest(markdown)
        if markdown is None:
            html = ""
        elif card.pk and card.markdown_sha256 == digest:
            html = card.html
        else:
            html = render(markdown)
        now = timezone.now()
        card.revision += 1
        card.plan, card.markdown, card.facts = plan, markdown or "", facts
        card.html, card.markdown_sha256 = html, digest
        card.updated_at = now
        card.source, card.status_digest = source, status_digest
        if content_changed:
            card.source_at = now
        save(card)
    return Written(card, changed=True, content_changed=content_changed)


# -- cards of A2A sessions --------------------------------------------------------------

_NO_TIME = datetime.min.replace(tzinfo=UTC)


RECENT_TASKS = 20


def recent_first() -> list:
    """Newest turn first: how `recent_tasks` (and changes.read_all) order a session's tasks."""
    return [Coalesce("status_timestamp", "status_received_at").desc(), F("id").desc()]


# Read by every derive (prepared.py says why they are prepared).
_RECENT_TASKS = Prepared(
    lambda session_id: Task.objects.filter(session_id=session_id).order_by(*recent_first())[
        :RECENT_TASKS
    ]
)
_CARD = Prepared(lambda session_id: ProgressCard.objects.filter(session_id=session_id))


def stored(session_id: int) -> ProgressCard | None:
    """The session's stored card, if it has one (a prepared read)."""
    return next(iter(_CARD(session_id)), None)


def recent_tasks(session: Session) -> list[Task]:
    """The session's newest tasks (turns), newest first: everything its card shows."""
    return list(_RECENT_TASKS(session.pk))


def from_session(
    session: Session,
    tasks: list[Task],
    *,
    question: Any = NOT_READ,
    card: Any = NOT_READ,
    checks: Any = NOT_READ,
    save: Callable[[ProgressCard], None] = prepared.update,
) -> Written:
    """Recompute an A2A session's card from what the applier stored; `tasks` newest first.
    `save` writes the card (`store`).

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
    status_digest = _content_digest(plan, markdown)
    if card is NOT_READ:  # else read by the caller, under the session's lock
        card = stored(session.pk)
    source = ProgressCard.Source.STATUS
    if (
        card is not None
        and card.source == ProgressCard.Source.API
        and card.status_digest == status_digest
    ):
        # Two writers, one card: the latest write wins. The statuses give no plan or note
        # newer than what they gave before the card-API write, so that write stands.
        plan, markdown, source = card.plan, card.markdown or None, ProgressCard.Source.API
    facts = _facts(session, tasks, None if question is NOT_READ else question, checks)
    return store(
        session,
        plan,
        markdown,
        facts,
        only_if_changed=True,
        source=source,
        status_digest=status_digest,
        current=card,
        save=save,
    )


def _facts(
    session: Session, tasks: list[Task], question: Interaction | None, checks: Any
) -> dict | None:
    """What the card shows beside the plan and note, from the session and its tasks (newest
    first): state, the open question (`question` when the caller read it), who answered it,
    uncertain effects and their checks (`checks`, the open ones, when the caller read them)
    and the latest ended turn's telemetry; None when there is nothing."""
    facts: dict[str, Any] = {"state": session.state} if session.state else {}
    if question is None and session.needs_human:
        question = (
            Interaction.objects.filter(task__session=session, state=Interaction.State.OPEN)
            .exclude(kind=Interaction.Kind.CHECK)
            .order_by("-opened_at", "-id")
            .first()
        )
    elif question is not None and question.kind == Interaction.Kind.CHECK:
        question = None  # a check asks nothing of the agent's task (effect_checks below)
    if question is not None:
        prompt = cut(strip_invisible(question.prompt), MAX_QUESTION_CHARS)
        facts["question"] = {"kind": question.kind, "prompt": prompt}
        if question.expired_at is not None:
            facts["question"]["expired"] = True  # the agent's expiry passed: it still waits
    elif session.state in INTERRUPTED_STATES:
        # Answered in Onlooker, and the agent has not gone on yet: say who answered.
        if answer := decision_words.awaited_answer(session.pk):
            facts["answer"] = answer
    elif session.state == TaskState.COMPLETED and (
        refused := decision_words.refused_kind(session.pk)
    ):
        facts["refused"] = refused  # said no: the card ends as the denial (states.of_facts)
    facts.update(effect_checks.card_facts(session, tasks, checks))
    # The latest ended turn's telemetry stays on the card while the next turn runs.
    ended = next((t for t in tasks if t.is_terminal and t.telemetry), None)
    if ended is not None:
        facts["telemetry"] = ended.telemetry
    return facts or None


def _content_digest(plan: list[dict] | None, markdown: str | None) -> str:
    """Names the plan and note the statuses give; "" for none, as on a card no status wrote."""
    if plan is None and markdown is None:
        return ""
    return hashlib.sha256(json.dumps([plan, markdown], sort_keys=True).encode()).hexdigest()


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
