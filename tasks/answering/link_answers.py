"""Following an answer link (tasks/notify/answer_links.py): what its confirm page shows, and
the decision its POST makes.

Mail scanners, link-preview bots (Slack's, Outlook's SafeLinks) and people's own previews fetch
links they were never meant to act on, so `follow` (the GET, and HEAD) only reads: it never
decides, claims or marks anything. Only `decide` (the confirm page's POST, CSRF-checked by the
view) answers, as the person logged in, through answers.answer with `via="link"` and the link's
round: the same checks as the session page (team visibility, the approver permission, no
self-approval, one decision ever).

A link works while the round it names is open. Asked anew, the question has new links (410);
answered, dismissed or denied on expiry, the page says who decided what (409); closed by the
agent without a decision, it is gone (410). A question only marked expired (`leave`) is
still open, and still answered here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks.answering import answers, callers
from tasks.answering.rules import (
    AgentFailed,
    AlreadyAnswered,
    AnswerError,
    NotAllowed,
    NotFound,
    already_decided,
    may_answer,
)
from tasks.models import Interaction
from tasks.notify import answer_links
from tasks.notify.answer_links import Link
from tasks.sessions import activity
from tasks.sessions.progress_card import strip_invisible


class NotOurs(AnswerError):
    """The token was not signed here, or names an action its question never had."""


class Gone(AnswerError):
    """The round the link names has closed without a decision anyone can be told of."""

    status = 410


MAY_NOT_ANSWER = "You may see this, but not answer it: ask for the approver role."
MOVED_ON = "The agent no longer waits for this: it moved on, so this link no longer works."
ASKED_AGAIN = (
    "This link was for an earlier asking of this question, and no longer works: the agent "
    "has asked it again since. Answer it from a newer link or from the session page."
)

# What each link decides, as `Decision.approved`: an answer link posts any answer its
# question takes (a choice or text; a connection's "I've connected" or "Cancel").
_APPROVES = {"approve": True, "deny": False}

HEADINGS = {
    "approve": "Approve this?",
    "deny": "Deny this?",
    "answer": "Answer this question",
}
_REFUSED_HEADINGS = {
    NotOurs: "This link is not one Onlooker made",
    NotFound: "No such question",
    Gone: "This link no longer works",
    answers.RoundClosed: "This link no longer works",
    AlreadyAnswered: "Already decided",
    NotAllowed: "You cannot decide this",
    AgentFailed: "The agent has not taken it",
}


@dataclass(frozen=True)
class Followed:
    """What an answer link's page shows: the question (as the session page shows it, with
    `whole_prompt`), whether its form is offered, why not or why a post decided nothing
    (`refused`), and whether this request decided it (`decided`: `question.outcome` says
    how)."""

    action: str = ""
    question: Interaction | None = None
    refused: AnswerError | None = None
    decided: bool = False
    answerable: bool = False

    @property
    def status(self) -> int:
        return self.refused.status if self.refused is not None else 200

    @property
    def heading(self) -> str:
        if self.decided and self.question is not None:
            return self.question.outcome
        if self.refused is not None and (not self.answerable or self.question is None):
            for kind, heading in _REFUSED_HEADINGS.items():
                if isinstance(self.refused, kind):
                    return heading
            return "Not sent"
        return HEADINGS.get(self.action, "")


def follow(user, token: str) -> Followed:
    """The confirm page of the link `token`, for `user` (logged in). Reads only."""
    try:
        link, interaction = _opened(user, token)
    except AnswerError as error:
        return Followed(refused=error)
    return _page(user, link, interaction.pk, refused=_why_not(user, link, interaction))


def decide(user, token: str, form: Any) -> Followed:
    """The confirm page's POST: `user` decides what the link `token` leads to, with `form`'s
    reason (a deny's) or answer (an answer link's choice or text)."""
    try:
        link, interaction = _opened(user, token)
    except AnswerError as error:
        return Followed(refused=error)
    try:
        refused = _why_not(user, link, interaction)
        if refused is not None:
            raise refused
        decision = _decision(link, interaction, form)
        answers.answer(user, interaction, decision, via="link", round_=link.round)
    except AnswerError as error:
        return _page(user, link, interaction.pk, refused=error)
    return _page(user, link, interaction.pk, decided=True)


def _opened(user, token: str) -> tuple[Link, Interaction]:
    """The link and its interaction, if the token is ours and `user` may see it."""
    try:
        link = answer_links.read(token)
    except answer_links.BadLink as error:
        raise NotOurs(str(error)) from None
    interaction = answers.visible(user, link.interaction_pk)
    if link.action not in answer_links.ACTIONS.get(interaction.kind, ()):
        raise NotOurs(answer_links.NOT_OURS)
    return link, interaction


def _why_not(user, link: Link, current: Interaction) -> AnswerError | None:
    """Why `user` may not decide `current` through `link` now, or None."""
    if current.round != link.round:
        return Gone(ASKED_AGAIN)
    if current.state != Interaction.State.OPEN:
        moved_on = current.state == Interaction.State.CLOSED and current.answer is None
        return Gone(MOVED_ON) if moved_on else AlreadyAnswered(already_decided(current))
    if not may_answer(user):
        return NotAllowed(MAY_NOT_ANSWER)
    if link.action == "approve" and answers.self_approval(user, current):
        return NotAllowed(answers.NEEDS_ANOTHER)
    if callers.needs_credential(current.task.session.agent, user):
        return callers.NeedsCredential(current.task.session.agent)  # no button to be refused
    return None


def _decision(link: Link, interaction: Interaction, form: Any) -> answers.Decision:
    """The posted decision, which must be the link's own: an approve link never denies."""
    decision = answers.parse_decision(interaction.kind, form)
    wanted = _APPROVES.get(link.action)
    if wanted is not None and decision.approved is not wanted:
        raise AnswerError(
            f"This link can only {link.action}, so nothing was sent. To decide otherwise, "
            "follow the question's other link or open the session page."
        )
    return decision


def _page(
    user, link: Link, pk: int, *, refused: AnswerError | None = None, decided: bool = False
) -> Followed:
    """The page for the interaction as stored now (after a decision, or a failed one)."""
    question = shown(pk)
    answerable = not decided and _why_not(user, link, question) is None
    return Followed(link.action, question, refused, decided, answerable)


def shown(pk: int) -> Interaction:
    """The interaction as the session page shows it (activity.questions: its detail, its
    choices as buttons, a connection's link), with its prompt whole: this page is about
    this one question."""
    rows = Interaction.objects.filter(pk=pk).select_related(
        "answered_by", "dismissed_by", "task__session__agent"
    )
    [question] = activity.questions(rows)
    question.whole_prompt = strip_invisible(
        Interaction.objects.values_list("prompt", flat=True).get(pk=pk)
    )
    return question
