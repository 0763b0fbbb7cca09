"""The applier: applies the pushes the receiver kept (pending deliveries), in batches.

One per server process: a process beside it (`ONLOOKER_APPLIER=process`, the default,
process.py) or a thread in it (`background`); or one for all of `manage.py serve`'s
processes (`shared`). It is woken by every push its servers receive so a lone push is
applied at once, and polling for what other processes received, for retries and
for what a crash left pending. `python manage.py apply_deliveries` runs the same loop
standalone (web processes then run with `ONLOOKER_APPLIER=external`). Tests run it `inline`:
on the request, after the delivery is committed, so a test's push is applied when its
response arrives. On SQLite a batch first moves the pushes waiting in the spool file into
the database (spool.py), and clears them from the spool once it has committed. Delivery rows
are written by deliveries.py; an event is applied by apply/.

A batch is one transaction: it claims up to `BATCH` due deliveries (`FOR UPDATE SKIP
LOCKED` on PostgreSQL, so processes never claim the same ones) with their agents, locks and
loads the sessions, tasks and cards they go to in four queries, applies them in the order
they were received, and derives every session it changed once, at the end (what deriving
reads, read for all of them at once). Each of its statements is a round trip to
PostgreSQL: they are counted. Its fragments are rendered once per batch however many of its
pushes the batch held, and stored in one statement: on PostgreSQL in the batch's
transaction, under the sessions' row locks; on SQLite after the batch commits (so pushes
are not kept waiting for the one write lock while they render), in a short second
transaction (fragments.py says how nothing stale is ever shown meanwhile). Browsers are
hinted once they are stored. A session another process is applying (its row is locked) is skipped,
not waited for: its deliveries stay pending for the next batch, so one session is never
applied by two processes at once and two appliers never deadlock. Under load, a thin batch
(about one delivery per session) is followed by a rest so the next holds more of each
session's (`drain`), and a batch whose time is up still finishes the sessions it began;
a lone push, or two or three that met, never wait.

A batch is tried whole, without a savepoint per delivery; if anything in it raises, it is
rolled back and applied again one delivery at a time, each in a savepoint: a delivery whose
apply raises is then rolled back alone, kept with its error, and tried again with backoff;
it never stops the rest of its batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from tasks.models import NOT_READ, Agent, Delivery
from tasks.pushes import apply, deliveries, process
from tasks.runtime.loop import Loop
from tasks.runtime.prepared import Prepared
from tasks.runtime.writer import writing
from tasks.sessions import changes, fragments, usage
from tasks.wire import protocol

log = logging.getLogger(__name__)

BATCH = 500  # deliveries claimed at once
# A batch holds SQLite's one write lock while it runs, and every push's 2xx waits for that
# lock: a batch stops taking more deliveries after this long.
BATCH_SECONDS = 0.04
OVERTIME = 3  # how far past BATCH_SECONDS a batch goes on finishing the sessions it began
# Under load (a batch of GATHER_FROM or more), a thin batch (fewer than DENSE deliveries per
# session) is followed by a rest half as long as it took, GATHER_SECONDS at least (`drain`).
GATHER_FROM = 4
DENSE = 2
GATHER_SECONDS = 0.02
POLL_SECONDS = 1.0  # how often an idle applier looks for work nobody woke it for


@dataclass
class Batch:
    claimed: int = 0
    applied: int = 0
    failed: int = 0
    # Left pending because another process is applying their session: try again soon.
    deferred: int = 0
    sessions: set[int] = field(default_factory=set)


def apply_batch(
    limit: int = BATCH,
    seconds: float | None = None,
    *,
    only: int | None = None,
    overtime: float | None = None,
) -> Batch:
    """Claim due pending deliveries and apply them, taking no more after `seconds` (default:
    `BATCH_SECONDS` on SQLite, where a batch holds the one write lock; no limit elsewhere)
    but those of sessions it began, for up to `overtime` seconds more (default: OVERTIME - 1
    times `seconds`); see the module's docstring."""
    batch = Batch()
    if seconds is None and connection.vendor == "sqlite":
        seconds = BATCH_SECONDS
    if seconds is not None and overtime is None:
        overtime = (OVERTIME - 1) * seconds
    until = None if seconds is None else (seconds, seconds + overtime)
    now = timezone.now()
    with writing():
        with transaction.atomic():
            moved = deliveries.move_from_spool(limit)
            later = _claim_and_apply(batch, limit, only, until, now)
        # Committed: what it moved is the database's now. Cleared before another process's
        # applier may take the spool's pushes, so none is ever moved (or counted) twice.
        try:
            deliveries.clear_spool(moved)
        except Exception:  # noqa: BLE001 - the next move finds them moved and clears them
            log.exception("could not clear %s moved pushes from the spool", len(moved))
    if later is None:
        return batch
    # Committed: the write lock is free for pushes while the fragments render.
    later.render()
    if later.rendered:
        try:
            with writing():
                later.store()
        except Exception:  # noqa: BLE001 - they stay marked stale: pages render them on read
            log.exception("could not store the fragments of a batch")
    return batch


