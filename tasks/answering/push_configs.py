"""Push configurations end with their task. Every task Onlooker started from the composer
(talking.py) or follows ("Follow this task", following.py) has its own push endpoint and a
push config naming it at the agent. Once the task has ended, neither is needed: the config
is deleted at the agent (`DeleteTaskPushNotificationConfig`, best effort, retried) and the
endpoint's per-task token is refused after `settings.ONLOOKER_PUSH_TOKEN_GRACE_SECONDS`
(tasks/pushes/receive.py), so late and retried pushes still land but a leaked token does not
live for ever. The agent's own endpoint (no task) never ends.

This module is the one writer of the ending fields of `PushEndpoint` (`ended_at`,
`config_deleted_at`, `delete_attempts`, `next_delete_at`, `last_delete_error`):

- `end_finished`: endpoints whose task (same agent, same task id) is in a terminal state get
  `ended_at` and a delete due now, one UPDATE per batch. The applier is not involved: a pass
  finds them, so nothing is added to the path that applies pushes.
- `delete_due`: each due delete is claimed (a conditional UPDATE moves `next_delete_at` past
  the call's time limit, so of several passes at once one calls), then called as whoever
  created the config: the agent keeps configs per subject. Success, or an agent that no
  longer knows the task (-32001), is `config_deleted_at`; a failure is retried after 1, 2,
  4, … minutes (at most an hour) and given up after MAX_ATTEMPTS (`next_delete_at` None,
  the last error kept). An agent that cannot be reached is tried once a pass: its other
  deletes wait for the next. At most BATCH deletes a pass.
- `live`: the configurations still in use at an agent, for the admin and `push_configs`.

Run by a background thread in each server (`start`, beside the expirer:
`ONLOOKER_NOTIFIER=background`), or by `manage.py end_push_configs` (one pass, for cron).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Exists, OuterRef
from django.utils import timezone

from tasks.answering import a2a_client, callers
from tasks.answering.rules import TASK_NOT_FOUND, AnswerError
from tasks.models import Agent, PushEndpoint, Task
from tasks.models.states import TERMINAL_STATES
from tasks.runtime.loop import Loop
from tasks.wire.agent_text import plain_text

log = logging.getLogger(__name__)

POLL_SECONDS = 15.0  # tasks end now and then; a look every few seconds is plenty
BATCH = 50  # deletes one pass calls at most; the next pass takes the rest
MAX_ATTEMPTS = 8  # 1+2+4+…+60 minutes: about four hours of trying, then given up
FIRST_RETRY = timedelta(minutes=1)
LONGEST_RETRY = timedelta(hours=1)
MAX_ERROR = 300  # what PushEndpoint.last_delete_error holds
# JSON-RPC errors that say the agent will never delete it (no push configs, no such
# method; and -32004, an unsupported operation, unless it only said it is busy): retrying
# cannot help.
_CANNOT_DELETE = frozenset({-32003, -32601})


# --- ending --------------------------------------------------------------------------------


def end_finished(now: datetime | None = None, *, limit: int | None = None) -> int:
    """Mark the endpoints whose task has ended: `ended_at` and a delete due now. Returns how
    many were marked (at most `limit`, BATCH by default; call again while it returns that)."""
    now = now or timezone.now()
    limit = limit or BATCH
    finished = Task.objects.filter(
        agent_id=OuterRef("agent_id"), task_id=OuterRef("task_id"), state__in=TERMINAL_STATES
    )
    batch = list(
        PushEndpoint.objects.filter(active=True, ended_at__isnull=True)
        .exclude(task_id="")
        .filter(Exists(finished))
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )
    if not batch:
        return 0
    # `ended_at__isnull` again: another pass may have marked some meanwhile; its time stands.
    return PushEndpoint.objects.filter(pk__in=batch, ended_at__isnull=True).update(
        ended_at=now, next_delete_at=now
    )


def end_all_finished(now: datetime | None = None) -> int:
    """`end_finished` batch after batch until none is left (cheap: no call to any agent)."""
    ended = 0
    while True:
        marked = end_finished(now, limit=BATCH)
        ended += marked
        if marked < BATCH:
            return ended


# --- deleting at the agent -----------------------------------------------------------------


@dataclass
class Pass:
    """What one pass of `delete_due` did, for the command and the log."""

    deleted: int = 0
    retrying: int = 0
    given_up: int = 0
    postponed: int = 0  # not called: their agent could not be reached earlier in this pass
    errors: list[str] = field(default_factory=list)

    def words(self) -> str:
        said = (
            f"{self.deleted} deleted at their agent, {self.retrying} to retry, "
            f"{self.given_up} given up"
        )
        if self.postponed:
            said += f", {self.postponed} postponed (their agent could not be reached)"
        return said


def due(now: datetime | None = None, *, limit: int | None = None) -> list[PushEndpoint]:
    """Endpoints whose config is due to be deleted now, longest waiting first (at most
    `limit`, BATCH by default)."""
    now = now or timezone.now()
    limit = limit or BATCH
    return list(
        PushEndpoint.objects.filter(next_delete_at__lte=now, config_deleted_at__isnull=True)
        .exclude(task_id="")
        .select_related("agent", "created_for")
        .order_by("next_delete_at", "pk")[:limit]
    )


def delete_due(now: datetime | None = None, *, stopping: threading.Event | None = None) -> Pass:
    """Delete at their agents the configs due now (at most BATCH). Never raises for what an
    agent does; a database that fails is left to the caller (the loop tries again)."""
    done = Pass()
    unreachable: set[int] = set()  # agents whose delete did not get through this pass
    for endpoint in due(now):
        if stopping is not None and stopping.is_set():
            break
        moment = now or timezone.now()
        if endpoint.agent_id in unreachable:
            _postpone(endpoint, moment)
            done.postponed += 1
            continue
        if not _claim(endpoint, moment):
            continue  # another pass has it
        error = _delete(endpoint)
        if error is None:
            _deleted(endpoint, moment)
            done.deleted += 1
            continue
        if _unreachable(error):
            unreachable.add(endpoint.agent_id)
        gave_up = _failed(endpoint, moment, error)
        done.given_up += gave_up
        done.retrying += not gave_up
        done.errors.append(str(error))
    return done


def backoff(attempts: int) -> timedelta:
    """The wait after the `attempts`-th failure: 1 min, 2, 4, … at most an hour."""
    return min(FIRST_RETRY * (2 ** max(attempts - 1, 0)), LONGEST_RETRY)


def caller_for(endpoint: PushEndpoint) -> callers.Caller:
    """Who deletes the config: whoever created it (agents keep configs per subject), or the
    shared credential when that was it, or when that person has no credential any more."""
    agent = endpoint.agent
    if endpoint.created_for is None:
        return callers.shared(agent)
    try:
        return callers.for_person(agent, endpoint.created_for)
    except callers.NeedsCredential:
        return callers.shared(agent)


def _delete(endpoint: PushEndpoint) -> a2a_client.A2AError | None:
    """Ask the agent to delete the config; None when it is gone (deleted now, or the agent no
    longer knows the task), else the failure."""
    try:
        caller = caller_for(endpoint)
        a2a_client.delete_task_push_notification_config(
            caller, endpoint.task_id, endpoint.public_id
        )
    except a2a_client.A2AError as error:
        if error.code == TASK_NOT_FOUND:
            return None
        return error
    except AnswerError as error:  # a person's credential that cannot be used (OAuth)
        return _NotCalled(str(error), not_sent=True)
    except DatabaseError:
        raise  # the loop waits for the database and tries again
    except Exception:  # noqa: BLE001 - one config's fault must not stop the others' deletes
        log.exception("deleting push config %s failed", endpoint.public_id)
        return _NotCalled("Onlooker could not make the call (see its log)", not_sent=True)
    return None


class _NotCalled(a2a_client.A2AError):
    """Nothing was sent, for a reason of this config's (its creator's credential cannot be
    used, or Onlooker failed making the call): says nothing about the agent, whose other
    deletes go on."""


def _unreachable(error: a2a_client.A2AError) -> bool:
    """The agent itself did not answer (no connection, a timeout): its other deletes in this
    pass would only wait as long again."""
    if isinstance(error, _NotCalled):
        return False
    return error.not_sent or error.http_status is None


def _cannot_delete(error: a2a_client.A2AError) -> bool:
    if error.code == -32004:
        return error.reason != "CONTEXT_BUSY"
    return error.code in _CANNOT_DELETE


def _claim(endpoint: PushEndpoint, now: datetime) -> bool:
    """Take this delete for this pass: of passes running at once, one moves `next_delete_at`
    past the time its call may take, and only it calls the agent."""
    hold = now + timedelta(seconds=settings.ONLOOKER_AGENT_CALL_SECONDS + 30)
    return bool(
        PushEndpoint.objects.filter(
            pk=endpoint.pk,
            next_delete_at=endpoint.next_delete_at,
            config_deleted_at__isnull=True,
        ).update(next_delete_at=hold)
    )


def _deleted(endpoint: PushEndpoint, now: datetime) -> None:
    PushEndpoint.objects.filter(pk=endpoint.pk).update(
        config_deleted_at=now, next_delete_at=None, last_delete_error=""
    )
    log.info("push config %s deleted at agent %s", endpoint.public_id, endpoint.agent_id)


def _failed(endpoint: PushEndpoint, now: datetime, error: a2a_client.A2AError) -> bool:
    """Count a failed delete: retried later, or given up (True)."""
    attempts = endpoint.delete_attempts + 1
    give_up = attempts >= MAX_ATTEMPTS or _cannot_delete(error)
    # The sentence a2a_client makes holds no secret: the agent's host and path, its words.
    said = plain_text(str(error), MAX_ERROR) or "the delete failed"
    PushEndpoint.objects.filter(pk=endpoint.pk).update(
        delete_attempts=attempts,
        next_delete_at=None if give_up else now + backoff(attempts),
        last_delete_error=said,
    )
    log.warning(
        "push config %s not deleted at agent %s (attempt %d%s): %s",
        endpoint.public_id,
        endpoint.agent_id,
        attempts,
        ", given up" if give_up else "",
        said,
    )
    return give_up


def _postpone(endpoint: PushEndpoint, now: datetime) -> None:
    """Not tried: its agent did not answer another delete in this pass. Moved behind, as
    long as its last failure's wait, with no attempt counted."""
    wait = backoff(endpoint.delete_attempts) if endpoint.delete_attempts else FIRST_RETRY
    PushEndpoint.objects.filter(
        pk=endpoint.pk, next_delete_at=endpoint.next_delete_at, config_deleted_at__isnull=True
    ).update(next_delete_at=now + wait)


