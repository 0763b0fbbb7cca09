"""Answer links: the signed URLs that `interaction.opened` events, reminders and emails carry
(`"actions": [{"name": "approve" | "deny" | "answer", "url": …}]`).

A link names one interaction, its round and the decision it leads to, signed with the
server's secret key so none of them can be changed. It is not a credential: following it
needs a login, its GET only shows what it would decide (a link-preview bot or a mail scanner
that fetches it changes nothing), and only the confirm page's POST decides, as the person
logged in, with the same checks as the session page. It stops working when the round
closes: a reopened question has new links.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.urls import reverse

from tasks.models import Interaction

_SALT = "onlooker.answer-link"

# The links each kind of question gets, by action name.
ACTIONS = {
    Interaction.Kind.APPROVAL: ("approve", "deny"),
    Interaction.Kind.QUESTION: ("answer",),
    Interaction.Kind.TEXT: ("answer",),
    Interaction.Kind.CONNECTION: ("answer",),
}


NOT_OURS = "This link is not one Onlooker made (it may have been cut or changed)."


class BadLink(Exception):
    """The token was not made by this server (changed, cut, or from another)."""


@dataclass(frozen=True)
class Link:
    interaction_pk: int
    round: int
    action: str


def token(interaction_pk: int, round_: int, action: str) -> str:
    return signing.dumps([interaction_pk, round_, action], salt=_SALT, compress=True)


def read(value: str) -> Link:
    """The link a token names; BadLink if it was not signed here, or names nothing it could."""
    try:
        pk, round_, action = signing.loads(value, salt=_SALT)
    except (signing.BadSignature, ValueError, TypeError):
        raise BadLink(NOT_OURS) from None
    if not (isinstance(pk, int) and isinstance(round_, int) and isinstance(action, str)):
        raise BadLink(NOT_OURS)
    return Link(pk, round_, action)


def url(interaction_pk: int, round_: int, action: str) -> str:
    path = reverse("answer-link", args=(token(interaction_pk, round_, action),))
    return settings.ONLOOKER_PUBLIC_URL.rstrip("/") + path


def actions(interaction: Interaction) -> list[dict]:
    """The answer links an event about `interaction` (in its current round) carries."""
    return [
        {"name": name, "url": url(interaction.pk, interaction.round, name)}
        for name in ACTIONS.get(interaction.kind, ())
    ]
