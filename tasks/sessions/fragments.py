"""A session's fragments, rendered once when the session changes and stored: the card, its
collapsed line, the sidebar row and the monitoring tile. The monitoring screen with a
thousand sessions then reads HTML instead of rendering it, the live message and the HTTP
refetch are the same stored strings, and the pages show exactly what the socket sends.

The only writer of `SessionView`. Fragments hold nothing per person (a person's buttons are
rendered per request, beside them), and nothing that goes stale with time alone (times are
absolute; static/js/times.js makes them relative in the browser).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.template.loader import render_to_string

from tasks.live import broadcast
from tasks.models import (
    NOT_READ,
    Agent,
    Interaction,
    ProgressCard,
    Session,
    SessionFragments,
    TaskState,
    progress_cards,
    states,
)
from tasks.models import sessions as session_models

log = logging.getLogger(__name__)

PARTIALS = {
    "card": "tasks/_card.html",
    "summary": "tasks/_card_summary.html",
    "sidebar": "tasks/_sidebar_row.html",
    "tile": "tasks/_tile.html",
}


# The partials show numbers unlocalized ({% localize off %}): ids and revisions in attributes
# the scripts read, and counts; each localized number would also cost a locale lookup.

# What else the fragments are made of: a partial the card includes, and the Python that
# puts the state and steps into words. A change to any of them is a change of markup.
INCLUDED = ("tasks/_card_steps.html",)


@functools.cache
def version() -> str:
    """Names the partials' source (and the code that words them): a deploy that changes
    either renders afresh, so sessions stored before it show the new markup on read."""
    digest = hashlib.sha256()
    folder = Path(settings.BASE_DIR) / "templates"
    for name in [*sorted(PARTIALS.values()), *INCLUDED]:
        digest.update((folder / name).read_bytes())
    # The words of states, and what the card and session models put into words (steps, the
    # state shown): the models the partials read beyond their fields.
    for module in (states, progress_cards, session_models):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())  # and how this module words an ending
    return digest.hexdigest()[:16]


def _context(session: Session, card: ProgressCard | None) -> dict:
    # The state in words from the card read just now, never a card the session object may
    # hold from before the change.
    facts = card.facts if card is not None else None
    shown = _ending(session) or states.of_session(session.state, facts)
    return {"session": session, "card": card, "state": shown}


def _decisions(session_ids) -> QuerySet:
    """The decisions people made in these sessions, each session's last first (a check's mark
    is not a decision on the work)."""
    return (
        Interaction.objects.filter(task__session_id__in=session_ids, answered_at__isnull=False)
        .exclude(kind=Interaction.Kind.CHECK)
        .order_by("task__session_id", "-answered_at", "-id")
        .values_list("task__session_id", "kind", "answer")
    )


def _ending(session: Session) -> states.Shown | None:
    """How a completed session ended when its last decision was a refusal; None otherwise.
    Read with others' by `many`, else one query, for completed sessions only."""
    if session.state != TaskState.COMPLETED:
        return None
    if hasattr(session, "ending_read"):
        return session.ending_read
    last = _decisions([session.pk]).first()
    return states.refused(last[1], last[2]) if last else None


def _read_endings(sessions: list[Session]) -> None:
    """The endings of these sessions, in one query (`_ending` then reads them from each)."""
    completed = {s.pk: s for s in sessions if s.state == TaskState.COMPLETED}
    if not completed:
        return
    for session in completed.values():
        session.ending_read = None
    found: set[int] = set()
    for session_id, kind, answer in _decisions(list(completed)):
        if session_id not in found:  # its last decision
            found.add(session_id)
            completed[session_id].ending_read = states.refused(kind, answer)


