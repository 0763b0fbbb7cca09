"""Held decisions: a page's answer is kept on the server for a few seconds (Undo) before it
goes to the agent (issue 33).

A page answer (answers.answer with `hold`) takes the interaction open → held, the decision
stored as a claim stores it and `held_until` saying when it goes. Held, it counts as taken:
anyone else's answer (a page, Slack, a link, the expiry policy) is refused, as for an
answer being sent. Then exactly one of two things happens, each one conditional UPDATE under
the session lock, so of two writers only one wins:

- `withdraw`: its maker presses Undo: held → open, the decision dropped, nothing sent. Anyone
  else is refused (NotAllowed), and so is Undo once it has left the held state (TooLate, 409).
- `send`: `held_until` has passed: held → answering (the claim answers.py makes for an open
  one), then sent and recorded by answers.deliver exactly as an unheld answer is. Of several
  processes looking (one loop per server, `start`), one claims it; the others change nothing.

Failing halfway: a process that dies holding a decision leaves it held, and any server's loop
sends it when it looks (POLL_SECONDS at most after `held_until`): closing the tab, or the
server, loses nothing. One that dies after claiming leaves a claim that goes stale
(answers.py: the same decision may then be retried, the same message). An agent that cannot
be reached releases it to open with the error, as an unheld answer would. A maker who lost
the credential their agent requires meanwhile gets the question back, open, with why.
Slack, answer links and expiry have no page to undo from: they are never held.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Min
from django.urls import reverse
from django.utils import timezone

from tasks.answering import answers, callers
from tasks.answering.rules import AnswerError, NotAllowed
from tasks.models import Interaction, Task
from tasks.models.states import INTERRUPTED_STATES
from tasks.runtime.loop import Loop

log = logging.getLogger(__name__)

# The most a decision waits past `held_until` when the server that held it is gone (another
# server's loop looks this often); a server's own holds are sent on time (it wakes for them).
POLL_SECONDS = 10.0
BATCH = 100  # decisions one look sends at most; the next look takes the rest
PROMPT_CHARS = 80  # of the question, in "Approved: Delete 3 old builds?"


class TooLate(AnswerError):
    """Undo after the decision left the held state (sent, or being sent)."""

    status = 409


def hold_seconds() -> int:
    """ONLOOKER_UNDO_SECONDS: how long a page's answer waits for Undo; 0 sends at once."""
    return max(0, settings.ONLOOKER_UNDO_SECONDS)


def hold() -> timedelta | None:
    """The hold a page's answer gets (None: sent at once)."""
    seconds = hold_seconds()
    return timedelta(seconds=seconds) if seconds else None


def answer_from_page(user, interaction: Interaction, decision: answers.Decision) -> Interaction:
    """A person's answer on a page, single or one of several: answers.answer, held for
    Undo when the setting says so. This process's loop is woken to send it on time."""
    done = answers.answer(user, interaction, decision, via="page", hold=hold())
    if done.state == Interaction.State.HELD:
        start()
        background.wake()
    return done


def said(interaction: Interaction) -> str:
    """What the toast says was sent (or is about to be): 'Approved: Delete 3 old builds?'."""
    answer = interaction.answer or {}
    approved = answer.get("approved")
    if approved is None:
        value = str(answer.get("value", ""))
        verb = f"Answered “{value if len(value) <= 40 else value[:39] + '…'}”"
    elif interaction.kind == Interaction.Kind.CONNECTION:
        verb = "Connected" if approved else "Cancelled the connection"
    else:
        verb = "Approved" if approved else "Denied"
    prompt = " ".join(interaction.prompt.split())
    if len(prompt) > PROMPT_CHARS:
        prompt = prompt[: PROMPT_CHARS - 1] + "…"
    return f"{verb}: {prompt}" if prompt else verb


def as_json(interaction: Interaction) -> dict:
    """The page's reply to an answer: the state, words for the list, the toast's words and,
    while held, where Undo posts and how many seconds it has left."""
    held = interaction.state == Interaction.State.HELD
    left = 0.0
    if held and interaction.held_until is not None:
        left = max(0.0, (interaction.held_until - timezone.now()).total_seconds())
    words = said(interaction)
    stop = "" if words.endswith(("?", "!", ".", "…")) else "."
    return {
        "state": interaction.state,
        "detail": f"{words}{stop} Sending in {round(left)} s…" if held else interaction.outcome,
        "toast": words,
        "undo": reverse("undo-answer", args=[interaction.pk]) if held else None,
        "seconds": round(left, 1),
    }


