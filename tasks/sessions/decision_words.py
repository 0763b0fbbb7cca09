"""A decision in one line, as people read it: what it was, who made it, when, how (on the page,
in Slack, by a link, through the API, or the team's expiry policy) and the words that went
with it (the reason typed beside a deny, the answer to a question). The session page's
"Decisions" list and its timeline both say a decision through here, so they say it alike
(templates/tasks/_decision_line.html draws it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.formats import time_format

from tasks.models import INTERRUPTED_STATES, Interaction, states
from tasks.wire import agent_text

VIA_WORDS = {
    "page": "on the page",
    "slack": "in Slack",
    "link": "by a link",
    "expiry": "",  # says itself: "Denied by the team's expiry policy"
    "api": "through the API",
}
_APPROVED = {True: "Approved", False: "Denied"}
_CONNECTED = {True: "Connected", False: "Cancelled"}
SAID_CHARS = 500  # of a reason or an answer on one line; the API has them whole


def _visible(text: str) -> str:
    """Without control and format characters: a U+202E in an answer must not reorder the
    words beside it where no template filter cleans it (the card's answer line)."""
    return "".join(c for c in text if not agent_text.hidden(c) or c.isspace())


def via_words(via: str | None) -> str:
    return VIA_WORDS.get(via or "", "")


def _cut(text: Any) -> str:
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= SAID_CHARS else text[: SAID_CHARS - 1] + "…"


@dataclass(frozen=True)
class Line:
    made: str  # "Approved", "Denied", "Answered", …
    by: str  # a username, or "" for the team's expiry policy
    at: datetime | None
    via: str  # how, in words ("on the page"); "" when not known
    answer: str = ""  # what was answered to a question
    reason: str = ""  # the words sent beside the decision

    @property
    def who(self) -> str:
        return self.by or "the team's expiry policy"

    @property
    def sentence(self) -> str:
        """The line as plain text, for what is not a page (the card's answer line, a
        notification): "Denied by alice, 15:43, on the page. Reason: “not on a Friday”"."""
        words = f"{self.made} by {self.who}"
        if self.at is not None:
            words += f", {time_format(timezone.localtime(self.at), 'H:i')}"
        if self.via:
            words += f", {self.via}"
        if self.answer:
            words += f": “{_visible(self.answer)}”"
        if self.reason:
            words += f". Reason: “{_visible(self.reason)}”"
        return words


def made_words(kind: str, answer: Any) -> str:
    """ "Approved", "Denied", "Connected", "Cancelled", "Checked" or "Answered"."""
    if kind == Interaction.Kind.CHECK:
        return "Checked"
    approved = answer.get("approved") if isinstance(answer, dict) else None
    if approved is None:
        return "Answered"
    words = _CONNECTED if kind == Interaction.Kind.CONNECTION else _APPROVED
    return words[bool(approved)]


def of_interaction(interaction: Interaction) -> Line:
    """The decision `interaction` holds (`answered_by` loaded)."""
    answer = interaction.answer if isinstance(interaction.answer, dict) else {}
    value = answer.get("value") if answer.get("approved") is None else None
    by = interaction.answered_by.get_username() if interaction.answered_by else ""
    if not by and interaction.answered_via != "expiry":
        by = "someone"
    return Line(
        made=made_words(interaction.kind, answer),
        by=by,
        at=interaction.answered_at,
        via=via_words(interaction.answered_via),
        answer=_cut(value) if value not in (None, "") else "",
        reason=_cut(interaction.reason) if interaction.reason else "",
    )


def awaited_answer(session_id: int) -> dict | None:
    """The card's answer line while the task that asked still waits (a task that went on
    closed that chapter): the last decision made in Onlooker, or None. Until the agent took
    it, what is under way ("Being answered by alice right now"): the card must change when it
    is taken, so pages refetch what they show of it."""
    answered = (
        Interaction.objects.filter(
            task__session_id=session_id,
            task__state__in=INTERRUPTED_STATES,
            state__in=[
                Interaction.State.HELD,  # "sending in a few seconds", until Undo or sent
                Interaction.State.ANSWERING,
                Interaction.State.SENT,
                Interaction.State.ANSWERED,
            ],
        )
        .exclude(kind=Interaction.Kind.CHECK)  # a check's mark goes to no agent
        .select_related("answered_by", "task__agent")
        .order_by("-answered_at", "-id")
        .first()
    )
    if answered is None:
        return None
    settled = answered.state == Interaction.State.ANSWERED
    text = of_interaction(answered).sentence if settled else answered.outcome
    return {"kind": answered.kind, "text": text}


def refused_kind(session_id: int) -> str:
    """The kind of the session's last decision if it said no ("approval", "connection"),
    else "": a task completed after a person said no did not do what was asked."""
    last = (
        Interaction.objects.filter(task__session_id=session_id, answered_at__isnull=False)
        .exclude(kind=Interaction.Kind.CHECK)  # a check's mark is no decision on the work
        .order_by("-answered_at", "-id")
        .values_list("kind", "answer")
        .first()
    )
    return last[0] if last is not None and states.refused(*last) is not None else ""


def attach(interactions: Iterable[Interaction]) -> None:
    """Give each answered interaction its `decision` line, for the page to draw."""
    for interaction in interactions:
        interaction.decision = of_interaction(interaction)