def run_once(now: datetime | None = None, *, stopping: threading.Event | None = None) -> Pass:
    """One pass: end what has finished, then delete what is due (at most BATCH)."""
    end_all_finished(now)
    return delete_due(now, stopping=stopping)


# --- what is in use ------------------------------------------------------------------------


def live(agent: Agent) -> list[PushEndpoint]:
    """The agent's push configurations still in use: its own endpoint, and each task's
    whose config has not been deleted, newest first."""
    return list(
        agent.endpoints.filter(active=True, config_deleted_at__isnull=True)
        .select_related("created_for")
        .order_by("-created_at", "-pk")
    )


def kind(endpoint: PushEndpoint) -> str:
    """ "followed", "started" (work Onlooker started from the composer), or "agent's own"."""
    if not endpoint.task_id:
        return "agent's own"
    return "followed" if endpoint.followed else "started"


def status(endpoint: PushEndpoint) -> str:
    """Where its ending stands, in words (never a secret): "in use", "deleted",
    "retrying (attempt 2): …", "gave up after 8 attempts: …"."""
    if endpoint.config_deleted_at is not None:
        return "deleted"
    if endpoint.ended_at is None:
        return "in use"
    if endpoint.delete_attempts == 0:
        return "ended; delete due"
    if endpoint.next_delete_at is None:
        return (
            f"gave up after {endpoint.delete_attempts} attempt"
            f"{'' if endpoint.delete_attempts == 1 else 's'}: {endpoint.last_delete_error}"
        )
    return f"retrying (attempt {endpoint.delete_attempts}): {endpoint.last_delete_error}"


