"""Uncertain effects (effects/v1 `uncertain`: a payment, an upload the agent cannot tell
happened) and the checks they open: an interaction of kind check that a person marks checked
after looking (answering/checks.py). The applier opens one per effect (pushes/apply/checks.py)
under the id and with the prompt made here; the card reads here what to say of them.

The card names each effect of the newest turn, and every effect whose check is still open
whatever turn it came in, marked "needs checking" until someone marks it checked; once
checked, the line says who did while its turn is the newest, then goes with the next turn.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db.models import Q

from tasks.models import NOT_READ, Interaction, Session, Task, states

PREFIX = "effect:"
DIGEST_CHARS = 16  # of SHA-256's hex: an id per effect, stable across pushes and turns


def interaction_id(effect: str) -> str:
    """The check's interaction id: the same effect (pushed twice, or again in a later turn)
    names the same check. A short digest, since an effect id may be 200 characters."""
    digest = hashlib.sha256(effect.encode("utf-8", "surrogatepass")).hexdigest()
    return PREFIX + digest[:DIGEST_CHARS]


def prompt(effect: str) -> str:
    """ "Check: Upload of report.pdf unconfirmed". The pages show it after their own "Check"
    label, so they leave out its first 7 characters (_inbox_row.html, _interaction.html)."""
    return f"Check: {states.uncertain_words(effect)}"


def detail(effect: str) -> dict:
    """What the check keeps of the effect: the agent's own id, as the card names it."""
    return {"effect": effect}


def effect_of(check: Interaction) -> str | None:
    found = check.detail.get("effect") if isinstance(check.detail, dict) else None
    return found if isinstance(found, str) else None


def card_facts(session: Session, tasks: list[Task], open_checks: Any = NOT_READ) -> dict:
    """The card's facts about uncertain effects (`tasks`: the session's newest, newest first):
    `uncertain`, every effect it names; `unchecked`, those whose check is open; `checked`,
    who checked one of the newest turn's effects ("Checked by alice, 10:02").

    `open_checks`: the session's open checks, when the caller read them with its other open
    interactions (changes.read_all, for a batch's sessions at once). Otherwise they are read
    here, with the checks of the newest turn's effects, in one query, and only when the
    session needs a person (`session.needs_human`, derived before the card) or its newest
    turn has an uncertain effect."""
    newest = tasks[0] if tasks else None
    effects = set(newest.uncertain_effects) if newest is not None else set()
    if open_checks is NOT_READ:
        if not effects and not session.needs_human:
            return {}
        found = _checks(session, effects, with_open=True)
    else:
        found = [*open_checks, *(_checks(session, effects, with_open=False) if effects else [])]
    unchecked: set[str] = set()
    checked: dict[str, str] = {}
    for check in found:
        effect = effect_of(check)
        if effect is None:
            continue
        if check.state == Interaction.State.OPEN:
            unchecked.add(effect)
        elif check.state == Interaction.State.ANSWERED and effect in effects:
            checked[effect] = check.outcome  # the latest answered last
    return _facts(effects | unchecked, unchecked, checked)


def _checks(session: Session, effects: set[str], *, with_open: bool) -> list[Interaction]:
    """The session's checks of these effects (answered last by time), and its open ones."""
    wanted = Q(interaction_id__in=[interaction_id(effect) for effect in effects])
    if with_open:
        wanted |= Q(state=Interaction.State.OPEN)
    return list(
        Interaction.objects.filter(wanted, task__session=session, kind=Interaction.Kind.CHECK)
        .select_related("answered_by")
        .order_by("answered_at", "id")
    )


def _facts(shown: set[str], unchecked: set[str], checked: dict[str, str]) -> dict:
    facts: dict[str, Any] = {}
    if shown:
        facts["uncertain"] = sorted(shown)
    if unchecked:
        facts["unchecked"] = sorted(unchecked)
    checked = {effect: text for effect, text in checked.items() if effect not in unchecked}
    if checked:
        facts["checked"] = dict(sorted(checked.items()))
    return facts