def withdraw(user, interaction: Interaction) -> Interaction:
    """Undo: the held decision dropped, the question open again, nothing sent. Only its
    maker may; after it was sent (or began to be), TooLate says what became of it."""
    with answers.changing(interaction):
        current = answers.reread(interaction)
        if current.state != Interaction.State.HELD:
            raise TooLate(_too_late(current))
        if current.answered_by_id != user.pk:
            who = current.answered_by.get_username() if current.answered_by else "someone else"
            raise NotAllowed(f"Only {who}, who made this decision, can undo it.")
        if not _drop(current, by=user.pk):
            raise TooLate(_too_late(answers.reread(interaction)))
    log.info("%s withdrew their held answer to interaction %s", user, interaction.pk)
    return answers.reread(interaction)


def _too_late(current: Interaction) -> str:
    if current.state == Interaction.State.OPEN:
        return "Nothing to undo: this question is open (the answer was withdrawn or not sent)."
    return f"Too late to undo: it was sent. {current.outcome}."


def _drop(current: Interaction, *, by: int | None, error: str = "") -> bool:
    """held → open, the decision dropped (its maker's Undo, or a send that cannot be made)."""
    rows = Interaction.objects.filter(
        pk=current.pk, round=current.round, state=Interaction.State.HELD
    )
    if by is not None:
        rows = rows.filter(answered_by_id=by)
    return bool(
        rows.update(
            state=Interaction.State.OPEN,
            answered_by=None,
            answered_at=None,
            answer=None,
            reason="",
            answered_via="",
            held_until=None,
            last_error=error[:2_000],
        )
    )


def send(interaction: Interaction, *, now: datetime | None = None) -> Interaction | None:
    """Send one held decision whose time has come, as its maker. None when another process
    (or Undo) got there first. AnswerError (AgentFailed…) as answers.answer raises it."""
    current = answers.reread(interaction)
    if current.state != Interaction.State.HELD:
        return None
    agent = current.task.session.agent
    try:
        if current.answered_by is None:  # its maker's account was deleted meanwhile
            raise NotAllowed("the person who made this decision no longer exists")
        caller = callers.for_person(agent, current.answered_by)
    except NotAllowed as refused:  # NeedsCredential: they lost the one the agent requires
        with answers.changing(current):
            _drop(current, by=None, error=f"Not sent: {refused}")
        return None
    claim = _claim(current, now or timezone.now())
    if claim is None:
        return None
    return answers.deliver(current, claim, caller)


def _claim(current: Interaction, now: datetime) -> answers.Claim | None:
    """held → answering, for the one process that wins; the others (and a late Undo) see
    it gone. Due or not is checked again under the lock: Undo may have come in between."""
    with answers.changing(current):
        rows = Interaction.objects.filter(
            pk=current.pk, round=current.round, state=Interaction.State.HELD, held_until__lte=now
        )
        if Task.objects.filter(pk=current.task_id, state__in=INTERRUPTED_STATES).exists():
            won = rows.update(state=Interaction.State.ANSWERING, answered_at=now, held_until=None)
        else:
            # The agent went on while it was held (its status closes only what is pending,
            # and a held decision is not yet): it no longer waits, so nothing is sent.
            won = 0
            rows.update(
                state=Interaction.State.CLOSED,
                answered_by=None,
                answered_at=None,
                answer=None,
                reason="",
                answered_via="",
                held_until=None,
            )
    if not won:
        return None
    return answers.Claim(bound=answers.reread(current), first=True)


def send_due(now: datetime | None = None) -> int:
    """Send every held decision whose hold has passed (at most BATCH); how many went."""
    now = now or timezone.now()
    due = Interaction.objects.filter(state=Interaction.State.HELD, held_until__lte=now)
    sent = 0
    for interaction in due.select_related("task__session__agent").order_by("held_until")[:BATCH]:
        try:
            if send(interaction, now=now) is not None:
                sent += 1
        except AnswerError as error:  # recorded on the interaction (open again, or sent)
            log.warning("held answer to interaction %s: %s", interaction.pk, error)
    return sent


def next_due() -> datetime | None:
    return Interaction.objects.filter(state=Interaction.State.HELD).aggregate(at=Min("held_until"))[
        "at"
    ]


class Background(Loop):
    """This process's sender of held decisions. Several processes may run one: each
    decision is claimed by one (see the module's docstring). It sleeps until the next
    decision is due, POLL_SECONDS at most, and is woken by a hold made here."""

    name = "onlooker-held-answers"

    def step(self) -> None:
        send_due()
        upcoming = next_due()
        wait = POLL_SECONDS
        if upcoming is not None:
            wait = min(wait, max(0.05, (upcoming - timezone.now()).total_seconds()))
        self.poll_seconds = wait


background = Background(POLL_SECONDS)


def start() -> None:
    """Start this process's sender if timed work runs here (ONLOOKER_NOTIFIER=background,
    as the notification sender and the expirer: the ASGI app starts them when loaded)."""
    if settings.ONLOOKER_NOTIFIER == "background":
        background.start()
