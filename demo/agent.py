"""The example agent: a real A2A 1.0 JSON-RPC server (a2a-sdk) speaking the Nylorun profile v2.

    python -m demo.agent --port 9999 --signing-secret whsec_... [--host 127.0.0.1] [--speed 1.0]

It serves its card at `/.well-known/agent-card.json` and JSON-RPC at `/a2a/jsonrpc`, runs one
of three scenarios per task (see `demo.scenarios`), and pushes every task event to the task's
push configs, signed with Standard Webhooks and retried until they are taken (`demo.pushes`).
GetTask, ListTasks, CancelTask and the push-config methods are a2a-sdk's, over an in-memory
task store: a restarted agent starts empty.

SIGINT or SIGTERM stops it within a few seconds, exit status 0. `serve()` runs it in a thread
instead of a process.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence

import uvicorn
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryPushNotificationConfigStore, InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
)
from standardwebhooks import Webhook
from starlette.applications import Starlette

from demo.executor import ExampleExecutor
from demo.pushes import RetryPolicy, SignedPushSender
from demo.run import EFFECTS, FILES, INTERACTIONS, PROGRESS, TELEMETRY
from demo.scenarios import STARTERS

RPC_PATH = "/a2a/jsonrpc"
SECRET_VARIABLE = "EXAMPLE_AGENT_SIGNING_SECRET"
SHUTDOWN_SECONDS = 2  # uvicorn's grace for open requests; nothing here streams

log = logging.getLogger("demo.agent")

EXTENSION_DESCRIPTIONS = {
    INTERACTIONS: "Approvals, questions and connections, answered with typed data",
    EFFECTS: "Reports a step whose outcome was lost",
    PROGRESS: "The plan, step by step",
    TELEMETRY: "Steps, tokens, cost and trace id when a task ends",
    FILES: "Kind, version, size, SHA-256 and path of each artifact",
}


def agent_card(rpc_url: str) -> AgentCard:
    return AgentCard(
        name="Example agent",
        description=(
            "Onlooker's example agent: ships releases (after an approval), researches "
            "questions (after asking what matters) and opens pull requests (after a GitHub "
            "connection), reporting its progress as it goes."
        ),
        version="1.0.0",
        provider=AgentProvider(organization="Onlooker", url="https://example.com/onlooker"),
        capabilities=AgentCapabilities(
            streaming=False,
            push_notifications=True,
            extensions=[
                AgentExtension(uri=uri, description=text, required=False)
                for uri, text in EXTENSION_DESCRIPTIONS.items()
            ],
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "text/markdown"],
        skills=[
            AgentSkill(
                id="release",
                name="Ship a release",
                description="Tests, builds and deploys a release; asks before deploying.",
                tags=["release", "deploy"],
                examples=[STARTERS[0]],
            ),
            AgentSkill(
                id="research",
                name="Research a question",
                description="Reads sources and compares options; asks what to focus on.",
                tags=["research"],
                examples=[STARTERS[1]],
            ),
            AgentSkill(
                id="connect",
                name="Work on a GitHub repository",
                description="Asks for a GitHub connection, then opens a pull request.",
                tags=["github"],
                examples=[STARTERS[2]],
            ),
        ],
        supported_interfaces=[
            AgentInterface(url=rpc_url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
    )


def build_app(
    public_url: str,
    *,
    signing_secret: str | None = None,
    speed: float = 1.0,
    policy: RetryPolicy | None = None,
) -> Starlette:
    """The agent as an ASGI app; `public_url` is where callers reach it (its card says so)."""
    card = agent_card(public_url.rstrip("/") + RPC_PATH)
    configs = InMemoryPushNotificationConfigStore()
    sender = SignedPushSender(configs, signing_secret=signing_secret, policy=policy)
    handler = DefaultRequestHandler(
        agent_executor=ExampleExecutor(speed=speed),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=configs,
        push_sender=sender,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        # Ends running tasks and push workers, so the process exits at once.
        await handler.aclose()
        await sender.aclose()

    return Starlette(
        routes=[*create_jsonrpc_routes(handler, rpc_url=RPC_PATH), *create_agent_card_routes(card)],
        lifespan=lifespan,
    )


class _QuietShutdown(logging.Filter):
    """a2a-sdk warns for each running task whose queues close at shutdown: stopping them is
    the point, and a demo's Ctrl-C should not print warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Dispatcher task is not running" not in record.getMessage()


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal after its graceful shutdown, which turns a clean stop
        # into a KeyboardInterrupt traceback or a death by SIGTERM. Stop the same way, then
        # exit normally. (A second Ctrl-C still forces the exit.)
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _config(app: Starlette, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
    )


