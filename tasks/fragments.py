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
from django.template.loader import render_to_string

from tasks import models, states
from tasks.models import Agent, Card, Session, SessionView

log = logging.getLogger(__name__)

PARTIALS = {
    "card": "tasks/_card.html",
    "summary": "tasks/_card_summary.html",
    "sidebar": "tasks/_sidebar_row.html",
    "tile": "tasks/_tile.html",
}


# What else the fragments are made of: a partial the card includes, and the Python that
# puts the state and steps into words. A change to any of them is a change of markup.
INCLUDED = ("tasks/_card_step.html",)


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


def _tile_card(context: dict) -> str:
    """The card as a tile shows it: the steps around the current one, not the whole plan."""
    return render_to_string(PARTIALS["card"], {**context, "in_tile": True})


def render(session: Session, card: Card | None) -> dict[str, str]:
    context = _context(session, card)
    html = {"card": render_to_string(PARTIALS["card"], context)}
    tile = {**context, "card_html": _tile_card(context)}
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
    fields = {"version": version(), "revision": card.revision if card else 0, **html}
    # One UPDATE on the hot path; the INSERT only for a session's first change. The caller
    # holds the session's row lock, so no one else inserts meanwhile.
    if not SessionView.objects.filter(session=session).update(**fields):
        SessionView.objects.create(session=session, **fields)
    return Stored(card, html)


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
