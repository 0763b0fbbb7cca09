"""Team channels never slow ingest nor each other (issue 14): a real daphne process with its
applier and its notification sender, fed approval-asking pushes at a steady rate, in three
phases of the same length:

    quiet    the agent's team has no channel: what a push costs without notifications
    told     the team has a working signed webhook (a loopback receiver here, verifying
             each signature with the standardwebhooks library)
    stuck    the same, plus a second channel of the team whose receiver never answers
             (each send waits out the sender's 10 s timeout, then backs off)

Each push opens a new interaction. Printed per phase: POST → 2xx p50/p99, and for the
working webhook push → received p50/p99 (the 2xx of the push to the receiver's arrival),
events received and verified. The working channel's figures in `stuck` against `told` say
whether a stuck channel holds up a healthy one; the 2xx figures against `quiet` whether
notifications slow ingest.

    python -m tests.benchmarks notify [--seconds 8] [--rate 20]

With DATABASE_URL (PostgreSQL) and REDIS_URL set, it runs on them, like the others.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from standardwebhooks import Webhook

from tasks.wire import profile
from tests.benchmarks.ingest import Server, Workspace, _run_checked

DESCRIPTION = "push → 2xx and push → webhook with no channel, a working one, and a stuck one"

BENCH_DATABASE = "onlooker_bench_notify"
PHASES = ("quiet", "told", "stuck")

SETUP = """
import json
import django

django.setup()
from django.contrib.auth.models import Group
from tasks.answering.agents import new_endpoint, new_signing_secret
from tasks.models import Agent
from tasks.notify.channels import add

teams = {}
for phase in ("quiet", "told", "stuck"):
    secret = new_signing_secret()
    agent = Agent.objects.create(
        name=f"{phase}-bot",
        card_url="http://agent.invalid/.well-known/agent-card.json",
        rpc_url="http://agent.invalid/a2a/jsonrpc",
        protocol_version="1.0",
        signing_secret=secret,
        team=Group.objects.create(name=phase),
    )
    endpoint, _, _ = new_endpoint(agent)
    teams[phase] = {"path": f"/a2a/push/{endpoint.public_id}/", "secret": secret}
# The receivers are on loopback: channels may post there only when they say so.
for phase in ("told", "stuck"):
    teams[phase]["hook"] = add(phase, "webhook", "{told}", allow_private=True).signing_secret
