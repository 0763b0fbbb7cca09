"""What applying shares: `Locked`, what one batch has locked and loaded, and `Applied`, what
applying one delivery has found and done so far (its session, warnings, note, usage), read
by the parts that apply it (status, interactions, transcript, artifacts) and by `derive`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tasks.models import Agent, Delivery, Message, ProgressCard, Session, Task
from tasks.runtime import prepared
from tasks.runtime.prepared import Prepared
from tasks.sessions import changes, progress_card, timeline, usage
from tasks.wire import protocol as p

SAID_ROWS = 500  # transcript messages inserted in one statement (`Locked.write_said`)


class Locked:
    """What one batch has locked and loaded: each session row once, each task once. Shared by
    the deliveries of one batch, in its transaction (the row locks last until it ends).

    `gather`: the tasks' UPDATEs and the transcript's INSERTs wait for `write_tasks` and
    `write_said`, as the timeline's entries do, and deriving's writes for `derived.write()`:
    a task the batch applied three statuses to is written once, and the batch's messages go
    in one INSERT, its tasks in one UPDATE. Each statement is a round trip to PostgreSQL,
    and one per delivery was a third of a busy batch's (applier.py says when each is
    written). Without it (a delivery applied alone, in its savepoint, or
    fetched.py's), each is written at once."""

    def __init__(self, *, nowait: bool = False, gather: bool = False) -> None:
        self.nowait = nowait
        self.gather = gather
        self._changed_tasks: dict[int, Task] = {}
        self._said: list[Message] = []
        self.sessions: dict[int, Session] = {}
        self.tasks: dict[tuple[int, str], Task] = {}
        self._held: set[tuple[int, str]] = set()
        # (agent, task id) → session id, for the tasks `preload` found.
        self.session_of: dict[tuple[int, str], int] = {}
        # The locked sessions' cards (a session without one is not here): derive reads them
        # from here rather than one query per session. Only derive writes a card in a batch.
        self.cards: dict[int, ProgressCard] = {}
        self.forgot = False
        # The batch's timeline entries, inserted together once it is applied (applier.py),
        # and (`gather`) the writes of deriving its sessions, made together once all are.
        self.timeline = timeline.Pending()
        self.derived = changes.Gathered() if gather else None
        # Tasks created here that have had no status yet: their first one is a state entry
        # even when it repeats the state they were created in.
        self.fresh: set[int] = set()

    def preload(self, deliveries: list[Delivery]) -> None:
        """Lock and load, in four queries, the sessions, tasks and cards these deliveries go
        to that exist already, rather than four queries per task as each is first met. A session
        another process holds is passed over, and its deliveries are deferred (`held`)."""
        wanted = {(d.agent_id, d.task_id) for d in deliveries if d.task_id}
        if not wanted:
            return
        if len(wanted) == 1:
            self._preload_one(*wanted)
            return
        self.session_of = sessions_of = {
            (agent_id, task_id): session_id
            for agent_id, task_id, session_id in Task.objects.filter(
                agent_id__in={a for a, _ in wanted}, task_id__in={t for _, t in wanted}
            ).values_list("agent_id", "task_id", "session_id")
            if (agent_id, task_id) in wanted
        }
        if not sessions_of:
            return
        sessions = changes.lock_all(set(sessions_of.values()), skip_locked=self.nowait)
        self.sessions.update((session.pk, session) for session in sessions)
        self._held = {key for key, id_ in sessions_of.items() if id_ not in self.sessions}
        if self.sessions:
            self.cards = ProgressCard.objects.in_bulk(list(self.sessions), field_name="session_id")
        for task in Task.objects.filter(
            session_id__in=self.sessions.keys(),
            agent_id__in={a for a, _ in wanted},
            task_id__in={t for _, t in sessions_of},
        ):
            self.tasks[(task.agent_id, task.task_id)] = task

    def _preload_one(self, wanted: tuple[int, str]) -> None:
        """`preload` for one task (a lone push's batch, what a push waits for at tens a
        second), with the same four reads prepared: compiling them cost more than running
        them (runtime/prepared.py)."""
        found = _SESSION_OF(*wanted)
        if not found:
            return
        task_pk, session_id = found[0].pk, found[0].session_id
        self.session_of = {wanted: session_id}
        sessions = changes.lock_all({session_id}, skip_locked=self.nowait)
        if not sessions:
            self._held = {wanted}
            return
        self.sessions[session_id] = sessions[0]
        card = progress_card.stored(session_id)
        if card is not None:
            self.cards[session_id] = card
        for task in _TASK(task_pk, session_id):
            self.tasks[wanted] = task

    def held(self, delivery: Delivery) -> bool:
        """Whether `preload` found the session of this delivery's task held by another
        process (its deliveries wait for a later batch)."""
        return (delivery.agent_id, delivery.task_id) in self._held

    def forget(self) -> None:
        """A delivery was rolled back: what it changed of these objects in memory is not in
        the database, so they are read again (the row locks stay: the transaction goes on)."""
        self.sessions.clear()
        self.tasks.clear()
        self.cards.clear()
        self.timeline.drop()
        if self.derived is not None:
            self.derived.drop()
        self._changed_tasks.clear()
        self._said.clear()
        self.forgot = True

    def save_task(self, task: Task) -> None:
        """`task` changed: its row is updated now, or with the batch's (`gather`)."""
        if self.gather:
            self._changed_tasks[task.pk] = task
        else:
            prepared.update(task)

    def write_tasks(self) -> None:
        """The changed tasks' UPDATE, each task once however many statuses it had, all in
        one statement on PostgreSQL: before anything reads them from the database (deriving
        the sessions does)."""
        tasks, self._changed_tasks = self._changed_tasks, {}
        prepared.update_all(list(tasks.values()))

    def keep_said(self, message: Message) -> None:
        """A transcript message to insert (skipped if its id is in the transcript already):
        now, or with the batch's (`gather`)."""
        if self.gather:
            self._said.append(message)
        else:
            prepared.insert(message, ignore_conflicts=True)

    def write_said(self) -> None:
        """The messages kept so far, in one INSERT, in the order they were kept (their ids
        break ties of time in the transcript): before anything reads or moves them."""
        said, self._said = self._said, []
        if len(said) == 1:  # a lone push's: its INSERT made once
            prepared.insert(said[0], ignore_conflicts=True)
        elif said:
            # A statement of at most SAID_ROWS rows: a snapshot may repeat a long history.
            Message.objects.bulk_create(said, ignore_conflicts=True, batch_size=SAID_ROWS)

    def session(self, session_id: int) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = changes.lock(session_id, nowait=self.nowait)
        return session

    def open_session(self, agent: Agent, context_id: str, at: datetime) -> Session:
        session = changes.open_session(agent, context_id, at=at, nowait=self.nowait)
        return self.sessions.setdefault(session.pk, session)


# A task's session, and then (under the session's lock) the task: `_preload_one`'s reads.
_SESSION_OF = Prepared(
    lambda agent_id, task_id: Task.objects.filter(agent_id=agent_id, task_id=task_id).only(
        "session_id"
    ),
    keys=(int, str),
)
_TASK = Prepared(
    lambda pk, session_id: Task.objects.filter(pk=pk, session_id=session_id), keys=(int, int)
)


@dataclass
class Applied:
    """One delivery's apply (apply_delivery): what it found and did so far."""

    agent: Agent
    now: datetime  # when the delivery was received
    locked: Locked
    warnings: list[str] = field(default_factory=list)
    session: Session | None = None
    # The applied status's note message and time: what a card receipt is kept as.
    note: tuple[Task, p.Message, datetime, bool] | None = None
    status_at: tuple[Task, datetime] | None = None
    # What this delivery adds to the usage ledger: written with its batch's (usage.record).
    grown: usage.Deltas = field(default_factory=usage.Deltas)