def _claim_and_apply(
    batch: Batch, limit: int, only: int | None, until: tuple[float, float] | None, now
) -> fragments.Later | None:
    """The batch's transaction, after its move from the spool: claim, apply, and the
    "session changed" step for the sessions it changed (on SQLite, or after a failure,
    their fragments are marked stale: the returned `Later` renders and stores them once
    this commits)."""
    postgresql = connection.vendor == "postgresql"
    if only is None and limit == BATCH:
        claimed = _CLAIM(now)  # every batch of a running applier: prepared.py says why
    else:
        due = deliveries.due(now) if only is None else deliveries.due(now).filter(pk=only)
        claimed = list(_claim(due, limit))
    batch.claimed = len(claimed)
    if not claimed:
        return None
    agents: dict[int, Agent] = {}
    for delivery in claimed:  # one object per agent, shared by its sessions' fragments
        delivery.agent = agents.setdefault(delivery.agent_id, delivery.agent)
    later = None
    try:
        with transaction.atomic():
            touched = _apply(claimed, batch, now, until=until, nowait=postgresql)
            # A failure to store (or mark) their fragments undoes the batch, applied alone
            # below. On PostgreSQL they are stored under the sessions' row locks, which only
            # other writers of the same sessions wait for: no second transaction, nothing to
            # check after it. On SQLite not while holding the one write lock every push needs.
            if touched:
                later = changes.changed(
                    touched, derived=True, later=not postgresql, savepoint=False
                )
    except Exception:  # noqa: BLE001 - deriving a session failed: find which, alone
        # One of its deliveries failed (or met a session another process holds):
        # that one is found, and kept for a retry, one delivery at a time.
        log.info("a batch could not be applied whole; applying one at a time", exc_info=True)
        batch.applied = batch.failed = batch.deferred = 0
        touched = _apply(claimed, batch, now, until=until, nowait=postgresql, alone=True)
        later = changes.changed(touched, derived=True, later=True) if touched else None
    batch.sessions = {one.session.pk for one in touched}
    return later


def _claim(due: QuerySet[Delivery], limit: int) -> QuerySet[Delivery]:
    """Due deliveries to apply, oldest first, locked (passing over those another process
    holds), with their agents in the same query (locking only the deliveries' rows)."""
    return (
        due.select_related("agent")
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("pk")[:limit]
    )


_CLAIM = Prepared(lambda now: _claim(deliveries.due(now), BATCH), keys=(datetime,))
# Whether any is due, locked or not (drain asks after every batch that claimed none).
_ANY_DUE = Prepared(lambda now: deliveries.due(now).only("pk")[:1], keys=(datetime,))


def _apply(
    claimed: list[Delivery],
    batch: Batch,
    now,
    *,
    until: tuple[float, float] | None,
    nowait: bool,
    alone: bool = False,
) -> list[changes.Changed]:
    """Apply the claimed deliveries in order, then derive each changed session once. Any
    error raises, for the caller to roll the batch back and apply it `alone`: each delivery
    in a savepoint and its session derived with it, so a failure (to apply or to derive) is
    that delivery's alone, kept and retried, and a session another process holds defers
    only its deliveries. Savepoints are not free (two statements, two round trips on
    PostgreSQL, per delivery), and deliveries seldom fail: the batch is tried whole first."""
    # Whole, the batch's task UPDATEs and transcript INSERTs are gathered (state.Locked).
    locked = apply.Locked(nowait=nowait, gather=not alone)
    locked.preload(claimed)
    results = _apply_in_order(claimed, batch, now, locked, until=until, alone=alone)
    if not alone:
        locked.write_tasks()  # each once, before deriving reads them
        deliveries.record_outcomes(results.done)
        # The batch's telemetry, one statement for all of it (none when it had none).
        usage.record(a.grown for applied in results.by_session.values() for a in applied)
    touched = _derive(results, alone=alone)
    if not alone:
        # Deriving kept the notes the batch superseded, and the receipts: all of its
        # messages in one INSERT, and the whole batch's timeline entries in another; then
        # its sessions, their cards and their search texts, one statement for each.
        locked.write_said()
        locked.timeline.write()
        locked.derived.write()
    return touched


