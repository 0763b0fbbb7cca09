"""A session's fragments, rendered once when the session changes and stored: the card, its
collapsed line, the sidebar row and the monitoring tile. The monitoring screen with a
thousand sessions then reads HTML instead of rendering it, the live message and the HTTP
refetch are the same stored strings, and the pages show exactly what the socket sends.

The only writer of `SessionView`. Fragments hold nothing per person (a person's buttons are
rendered per request, beside them), and nothing that goes stale with time alone (times are
absolute; static/js/times.js makes them relative in the browser).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.template.loader import render_to_string

from tasks import models
from tasks.live import broadcast
from tasks.models import Agent, Card, Session, SessionView, states

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
    for module in (states, models):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:16]


def _context(session: Session, card: Card | None) -> dict:
    # The state in words from the card read just now, never a card the session object may
    # hold from before the change.
    facts = card.facts if card is not None else None
    return {"session": session, "card": card, "state": states.of_session(session.state, facts)}


def _tile_card(context: dict, card_html: str | None = None) -> str:
    """The card as a tile shows it: the steps around the current one, not the whole plan.
    Only that differs from the whole card (`in_tile` in _card.html), so a card whose plan
    fits on a tile shows there as it is: `card_html`, when rendered already, is reused."""
    card = context["card"]
    if card is None or not card.hidden_tile_steps:
        return render_to_string(PARTIALS["card"], context) if card_html is None else card_html
    return render_to_string(PARTIALS["card"], {**context, "in_tile": True})


def render(session: Session, card: Card | None) -> dict[str, str]:
    context = _context(session, card)
    html = {"card": render_to_string(PARTIALS["card"], context)}
    tile = {**context, "card_html": _tile_card(context, html["card"])}
    html["tile"] = render_to_string(PARTIALS["tile"], tile)
    for key in ("summary", "sidebar"):
        html[key] = render_to_string(PARTIALS[key], context)
    return {key: html[key] for key in PARTIALS}


@dataclass(frozen=True)
class Stored:
    card: Card | None
    html: dict[str, str]


def store(session: Session) -> Stored:
    """Render and keep the session's fragments; call it in the transaction that changed the
    session, so they commit (or roll back) with the change."""
    card = Card.objects.filter(session=session).first()
    html = render(session, card)
    _store(session, card, html)
    return Stored(card, html)


def _view_fields(card: Card | None, html: dict[str, str]) -> dict:
    return {"version": version(), "revision": card.revision if card else 0, **html}


def _store(session: Session, card: Card | None, html: dict[str, str]) -> None:
    fields = _view_fields(card, html)
    # One UPDATE on the hot path; the INSERT only for a session's first change. The caller
    # holds the session's row lock (or, storing after commit, SQLite's one write lock or the
    # unique session), so a second INSERT fails rather than duplicates.
    if not SessionView.objects.filter(session=session).update(**fields):
        SessionView.objects.create(session=session, **fields)


def forget(session: Session) -> None:
    """Drop the session's stored fragments: until they are stored again, pages render them
    when asked (`one`), so nothing shows what the session was before a change."""
    SessionView.objects.filter(session=session).delete()


def forget_agent(agent: Agent) -> None:
    """Drop the stored fragments of every session of the agent: they show its name, which a
    person changed (see `agents.changed`)."""
    SessionView.objects.filter(session__agent=agent).delete()


def of(session: Session) -> dict[str, str]:
    """All of the session's fragments to show (see `one`)."""
    return {key: one(session, key) for key in PARTIALS}


def one(session: Session, key: str) -> str:
    """One fragment to show: the stored one, or (stored by older templates, or never)
    rendered now. Load `session` with select_related("view", "card", "agent")."""
    view = getattr(session, "view", None)  # a missing one-to-one row reads as None here
    if view is not None and view.version == version():
        return getattr(view, key)
    context = _context(session, getattr(session, "card", None))
    if key == "tile":
        context["card_html"] = _tile_card(context)
    return render_to_string(PARTIALS[key], context)