add("stuck", "webhook", "{stuck}", allow_private=True)
print(json.dumps(teams))
"""


class Receivers:
    """Two loopback webhook receivers: one answers at once and notes when each event
    arrived (and whether its signature verified), the other never answers in time."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.verified = 0
        self.secrets: dict[str, str] = {}
        outer = self

        class Told(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                at = time.monotonic()
                event = json.loads(body)
                key = event["interaction"]["interactionId"]
                secret = outer.secrets.get(key.split("-", 1)[0])
                try:
                    Webhook(secret).verify(body, dict(self.headers.items()))
                    outer.verified += 1
                except Exception:  # noqa: BLE001 - counted as not verified
                    pass
                if event["type"] == "interaction.opened":
                    outer.arrived.setdefault(key, at)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        class Stuck(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                time.sleep(30)  # far past the sender's timeout

            def log_message(self, *args) -> None:
                pass

        self.told = ThreadingHTTPServer(("127.0.0.1", 0), Told)
        self.stuck = ThreadingHTTPServer(("127.0.0.1", 0), Stuck)
        self.stuck.daemon_threads = True
        for server in (self.told, self.stuck):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def url(self, server: ThreadingHTTPServer) -> str:
        return f"http://127.0.0.1:{server.server_address[1]}/hook"

    def close(self) -> None:
        for server in (self.told, self.stuck):
            server.shutdown()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each phase")
    parser.add_argument("--rate", type=float, default=20.0, help="pushes per second")


def asking_push(webhook: Webhook, phase: str, n: int) -> tuple[bytes, dict]:
    """Push n of a phase: its own task, waiting for approval of its own interaction."""
    now = datetime.now(UTC)
    body = {
        "statusUpdate": {
            "taskId": f"{phase}-task-{n}",
            "contextId": f"{phase}-ctx-{n}",
            "status": {
                "state": "TASK_STATE_AUTH_REQUIRED",
                "timestamp": now.isoformat().replace("+00:00", "Z"),
                "message": {
                    "messageId": f"{phase}-m-{n}",
                    "role": "ROLE_AGENT",
                    "parts": [{"text": f"Delete build {n}?"}],
                },
            },
            "metadata": {
                profile.INTERACTIONS: {
                    "interactionId": f"{phase}-{n}",
                    "kind": "approval",
                    "prompt": f"Delete build {n}?",
                }
            },
        }
    }
    raw = json.dumps(body)
    msg_id = f"msg_{phase}_{n}"
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": webhook.sign(msg_id, now, raw),
    }
    return raw.encode(), headers


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(args: argparse.Namespace) -> int:
    if args.seconds <= 0 or args.rate <= 0:
        raise SystemExit("--seconds and --rate must be more than 0")
    receivers = Receivers()
    try:
        with Workspace(
            os.environ.get("DATABASE_URL", "").strip(), database=BENCH_DATABASE
        ) as workspace:
            env = workspace.onlooker_env()
            if os.environ.get("REDIS_URL"):
                env["REDIS_URL"] = os.environ["REDIS_URL"]
            _run_checked([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env)
            script = SETUP.replace("{told}", receivers.url(receivers.told))
            script = script.replace("{stuck}", receivers.url(receivers.stuck))
            teams = json.loads(_run_checked([sys.executable, "-c", script], env).splitlines()[-1])
            for phase in ("told", "stuck"):
                receivers.secrets[phase] = teams[phase]["hook"]
            with Server("onlooker", "dashboard.asgi:application", env, workspace.directory) as s:
                rows = [
                    _phase(s.base_url, phase, teams[phase], receivers, args) for phase in PHASES
                ]
        _print(rows, args, workspace.description, receivers.verified)
    finally:
        receivers.close()
    return 0


def _phase(base: str, phase: str, team: dict, receivers: Receivers, args) -> dict:
    webhook = Webhook(team["secret"])
    interval = 1 / args.rate
    acked: dict[str, float] = {}
    latencies: list[float] = []
    errors = 0
    with httpx.Client(base_url=base, timeout=10) as client:
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < args.seconds:
            body, headers = asking_push(webhook, phase, n)
            sent = time.monotonic()
            response = client.post(team["path"], content=body, headers=headers)
            done = time.monotonic()
            if response.status_code == 200:
                latencies.append(done - sent)
                acked[f"{phase}-{n}"] = done
            else:
                errors += 1
            n += 1
            time.sleep(max(0.0, started + n * interval - time.monotonic()))
    told = []
    if phase != "quiet":
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(k not in receivers.arrived for k in acked):
            time.sleep(0.05)
        told = [receivers.arrived[k] - at for k, at in acked.items() if k in receivers.arrived]
    return {
        "phase": phase,
        "pushes": n,
        "errors": errors,
        "ack": latencies,
        "told": told,
        "received": len(told),
    }


def _print(rows: list[dict], args, description: str, verified: int) -> None:
    print(f"notify: {args.rate:g} asking pushes/s for {args.seconds:g} s a phase; {description}")
    print()
    print("| phase | pushes | errors | POST→2xx p50 / p99 | push→webhook p50 / p99 | received |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        ack = row["ack"]
        told = row["told"]
        webhook = (
            f"{percentile(told, 50) * 1000:.0f} / {percentile(told, 99) * 1000:.0f} ms"
            if told
            else "—"
        )
        received = "—" if row["phase"] == "quiet" else f"{row['received']}/{row['pushes']}"
        print(
            f"| {row['phase']} | {row['pushes']} | {row['errors']} | "
            f"{percentile(ack, 50) * 1000:.1f} / {percentile(ack, 99) * 1000:.1f} ms | "
            f"{webhook} | {received} |"
        )
    print()
    print(f"signatures verified with standardwebhooks: {verified}")
    quiet, told, stuck = (statistics.median(row["ack"]) for row in rows)
    print(f"median POST→2xx, a working channel vs none: {told / quiet:.2f}×")
    print(
        f"median POST→2xx, a stuck channel beside it vs the working one alone: {stuck / told:.2f}×"
    )


if __name__ == "__main__":
    sys.exit(run(argparse.ArgumentParser().parse_args()))
