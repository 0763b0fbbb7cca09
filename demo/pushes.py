"""Push notifications the way the Nylorun profile sends them: signed with Standard Webhooks and
delivered at least once.

a2a-sdk's own sender posts each event once, inline, and forgets it when the receiver is down.
This one only queues the event (the agent never waits for a webhook) and a worker per task and
push config delivers the queue in order:

- every push carries the config's credentials (`X-A2A-Notification-Token`, `Authorization`)
  and, with a signing secret, `webhook-id`, `webhook-timestamp` and `webhook-signature`;
- a push that gets no 2xx (or no answer) is retried with exponential backoff and jitter,
  keeping its `webhook-id` (the receiver's idempotency key) and signed afresh each time (the
  receiver refuses timestamps older than 5 minutes). Pushes after it wait, so a task's pushes
  arrive in order; other tasks' workers go on meanwhile. After `give_up_after` seconds the
  push is dropped and the next one is tried;
- 400, 413 and 415 are not retried: they refuse the body itself, and the same bytes would be
  refused again.

One line per attempt goes to the `demo.pushes` logger, without secrets. Pushes still queued
when the agent stops are lost: the agent keeps its tasks in memory only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx
from a2a.server.tasks import PushNotificationConfigStore, PushNotificationSender
from a2a.server.tasks.push_notification_sender import PushNotificationEvent
from a2a.types import TaskPushNotificationConfig
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict
from standardwebhooks import Webhook

log = logging.getLogger(__name__)

NOT_RETRIED = frozenset({400, 413, 415})


@dataclass(frozen=True)
class RetryPolicy:
    first: float = 0.5  # seconds before the first retry; doubled after each failure
    longest: float = 30.0  # the longest wait between two attempts
    give_up_after: float = 600.0  # seconds from the first attempt
    timeout: float = 10.0  # per attempt

    def wait(self, failures: int) -> float:
        """The wait after `failures` failed attempts, ±25% so agents that failed together
        do not all come back at the same moment."""
        base = min(self.first * 2 ** (failures - 1), self.longest)
        return base * random.uniform(0.75, 1.25)


@dataclass
class _Push:
    webhook_id: str
    task_id: str
    body: bytes
    url: str
    what: str  # e.g. "statusUpdate TASK_STATE_WORKING", for the log
    headers: dict[str, str] = field(repr=False)  # the config's credentials


class SignedPushSender(PushNotificationSender):
    """Queues every task event for each of the task's push configs and delivers it there."""

    def __init__(
        self,
        config_store: PushNotificationConfigStore,
        *,
        signing_secret: str | None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self._config_store = config_store
        self._webhook = Webhook(signing_secret) if signing_secret else None
        self._policy = policy or RetryPolicy()
        self._client = httpx.AsyncClient(
            timeout=self._policy.timeout, trust_env=False, follow_redirects=False
        )
        self._queues: dict[tuple[str, str, str], deque[_Push]] = {}
        self._workers: dict[tuple[str, str, str], asyncio.Task] = {}

    @property
    def pending(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        # Serialized now: the event is a2a-sdk's object, which it may change later.
        data = MessageToDict(to_stream_response(event))
        body = json.dumps(data, separators=(",", ":")).encode()
        what = _describe(data)
        for config in await self._config_store.get_info_for_dispatch(task_id):
            push = _Push(
                webhook_id=f"msg_{uuid.uuid4().hex}",
                task_id=task_id,
                body=body,
                url=config.url,
                what=what,
                headers=_credentials(config),
            )
            key = (task_id, config.id, config.url)
            self._queues.setdefault(key, deque()).append(push)
            if key not in self._workers:
                self._workers[key] = asyncio.create_task(self._work(key))

    async def aclose(self) -> None:
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if self.pending:
            log.warning("stopping with %d pushes not delivered", self.pending)
        await self._client.aclose()

    async def _work(self, key: tuple[str, str, str]) -> None:
        queue = self._queues[key]
        try:
            while queue:
                await self._deliver(queue[0])
                queue.popleft()
        finally:
            # No await between the last look at the queue and here: a push queued meanwhile
            # would have found this worker still registered, so none is left behind.
            del self._workers[key]
            if not queue:
                del self._queues[key]

    async def _deliver(self, push: _Push) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._policy.give_up_after
        attempt = 0
        while True:
            attempt += 1
            outcome, retry = await self._attempt(push)
            where = f"push {push.webhook_id} task {push.task_id} {push.what} to {_shown(push.url)}"
            if outcome is None:
                log.info("%s attempt %d: delivered", where, attempt)
                return
            wait = self._policy.wait(attempt)
            if not retry or loop.time() + wait > deadline:
                log.warning("%s attempt %d: %s; giving up", where, attempt, outcome)
                return
            log.info("%s attempt %d: %s; retrying in %.2f s", where, attempt, outcome, wait)
            await asyncio.sleep(wait)

    async def _attempt(self, push: _Push) -> tuple[str | None, bool]:
        """(None, _) when delivered, else (what went wrong, whether to retry)."""
        headers = {"Content-Type": "application/json", **push.headers}
        if self._webhook is not None:
            now = datetime.now(UTC)
            headers["webhook-id"] = push.webhook_id
            headers["webhook-timestamp"] = str(int(now.timestamp()))
            headers["webhook-signature"] = self._webhook.sign(
                push.webhook_id, now, push.body.decode()
            )
        try:
            response = await self._client.post(push.url, content=push.body, headers=headers)
        except httpx.HTTPError as error:
            return f"no answer ({type(error).__name__})", True
        if 200 <= response.status_code < 300:
            return None, False
        return f"HTTP {response.status_code}", response.status_code not in NOT_RETRIED


def _credentials(config: TaskPushNotificationConfig) -> dict[str, str]:
    headers = {}
    if config.token:
        headers["X-A2A-Notification-Token"] = config.token
    auth = config.authentication
    if config.HasField("authentication") and auth.scheme and auth.credentials:
        headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
    return headers


def _describe(data: dict) -> str:
    kind = next(iter(data), "?")
    member = data.get(kind) or {}
    if kind == "artifactUpdate":
        return f"{kind} {member.get('artifact', {}).get('artifactId', '')}"
    return f"{kind} {member.get('status', {}).get('state', '')}".rstrip()


def _shown(url: str) -> str:
    """The URL without user info, query or fragment: those may hold secrets."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