def _tile_card(context: dict, card_html: str | None = None) -> str:
    """The card as a tile shows it: the steps around the current one, not the whole plan.
    Only that differs from the whole card (`in_tile` in _card.html), so a card whose plan
    fits on a tile shows there as it is: `card_html`, when rendered already, is reused."""
    card = context["card"]
    if card is None or not card.hidden_tile_steps:
        return render_to_string(PARTIALS["card"], context) if card_html is None else card_html
    return render_to_string(PARTIALS["card"], {**context, "in_tile": True})


def render(session: Session, card: ProgressCard | None) -> dict[str, str]:
    context = _context(session, card)
    html = {"card": render_to_string(PARTIALS["card"], context)}
    tile = {**context, "card_html": _tile_card(context, html["card"])}
    html["tile"] = render_to_string(PARTIALS["tile"], tile)
    for key in ("summary", "sidebar"):
        html[key] = render_to_string(PARTIALS[key], context)
    return {key: html[key] for key in PARTIALS}


def forget_agent(agent: Agent) -> None:
    """Drop the stored fragments of every session of the agent: they show its name, which a
    person changed (see `agents.changed`)."""
    SessionFragments.objects.filter(session__agent=agent).delete()


def of(session: Session) -> dict[str, str]:
    """All of the session's fragments to show (see `one`)."""
    return {key: one(session, key) for key in PARTIALS}


def many(sessions: list[Session], key: str) -> list[str]:
    """`one` fragment of each session: what is rendered now (stored by older templates, or
    never) reads the endings it needs in one query for all, so a page costs the same queries
    however many sessions it shows."""
    _read_endings([s for s in sessions if not _stored_current(s)])
    return [one(s, key) for s in sessions]


def _stored_current(session: Session) -> bool:
    stored = getattr(session, "fragments", None)  # a missing one-to-one row reads as None
    return stored is not None and stored.version == version()


def one(session: Session, key: str) -> str:
    """One fragment to show: the stored one, or (stored by older templates, or never)
    rendered now. Load `session` with select_related("fragments", "card", "agent")."""
    stored = getattr(session, "fragments", None)  # a missing one-to-one row reads as None
    if stored is not None and stored.version == version():
        return getattr(stored, key)
    context = _context(session, getattr(session, "card", None))
    if key == "tile":
        context["card_html"] = _tile_card(context)
    return render_to_string(PARTIALS[key], context)


def snapshot(session: Session, rendered: Rendered | None = None) -> dict:
    """What a browser needs to show a session: its fragments with the card revision they
    show (`rendered` just now, or as kept: load `session` with select_related("card",
    "fragments")). The live message and the HTTP refetch are this same dict."""
    card = rendered.card if rendered else getattr(session, "card", None)
    return {
        "type": "card.changed",
        "session": session.pk,
        "agent": session.agent_id,
        "title": str(session),
        "revision": card.revision if card else 0,
        "hasCard": card is not None and not card.is_cleared,
        "state": session.state,
        # In the words the pages show: screen readers announce it.
        "stateLabel": (
            _ending(session) or states.of_session(session.state, card.facts if card else None)
        ).words,
        "needsHuman": session.needs_human,
        "updatedAt": session.updated_at.isoformat(),
        "html": rendered.html if rendered else of(session),
    }


# -- publishing: the write side, taken only by the "session changed" step (changes.py) -------
#
# A change's fragments are rendered and stored with it, in the writer's transaction under the
# sessions' row locks, all of a batch's in one statement (each statement is a round trip on
# PostgreSQL), and browsers hinted once it commits (`publish`). On SQLite a batch of the
# applier's does not render while it holds the one write lock every push's 2xx waits for:
# its sessions' fragments are marked stale with the change (pages render those on read),
# rendered once it commits, and stored each only if its session is still as rendered, since
# another writer that changed it meanwhile stores its own (`publish_later`). Either way,
# nothing stale is ever shown, and a session whose fragments could not be rendered or
# stored is hinted too, from what was committed.