def as_json(endpoint: PushEndpoint) -> dict:
    """One configuration for `push_configs --json`: ids, times and state, no token."""

    def at(moment: datetime | None) -> str | None:
        return moment.isoformat() if moment is not None else None

    return {
        "endpoint": endpoint.public_id,
        "task_id": endpoint.task_id,
        "kind": kind(endpoint),
        "created_for": endpoint.created_for.get_username() if endpoint.created_for else None,
        "created_at": at(endpoint.created_at),
        "ended_at": at(endpoint.ended_at),
        "config_deleted_at": at(endpoint.config_deleted_at),
        "delete_attempts": endpoint.delete_attempts,
        "next_delete_at": at(endpoint.next_delete_at),
        "last_delete_error": endpoint.last_delete_error,
        "status": status(endpoint),
    }


# --- in the background ---------------------------------------------------------------------


class Background(Loop):
    """This process's config ender: looks every `poll_seconds`. Several processes may run
    one: each delete is claimed by one of them (`_claim`)."""

    name = "onlooker-push-configs"

    def step(self) -> None:
        done = run_once(stopping=self.stopped)
        if done.deleted or done.retrying or done.given_up:
            log.info("push configs: %s", done.words())


background = Background(POLL_SECONDS)


def start() -> None:
    """Start this process's config ender if the settings say timed work runs here (as the
    notification sender and the expirer: the ASGI app calls this when it is loaded)."""
    if settings.ONLOOKER_NOTIFIER == "background":
        background.start()