class Handle:
    """A running agent in a background thread (see `serve`)."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, url: str) -> None:
        self.url = url
        self._server = server
        self._thread = thread

    @property
    def card_url(self) -> str:
        return f"{self.url}/.well-known/agent-card.json"

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)


def serve(
    host: str = "127.0.0.1",
    port: int = 9999,
    signing_secret: str | None = None,
    speed: float = 1.0,
    *,
    public_url: str | None = None,
    policy: RetryPolicy | None = None,
    start_timeout: float = 10.0,
) -> Handle:
    """Run the agent in a daemon thread of this process; returns once it listens."""
    url = public_url or f"http://{_reachable(host)}:{port}"
    app = build_app(url, signing_secret=signing_secret, speed=speed, policy=policy)
    server = _Server(_config(app, host, port))
    thread = threading.Thread(target=server.run, name="example-agent", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the example agent did not start on {host}:{port}")
        time.sleep(0.02)
    return Handle(server, thread, url)


def _reachable(host: str) -> str:
    """A host a caller can use: listening on every address is reachable on loopback."""
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)  # noqa: S104


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m demo.agent", description="Run Onlooker's example A2A 1.0 agent."
    )
    parser.add_argument("--port", type=int, default=9999)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--public-url", default="", help="the base URL callers use (default: http://host:port)"
    )
    parser.add_argument(
        "--signing-secret",
        default=os.environ.get(SECRET_VARIABLE, ""),
        help=f"Standard Webhooks secret, whsec_… (or ${SECRET_VARIABLE}); without one, "
        "pushes carry only the push config's token and bearer",
    )
    parser.add_argument(
        "--speed", type=float, default=1.0, help="how much faster than real time (the tests use 20)"
    )
    retry = parser.add_argument_group("push retries")
    retry.add_argument("--retry-first", type=float, default=0.5, help="first wait, seconds")
    retry.add_argument("--retry-max", type=float, default=30.0, help="longest wait, seconds")
    retry.add_argument("--retry-for", type=float, default=600.0, help="give up after, seconds")
    args = parser.parse_args(argv)
    if args.speed <= 0:
        parser.error("--speed must be above 0")
    if min(args.retry_first, args.retry_max, args.retry_for) <= 0:
        parser.error("the retry times must be above 0")
    if args.signing_secret and not valid_secret(args.signing_secret):
        parser.error("--signing-secret is not a Standard Webhooks secret (whsec_<base64>)")
    return args


def valid_secret(secret: str) -> bool:
    """`whsec_` and a base64 key, as Onlooker's `add_agent` makes them. (The library itself
    takes almost anything, "nope" included, and a receiver would then refuse every push.)"""
    if not secret.startswith("whsec_"):
        return False
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        Webhook(secret)
    except Exception:  # binascii.Error, and the library's own errors for an empty key
        return False
    return len(key) > 0


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("demo").setLevel(logging.INFO)
    logging.getLogger("a2a.server.events.event_queue_v2").addFilter(_QuietShutdown())
    url = args.public_url.rstrip("/") or f"http://{_reachable(args.host)}:{args.port}"
    policy = RetryPolicy(
        first=args.retry_first, longest=args.retry_max, give_up_after=args.retry_for
    )
    secret = args.signing_secret or None
    app = build_app(url, signing_secret=secret, speed=args.speed, policy=policy)
    log.info(
        "example agent at %s (card %s/.well-known/agent-card.json), pushes %s",
        url + RPC_PATH,
        url,
        "signed" if args.signing_secret else "unsigned",
    )
    server = _Server(_config(app, args.host, args.port))
    server.run()
    if not server.started:
        sys.exit(1)  # could not listen (the port is taken?): uvicorn said why
    log.info("example agent stopped")


if __name__ == "__main__":
    main()