@dataclass
class _Results:
    """A batch's deliveries as they were applied: all of them (`done`), and those of each
    session, in order, with the session's team."""

    done: list[Delivery] = field(default_factory=list)
    by_session: dict[int, list[apply.Applied]] = field(default_factory=dict)
    teams: dict[int, int | None] = field(default_factory=dict)


def _apply_in_order(
    claimed: list[Delivery],
    batch: Batch,
    now,
    locked: apply.Locked,
    *,
    until: tuple[float, float] | None,
    alone: bool,
) -> _Results:
    results = _Results()
    by_session = results.by_session
    started = time.monotonic()
    for delivery in claimed:
        if until is not None and by_session and time.monotonic() - started > until[0]:
            # Time is up, but a session's work after its deliveries (derive, render, store)
            # costs several times one delivery: finish the sessions this batch has begun, so
            # that work is shared by all of their claimed deliveries, and leave the others
            # pending (and, once this commits, unlocked). Within limits: past until[1]
            # seconds (OVERTIME × the time), or at a delivery whose session is not known
            # yet (it may be one begun here: applying a later one first would reorder that
            # session), the batch stops.
            session_id = locked.session_of.get((delivery.agent_id, delivery.task_id))
            if session_id is None or time.monotonic() - started > until[1]:
                break
            if session_id not in by_session:
                continue
        if locked.held(delivery):
            batch.deferred += 1  # another process is applying its session
            continue
        if alone:
            applied = _apply_alone(delivery, batch, now, locked)
            if applied is None:
                continue
        else:
            event = protocol.parse(delivery.body.encode())
            applied = apply.apply_delivery(delivery, event, locked, save=False)
        batch.applied += 1
        results.done.append(delivery)
        if applied.session is not None:
            by_session.setdefault(applied.session.pk, []).append(applied)
            results.teams[applied.session.pk] = delivery.agent.team_id
    return results


def _derive(results: _Results, *, alone: bool) -> list[changes.Changed]:
    """Each session the batch changed, derived once (unless applied alone: derived with each
    delivery), as the "session changed" step takes it."""
    by_session = results.by_session
    # What deriving reads, for all of the batch's sessions at once (a lone session's reads
    # are prepared statements, cheaper than compiling these).
    reads = changes.read_all(list(by_session)) if not alone and len(by_session) > 1 else {}
    touched = []
    for session_id, applied in by_session.items():
        # Applied alone, a session was derived with each of its deliveries, some of which
        # may have been rolled back since: its card is read once this commits.
        card = NOT_READ if alone else apply.derive(applied, reads.get(session_id))
        session = applied[-1].session
        # Its fragments show its agent's name: the agent this batch loaded above, rather
        # than a query per session when they render. A rename meanwhile stores them again,
        # under the session's lock, once it commits (agents.changed); on SQLite, a later
        # store also stores them only if the name is still the one they show.
        if session.agent_id == applied[-1].agent.pk:
            session.agent = applied[-1].agent
        touched.append(changes.Changed(session, results.teams[session_id], card))
    return touched


def _apply_alone(
    delivery: Delivery, batch: Batch, now, locked: apply.Locked
) -> apply.Applied | None:
    """One delivery in its own savepoint, its session derived with it; None if it was
    rolled back (failed, and marked for a retry, or deferred)."""
    try:
        with transaction.atomic():
            event = protocol.parse(delivery.body.encode())
            applied = apply.apply_delivery(delivery, event, locked)
            usage.record([applied.grown])  # in its savepoint: rolled back with it
            if applied.session is not None:
                apply.derive([applied])
            locked.timeline.write()
    except OperationalError as error:
        locked.forget()
        if changes.held(error):
            batch.deferred += 1
        else:
            deliveries.failed(delivery, error, now)
            batch.failed += 1
        return None
    except Exception as error:  # noqa: BLE001 - rolled back alone; kept and retried
        locked.forget()
        deliveries.failed(delivery, error, now)
        batch.failed += 1
        return None
    return applied


def retry_now(queryset) -> int:
    """Have pending deliveries (a queryset) applied now rather than at their next retry, say
    once what made them fail is fixed; returns how many."""
    count = deliveries.retry_now(queryset)
    wake()
    return count


