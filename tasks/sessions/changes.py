"""The one "session changed" step, taken by every writer of a session (the applier, answers,
the card API, tasks fetched from agents, an agent's rename), and the only writer of Session
rows:

1. lock the session row, first, always (`open_session`, `lock`, `lock_all`): everything under
   it (tasks, interactions, the transcript, the card) is then serialized by that one lock,
   in one lock order;
2. change what is under it (queuing notifications where the change knows what opened or
   closed: notify.outbox);
3. `changed`: derive each session's state, card and searchable text from its tasks (unless
   the writer derived it), store its fragments with the change and hint browsers once it
   commits.

Sessions are created only by `open_session`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import OperationalError, connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from tasks.models import NEWEST_OPEN_ORDER, NOT_READ, Agent, Interaction, Session, Task
from tasks.runtime import prepared
from tasks.sessions import fragments, progress_card, search
from tasks.sessions import timeline as history

LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for NOWAIT finding a lock taken


class Held(OperationalError):
    """Another transaction is creating this session: try again once it has committed."""


def held(error: OperationalError) -> bool:
    """Whether a `nowait` lock failed because another transaction holds the row (or is
    creating it)."""
    return isinstance(error, Held) or getattr(error.__cause__, "sqlstate", None) == (
        LOCK_NOT_AVAILABLE
    )


def open_session(agent: Agent, context_id: str, *, at: datetime, nowait: bool = False) -> Session:
    """The agent's session for a context, created if new, locked."""
    session = Session.objects.filter(agent=agent, context_id=context_id).first()
    if session is None:
        _creating(agent, context_id, nowait=nowait)
        session, _ = Session.objects.get_or_create(
            agent=agent, context_id=context_id, defaults={"updated_at": at}
        )
    return lock(session.pk, nowait=nowait)


def _creating(agent: Agent, context_id: str, *, nowait: bool) -> None:
    """On PostgreSQL, one transaction at a time creates a given session: a second one's
    INSERT would wait on the first's uncommitted row in the unique index, and two appliers
    each creating a session and a task the other had just created deadlocked. An advisory
    lock on (agent, context) for the rest of the transaction: `nowait` raises Held (the
    applier defers the delivery) rather than wait. A hash collision only serializes two
    creations that needed not be."""
    if connection.vendor != "postgresql":
        return  # SQLite has one writer at a time
    agent_key = agent.pk % 2**31  # both int4
    key = zlib.crc32(context_id.encode("utf-8", "surrogatepass")) - 2**31
    with connection.cursor() as cursor:
        if nowait:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [agent_key, key])
            if not cursor.fetchone()[0]:
                raise Held(f"session {context_id!r} of agent {agent.pk} is being created")
        else:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [agent_key, key])


def name(session: Session, first_words: str) -> None:
    """Title an untitled session after what a person first asked it: the first line, cut.
    Written now, with the change that brought it: if that is rolled back, so is the title."""
    session.title = first_words.strip().splitlines()[0][:200]
    Session.objects.filter(pk=session.pk).update(title=session.title)


def lock(session_id: int, *, nowait: bool = False) -> Session:
    """Lock a session's row for the rest of the transaction. `nowait`: raise instead of
    waiting when another process holds it (an applier then leaves its deliveries for later
    rather than queue behind, or deadlock with, another applier)."""
    return Session.objects.select_for_update(nowait=nowait).get(pk=session_id)


def lock_all(session_ids: set[int], *, skip_locked: bool = False) -> list[Session]:
    """Lock several sessions' rows at once, in one order (by id), so two writers locking
    overlapping sets never deadlock. `skip_locked`: leave out (rather than wait for) those
    another transaction holds."""
    if len(session_ids) == 1:  # one push's batch: prepared (runtime/prepared.py says why)
        return _LOCK_ONE[skip_locked](*session_ids)
    sessions = Session.objects.select_for_update(skip_locked=skip_locked)
    return list(sessions.filter(pk__in=session_ids).order_by("pk"))


_LOCK_ONE = {
    skip: prepared.Prepared(
        lambda pk, skip=skip: Session.objects.select_for_update(skip_locked=skip).filter(pk=pk)
    )
    for skip in (False, True)
}


class Gathered:
    """The writes of deriving a batch's sessions, made together (`write`) rather than as each
    is derived: the sessions' rows, their cards' and their search texts', one statement of
    each kind on PostgreSQL. Each statement is a round trip, and these three a session were
    a third of a busy batch's time, waiting (docs/performance.md). Nothing in the batch
    reads them from the database before `write` (applier.py says when it runs); a card not
    stored yet is inserted at once, so it has its id."""

    def __init__(self) -> None:
        self._rows: dict[tuple, dict[int, Any]] = {}  # by (model, fields): by id
        self._texts: dict[int, tuple[Session, progress_card.ProgressCard | None]] = {}

    def update(self, instance: Any, fields: tuple[str, ...] | None = None) -> None:
        """prepared.update(instance, fields), with the batch's."""
        if instance.pk is None or instance._state.adding:
            prepared.update(instance, fields)
            return
        self._rows.setdefault((type(instance), fields), {})[instance.pk] = instance

    def text(self, session: Session, card: progress_card.ProgressCard | None) -> None:
        """search.keep(session, card), with the batch's."""
        self._texts[session.pk] = (session, card)

    def write(self) -> None:
        """Each gathered row as it is now, then the search texts."""
        rows, self._rows = self._rows, {}
        for (_, fields), instances in rows.items():
            prepared.update_all(list(instances.values()), fields)
        texts, self._texts = self._texts, {}
        search.keep_all(list(texts.values()))

    def drop(self) -> None:
        self._rows.clear()
        self._texts.clear()


