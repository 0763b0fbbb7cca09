"""A real a2a-sdk 1.x JSON-RPC agent that asks for an approval, for end-to-end tests.

Run: `python -m tests.peers.approval_agent --port N [--sign-secret whsec_...] [--push-log FILE]`.
It serves its card at `/.well-known/agent-card.json` and JSON-RPC at `/a2a/jsonrpc` on
127.0.0.1, and pushes every task event to the push config given with `SendMessage`.

First turn: the task (SUBMITTED); WORKING with a message and progress/v1 steps; an artifact
in two chunks (the second `append`, `lastChunk`, with files/v1 data); AUTH_REQUIRED with an
interactions/v1 approval on the status message.

Follow-up turn: WORKING, then
- an interactions/v1 answer `{interactionId, approved: true}` → COMPLETED with telemetry/v1;
- `approved: false` → REJECTED;
- anything else (plain text included: text never approves) → AUTH_REQUIRED again, same
  interaction.

With `--sign-secret`, every push is signed (Standard Webhooks: webhook-id, webhook-timestamp,
webhook-signature). With `--push-log`, every push is logged as one JSON line when it is sent
(`"event": "sent"`) and when it is answered (`"event": "answered"`, with the HTTP status), so a
test can count what the agent really sent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import MessageToDict
from standardwebhooks import Webhook
from starlette.applications import Starlette

INTERACTIONS = "https://docs.nylorun.com/a2a/interactions/v1"
PROGRESS = "https://docs.nylorun.com/a2a/progress/v1"
TELEMETRY = "https://docs.nylorun.com/a2a/telemetry/v1"
FILES = "https://docs.nylorun.com/a2a/files/v1"

RPC_PATH = "/a2a/jsonrpc"
ARTIFACT_ID = "release-notes"
ARTIFACT_NAME = "release-notes.md"
CHUNKS = ("# Release 2.4\n\n", "- Faster pushes\n- Signed webhooks\n")
CONTENT = "".join(CHUNKS).encode()
FILE_INFO = {
    "kind": "markdown",
    "version": 1,
    "size": len(CONTENT),
    "sha256": hashlib.sha256(CONTENT).hexdigest(),
    "path": "docs/release-notes.md",
}
PROMPT = "Publish the release notes to the public site?"
WORKING_TEXT = "Drafting the release notes"
ASK_AGAIN_TEXT = "A text reply is not an approval. " + PROMPT
PUBLISHED_TEXT = "Published the release notes"
DENIED_TEXT = "Not published: the approval was denied"
TELEMETRY_DATA = {"steps": 3, "tokens": 1234, "costUsd": 0.0042, "traceId": "trace-e2e-0001"}


def interaction_id(task_id: str) -> str:
    return f"approve-publish-{task_id}"


def approval_message(task: dict, *, approved: bool = True) -> dict:
    """A client's interactions/v1 answer to this agent's approval, as a SendMessage message."""
    answer = {"interactionId": interaction_id(task["id"]), "approved": approved}
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "taskId": task["id"],
        "contextId": task["contextId"],
        "parts": [{"text": "Approve" if approved else "Deny"}],
        "metadata": {INTERACTIONS: answer},
        "extensions": [INTERACTIONS],
    }


def steps(*states: str) -> dict:
    labels = ("Draft the notes", "Get approval", "Publish")
    return {
        "steps": [{"label": label, "state": s} for label, s in zip(labels, states, strict=True)]
    }


class ApprovalExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await self._first_turn(context, event_queue, updater)
        else:
            await self._follow_up(context, updater)

    async def _first_turn(
        self, context: RequestContext, event_queue: EventQueue, updater: TaskUpdater
    ) -> None:
        await event_queue.enqueue_event(
            Task(
                id=context.task_id,
                context_id=context.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message],
            )
        )
        progress = {PROGRESS: steps("in_progress", "pending", "pending")}
        await updater.update_status(
            TaskState.TASK_STATE_WORKING,
            message=updater.new_agent_message([Part(text=WORKING_TEXT)]),
            metadata=progress,
        )
        await updater.add_artifact(
            [Part(text=CHUNKS[0])], artifact_id=ARTIFACT_ID, name=ARTIFACT_NAME
        )
        await updater.add_artifact(
            [Part(text=CHUNKS[1])],
            artifact_id=ARTIFACT_ID,
            name=ARTIFACT_NAME,
            metadata={FILES: FILE_INFO},
            append=True,
            last_chunk=True,
        )
        await self._ask(updater, PROMPT)

    async def _ask(self, updater: TaskUpdater, text: str) -> None:
        question = {
            INTERACTIONS: {
                "interactionId": interaction_id(updater.task_id),
                "kind": "approval",
                "prompt": PROMPT,
            }
        }
        await updater.update_status(
            TaskState.TASK_STATE_AUTH_REQUIRED,
            message=updater.new_agent_message([Part(text=text)], metadata=question),
            metadata={PROGRESS: steps("completed", "in_progress", "pending")},
        )

    async def _follow_up(self, context: RequestContext, updater: TaskUpdater) -> None:
        await updater.start_work()
        metadata = MessageToDict(context.message.metadata) if context.message else {}
        answer = metadata.get(INTERACTIONS)
        approved = None
        if isinstance(answer, dict) and answer.get("interactionId") == interaction_id(
            updater.task_id
        ):
            approved = answer.get("approved")
        if approved is True:
            await updater.update_status(
                TaskState.TASK_STATE_COMPLETED,
                message=updater.new_agent_message([Part(text=PUBLISHED_TEXT)]),
                metadata={
                    TELEMETRY: TELEMETRY_DATA,
                    PROGRESS: steps("completed", "completed", "completed"),
                },
            )
        elif approved is False:
            await updater.update_status(
                TaskState.TASK_STATE_REJECTED,
                message=updater.new_agent_message([Part(text=DENIED_TEXT)]),
                metadata={PROGRESS: steps("completed", "failed", "skipped")},
            )
        else:
            await self._ask(updater, ASK_AGAIN_TEXT)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class StandardWebhooksAuth(httpx.Auth):
    """Signs each push body: `{webhook-id}.{webhook-timestamp}.{body}` (Standard Webhooks)."""

    requires_request_body = True

    def __init__(self, secret: str) -> None:
        self._webhook = Webhook(secret)

    def auth_flow(self, request: httpx.Request):
        msg_id = f"msg_{uuid.uuid4().hex}"
        now = datetime.now(UTC)
        request.headers["webhook-id"] = msg_id
        request.headers["webhook-timestamp"] = str(int(now.timestamp()))
        request.headers["webhook-signature"] = self._webhook.sign(
            msg_id, now, request.content.decode()
        )
        yield request


def push_key(request: httpx.Request) -> str:
    """The idempotency key a receiver derives: webhook-id, else the body's SHA-256."""
    webhook_id = request.headers.get("webhook-id")
    if webhook_id:
        return f"id:{webhook_id}"
    return f"sha256:{hashlib.sha256(request.content).hexdigest()}"