@dataclass
class Changed:
    """A session a writer changed: where its hints go (its agent's team) and its card as the
    change left it (NOT_READ: read with the others' when they render)."""

    session: Session
    team_id: int | None
    card: ProgressCard | None | object = NOT_READ


@dataclass(frozen=True)
class Rendered:
    session: Session
    team_id: int | None
    card: ProgressCard | None
    html: dict[str, str]


def publish(changed: list[Changed], *, savepoint: bool = True) -> None:
    """Store the changed sessions' fragments in the caller's transaction, under their
    locks, and hint browsers once it commits. With `savepoint`, a failure rolls back only
    the fragments, which are dropped (pages render them on read): the change they follow
    stands. Without, a database error raises, for a caller that can undo its change and
    make it again (the applier's batch, which then applies each delivery alone)."""
    rendered: list[Rendered] = []
    try:
        with transaction.atomic() if savepoint else contextlib.nullcontext():
            rendered = _render(changed)
            unrendered = {c.session.pk for c in changed} - {r.session.pk for r in rendered}
            if unrendered:
                _mark_stale(unrendered)
            _upsert(rendered)
    except Exception:
        if not savepoint:
            raise
        log.exception("could not store the fragments of sessions %s", _ids(changed))
        rendered = []
        _drop(_ids(changed))
    _hint_after_commit(changed, rendered)


def publish_later(changed: list[Changed], *, savepoint: bool = True) -> Later:
    """Mark the changed sessions' fragments stale in the caller's transaction, to be
    rendered and stored once it commits (`Later`). With `savepoint` a failure to mark them is
    rolled back alone (they are dropped instead); without, it raises, as in `publish`."""
    try:
        with transaction.atomic() if savepoint else contextlib.nullcontext():
            _mark_stale(_ids(changed))
    except Exception:
        if not savepoint:
            raise
        log.exception("could not mark the fragments of sessions %s stale", _ids(changed))
        _drop(_ids(changed))
    return Later(changed)


class Later:
    """Fragments to render after the change committed, with no lock held (`render`), then
    store in a short transaction of their own (`store`): the caller takes SQLite's write
    lock for that one only."""

    def __init__(self, changed: list[Changed]) -> None:
        self.changed = changed
        self.rendered: list[Rendered] = []

    def render(self) -> None:
        self.rendered = _render(self.changed)

    def store(self) -> None:
        """Store what `render` rendered, for each session still as rendered (one query
        tells), all in one statement; should that fail, each alone in a savepoint, so one
        session's failure leaves the others stored. Hint browsers once stored."""
        try:
            with transaction.atomic():
                stored = _upsert(_still_current(self.rendered))
        except Exception:  # noqa: BLE001 - rolled back whole: try each alone
            log.info("could not store a batch's fragments together; storing each", exc_info=True)
            with transaction.atomic():
                stored = [one for one in _still_current(self.rendered) if _upsert_alone(one)]
        # Those it did not store stay marked stale: pages render them on read, and the
        # writer that changed one meanwhile has hinted its own.
        _hint_after_commit([], stored)


def _ids(changed: list[Changed]) -> list[int]:
    return [c.session.pk for c in changed]


def _render(changed: list[Changed]) -> list[Rendered]:
    """The changed sessions' fragments, each in one go; a session that fails to render is
    left out (and logged). Cards the writer did not keep are read in one query."""
    cards = {c.session.pk: c.card for c in changed if c.card is not NOT_READ}
    unread = [c.session.pk for c in changed if c.card is NOT_READ]
    if unread:
        try:
            cards.update(ProgressCard.objects.in_bulk(unread, field_name="session_id"))
        except Exception:  # noqa: BLE001 - none renders: pages render them on read
            log.exception("could not read the cards of sessions %s to render", unread)
            return []
    rendered = []
    for c in changed:
        card = cards.get(c.session.pk)
        try:
            rendered.append(Rendered(c.session, c.team_id, card, render(c.session, card)))
        except Exception:  # noqa: BLE001 - left stale: pages render it on read
            log.exception("could not render the fragments of session %s", c.session.pk)
    return rendered


