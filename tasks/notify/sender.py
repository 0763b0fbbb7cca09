"""The sender: the only writer of sending state. It takes due rows of the outbox, sends each
to its channel, and records what happened (on the row, and the channel's last success or
error).

A row is claimed before it is sent (claims.py: a due pending row that no other sender holds
is leased to this sender, `claimed_until`, and the lease committed); the HTTP call or the
SMTP conversation happens after, outside any transaction, and its outcome is recorded by a
conditional UPDATE of the row as claimed (still pending, same lease). So a row another
sender holds is never sent twice, a row whose send got a 2xx is marked sent and never sent
again, and a sender that dies mid-send leaves a lease that expires: the row is sent by the
next sender that finds it due.

Exactly once, with one window: a crash (or a lost database) between the receiver's 2xx and
recording it sends that event again when the lease expires. Each event's `webhook-id` (and
an email's Message-ID) is the same on every attempt, `Notification.event_id`, so a receiver
that keeps the ids it saw drops the repeat; Slack shows it twice.

Which rows are due, and the order each channel's go out in (an opening answered before it
went out is skipped, and so on), is claims.py too. Sending itself is sending.py; where a
channel may send, targets.py. Failures (non-2xx, a redirect, a timeout, a refused
connection, a target that is not a public address, an SMTP error) are recorded in two
texts: a short one the team sees, and one with the receiver's own words for the admin and
the log (sending.SendFailed). They are retried with
exponential backoff (5 s, doubling, at most an hour, with jitter), and the channel's other
rows, and those queued for it meanwhile, wait as long: a channel that is down gets one
attempt per interval, not one per row or per new event. After Notification.GIVE_UP_AFTER
from when it was due, a row that still fails is given up (`failed`). Rows of a disabled
channel stay pending until it is enabled.

Channels are sent to concurrently, one worker per channel at a time, with short timeouts,
and each team's channels hold at most TEAM_WORKERS of the WORKERS at once (shares.py): a
slow or failing channel never delays another, nor one team's dead receivers another team's
channels. Nothing here runs on a request (the applier and answers only insert rows). The
background thread (`ONLOOKER_NOTIFIER=background`, the default, started with the ASGI app)
looks every POLL_SECONDS; `manage.py send_notifications` runs the same loop standalone
(`ONLOOKER_NOTIFIER=external`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import seen, shares
from tasks.notify.claims import Claimed, claim_next, due_channels, unclaimed
from tasks.notify.sending import TOTAL_SECONDS, SendFailed, send
from tasks.runtime.loop import Loop
from tasks.runtime.writer import writing

log = logging.getLogger(__name__)

Kind = Notification.Kind
State = Notification.State

WORKERS = 8  # channels sent to at once
# Of which one team's channels may hold at most this many (shares.py): its receivers that
# hang hold these, never the others'.
TEAM_WORKERS = 2
PER_CHANNEL = 50  # rows a channel's worker sends before it lets other channels have a turn
# A channel's worker stops taking its rows after this long, so a slow channel that still
# answers never keeps a worker from the others for long.
CHANNEL_SECONDS = 15.0
POLL_SECONDS = 1.0
FIRST_BACKOFF = timedelta(seconds=5)
MAX_BACKOFF = timedelta(hours=1)
ERROR_CHARS = 300


def backoff(attempts: int, *, jitter: float | None = None) -> timedelta:
    """How long after its `attempts`-th failure a row is tried again: 5 s, doubling, at most
    an hour, less up to a fifth at random (`jitter`, 0–1), so rows that failed together are
    not all retried in the same second."""
    base = min(FIRST_BACKOFF * 2 ** max(attempts - 1, 0), MAX_BACKOFF)
    fraction = random.random() if jitter is None else jitter
    return base * (1 - 0.2 * fraction)


# -- recording ------------------------------------------------------------------------------


def _sent(claimed: Claimed, at: datetime) -> None:
    row = claimed.notification
    with writing(), transaction.atomic():
        recorded = Notification.objects.filter(
            pk=row.pk, state=State.PENDING, claimed_until=claimed.until
        ).update(
            state=State.SENT,
            sent_at=at,
            claimed_until=None,
            attempts=F("attempts") + 1,
            last_error="",
        )
        NotificationChannel.objects.filter(pk=row.channel_id).update(last_success_at=at)
    if not recorded:
        # Its lease ran out mid-send and another sender took it: it may go out twice.
        log.warning("notification %s was sent after its lease ran out", row.pk)


def _failed(claimed: Claimed, error: SendFailed, at: datetime) -> None:
    """Record a failed attempt: the row and the channel keep `error.shown`, what the team
    may read; the channel keeps `error.detail` (the receiver's words) for the admin."""
    row = claimed.notification
    attempts = row.attempts + 1
    give_up = at >= row.due_at + Notification.GIVE_UP_AFTER
    retry_at = at + backoff(attempts)
    log.warning(
        "notification %s (%s) to channel %s failed, attempt %s%s: %s",
        row.pk,
        row.kind,
        row.channel_id,
        attempts,
        ", giving up" if give_up else "",
        error.detail,
    )
    shown = error.shown
    change: dict = {"attempts": attempts, "last_error": shown, "claimed_until": None}
    if give_up:
        change.update(state=State.FAILED, last_error=f"gave up after {attempts} attempts: {shown}")
    else:
        change["next_attempt_at"] = retry_at
    with writing(), transaction.atomic():
        Notification.objects.filter(
            pk=row.pk, state=State.PENDING, claimed_until=claimed.until
        ).update(**change)
        NotificationChannel.objects.filter(pk=row.channel_id).update(
            last_error=shown[:ERROR_CHARS], last_error_detail=error.detail, last_error_at=at
        )
        # The channel is failing: what else it has due waits as long, rather than each
        # row being tried (and failing) in turn, once a pass.
        Notification.objects.filter(
            unclaimed(at),
            channel_id=row.channel_id,
            state=State.PENDING,
            next_attempt_at__lt=retry_at,
        ).exclude(pk=row.pk).update(next_attempt_at=retry_at)


# -- one channel, every channel ------------------------------------------------------------


def send_channel(
    channel_id: int,
    now: datetime | None = None,
    *,
    limit: int = PER_CHANNEL,
    stopping: threading.Event | None = None,
) -> int:
    """Send what the channel has due, in order, until it is done, fails (the rest then wait
    for the retry), `limit` rows were sent, CHANNEL_SECONDS passed or `stopping` is set.
    How many were sent."""
    started = time.monotonic()
    start = now or timezone.now()
    passed: set[int] = set()
    sent = 0
    told: set[int] = set()  # interactions whose "Notified …" line changed
    try:
        sent = _send_channel(channel_id, start, started, limit, stopping, passed, told)
    finally:
        # Pages showing these questions refetch their lines; after the commits above.
        seen.hint_interactions(told)
    return sent


def _send_channel(
    channel_id: int,
    start: datetime,
    started: float,
    limit: int,
    stopping: threading.Event | None,
    passed: set[int],
    told: set[int],
) -> int:
    sent = 0
    while sent < limit and time.monotonic() - started < CHANNEL_SECONDS:
        if stopping is not None and stopping.is_set():
            break
        # `now` moves on with the real clock: what fell due while sending is taken too.
        now = start + timedelta(seconds=time.monotonic() - started)
        claimed = claim_next(channel_id, now, passed)
        if claimed is None:
            break
        try:
            send(claimed.notification, at=now)
        except SendFailed as error:
            _failed(claimed, error, start + timedelta(seconds=time.monotonic() - started))
            told.add(claimed.notification.interaction_id)
            break
        except Exception as error:  # noqa: BLE001 - a bug in a format, say: retried, logged
            log.exception("notification %s could not be sent", claimed.notification.pk)
            _failed(claimed, SendFailed(f"{type(error).__name__} (see the log)"), now)
            told.add(claimed.notification.interaction_id)
            break
        _sent(claimed, start + timedelta(seconds=time.monotonic() - started))
        told.add(claimed.notification.interaction_id)
        sent += 1
    return sent


def _in_worker(
    channel_id: int, now: datetime | None, limit: int, stopping: threading.Event | None = None
) -> int:
    """send_channel in a pool's thread, which has database connections of its own."""
    try:
        return send_channel(channel_id, now, limit=limit, stopping=stopping)
    except Exception:  # noqa: BLE001 - the database went away, say: the next pass retries
        log.exception("could not send the notifications of channel %s", channel_id)
        return 0
    finally:
        connections.close_all()


def send_due(now: datetime | None = None, *, limit: int = PER_CHANNEL) -> int:
    """Send what is due now on every enabled channel (at most `limit` rows a channel), each
    channel in a worker of its own, the workers shared between teams (shares.py), and wait
    for them all; how many were sent."""
    waiting = due_channels(now)
    if not waiting:
        return 0
    if len(waiting) == 1:
        return send_channel(waiting[0].channel, now, limit=limit)
    sent = 0
    running: dict[Future, shares.Due] = {}
    last_team = None
    with ThreadPoolExecutor(min(WORKERS, len(waiting) or 1), "onlooker-sender") as pool:
        while waiting or running:
            holding = Counter(due.team for due in running.values())
            free = WORKERS - len(running)
            for due in shares.pick(
                waiting, holding, free=free, per_team=TEAM_WORKERS, after=last_team
            ):
                waiting.remove(due)
                running[pool.submit(_in_worker, due.channel, now, limit)] = due
                last_team = due.team
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                sent += future.result()
                del running[future]
    return sent


# -- the background thread ------------------------------------------------------------------


class Background(Loop):
    """The process's sender: looks for due rows every `poll_seconds` (or when woken) and
    gives each channel with some to a free worker, unless one is already sending that
    channel's, the workers shared between teams (shares.py). It never waits for a channel:
    a slow one holds its worker, not the loop; a worker coming free wakes it. stop() lets
    the sends in flight be recorded; what is not sent yet stays pending for the next
    sender."""

    name = "onlooker-sender"
    stop_timeout = TOTAL_SECONDS + 2

    def __init__(
        self,
        poll_seconds: float = POLL_SECONDS,
        workers: int = WORKERS,
        per_team: int = TEAM_WORKERS,
    ) -> None:
        super().__init__(poll_seconds)
        self.workers = workers
        self.per_team = per_team
        self._busy: dict[int, tuple[Future, int]] = {}  # channel → (its worker, its team)
        self._last_team: int | None = None
        self._pool: ThreadPoolExecutor | None = None

    def begin(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, "onlooker-sender")

    def end(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def step(self) -> None:
        self._busy = {c: busy for c, busy in self._busy.items() if not busy[0].done()}
        waiting = [due for due in due_channels() if due.channel not in self._busy]
        holding = Counter(team for _, team in self._busy.values())
        chosen = shares.pick(
            waiting,
            holding,
            free=self.workers - len(self._busy),
            per_team=self.per_team,
            after=self._last_team,
        )
        for due in chosen:
            future = self._pool.submit(_in_worker, due.channel, None, PER_CHANNEL, self.stopped)
            # A row queued while the worker was finishing (after its last look, before it
            # was done), or a channel that waited for a free worker, is taken at once, not
            # at the next poll.
            future.add_done_callback(lambda _: self.wake())
            self._busy[due.channel] = (future, due.team)
            self._last_team = due.team


background = Background()


def start() -> None:
    """Start this process's sender if the settings say it runs here (the ASGI app calls
    this when it is loaded)."""
    if settings.ONLOOKER_NOTIFIER == "background":
        background.start()


# Set in the applier's own process (pushes/process.py): what it queues, its server sends.
_relay_wake = None


def relay_wakes_to(relay) -> None:
    """Call `relay()` instead of waking a sender in this process (None: wake here again)."""
    global _relay_wake
    _relay_wake = relay


def wake() -> None:
    """Something was queued: look now rather than at the next poll."""
    if _relay_wake is not None:
        _relay_wake()
        return
    if settings.ONLOOKER_NOTIFIER == "background" and background.running:
        background.wake()
