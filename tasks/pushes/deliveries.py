"""Delivery rows, the log of every push kept: the only module that creates, updates or
deletes them (pages, the admin and the API read them). A push is kept here on its request
(`receive`; on SQLite in the spool file, moved into the table by the applier's batches:
`move_from_spool`, `clear_spool`), its outcome recorded once it is applied
(`record_outcome`, `record_outcomes`), a failed apply kept for a retry with backoff
(`failed`), what is due for the applier read (`due`), and old rows pruned (`prune`).

The log is keyed by (agent, idempotency key): a second copy of a key is a duplicate,
counted on the first and never applied.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from tasks.models import Delivery, PushEndpoint
from tasks.pushes import spool
from tasks.runtime import prepared
from tasks.runtime.writer import writing
from tasks.wire import protocol as p

log = logging.getLogger(__name__)

MAX_BACKOFF = timedelta(hours=1)


def idempotency_key(webhook_id: str | None, body: bytes) -> str:
    if webhook_id:
        if len(webhook_id) <= 150:
            return f"id:{webhook_id}"
        return f"id-sha256:{hashlib.sha256(webhook_id.encode()).hexdigest()}"
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


@dataclass
class Result:
    delivery: Delivery
    duplicate: bool
    # Something was kept for the applier to take: the push, or (spool.py) a copy of one it
    # has taken, to be counted on it.
    kept: bool = False

    @property
    def pending(self) -> bool:
        return self.kept or not self.duplicate


# -- keeping a push -----------------------------------------------------------------------


def receive(endpoint: PushEndpoint, key: str, body: bytes, event: p.Event) -> Result:
    """Keep an authenticated, parsed push, pending: the only work a push does on its
    request. Once this returns it is committed, so the agent's 2xx means "kept"; the applier
    applies it (applier.py). A second copy of a key is a duplicate. On SQLite it is kept in
    the spool file, where it never waits for the database's write lock (spool.py)."""
    in_caller_transaction = transaction.get_connection().in_atomic_block
    file = spool.path()
    if file is not None and not in_caller_transaction:
        return _receive_in_spool(file, endpoint, key, body, event)
    try:
        with writing():
            if in_caller_transaction:
                # In a caller's transaction (a test's): a savepoint, so a duplicate's error
                # does not abort it.
                with transaction.atomic():
                    delivery = keep(endpoint.agent_id, endpoint, key, body, event)
            else:
                # One INSERT commits on its own: a BEGIN and a COMMIT around it would be two
                # more round trips to PostgreSQL on every push.
                delivery = keep(endpoint.agent_id, endpoint, key, body, event)
    except IntegrityError:
        duplicate = count_duplicate(endpoint.agent_id, key)
        if duplicate is None:
            raise
        return duplicate
    return Result(delivery, duplicate=False)


def _receive_in_spool(
    file: str, endpoint: PushEndpoint, key: str, body: bytes, event: p.Event
) -> Result:
    agent_id = endpoint.agent_id
    kept = spool.keep(
        file,
        agent_id=agent_id,
        endpoint_id=endpoint.pk,
        key=key,
        received_at=timezone.now(),
        kind=event.kind,
        task_id=event.task_id,
        body=body.decode(),
    )
    if kept.duplicate:
        return Result(Delivery(pk=kept.delivery_id, agent_id=agent_id), duplicate=True)
    if kept.copy_of is not None:  # the database's: this copy is counted on it when moved
        return Result(Delivery(pk=kept.copy_of, agent_id=agent_id), duplicate=True, kept=True)
    return Result(Delivery(pk=kept.delivery_id, agent_id=agent_id), duplicate=False)


def keep(
    agent_id: int, endpoint: PushEndpoint | None, key: str, body: bytes, event: p.Event
) -> Delivery:
    """The delivery row, pending; its unique (agent, key) refuses a second copy."""
    file = spool.path()
    delivery = Delivery(
        # Where there is a spool file its sequence numbers every delivery (spool.py).
        pk=spool.next_id(file) if file is not None else None,
        agent_id=agent_id,
        endpoint=endpoint,
        idempotency_key=key,
        received_at=timezone.now(),
        kind=event.kind,
        task_id=event.task_id,
        body=body.decode(),
    )
    prepared.insert(delivery)  # Delivery.objects.create(), its INSERT made once
    return delivery


def count_duplicate(agent_id: int, key: str) -> Result | None:
    """The delivery already kept under this key, counted once more; None if there is none
    (the IntegrityError was about something else)."""
    delivery = Delivery.objects.filter(agent_id=agent_id, idempotency_key=key).first()
    if delivery is None:
        return None
    with writing():
        Delivery.objects.filter(pk=delivery.pk).update(duplicates=F("duplicates") + 1)
    return Result(delivery, duplicate=True)


# -- the spool's pushes, moved into the table ---------------------------------------------


