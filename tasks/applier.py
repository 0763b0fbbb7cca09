"""The applier: applies the pushes the receiver kept (pending deliveries), in batches.

One per process: a background thread started with the ASGI app (`ONLOOKER_APPLIER=
background`, the default), woken by every push it receives so a lone push is applied at
once, and polling for what other processes received, for retries and for what a crash left
pending. `python manage.py apply_deliveries` runs the same loop standalone (web processes
then run with `ONLOOKER_APPLIER=external`). Tests run it `inline`: on the request, after the
delivery is committed, so a test's push is applied when its response arrives.

A batch is one transaction: it claims up to `BATCH` due deliveries (`FOR UPDATE SKIP
LOCKED` on PostgreSQL, so processes never claim the same ones), applies them in the order
they were received, each in a savepoint, and publishes every session it changed once, at
the end: its fragments are rendered once per batch however many of its pushes the batch
held, and browsers are hinted after commit. A session another process is applying (its row
is locked) is skipped, not waited for: its deliveries stay pending for the next batch, so
one session is never applied by two processes at once and two appliers never deadlock.

A delivery whose apply raises is rolled back alone, kept with its error, and tried again
with backoff; it never stops the rest of its batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import OperationalError, close_old_connections, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from tasks import changes, ingest, protocol
from tasks.models import Agent, Delivery, Session

log = logging.getLogger(__name__)

BATCH = 100  # deliveries claimed at once
# A batch holds SQLite's one write lock while it runs, and every push's 2xx waits for that
# lock: a batch stops taking more deliveries after this long.
BATCH_SECONDS = 0.04
POLL_SECONDS = 1.0  # how often an idle applier looks for work nobody woke it for
MAX_BACKOFF = timedelta(hours=1)
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for NOWAIT finding a lock taken


def backoff(attempts: int) -> timedelta:
    """How long after its `attempts`-th failure a delivery is tried again: 5 s, doubling."""
    return min(timedelta(seconds=5 * 2 ** (attempts - 1)), MAX_BACKOFF)


@dataclass
class Batch:
    claimed: int = 0
    applied: int = 0
    failed: int = 0
    # Left pending because another process is applying their session: try again soon.
    deferred: int = 0
    sessions: set[int] = field(default_factory=set)


# One writer at a time on SQLite: the receiver's insert and a batch take turns here, where a
# waiter wakes the moment the other is done, rather than in SQLite's busy handler, which
# sleeps in growing steps. PostgreSQL writers never wait for each other this way.
_sqlite_writer = threading.Lock()


@contextmanager
def writing() -> Iterator[None]:
    if connection.vendor != "sqlite":
        yield
        return
    with _sqlite_writer:
        yield


def apply_batch(limit: int = BATCH, seconds: float | None = BATCH_SECONDS) -> Batch:
    """Claim due pending deliveries and apply them, taking no more after `seconds` (None:
    all claimed); see the module's docstring."""
    batch = Batch()
    nowait = connection.vendor == "postgresql"
    now = timezone.now()
    with writing(), transaction.atomic():
        due = Delivery.objects.filter(outcome=Delivery.Outcome.PENDING).filter(
            Q(retry_at__isnull=True) | Q(retry_at__lte=now)
        )
        claimed = list(due.select_for_update(skip_locked=True).order_by("pk")[:limit])
        batch.claimed = len(claimed)
        if not claimed:
            return batch
        agents = Agent.objects.in_bulk({d.agent_id for d in claimed})
        changed: dict[int, tuple[Session, int | None]] = {}
        failures: list[tuple[Delivery, Exception]] = []
        started = time.monotonic()
        for delivery in claimed:
            if seconds is not None and time.monotonic() - started > seconds and changed:
                break  # the rest stay pending (and, once this commits, unlocked)
            delivery.agent = agents[delivery.agent_id]
            try:
                with transaction.atomic():
                    event = protocol.parse(delivery.body.encode())
                    session = ingest.apply_delivery(delivery, event, nowait=nowait)
            except OperationalError as error:
                if getattr(error.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE:
                    batch.deferred += 1
                    continue
                failures.append((delivery, error))
                continue
            except Exception as error:  # noqa: BLE001 - rolled back alone; kept and retried
                failures.append((delivery, error))
                continue
            batch.applied += 1
            if session is not None:
                changed[session.pk] = (session, delivery.agent.team_id)
        for delivery, error in failures:
            _failed(delivery, error, now)
            batch.failed += 1
        for session, team_id in changed.values():
            changes.publish(session, team_id=team_id)
        batch.sessions = set(changed)
    return batch


def _failed(delivery: Delivery, error: Exception, now) -> None:
    attempts = delivery.attempts + 1
    log.error(
        "delivery %s (agent %s) not applied, attempt %s: %s",
        delivery.pk,
        delivery.agent_id,
        attempts,
        error,
        exc_info=error,
    )
    Delivery.objects.filter(pk=delivery.pk).update(
        attempts=F("attempts") + 1,
        last_error=f"{type(error).__name__}: {error}"[:2000],
        retry_at=now + backoff(attempts),
    )


def drain() -> int:
    """Apply batches until nothing due is left; returns how many deliveries were applied."""
    applied = waits = 0
    while True:
        batch = apply_batch()
        applied += batch.applied
        if batch.claimed == 0:
            return applied
        if batch.applied or batch.failed:
            waits = 0
            continue
        # Everything claimed belongs to sessions another process is applying: give it a
        # moment, then leave the rest to the next poll.
        waits += 1
        if waits > 20:
            return applied
        time.sleep(0.01)


class Background:
    """The process's applier thread: `wake()` after committing a delivery."""

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        self.poll_seconds = poll_seconds
        self._woken = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="onlooker-applier", daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        self._woken.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        # What a crash left pending is applied first: nothing woke anyone for it.
        while not self._stopping:
            self._woken.clear()
            try:
                drain()
            except Exception:  # noqa: BLE001 - the database went away, say: try again later
                log.exception("the applier could not apply pending deliveries")
                time.sleep(min(self.poll_seconds, 1.0))
            finally:
                close_old_connections()
            self._woken.wait(self.poll_seconds)


background = Background()


def start() -> None:
    """Start this process's applier if the settings say it runs here (the ASGI app calls
    this when it is loaded)."""
    if settings.ONLOOKER_APPLIER == "background":
        background.start()


def wake() -> None:
    """A delivery was committed: have it applied."""
    mode = settings.ONLOOKER_APPLIER
    if mode == "background":
        background.start()  # already running, unless this process is not the ASGI app
        background.wake()
    elif mode == "inline":
        try:
            drain()
        except Exception:  # noqa: BLE001 - the delivery is kept; the next wake applies it
            log.exception("could not apply pending deliveries")
