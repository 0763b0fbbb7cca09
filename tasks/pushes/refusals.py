"""Counts of refused pushes per agent and reason (the admin and the agent page show them):
the only thing a refused push writes, and at most once a second per process.

A refusal used to be a write transaction of its own, so anyone who knew a push URL could
turn bad requests into a write flood: 250 badly signed pushes a second slowed a good push's
p50 from 3 to 26 ms (on SQLite they queue for the one write lock). Here refusals are added
up in memory; a lone refusal is still written at once (an agent's owner looking at why
pushes fail sees it now), but the ones that follow within ONLOOKER_REFUSAL_WRITE_SECONDS are
written together when that time is up, in one transaction. A process that dies loses at
most that second's counts: they are statistics, not deliveries.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import F
from django.utils import timezone

from tasks.models import Refusal

log = logging.getLogger(__name__)


@dataclass
class _Tally:
    count: int
    last_at: object  # datetime
    last_detail: str


class _Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[tuple[int, str], _Tally] = {}
        self.written_at = -float("inf")  # time.monotonic() of the last write
        self.timer: threading.Timer | None = None

    def add(self, agent_id: int, reason: str, detail: str) -> None:
        now = timezone.now()
        with self.lock:
            tally = self.pending.get((agent_id, reason))
            if tally is None:
                self.pending[(agent_id, reason)] = _Tally(1, now, detail)
            else:
                tally.count, tally.last_at, tally.last_detail = tally.count + 1, now, detail
            wait = self.written_at + settings.ONLOOKER_REFUSAL_WRITE_SECONDS - time.monotonic()
            if wait > 0:
                if self.timer is None:
                    self.timer = threading.Timer(wait, self._write_later)
                    self.timer.daemon = True
                    self.timer.start()
                return
        self.write()

    def write(self) -> None:
        """Write what is pending now (also how a test or a shutdown makes sure of it)."""
        with self.lock:
            pending, self.pending = self.pending, {}
            self.written_at = time.monotonic()
            self._cancel_timer()
        if not pending:
            return
        try:
            _store(pending)
        except DatabaseError as error:
            # Kept for the next write: a refusal counted while the database is away.
            log.warning("refusal counts not written (kept for later): %s", error)
            with self.lock:
                for key, tally in pending.items():
                    newer = self.pending.get(key)
                    if newer is not None:
                        tally.count += newer.count
                        tally.last_at, tally.last_detail = newer.last_at, newer.last_detail
                    self.pending[key] = tally

    def clear(self) -> None:
        """Forget what is pending, as if the process had just started (tests)."""
        with self.lock:
            self.pending.clear()
            self.written_at = -float("inf")
            self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _write_later(self) -> None:
        try:
            self.write()
        finally:
            connections.close_all()  # this timer's thread ends: hand its connection back


def _store(pending: dict[tuple[int, str], _Tally]) -> None:
    with transaction.atomic():
        for (agent_id, reason), tally in sorted(pending.items()):
            refusal, _ = Refusal.objects.get_or_create(
                agent_id=agent_id, reason=reason, defaults={"last_at": tally.last_at}
            )
            Refusal.objects.filter(pk=refusal.pk).update(
                count=F("count") + tally.count,
                last_at=tally.last_at,
                last_detail=tally.last_detail,
            )
    for (agent_id, reason), tally in pending.items():
        log.info("push refused: agent=%s reason=%s (%d)", agent_id, reason, tally.count)


counter = _Counter()


def count(agent_id: int, reason: str, detail: str) -> None:
    """Count one refused push of the agent's. `detail` is stored as given: the caller makes
    it plain text that fits (300 characters)."""
    counter.add(agent_id, reason, detail)