def drain(*, gather: float = 0.0, sleep: Callable[[float], None] = time.sleep) -> int:
    """Apply batches until nothing due is left; returns how many deliveries were applied.

    `gather`: after a thin batch of `GATHER_FROM` deliveries or more (pushes are arriving
    faster than the applier takes them one by one, but the batch held fewer than `DENSE` per
    session), rest half as long as the batch took, and at least `gather`, before the next,
    so it holds more of each session's.
    A batch's cost is mostly per session (deriving, rendering and storing fragments: several
    times one delivery's), not per delivery: applied one or two at a time, pushes spread
    over many sessions cost three times the CPU each, taken from acknowledging (the
    receiver shares the applier's core as a thread, and the write lock on SQLite in any
    mode). Resting half as long as it worked keeps the applier to two thirds of its time
    while batches are thin; as pushes wait, batches thicken and the rests stop, so a backlog
    does not grow without bound. A rest as long as the batch (half its time) was every push's
    wait too: at 200 pushes a second over 10 sessions push → DOM p99 was 264–275 ms against
    235–253 on PostgreSQL, 190–219 against 165–189 on SQLite, for 14% more socket messages
    and 5% more of a core in the server. Two or three in a batch are pushes that met by
    chance, not load: rested after, at 50 pushes a second (a batch or two of each, on a
    machine with CPU to spare) every push waited for the rest, push → browser p50 65 ms
    against 29 ms without it on PostgreSQL. A lone push never waits: its batch is one
    delivery."""
    applied = waits = 0
    while True:
        started = time.monotonic()
        batch = apply_batch()
        took = time.monotonic() - started
        applied += batch.applied
        if batch.applied or batch.failed:
            waits = 0
            thin = batch.applied < DENSE * len(batch.sessions)
            if gather and batch.claimed >= GATHER_FROM and thin:
                sleep(max(gather, took / 2))
            continue
        # Nothing claimed, or only deliveries of sessions another process is applying. Due
        # rows SKIP LOCKED passed over may be held only for a moment (a duplicate being
        # counted on its row, another applier finishing): look again shortly, a few times,
        # then leave them to the next poll.
        if (batch.claimed or _ANY_DUE(timezone.now())) and waits < 20:
            waits += 1
            time.sleep(0.01)
            continue
        return applied


class Background(Loop):
    """The process's applier thread: `wake()` after committing a delivery. Its first step
    applies what a crash left pending: nothing woke anyone for it."""

    name = "onlooker-applier"

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        super().__init__(poll_seconds)
        self.failure_pause = min(poll_seconds, 1.0)

    def step(self) -> None:
        drain(gather=GATHER_SECONDS)


background = Background()


def start() -> None:
    """Start this process's applier, as a thread or as a process beside it, if the settings
    say so (the ASGI app calls this when it is loaded)."""
    mode = settings.ONLOOKER_APPLIER
    if mode == "background":
        background.start()
    elif mode == "process":
        process.supervisor.start()


def wake(delivery_id: int | None = None) -> None:
    """A delivery was committed (`delivery_id`, or some): have it applied."""
    mode = settings.ONLOOKER_APPLIER
    if mode == "process":
        process.supervisor.start()  # already running, unless not the ASGI app
        process.supervisor.wake()
    elif mode == "shared":
        process.nudge(settings.ONLOOKER_APPLIER_WAKE_FD)
    elif mode == "background":
        background.start()  # already running, unless this process is not the ASGI app
        background.wake()
    elif mode == "inline":
        try:
            if delivery_id is None:
                drain()
            else:
                _apply_one(delivery_id)
        except Exception:  # noqa: BLE001 - the delivery is kept; the next wake applies it
            log.exception("could not apply pending deliveries")


def _apply_one(delivery_id: int) -> None:
    """Inline: apply the delivery just received, by its key, rather than scan for what is
    due (a test's one long transaction keeps every row it ever updated in that scan)."""
    pending = Delivery.objects.filter(pk=delivery_id, outcome=Delivery.Outcome.PENDING)
    for _ in range(50):
        batch = apply_batch(only=delivery_id)
        if batch.applied or batch.failed or not pending.exists():
            return
        # Its row is held for a moment (a duplicate being counted on it), or its session is
        # (another request applying to it): try again shortly.
        time.sleep(0.01)
    drain()  # held longer than that: whatever is due now, this one included