def snapshot(session: Session, stored: Stored | None = None) -> dict:
    """What a browser needs to show a session: its fragments with the card revision they
    show (`stored` just now, or as kept: load `session` with select_related("card", "view")).
    The live message and the HTTP refetch are this same dict."""
    card = stored.card if stored else getattr(session, "card", None)
    return {
        "type": "card.changed",
        "session": session.pk,
        "agent": session.agent_id,
        "title": str(session),
        "revision": card.revision if card else 0,
        "hasCard": card is not None and not card.is_cleared,
        "state": session.state,
        # In the words the pages show: screen readers announce it.
        "stateLabel": states.of_session(session.state, card.facts if card else None).words,
        "needsHuman": session.needs_human,
        "updatedAt": session.updated_at.isoformat(),
        "html": stored.html if stored else of(session),
    }


def changed(session: Session, *, team_id: int | None) -> None:
    """Call at the end of the transaction that changed the session (changes.py does): its
    fragments are rendered and stored with the change, and the hint is sent after commit.

    Nothing here may undo the change it follows: the fragments are stored in a savepoint, so
    a failure (a template error, a database error) rolls back only them. A database error
    caught without one would leave the caller's transaction marked for rollback, and the
    change it reports as done would be lost. Fragments that could not be stored are dropped,
    so pages render afresh instead of showing what the session was before."""
    try:
        with transaction.atomic():
            stored: Stored | None = store(session)
    except Exception:  # noqa: BLE001 - only the fragments were rolled back; pages re-render
        log.exception("could not store the fragments of session %s", session.pk)
        stored = None
        try:
            with transaction.atomic():
                forget(session)
        except Exception:  # noqa: BLE001 - the stale fragments stay; the change still commits
            log.exception("could not drop the stale fragments of session %s", session.pk)

    def send() -> None:
        try:
            if stored is None:  # render what was committed, not what this object caches
                shown = Session.objects.select_related("agent", "card", "view").get(pk=session.pk)
                message = snapshot(shown)
            else:
                message = snapshot(session, stored)
        except Exception:  # noqa: BLE001 - a broken hint must not fail a committed change
            log.exception("could not build the live message for session %s", session.pk)
            return
        broadcast.hint(session.pk, team_id, message)

    transaction.on_commit(send)


# -- the applier's publish: rendered outside its write transaction ---------------------------
#
# A batch renders many sessions' fragments; rendering is pure CPU, and on SQLite a write
# transaction holds the one write lock every push's 2xx waits for. So the applier marks the
# fragments of the sessions it changed as stale in its transaction (pages render those on
# read until they are stored again), renders after commit, and stores them in a short second
# transaction, each only if its session is still what was rendered (another writer that
# changed it since stores its own). A crash between the two leaves stale-marked fragments:
# pages render them afresh, never show what the session was before.


def mark_stale(session_ids: list[int], *, savepoint: bool = True) -> None:
    """Call in the transaction that changed the sessions. Never undoes it: a failure to mark
    (or, failing that, to drop) the fragments is rolled back alone and logged. Without
    `savepoint` (two round trips on PostgreSQL), a failure raises instead, for a caller that
    can undo its change and make it again."""
    if not savepoint:
        SessionView.objects.filter(session_id__in=session_ids).update(version="")
        return
    try:
        with transaction.atomic():
            SessionView.objects.filter(session_id__in=session_ids).update(version="")
        return
    except Exception:  # noqa: BLE001 - only the marking was rolled back
        log.exception("could not mark the fragments of sessions %s stale", session_ids)
    try:
        with transaction.atomic():
            SessionView.objects.filter(session_id__in=session_ids).delete()
    except Exception:  # noqa: BLE001 - the stale fragments stay; the change still commits
        log.exception("could not drop the stale fragments of sessions %s", session_ids)


@dataclass(frozen=True)
class Rendered:
    session: Session
    team_id: int | None
    stored: Stored