def push_summary(request: httpx.Request) -> dict:
    body = json.loads(request.content)
    kind = next(iter(body))
    member = body[kind]
    return {
        "key": push_key(request),
        "kind": kind,
        "state": (member.get("status") or {}).get("state"),
        "url": str(request.url),
    }


def push_logger(path: Path | None):
    def write(record: dict) -> None:
        if path is not None:
            with path.open("a") as log:
                log.write(json.dumps(record) + "\n")

    async def on_request(request: httpx.Request) -> None:
        write({"event": "sent", **push_summary(request)})

    async def on_response(response: httpx.Response) -> None:
        write(
            {"event": "answered", "status": response.status_code, **push_summary(response.request)}
        )

    return {"request": [on_request], "response": [on_response]}


def agent_card(port: int) -> AgentCard:
    return AgentCard(
        name="Approval peer",
        description="Drafts release notes and asks for approval before publishing them.",
        version="1.0.0",
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=True,
            extensions=[
                AgentExtension(uri=uri, required=False)
                for uri in (INTERACTIONS, PROGRESS, TELEMETRY, FILES)
            ],
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "text/markdown"],
        skills=[
            AgentSkill(
                id="publish-notes",
                name="Publish release notes",
                description="Drafts release notes and publishes them once approved.",
                tags=["test"],
            )
        ],
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}{RPC_PATH}",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
    )


def build_app(port: int, sign_secret: str | None, push_log: Path | None) -> Starlette:
    card = agent_card(port)
    config_store = InMemoryPushNotificationConfigStore()
    client = httpx.AsyncClient(
        timeout=10,
        trust_env=False,
        auth=StandardWebhooksAuth(sign_secret) if sign_secret else None,
        event_hooks=push_logger(push_log),
    )
    handler = DefaultRequestHandler(
        agent_executor=ApprovalExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=config_store,
        push_sender=BasePushNotificationSender(httpx_client=client, config_store=config_store),
    )
    return Starlette(
        routes=[
            *create_jsonrpc_routes(handler, rpc_url=RPC_PATH),
            *create_agent_card_routes(card),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sign-secret", default="", help="Standard Webhooks secret, whsec_…")
    parser.add_argument("--push-log", type=Path, default=None, help="JSON-lines log of pushes")
    args = parser.parse_args()
    app = build_app(args.port, args.sign_secret or None, args.push_log)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()


class ServedInThread:
    """An ASGI app served by uvicorn on a loopback port in a thread of the test process:
    started when made, `stop()` to end it."""

    def __init__(self, app, port: int) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the a2a-sdk agent did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stops serving: the port is closed when this returns. The thread may linger (a
        daemon) while asyncio cancels what a2a-sdk still runs for a task waiting for a
        person, which can take seconds a test has no use for."""
        self.server.should_exit = True
        deadline = time.monotonic() + 5
        while self.thread.is_alive() and time.monotonic() < deadline:
            if self.server.started and not any(s.is_serving() for s in self.server.servers):
                self.thread.join(timeout=0.5)
                return
            time.sleep(0.01)