def derive(
    session: Session,
    *,
    updated_at: datetime | None = None,
    timeline: history.Pending | None = None,
    card: Any = NOT_READ,
    read: Read | None = None,
    gathered: Gathered | None = None,
) -> progress_card.Written:
    """The session's state, whether it needs a person, its title and its card, from what is
    stored under it now. Call under its lock, after the change. A new card revision is a
    timeline entry: gathered in `timeline` (the applier's batch) or, without one, written now.
    `card`: the session's card (or None), and `read`, what else it reads, when the caller
    read them under the lock. `gathered`: the session's, card's and search text's writes
    wait for the batch's (`Gathered.write`); without it they are made now."""
    checks: Any = NOT_READ
    if read is None:
        # The newest turns hold everything the card shows.
        tasks = progress_card.recent_tasks(session)
        waiting = session.derive_state(tasks)
    else:
        tasks, checks = read.tasks, read.checks
        waiting = session.derive_state(tasks, read.waiting)
    fields = ("state", "needs_human", "title")
    if updated_at is not None:
        session.updated_at = updated_at
        fields += ("updated_at",)
    # session.save(update_fields=fields), its UPDATE compiled once, now or with the batch's.
    save = prepared.update if gathered is None else gathered.update
    save(session, fields)
    written = progress_card.from_session(
        session, tasks, question=waiting, card=card, checks=checks, save=save
    )
    card_written(session, written, timeline=timeline, gathered=gathered)
    return written


def card_written(
    session: Session,
    written: progress_card.Written,
    *,
    timeline: history.Pending | None = None,
    gathered: Gathered | None = None,
) -> None:
    """What follows a card write, derived (`derive`) or direct (the card API): a new revision
    is a timeline entry, and the card's plan and note are searchable."""
    if written.changed:
        if timeline is not None:
            timeline.card(session, written.card)
        else:
            history.card_written(session, written.card)
    # Writes only if its title, plan or note changed.
    if gathered is None:
        search.keep(session, written.card)
    else:
        gathered.text(session, written.card)


@dataclass(frozen=True)
class Read:
    """What deriving a session reads: its newest tasks, newest first, its newest open
    interaction (with its task's state as `task_state`), or None, and its open checks
    (uncertain effects a person must look at: sessions/effect_checks.py)."""

    tasks: list[Task]
    waiting: Interaction | None
    checks: list[Interaction]


def read_all(session_ids: list[int]) -> dict[int, Read]:
    """What `derive` reads, for many sessions in two queries rather than two per session
    (the applier's batch). Call under their locks, once their changes are made: deriving a
    session changes neither its tasks nor its interactions."""
    newest = Window(
        RowNumber(), partition_by=[F("session_id")], order_by=progress_card.recent_first()
    )
    ranked = (
        Task.objects.filter(session_id__in=session_ids)
        .annotate(turn=newest)
        .filter(turn__lte=progress_card.RECENT_TASKS)
    )
    tasks: dict[int, list[Task]] = {pk: [] for pk in session_ids}
    for task in sorted(ranked, key=lambda t: (t.session_id, t.turn)):
        tasks[task.session_id].append(task)
    waiting: dict[int, Interaction] = {}
    open_ones = (
        Interaction.objects.filter(task__session_id__in=session_ids, state=Interaction.State.OPEN)
        .annotate(task_state=F("task__state"), session_of=F("task__session_id"))
        .order_by(*NEWEST_OPEN_ORDER)
    )
    checks: dict[int, list[Interaction]] = {pk: [] for pk in session_ids}
    for interaction in open_ones:
        waiting.setdefault(interaction.session_of, interaction)  # the first is the newest
        if interaction.kind == Interaction.Kind.CHECK:
            checks[interaction.session_of].append(interaction)
    return {pk: Read(tasks[pk], waiting.get(pk), checks[pk]) for pk in session_ids}


Changed = fragments.Changed


def changed(
    sessions: list[Changed],
    *,
    derived: bool = False,
    updated_at: datetime | None = None,
    later: bool = False,
    savepoint: bool = True,
) -> fragments.Later | None:
    """The last step of every change to sessions, in the writer's transaction, under their
    locks: derive each (`derive`), store its fragments and hint browsers once the change
    commits (fragments.publish). A batch of changes to one session takes it once.

    `derived`: the writer derived them itself, or wrote their cards (the applier derives a
    batch's sessions with its receipts; the card API writes the card it is given), and their
    `Changed.card` is what that left (or NOT_READ). `updated_at`: the sessions' time moves to
    it. `later`: SQLite's applier batches render after commit, not while holding the one
    write lock: their fragments are marked stale now, and the returned `Later` renders and
    stores them. `savepoint=False`: a failure to store or mark fragments raises, for a caller
    that can undo its change and make it again; otherwise it never undoes the change."""
    for one in sessions:
        if not derived:
            one.card = derive(one.session, updated_at=updated_at).card
        elif updated_at is not None:
            one.session.updated_at = updated_at
            prepared.update(one.session, ("updated_at",))
    if later:
        return fragments.publish_later(sessions, savepoint=savepoint)
    fragments.publish(sessions, savepoint=savepoint)
    return None