def render_many(
    changed: list[tuple[Session, int | None]], cards: dict[int, Card | None] | None = None
) -> list[Rendered]:
    """Render changed sessions' fragments (with their teams): after their change committed
    (no lock held), or under their locks (`publish_batch`). `cards`: their cards as
    changed, by session, where the caller has them (the applier's batch derived them); one
    query reads the others'."""
    cards = dict(cards or {})
    unread = [s.pk for s, _ in changed if s.pk not in cards]
    if unread:
        try:
            cards.update(Card.objects.in_bulk(unread, field_name="session_id"))
        except Exception:  # noqa: BLE001 - they stay marked stale: pages render them on read
            log.exception("could not read the cards of sessions to render")
            return []
    rendered = []
    for session, team_id in changed:
        card = cards.get(session.pk)
        try:
            rendered.append(Rendered(session, team_id, Stored(card, render(session, card))))
        except Exception:  # noqa: BLE001 - they stay marked stale: pages render them on read
            log.exception("could not render the fragments of session %s", session.pk)
    return rendered


def _as_rendered(one: Rendered) -> tuple:
    session, card = one.session, one.stored.card
    return (
        session.state,
        session.needs_human,
        session.title,
        session.updated_at,
        session.agent.name,
        card.revision if card is not None else None,
    )


def store_rendered(rendered: list[Rendered]) -> None:
    """Store what `render_many` rendered, in a short transaction of its own, for each
    session still as rendered (one query tells); hint browsers of those after commit.

    All of them in one statement: on PostgreSQL each statement is a round trip, and a batch
    may hold hundreds of sessions. Should that fail, each is stored alone in a savepoint, so
    one session's failure leaves the others stored."""
    try:
        with transaction.atomic():
            _store_rendered(rendered, together=True)
        return
    except Exception:  # noqa: BLE001 - rolled back whole: try each alone
        log.info("could not store a batch's fragments together; storing each", exc_info=True)
    with transaction.atomic():
        _store_rendered(rendered, together=False)


_STORED_FIELDS = ["version", "revision", *PARTIALS]


def publish_batch(
    sessions: list[tuple[Session, int | None]], cards: dict[int, Card | None]
) -> None:
    """Render (as `render_many`) and store the fragments of the sessions a batch changed, in
    its transaction (under their row locks: PostgreSQL), all in one statement; hint browsers
    after commit. A session whose fragments could not render is marked stale: pages render
    it on read. A database error raises, for the caller to undo the batch."""
    rendered = render_many(sessions, cards)
    unrendered = {s.pk for s, _ in sessions} - {one.session.pk for one in rendered}
    if unrendered:
        mark_stale(list(unrendered), savepoint=False)
    _upsert(rendered)
    _hint_after_commit(rendered)


def _upsert(rendered: list[Rendered]) -> None:
    views = [
        SessionView(session=one.session, **_view_fields(one.stored.card, one.stored.html))
        for one in rendered
    ]
    # An UPDATE of the row a session's first change inserted; INSERT for a first change.
    SessionView.objects.bulk_create(
        views, update_conflicts=True, unique_fields=["session"], update_fields=_STORED_FIELDS
    )


def _hint_after_commit(stored: list[Rendered]) -> None:
    for one in stored:
        message = snapshot(one.session, one.stored)
        transaction.on_commit(
            lambda one=one, message=message: broadcast.hint(one.session.pk, one.team_id, message)
        )


def _store_rendered(rendered: list[Rendered], *, together: bool) -> None:
    now = {
        pk: tuple(shown)
        for pk, *shown in Session.objects.filter(
            pk__in=[one.session.pk for one in rendered]
        ).values_list(
            "pk", "state", "needs_human", "title", "updated_at", "agent__name", "card__revision"
        )
    }
    # Changed since (or gone) otherwise: its writer stores and hints its own.
    current = [one for one in rendered if now.get(one.session.pk) == _as_rendered(one)]
    if together:
        _upsert(current)
        stored = current
    else:
        stored = []
        for one in current:
            try:
                with transaction.atomic():
                    _store(one.session, one.stored.card, one.stored.html)
            except Exception:  # noqa: BLE001 - stays marked stale: pages render it on read
                log.exception("could not store the fragments of session %s", one.session.pk)
                continue
            stored.append(one)
    _hint_after_commit(stored)