def move_from_spool(limit: int) -> dict[int, int]:
    """Move up to `limit` pushes, oldest first, from the spool into `Delivery` (pending), in
    the caller's transaction, which holds the database's write lock. Returns what to clear
    (`clear_spool`) once that transaction has committed: spool id → copies counted on it
    when it was moved (nothing where there is no spool)."""
    taken = spool.take(limit)
    if taken is None:
        return {}
    new: list[Delivery] = []
    copies: Counter[int] = Counter()
    for push in taken.pushes:
        if push.agent_id not in taken.agents:
            continue  # its agent was deleted meanwhile, and its deliveries with it
        first = taken.kept.get((push.agent_id, push.key))
        if first == push.spool_id:
            continue
        if first is not None:
            copies[first] += 1 + push.duplicates
            continue
        new.append(
            Delivery(
                # Its own id, which its agent was told; another only if the database has it
                # (the spool was deleted, or the database replaced, since).
                pk=None if push.spool_id in taken.ids_taken else push.spool_id,
                agent_id=push.agent_id,
                endpoint_id=push.endpoint_id if push.endpoint_id in taken.endpoints else None,
                idempotency_key=push.key,
                received_at=datetime.fromisoformat(push.received_at),
                kind=push.kind,
                task_id=push.task_id,
                body=push.body,
                duplicates=push.duplicates,
            )
        )
    Delivery.objects.bulk_create(new)
    for pk, count in copies.items():
        Delivery.objects.filter(pk=pk).update(duplicates=F("duplicates") + count)
    return {push.spool_id: push.duplicates for push in taken.pushes}


def clear_spool(moved: dict[int, int]) -> None:
    """Delete moved pushes from the spool (spool.clear): call once the move has committed,
    still holding the database's writer lock. A copy counted on one of them since it was
    moved is counted on its delivery."""
    for agent_id, key, late in spool.clear(moved):
        Delivery.objects.filter(agent_id=agent_id, idempotency_key=key).update(
            duplicates=F("duplicates") + late
        )


# -- applying -----------------------------------------------------------------------------


def due(now: datetime | None = None) -> QuerySet[Delivery]:
    """The pending deliveries due to be applied (`now`, or now): never tried, or their
    retry's time has come."""
    return Delivery.objects.filter(outcome=Delivery.Outcome.PENDING).filter(
        Q(retry_at__isnull=True) | Q(retry_at__lte=timezone.now() if now is None else now)
    )


_OUTCOME_FIELDS = ["outcome", "warnings", "applied_at", "last_error", "retry_at"]


def record_outcome(
    delivery: Delivery, outcome: str, warnings: list[str], *, save: bool = True
) -> None:
    """Record an applied delivery's outcome on it (`save=False`: in memory only, for the
    caller to write with others, see `record_outcomes`)."""
    delivery.outcome = outcome
    delivery.warnings = warnings
    delivery.applied_at = timezone.now()
    delivery.last_error = ""
    delivery.retry_at = None
    if save:
        delivery.save(update_fields=_OUTCOME_FIELDS)


def record_outcomes(deliveries: list[Delivery]) -> None:
    """Write applied deliveries' outcomes: one UPDATE per outcome for those without warnings
    (nearly all), one per delivery for the rest."""
    plain: dict[str, list[int]] = {}
    for delivery in deliveries:
        if delivery.warnings:
            delivery.save(update_fields=_OUTCOME_FIELDS)
        else:
            plain.setdefault(delivery.outcome, []).append(delivery.pk)
    if not plain:
        return
    at = max(d.applied_at for d in deliveries)
    for delivery in deliveries:
        if not delivery.warnings:
            delivery.applied_at = at
    if len(deliveries) == 1 and plain:  # a lone push's batch: its UPDATE made once
        prepared.update(deliveries[0], tuple(_OUTCOME_FIELDS))
        return
    for outcome, pks in plain.items():
        Delivery.objects.filter(pk__in=pks).update(
            outcome=outcome, warnings=[], applied_at=at, last_error="", retry_at=None
        )


def backoff(attempts: int) -> timedelta:
    """How long after its `attempts`-th failure a delivery is tried again: 5 s, doubling."""
    return min(timedelta(seconds=5 * 2 ** (attempts - 1)), MAX_BACKOFF)


def failed(delivery: Delivery, error: Exception, now: datetime) -> None:
    """A delivery whose apply raised (and was rolled back): kept pending, with its error,
    for a retry after its backoff."""
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


def retry_now(deliveries: QuerySet[Delivery]) -> int:
    """Have pending deliveries (a queryset) due now rather than at their next retry, say
    once what made them fail is fixed; returns how many (applier.retry_now wakes the
    applier for them)."""
    return deliveries.filter(outcome=Delivery.Outcome.PENDING).update(retry_at=None)


# -- pruning ------------------------------------------------------------------------------


def prune(age: timedelta, *, dry_run: bool = False) -> int:
    """Delete the deliveries received longer than `age` ago (`dry_run`: only count them);
    returns how many. A pending delivery is a push not applied yet (its apply keeps
    failing): kept until it is, however old."""
    old = Delivery.objects.filter(received_at__lt=timezone.now() - age).exclude(
        outcome=Delivery.Outcome.PENDING
    )
    if dry_run:
        return old.count()
    deleted, _ = old.delete()
    return deleted
