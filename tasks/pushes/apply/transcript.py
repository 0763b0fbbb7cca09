"""The session transcript, the agent's side: what agents said (status messages, history,
message pushes) and the one-line receipts of card writes. The transcript's one writer of the
agent side (people's messages are answering's)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tasks.models import Delivery, Message, ProgressCard, Session, Task
from tasks.pushes.apply.state import Applied
from tasks.sessions import artifact_markdown, changes, progress_card
from tasks.wire import message_parts
from tasks.wire import protocol as p


def card_receipt(
    session: Session, card: ProgressCard | None, *, at: datetime, task: Task | None = None
) -> None:
    """The transcript's line for a card write, OpenClaw's receipt ("Progress card updated
    (rev 4, 1/3 done)"): for card-API writes, and for plan changes that came without a
    note. Call it under the session's row lock, in the write's transaction."""
    _receipt_line(session, card, at=at, task=task).save()


def _receipt_line(
    session: Session, card: ProgressCard | None, *, at: datetime, task: Task | None
) -> Message:
    return Message(
        session=session,
        task=task,
        role=Message.Role.AGENT,
        text=progress_card.receipt(card),
        at=at,
        card_update=True,
    )


def keep(
    applied: Applied,
    task: Task | None,
    message: p.Message,
    at: datetime,
    *,
    estimated: bool,
    card_update: bool = False,
) -> None:
    """Keep a message the agent sent (or a user's it repeats) in the session's transcript."""
    session = applied.session
    text = message.text
    # Links, files and data travel beside the text; a message may be only those.
    parts, files = message_parts.kept(message.parts)
    if not text and not parts:
        return
    if estimated and task is not None and task.status_timestamp is not None:
        # Dated only by receipt, after the task's dated statuses began: keep it before
        # the first of them rather than after the agent's answers.
        applied.locked.write_said()  # the batch's, so the first is found among them too
        first = task.message_set.filter(estimated_time=False).order_by("at").first()
        if first is not None and first.at <= at:
            at = first.at - timedelta(microseconds=1)
    # A message already in the transcript (a snapshot repeating history) is skipped.
    applied.locked.keep_said(
        Message(
            session=session,
            task=task,
            message_id=message.message_id,
            role=message.role,
            text=text,
            # The agent's markdown, rendered once, here; people's text stays plain, and a
            # receipt is one line (the card shows the note).
            html=artifact_markdown.message_html(text)
            if message.role == Message.Role.AGENT and not card_update
            else "",
            at=at,
            estimated_time=estimated,
            card_update=card_update,
            parts=parts,
            files=files,
        )
    )
    if not session.title and message.role == Message.Role.USER and text.strip():
        changes.name(session, text)


def history(
    applied: Applied, task: Task, messages: tuple[p.Message, ...], timestamp: datetime | None
) -> None:
    at = timestamp or applied.now
    for message in messages:
        keep(applied, task, message, at, estimated=timestamp is None)


def before_first_dated(applied: Applied, task: Task, at: datetime) -> None:
    """The task's first dated status, at `at`: messages dated only by their receipt (the
    user's, in a snapshot that raced the agent's first update) came before it."""
    applied.locked.write_said()  # the batch's are among them
    Message.objects.filter(task=task, estimated_time=True, at__gt=at).update(
        at=at - timedelta(microseconds=1)
    )


def message_event(applied: Applied, message: p.Message) -> str:
    """A message pushed on its own: kept in its task's session, or its context's."""
    task = None
    if message.task_id:
        task = Task.objects.filter(agent=applied.agent, task_id=message.task_id).first()
    if task is not None:
        applied.session = applied.locked.session(task.session_id)
    elif message.context_id:
        applied.session = applied.locked.open_session(
            applied.agent, message.context_id, applied.now
        )
    else:
        applied.warnings.append("a message with neither a known taskId nor a contextId")
        return Delivery.Outcome.IGNORED
    keep(applied, task, message, applied.now, estimated=True)
    return Delivery.Outcome.APPLIED


# -- card receipts ----------------------------------------------------------------------


def keep_note_as_said(applied: Applied) -> None:
    """The note did not reach the card (a later one in the same batch did)."""
    task, message, at, estimated = applied.note
    keep(applied, task, message, at, estimated=estimated)


def receipt(applied: Applied, written: progress_card.Written) -> None:
    """A status that changed the card's plan or note leaves one transcript line, the
    receipt, in place of its text (the card shows the note). A note that changed nothing
    on the card (older than the one shown, or the same text again) is kept as what the
    agent said."""
    card = written.card
    wrote = (
        written.content_changed
        and card is not None
        and card.source == ProgressCard.Source.STATUS
        and (card.plan is not None or bool(card.markdown))
    )
    if applied.note is not None:
        task, message, at, estimated = applied.note
        if wrote:
            line = p.Part(text=progress_card.receipt(card))
            message = replace(message, parts=(line,))
        keep(applied, task, message, at, estimated=estimated, card_update=wrote)
    elif wrote and applied.status_at is not None:
        task, at = applied.status_at
        applied.locked.keep_said(_receipt_line(applied.session, card, at=at, task=task))