_STORED_FIELDS = ["version", "revision", *PARTIALS]


def _stored_row(one: Rendered) -> SessionFragments:
    revision = one.card.revision if one.card else 0
    return SessionFragments(session=one.session, version=version(), revision=revision, **one.html)


def _upsert(rendered: list[Rendered]) -> list[Rendered]:
    """Store fragments in one statement: an UPDATE of the row a session's first change
    inserted, an INSERT only for a first change (one session: the UPDATE alone, nearly
    always); several sessions' together as one INSERT … ON CONFLICT UPDATE. The caller holds
    their row locks (or, storing after commit, SQLite's one write lock or the unique
    session), so a second INSERT fails rather than duplicates."""
    if len(rendered) == 1:
        row = _stored_row(rendered[0])
        fields = {name: getattr(row, name) for name in _STORED_FIELDS}
        if not SessionFragments.objects.filter(session=row.session).update(**fields):
            row.save(force_insert=True)
        return rendered
    SessionFragments.objects.bulk_create(
        [_stored_row(one) for one in rendered],
        update_conflicts=True,
        unique_fields=["session"],
        update_fields=_STORED_FIELDS,
    )
    return rendered


def _upsert_alone(one: Rendered) -> bool:
    try:
        with transaction.atomic():
            _upsert([one])
    except Exception:  # noqa: BLE001 - stays marked stale: pages render it on read
        log.exception("could not store the fragments of session %s", one.session.pk)
        return False
    return True


def _shown(one: Rendered) -> tuple:
    session, card = one.session, one.card
    return (
        session.state,
        session.needs_human,
        session.title,
        session.updated_at,
        session.agent.name,
        card.revision if card is not None else None,
    )


def _still_current(rendered: list[Rendered]) -> list[Rendered]:
    """Those whose sessions still show what was rendered (not changed since, nor gone)."""
    now = {
        pk: tuple(shown)
        for pk, *shown in Session.objects.filter(
            pk__in=[one.session.pk for one in rendered]
        ).values_list(
            "pk", "state", "needs_human", "title", "updated_at", "agent__name", "card__revision"
        )
    }
    return [one for one in rendered if now.get(one.session.pk) == _shown(one)]


def _mark_stale(session_ids) -> None:
    SessionFragments.objects.filter(session_id__in=session_ids).update(version="")


def _drop(session_ids: list[int]) -> None:
    """After a failure to store or mark them: drop them, so no page shows what the session
    was before the change (pages render what is missing). Never undoes the change."""
    try:
        with transaction.atomic():
            SessionFragments.objects.filter(session_id__in=session_ids).delete()
    except Exception:  # noqa: BLE001 - the stale fragments stay; the change still commits
        log.exception("could not drop the stale fragments of sessions %s", session_ids)


def _hint_after_commit(changed: list[Changed], rendered: list[Rendered]) -> None:
    """Once the caller's transaction commits: each rendered session's snapshot, and, for the
    changed sessions that were not rendered, one read from what was committed (pages render
    their fragments on read)."""
    for one in rendered:
        message = snapshot(one.session, one)
        transaction.on_commit(
            lambda one=one, message=message: broadcast.hint(one.session.pk, one.team_id, message)
        )
    done = {one.session.pk for one in rendered}
    for c in changed:
        if c.session.pk not in done:
            transaction.on_commit(lambda c=c: _hint_as_committed(c))


def _hint_as_committed(changed: Changed) -> None:
    try:
        shown = Session.objects.select_related("agent", "card", "fragments").get(
            pk=changed.session.pk
        )
        message = snapshot(shown)
    except Exception:  # noqa: BLE001 - a broken hint must not fail a committed change
        log.exception("could not build the live message for session %s", changed.session.pk)
        return
    broadcast.hint(changed.session.pk, changed.team_id, message)
