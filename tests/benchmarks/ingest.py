"""Ingest throughput: signed pushes per second through the real view, against a bare ASGI
endpoint that does the same HMAC check and one INSERT (DESIGN.md §6: Onlooker ≥ 50%).

Two rates per server, side by side: pushes *acknowledged* per second (2xx answers inside the
measured window) and pushes *applied* per second, sustained: every push of the run (warm-up
included) over the time from the first push until the last one is visible through
`/api/sessions`. To know when that is, each run ends with one more push per task whose note
is a known final text, and the benchmark polls `/api/sessions` (as a logged-in reader) until
every task's session shows it. A receiver that answers before it applies (the durable spool,
tasks/pushes/applier.py) can acknowledge faster than it applies: the pending backlog it leaves at
the end of the load and the time it takes to drain are printed, and a backlog that grows
without bound shows as a low applied rate (or as "not drained"), never as a fast ack rate.
For the bare endpoint a push is applied when it is acknowledged (its INSERT is the work).

With the spool, a third server runs with `ONLOOKER_APPLIER=external` (it only stores), and
then `manage.py apply_deliveries --once` drains what it stored as a child process: CPU per
push of the ack path (daphne) and of the apply path (the child's rusage) separately.

Both run as real daphne processes on loopback, each on a fresh database: SQLite files in a
temporary directory by default, or, when DATABASE_URL is set, a dedicated PostgreSQL
database (`onlooker_bench`, dropped at the end) created through that URL. REDIS_URL, if
set, is passed through, so broadcasts go where they would in production. The load is
C concurrent httpx workers for N seconds after a warm-up that is not counted; every push is
a distinct, correctly signed statusUpdate with its own webhook-id.

    python -m tests.benchmarks ingest [--seconds N] [--concurrency C]
    python -m tests.benchmarks ingest --profile 500   # in-process cProfile + query count
    python -m tests.benchmarks burst                  # 500 pushes/s open-loop (burst.py)

The figures are printed, never asserted: a benchmark that fails a build on a noisy machine
teaches people to ignore it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import itertools
import json
import math
import os
import pstats
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from standardwebhooks import Webhook

from tests.benchmarks import bare_push, workspace
from tests.benchmarks.workspace import SETTINGS_VARIABLES
from tests.processes import ROOT, children, free_port

DESCRIPTION = "signed pushes/s through the real view vs a bare ASGI endpoint (target ≥ 50%)"

BENCH_DATABASE = "onlooker_bench"
TARGET_RATIO = 0.5
TASKS = 50
REQUEST_TIMEOUT = 10.0
VISIBLE_POLL = 0.1  # seconds between two looks at /api/sessions while waiting for the finals
PENDING = "SELECT count(*) FROM tasks_delivery WHERE outcome = 'pending'"
APPLY_COMMAND = ROOT / "tasks" / "management" / "commands" / "apply_deliveries.py"
IN_REQUEST_NOTE = "the server applies in the request (outcome 'applied'): nothing is pending"

REGISTER_AGENT = """
import json
import django

django.setup()
from tasks.answering.agents import new_endpoint, new_signing_secret
from tasks.models import Agent

secret = new_signing_secret()
agent = Agent.objects.create(
    name="Benchmark",
    card_url="http://agent.invalid/.well-known/agent-card.json",
    rpc_url="http://agent.invalid/a2a/jsonrpc",
    protocol_version="1.0",
    signing_secret=secret,
)
endpoint, _, _ = new_endpoint(agent)
# A reader for /api/sessions: the agent has no team, so every user sees its sessions.
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

client = Client()
client.force_login(User.objects.create_user("bench-reader"))
cookie = client.cookies[settings.SESSION_COOKIE_NAME]
print(json.dumps({
    "path": f"/a2a/push/{endpoint.public_id}/",
    "secret": secret,
    "cookies": {settings.SESSION_COOKIE_NAME: cookie.value},
}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per server")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent pushers")
    parser.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds first")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternate bare and Onlooker this many times and pool the figures (less noise)",
    )
    parser.add_argument(
        "--bare-connection",
        choices=("persistent", "per-request"),
        default="persistent",
        help="the baseline keeps a connection per thread, or opens one per push like Django",
    )
    parser.add_argument(
        "--app",
        default="dashboard.asgi:application",
        help="the Onlooker ASGI app daphne serves (a wrapper, to measure a change against it)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="PUSHES",
        help="instead of the load test, profile PUSHES pushes in-process and count queries",
    )
    parser.add_argument(
        "--profile-out",
        type=Path,
        help="also save the pstats there, and the applier's in <path>.apply (for snakeviz)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=120.0,
        help="seconds after the load to wait for every push to be visible before calling it "
        "not drained",
    )
    parser.add_argument(
        "--skip-split",
        action="store_true",
        help="no third run with ONLOOKER_APPLIER=external + apply_deliveries --once (the "
        "ack-path and apply-path CPU per push)",
    )


def run(args: argparse.Namespace) -> int:
    if args.seconds <= 0 or args.concurrency < 1 or args.warmup < 0 or args.rounds < 1:
        raise SystemExit("--seconds > 0, --concurrency ≥ 1, --warmup ≥ 0, --rounds ≥ 1, please")
    # A SIGTERM would end the process without unwinding; as an exception, the servers are
    # stopped and the benchmark database is dropped on the way out.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with Workspace(
        os.environ.get("DATABASE_URL", "").strip(), database=BENCH_DATABASE
    ) as workspace:
        env = workspace.onlooker_env()
        _run_checked([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env)
        agent = json.loads(
            _run_checked([sys.executable, "-c", REGISTER_AGENT], env).splitlines()[-1]
        )
        if args.profile:
            profile_in_process(env, agent["path"], agent["secret"], args.profile, args.profile_out)
            return 0
        return _load_test(args, workspace, env, agent)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


# -- workspace: temporary data directory and databases --------------------------------------


class Workspace(workspace.Workspace):
    """The shared workspace, plus the bare endpoint's database."""

    @property
    def bare_database(self) -> str:
        # On PostgreSQL the baseline gets its own table in the same database, like Onlooker's.
        return self.bench_url or str(self.directory / "bare.sqlite3")

    def count_deliveries(self) -> int:
        return self.scalar("SELECT count(*) FROM tasks_delivery") + self.in_spool()

    def count_pending(self) -> int:
        """Deliveries kept but not applied yet (none, where pushes are applied in the request:
        no delivery is ever pending there), the spool file's included (tasks/pushes/spool.py)."""
        return self.scalar(PENDING) + self.in_spool()

    def in_spool(self) -> int:
        """Pushes kept in the spool file that the applier has not taken yet (SQLite)."""
        file = self.data_dir / "onlooker.sqlite3-spool"
        if self.postgres or not file.exists():
            return 0
        with contextlib.closing(sqlite3.connect(file)) as spool:
            try:
                return spool.execute("SELECT count(*) FROM push").fetchone()[0]
            except sqlite3.OperationalError:  # created, its table not yet
                return 0

    def scalar(self, statement: str) -> int:
        """Read Onlooker's database directly, beside the servers and not through them."""
        if self.postgres:
            import psycopg

            with psycopg.connect(self.bench_url) as connection:
                return connection.execute(statement).fetchone()[0]
        with contextlib.closing(sqlite3.connect(self.data_dir / "onlooker.sqlite3")) as db:
            return db.execute(statement).fetchone()[0]


def _pythonpath() -> str:
    # The project first; the caller's own PYTHONPATH after it, so --app can name a wrapper.
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def _run_checked(command: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{result.stderr[-3000:]}")
    return result.stdout


# -- servers --------------------------------------------------------------------------------


class Server(contextlib.AbstractContextManager):
    """One daphne process on loopback, or with `processes` `manage.py serve` running that
    many on one port (the app is then Onlooker's own); stopped (then killed) on exit,
    whatever happened."""

    def __init__(
        self,
        name: str,
        app: str,
        env: dict[str, str],
        log_dir: Path,
        *,
        processes: int | None = None,
    ) -> None:
        self.name = name
        self.port = free_port()
        self.log = log_dir / f"{name}.log"
        self.processes = processes
        self.command = [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(self.port),
            app,
        ]
        if processes is not None:
            self.command = [
                sys.executable,
                "manage.py",
                "serve",
                "--port",
                str(self.port),
                "--processes",
                str(processes),
            ]
        self.env = env
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_listening(timeout=30)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited at start:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not listen within {timeout:.0f} s:\n{self.log_tail()}")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def cpu_seconds(self) -> float | None:
        """User + system CPU of the server process (all threads) and of the processes it
        started (its applier process), from /proc; None elsewhere."""
        return process_tree_cpu(self.process.pid)

    def daphne_cpu_seconds(self) -> float | None:
        """CPU of the daphne processes alone, not of their appliers: the one process, or
        under `serve` each of its children that is a daphne (not the applier it runs)."""
        if self.processes is None:
            return process_tree_cpu(self.process.pid, descendants=False)
        pids = children(self.process.pid, running=b"daphne")
        seconds = [process_tree_cpu(pid, descendants=False) for pid in pids]
        return sum(s for s in seconds if s is not None) if pids else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def process_tree_cpu(pid: int, *, descendants: bool = True) -> float | None:
    """User + system CPU seconds of a process and of its live descendants (or of it alone),
    from /proc (None where there is no /proc, or the process is gone)."""
    total, stack, first = 0, [pid], True
    while stack:
        current = stack.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except (OSError, IndexError):
            if first:
                return None
            continue  # a child that just exited
        first = False
        # Fields 14 and 15 (utime, stime) of proc(5); the split above starts at field 3.
        total += int(fields[11]) + int(fields[12])
        if not descendants:
            break
        for task in tasks:
            with contextlib.suppress(OSError):
                stack.extend(int(c) for c in (task / "children").read_text().split())
    return total / os.sysconf("SC_CLK_TCK")


# -- load -----------------------------------------------------------------------------------


@dataclass
class Measurement:
    server: str
    seconds: float
    latencies: list[float] = field(default_factory=list)  # seconds, 2xx and errors alike
    errors: Counter = field(default_factory=Counter)  # status code or exception name → count
    error_samples: list[str] = field(default_factory=list)
    acknowledged: int = 0  # every 2xx, warm-up and stragglers included: all must be stored
    server_cpu: float | None = None
    client_cpu: float = 0.0
    outcomes: Counter = field(default_factory=Counter)  # the 2xx answers' "outcome"
    # Applied: every push of the run (finals included) over first push → all visible.
    applied: int = 0
    applied_seconds: float = 0.0
    drain_seconds: list[float] = field(default_factory=list)  # load end → all visible
    backlog: list[int] = field(default_factory=list)  # pending deliveries at the load's end
    backlog_growth: list[float] = field(default_factory=list)  # pending/s over the window
    undrained: int = 0  # still pending when --drain-timeout ran out
    applied_cpu: float | None = 0.0  # server CPU from the first push until all were visible
    # Filled by generate_load for what follows it (finals, drain), not for the table.
    first_sent: float = 0.0
    load_end: float = 0.0
    next_number: int = 0

    def add(self, other: Measurement) -> None:
        """Pool another round of the same server into this one."""
        self.seconds += other.seconds
        self.latencies += other.latencies
        self.errors.update(other.errors)
        self.error_samples = (self.error_samples + other.error_samples)[:5]
        self.acknowledged += other.acknowledged
        if self.server_cpu is not None and other.server_cpu is not None:
            self.server_cpu += other.server_cpu
        else:
            self.server_cpu = None
        self.client_cpu += other.client_cpu
        self.outcomes.update(other.outcomes)
        self.applied += other.applied
        self.applied_seconds += other.applied_seconds
        self.drain_seconds += other.drain_seconds
        self.backlog += other.backlog
        self.backlog_growth += other.backlog_growth
        self.undrained += other.undrained
        if self.applied_cpu is not None and other.applied_cpu is not None:
            self.applied_cpu += other.applied_cpu
        else:
            self.applied_cpu = None

    @property
    def completed(self) -> int:
        return len(self.latencies)

    @property
    def succeeded(self) -> int:
        return self.completed - sum(self.errors.values())

    @property
    def throughput(self) -> float:
        return self.succeeded / self.seconds

    @property
    def applied_rate(self) -> float:
        """Pushes applied per second, sustained; 0 when a run never drained."""
        if self.undrained or not self.applied_seconds:
            return 0.0
        return self.applied / self.applied_seconds

    @property
    def keeps_first(self) -> bool:
        """The server answered before applying (the durable spool's "accepted")."""
        return self.outcomes.get("accepted", 0) > 0

    def percentile(self, fraction: float) -> float:
        """Nearest-rank percentile in milliseconds."""
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
        return ordered[index] * 1000


def final_text(run: str, task: int) -> str:
    """The note of a task's last push: what /api/sessions shows once it is applied."""
    return f"Final push of {run} for task {task}."


def signed_push(
    webhook: Webhook,
    run: str,
    n: int,
    base: datetime,
    *,
    tasks: int = TASKS,
    text: str | None = None,
) -> tuple[bytes, dict]:
    """Push number n: a WORKING status with a message, on one of `tasks` tasks, later than
    n-1 (so a later push's note replaces an earlier one's whatever order they arrive in)."""
    task = n % tasks
    at = base + timedelta(milliseconds=n)
    body = {
        "statusUpdate": {
            "taskId": f"{run}-task-{task}",
            "contextId": f"{run}-ctx-{task}",
            "status": {
                "state": "TASK_STATE_WORKING",
                "timestamp": at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z",
                "message": {
                    "messageId": f"{run}-msg-{n}",
                    "role": "ROLE_AGENT",
                    "parts": [{"text": text or f"Step {n}: still working on task {task}"}],
                },
            },
        }
    }
    raw = json.dumps(body)
    msg_id = f"msg_{run}_{n}"
    now = datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": webhook.sign(msg_id, now, raw),
    }
    return raw.encode(), headers


def outcome_of(response: httpx.Response) -> str:
    try:
        return str(response.json().get("outcome"))
    except (ValueError, AttributeError):
        return "?"


async def generate_load(
    server: Server,
    url: str,
    secret: str,
    *,
    seconds: float,
    warmup: float,
    concurrency: int,
    run: str = "",
    pending: Callable[[], int] | None = None,
) -> Measurement:
    """C workers push back to back; only pushes completing inside the window are counted.
    `run` names this run's tasks and webhook ids, so a later round is not all duplicates.
    `pending`, when given, counts the backlog at both ends of the window."""
    measurement = Measurement(server.name, seconds)
    webhook = Webhook(secret)
    numbers = itertools.count()
    base = datetime.now(UTC)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    start = time.perf_counter()
    measurement.first_sent = start
    window_start, window_end = start + warmup, start + warmup + seconds
    cpu: dict[str, tuple[float | None, float]] = {}
    backlog: dict[str, tuple[float, int]] = {}

    async def sample_cpu(label: str, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        cpu[label] = (server.cpu_seconds(), time.process_time())
        if pending is not None:
            backlog[label] = (time.perf_counter(), await asyncio.to_thread(pending))

    async def worker(client: httpx.AsyncClient) -> None:
        while time.perf_counter() < window_end:
            body, headers = signed_push(webhook, run or server.name, next(numbers), base)
            sent = time.perf_counter()
            outcome: int | str
            detail = ""
            try:
                response = await client.post(url, content=body, headers=headers)
                outcome = response.status_code
                if not 200 <= outcome < 300:
                    detail = response.text[:200]
            except httpx.HTTPError as error:
                outcome, detail = type(error).__name__, str(error)[:200]
            done = time.perf_counter()
            if isinstance(outcome, int) and 200 <= outcome < 300:
                measurement.acknowledged += 1
                measurement.outcomes[outcome_of(response)] += 1
            elif len(measurement.error_samples) < 5:
                sample = f"{outcome}: {detail}"
                if sample not in measurement.error_samples:
                    measurement.error_samples.append(sample)
            if not window_start <= done <= window_end:
                continue  # warm-up, or finished after the window closed
            measurement.latencies.append(done - sent)
            if not (isinstance(outcome, int) and 200 <= outcome < 300):
                measurement.errors[outcome] += 1

    async with httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT) as client:
        await asyncio.gather(
            sample_cpu("start", window_start),
            sample_cpu("end", window_end),
            *(worker(client) for _ in range(concurrency)),
        )
    measurement.load_end = time.perf_counter()
    measurement.next_number = next(numbers)
    (server_start, client_start), (server_end, client_end) = cpu["start"], cpu["end"]
    if server_start is not None and server_end is not None:
        measurement.server_cpu = server_end - server_start
    measurement.client_cpu = client_end - client_start
    if "start" in backlog and "end" in backlog:
        (t0, n0), (t1, n1) = backlog["start"], backlog["end"]
        measurement.backlog_growth.append((n1 - n0) / max(t1 - t0, 1e-9))
    return measurement


async def push_finals(
    client: httpx.AsyncClient,
    url: str,
    secret: str,
    run: str,
    after: int,
    base: datetime,
    tasks: int = TASKS,
) -> tuple[dict[str, str], int]:
    """One last push per task, numbered after every push before it (so it is the newest),
    whose note is `final_text`: context id → the text to wait for, and how many were
    acknowledged."""
    webhook = Webhook(secret)
    first = after + (-after) % tasks  # a multiple of `tasks`: push first + t goes to task t
    expected: dict[str, str] = {}
    bodies = []
    for task in range(tasks):
        text = final_text(run, task)
        expected[f"{run}-ctx-{task}"] = text
        bodies.append(signed_push(webhook, run, first + task, base, tasks=tasks, text=text))

    async def one(body: bytes, headers: dict) -> bool:
        for _ in range(3):  # a final that failed would make the drain wait for nothing
            try:
                response = await client.post(url, content=body, headers=headers)
            except httpx.HTTPError:
                continue
            if 200 <= response.status_code < 300:
                return True
        return False

    acknowledged = await asyncio.gather(*(one(b, h) for b, h in bodies))
    return expected, sum(acknowledged)


async def wait_visible(
    client: httpx.AsyncClient,
    base_url: str,
    cookies: dict[str, str],
    expected: dict[str, str],
    timeout: float,
    pending: Callable[[], int] | None = None,
) -> float | None:
    """Poll /api/sessions until every context's card note shows its expected text: the
    perf_counter of the answer that showed them all (at most VISIBLE_POLL late), or None
    when `timeout` ran out first. With `pending`, the database is watched first until no
    delivery is pending: asking the server every VISIBLE_POLL meanwhile would take CPU
    from the applier whose drain is being timed."""
    deadline = time.perf_counter() + timeout
    while pending is not None and await asyncio.to_thread(pending):
        if time.perf_counter() > deadline:
            return None
        await asyncio.sleep(VISIBLE_POLL / 2)
    while True:
        response = await client.get(f"{base_url}/api/sessions?limit=1000", cookies=cookies)
        answered = time.perf_counter()
        if response.status_code != 200:
            raise SystemExit(f"/api/sessions answered {response.status_code}: {response.text}")
        notes = {
            s["contextId"]: (s.get("card") or {}).get("markdown") or ""
            for s in response.json()["sessions"]
        }
        if all(text in notes.get(context, "") for context, text in expected.items()):
            return answered
        if answered > deadline:
            return None
        await asyncio.sleep(VISIBLE_POLL)


async def load_and_drain(
    server: Server,
    url: str,
    secret: str,
    cookies: dict[str, str],
    workspace: Workspace,
    *,
    run: str,
    drain_timeout: float,
    **load: float,
) -> Measurement:
    """The load, then the finals, then the wait until every push is visible: ack and applied
    rates of one Onlooker run."""
    cpu_start = server.cpu_seconds()
    measured = await generate_load(
        server, url, secret, run=run, pending=workspace.count_pending, **load
    )
    measured.backlog.append(await asyncio.to_thread(workspace.count_pending))
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        base = datetime.now(UTC) + timedelta(seconds=1)  # newer than every push before them
        expected, acked = await push_finals(client, url, secret, run, measured.next_number, base)
        measured.acknowledged += acked
        if acked < len(expected):
            measured.error_samples.append(f"{len(expected) - acked} final pushes not acknowledged")
        visible = await wait_visible(
            client, server.base_url, cookies, expected, drain_timeout, workspace.count_pending
        )
    measured.applied = measured.acknowledged
    if visible is None:
        measured.undrained = max(1, workspace.count_pending())
        return measured
    measured.applied_seconds = visible - measured.first_sent
    measured.drain_seconds.append(visible - measured.load_end)
    cpu_end = server.cpu_seconds()
    measured.applied_cpu = None if cpu_start is None or cpu_end is None else cpu_end - cpu_start
    return measured


def _load_test(
    args: argparse.Namespace, workspace: Workspace, env: dict[str, str], agent: dict
) -> int:
    path, secret, cookies = agent["path"], agent["secret"], agent["cookies"]
    bare_db = workspace.bare_database
    bare_push.prepare(bare_db)
    bare_env = {
        **{k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES},
        "BARE_PUSH_SECRET": secret,
        "BARE_PUSH_DATABASE": bare_db,
        "BARE_PUSH_CONNECTION": args.bare_connection,
        "PYTHONPATH": _pythonpath(),
    }
    database = "PostgreSQL (onlooker_bench)" if workspace.postgres else "SQLite (WAL, temp dir)"
    print(
        f"ingest: {database}; daphne, one process each; {args.concurrency} concurrent pushers; "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per server"
        f"{f' × {args.rounds} rounds' if args.rounds > 1 else ''}; "
        f"bare connection: {args.bare_connection}; onlooker app: {args.app}; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start",
        flush=True,
    )
    load = {"seconds": args.seconds, "warmup": args.warmup, "concurrency": args.concurrency}
    results = {name: Measurement(name, 0.0, server_cpu=0.0) for name in ("bare", "onlooker")}
    with contextlib.ExitStack() as stack:
        bare = stack.enter_context(
            Server("bare", "tests.benchmarks.bare_push:application", bare_env, workspace.directory)
        )
        onlooker = stack.enter_context(Server("onlooker", args.app, env, workspace.directory))
        # Bare first, then Onlooker: one at a time, so neither competes with the other for CPU;
        # alternating rounds spread the machine's drifts over both.
        for round_number in range(args.rounds):
            cpu_start = bare.cpu_seconds()
            measured = asyncio.run(
                generate_load(
                    bare, f"{bare.base_url}/push", secret, run=f"bare{round_number}", **load
                )
            )
            cpu_end = bare.cpu_seconds()
            # The baseline's INSERT is all it does: applied when acknowledged.
            measured.applied = measured.acknowledged
            measured.applied_seconds = measured.load_end - measured.first_sent
            if cpu_start is None or cpu_end is None:
                measured.applied_cpu = None
            else:
                measured.applied_cpu = cpu_end - cpu_start
            results["bare"].add(measured)
            measured = asyncio.run(
                load_and_drain(
                    onlooker,
                    onlooker.base_url + path,
                    secret,
                    cookies,
                    workspace,
                    run=f"onlooker{round_number}",
                    drain_timeout=args.drain_timeout,
                    **load,
                )
            )
            results["onlooker"].add(measured)
        stored = {
            "bare": bare_push.count_rows(bare_db),
            "onlooker": workspace.count_deliveries(),
        }
        for server in (bare, onlooker):
            if server.process.poll() is not None:
                print(f"{server.name} died during the run:\n{server.log_tail()}")
    print_table(list(results.values()), stored, args.drain_timeout)
    if args.skip_split:
        return 0
    if not results["onlooker"].keeps_first:
        print(f"\nack/apply CPU split: n/a, {IN_REQUEST_NOTE}; its srv CPU ms/push is both")
        return 0
    if not APPLY_COMMAND.exists():
        print("\nack/apply CPU split: n/a, no `manage.py apply_deliveries` in this checkout")
        return 0
    split_cpu(args, workspace, env, path, secret, load)
    return 0


def print_table(results: list[Measurement], stored: dict[str, int], drain_timeout: float) -> None:
    header = (
        f"{'server':<10} {'acked/s':>8} {'applied/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'errors':>7} {'srv CPU %':>9} {'srv CPU ms/push':>15} {'client CPU %':>12}"
        f" {'acked/stored':>14} {'backlog':>8} {'drain s':>8} {'CPU ms/applied':>14}"
    )
    print()
    print(header)
    print("-" * len(header))
    for m in results:
        ok = m.succeeded
        srv = "n/a" if m.server_cpu is None else f"{100 * m.server_cpu / m.seconds:.0f}"
        per_push = "n/a" if m.server_cpu is None or not ok else f"{1000 * m.server_cpu / ok:.2f}"
        applied = "NOT DRAINED" if m.undrained else f"{m.applied_rate:.1f}"
        backlog = "-" if not m.backlog else str(max(m.backlog))
        drain = "-" if not m.drain_seconds else f"{max(m.drain_seconds):.2f}"
        if m.undrained:
            drain = f">{drain_timeout:g}"
        per_applied = (
            "n/a"
            if m.applied_cpu is None or not m.applied or m.undrained
            else f"{1000 * m.applied_cpu / m.applied:.2f}"
        )
        print(
            f"{m.server:<10} {m.throughput:>8.1f} {applied:>9} {m.percentile(0.5):>8.1f}"
            f" {m.percentile(0.99):>8.1f} {sum(m.errors.values()):>7} {srv:>9} {per_push:>15}"
            f" {100 * m.client_cpu / m.seconds:>12.0f}"
            f" {f'{m.acknowledged}/{stored.get(m.server, 0)}':>14} {backlog:>8} {drain:>8}"
            f" {per_applied:>14}"
        )
    for m in results:
        if m.errors or m.error_samples:
            print(f"\n{m.server} errors: {dict(m.errors)}")
            for sample in m.error_samples:
                print(f"  {sample}")
        if m.acknowledged > stored.get(m.server, 0):
            print(
                f"\n{m.server}: {m.acknowledged} pushes acknowledged but only "
                f"{stored.get(m.server, 0)} stored: acknowledged pushes were lost"
            )
    by_name = {m.server: m for m in results}
    bare, onlooker = by_name.get("bare"), by_name.get("onlooker")
    print(
        "\nacked/s: 2xx answers inside the measured window. applied/s: every push of the run "
        "(warm-up and one final push per task included) over the time from the first push "
        "until /api/sessions showed every task's final push (polled every "
        f"{VISIBLE_POLL:g} s after the load, once the database had no delivery pending). "
        "backlog: pending deliveries when the load ended; drain s: from then until all were "
        "visible (sending the finals included). "
        "srv CPU ms/push: daphne's CPU in "
        "the window over the pushes acknowledged in it (with the spool, the applier thread's "
        "share of it is whatever it applied meanwhile); CPU ms/applied: daphne's CPU from the "
        "first push until all were visible over every push applied. For bare, applied = "
        "acknowledged."
    )
    if onlooker is not None:
        if onlooker.keeps_first:
            growth = ", ".join(f"{g:+.1f}" for g in onlooker.backlog_growth)
            print(
                f"onlooker answered {dict(onlooker.outcomes)}; the pending backlog changed by "
                f"{growth} deliveries/s over the measured window (a positive figure is a "
                "backlog growing while pushes keep coming)"
            )
        else:
            print(f"onlooker answered {dict(onlooker.outcomes)}: applied/s: {IN_REQUEST_NOTE}")
        if onlooker.undrained:
            print(
                f"onlooker: NOT DRAINED within {drain_timeout:g} s after the load: "
                f"{onlooker.undrained} deliveries still pending; the backlog does not drain"
            )
    if bare and onlooker and bare.throughput > 0:
        for label, rate in (("acked", onlooker.throughput), ("applied", onlooker.applied_rate)):
            ratio = rate / bare.throughput
            verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
            print(
                f"{label + ':':<9} onlooker/bare = {ratio:.0%} of the baseline's pushes/s: "
                f"{verdict} the ≥ {TARGET_RATIO:.0%} target (DESIGN.md §6)"
            )
        if bare.server_cpu and onlooker.server_cpu and bare.succeeded and onlooker.succeeded:
            cost = (onlooker.server_cpu / onlooker.succeeded) / (bare.server_cpu / bare.succeeded)
            print(f"server CPU per push: onlooker costs {cost:.1f}× the baseline")


# -- ack path and apply path, separately ----------------------------------------------------


def split_cpu(
    args: argparse.Namespace,
    workspace: Workspace,
    env: dict[str, str],
    path: str,
    secret: str,
    load: dict[str, float],
) -> None:
    """A daphne that only stores (ONLOOKER_APPLIER=external) under the same load: its CPU
    per acknowledged push is the ack path's. Then `apply_deliveries --once` as a child,
    alone on the machine: its CPU (rusage) per delivery applied is the apply path's, less
    the CPU of the same command with nothing to apply (Django's start-up)."""
    external = {**env, "ONLOOKER_APPLIER": "external"}
    print(
        "\nack/apply split: daphne with ONLOOKER_APPLIER=external under the same load, then "
        "`manage.py apply_deliveries --once` draining what it stored",
        flush=True,
    )
    idle_cpu, _, _ = _apply_once(external)  # nothing pending that it could apply…
    left = workspace.count_pending()
    if left:  # …but failed deliveries waiting for their retry: not this run's, left aside
        print(f"({left} deliveries pending from the earlier runs, not due yet)")
    with Server("onlooker-external", args.app, external, workspace.directory) as server:
        ack = asyncio.run(
            generate_load(server, server.base_url + path, secret, run="external", **load)
        )
    pending = workspace.count_pending() - left
    apply_cpu, wall, output = _apply_once(external)
    applied = pending + left - workspace.count_pending()
    ack_ms = (
        f"{1000 * ack.server_cpu / ack.succeeded:.2f}"
        if ack.server_cpu is not None and ack.succeeded
        else "n/a"
    )
    apply_ms = f"{1000 * (apply_cpu - idle_cpu) / applied:.2f}" if applied else "n/a"
    header = f"{'path':<34} {'pushes':>7} {'per s':>8} {'CPU ms/push':>12}"
    print(header)
    print("-" * len(header))
    label = "ack (daphne, external applier)"
    print(f"{label:<34} {ack.succeeded:>7} {ack.throughput:>8.1f} {ack_ms:>12}")
    print(
        f"{'apply (apply_deliveries --once)':<34} {applied:>7} "
        f"{applied / max(wall, 1e-9):>8.1f} {apply_ms:>12}"
    )
    print(
        f"apply_deliveries --once: {pending} pending before, {applied} applied in {wall:.2f} s "
        f"wall, {apply_cpu:.2f} s CPU ({idle_cpu:.2f} s of it start-up, measured with nothing "
        f"pending, subtracted above); it said: {output.strip()[-200:]!r}"
    )
    if ack.errors:
        print(f"external run errors: {dict(ack.errors)} {ack.error_samples}")


def _apply_once(env: dict[str, str]) -> tuple[float, float, str]:
    """`manage.py apply_deliveries --once` as a child: its user + system CPU (its own
    rusage, from wait4), its wall time and its output."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "manage.py", "apply_deliveries", "--once"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        output = out.read().decode(errors="replace")
    if child.returncode != 0:
        raise SystemExit(f"apply_deliveries --once failed ({child.returncode}):\n{output[-3000:]}")
    return usage.ru_utime + usage.ru_stime, wall, output


# -- profile --------------------------------------------------------------------------------


def profile_in_process(
    env: dict[str, str], path: str, secret: str, pushes: int, out: Path | None = None
) -> None:
    """Push through the real view with Django's test client (same view, middleware and
    database as the server): count the queries of one push and show where the time of
    `pushes` pushes goes. With the durable spool the request only stores the push
    (ONLOOKER_APPLIER=external here, so no applier thread starts in this process); the
    applier's batches are then run here one by one (`applier.apply_batch()`), their queries
    counted and their CPU per delivery measured and profiled.

    What this does not show is the ASGI path: under daphne each sync middleware method,
    the request signals and the view are separate thread hops, and the broadcast goes back
    to the server's event loop instead of a fresh one as here. The load test's
    "srv CPU ms/push" is the whole figure; compare it with the CPU per push printed here."""
    os.environ.update(env)
    os.environ["ONLOOKER_APPLIER"] = "external"
    import django

    django.setup()
    from django.db import close_old_connections, connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    webhook = Webhook(secret)
    numbers = itertools.count()
    base = datetime.now(UTC)
    outcomes: Counter = Counter()

    def one_push() -> None:
        body, headers = signed_push(webhook, "profile", next(numbers), base)
        extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
        response = client.post(path, body, content_type="application/json", **extra)
        if response.status_code != 200:
            raise SystemExit(f"push refused: {response.status_code} {response.content[:300]!r}")
        outcomes[response.json().get("outcome")] += 1
        # The test client keeps the connection across requests; the server does not
        # (CONN_MAX_AGE=0), so close it here too or the profile would hide the reconnects.
        close_old_connections()

    def queries_of(action: Callable[[], object]) -> tuple[object, list[dict]]:
        # request_started empties the query log, and captured_queries slices that log when
        # read: start from an empty log and copy the slice before the next request.
        reset_queries()
        with CaptureQueriesContext(connection) as captured:
            result = action()
        return result, list(captured.captured_queries)

    apply_batch = _apply_batch_function()
    keeps_first = None

    def apply_pending(label: str) -> None:
        if keeps_first:
            _report_batches(label, apply_batch, queries_of)

    _, first = queries_of(one_push)  # a new task: creates its session and task
    keeps_first = outcomes.get("accepted", 0) > 0
    if keeps_first and isinstance(apply_batch, str):
        print(f"queries per batch: n/a, {apply_batch}")
        keeps_first = False
    for _ in range(TASKS - 1):
        one_push()  # the remaining tasks, so what follows is the steady state
    apply_pending(f"the batches that start {TASKS} tasks")
    _, steady = queries_of(one_push)
    applied_where = "stored only; applied in batches below" if keeps_first else "applied in it"
    for label, queries in (("starts a task", first), ("goes to an existing task", steady)):
        print(f"queries for a push that {label} ({applied_where}): {len(queries)}")
        for query in queries:
            print(f"  {query['time']:>6}s  {query['sql'][:140]}")
    if not keeps_first:
        print(f"queries per batch: n/a, {IN_REQUEST_NOTE}")

    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(pushes):
        one_push()
    plain, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    apply_pending(f"applying {pushes + 1} pushes to existing tasks")
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for _ in range(pushes):
        one_push()
    profiler.disable()
    profiled = time.perf_counter() - started
    if out is not None:
        profiler.dump_stats(out)
    print(
        f"\n{pushes} pushes in-process, one at a time: {1000 * plain / pushes:.2f} ms per push,"
        f" {1000 * cpu / pushes:.2f} ms of it CPU"
        f" ({1000 * profiled / pushes:.2f} ms under cProfile)"
        f"{'; the request only: applying is apart, above' if keeps_first else ''}"
    )
    _print_profile(profiler, "the requests")
    if keeps_first:
        apply_profiler = cProfile.Profile()
        apply_profiler.enable()
        while apply_batch().claimed:
            pass
        apply_profiler.disable()
        if out is not None:
            apply_profiler.dump_stats(out.with_name(out.name + ".apply"))
        _print_profile(apply_profiler, f"applying those {pushes} pushes (apply_batch)")


def _print_profile(profiler: cProfile.Profile, what: str) -> None:
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).strip_dirs().sort_stats(order).print_stats(30)
        print(f"\n-- {what}: top 30 by {order} --")
        print(text.getvalue().strip())


def _apply_batch_function() -> Callable[[], object] | str:
    """`tasks.pushes.applier.apply_batch`, or why there is none."""
    try:
        from tasks.pushes import applier
    except ImportError:
        return "there is no tasks.pushes.applier (the server applies in the request)"
    if not hasattr(applier, "apply_batch"):
        return "tasks.pushes.applier has no apply_batch()"
    return applier.apply_batch


def _report_batches(
    label: str,
    apply_batch: Callable[[], object],
    queries_of: Callable[[Callable[[], object]], tuple[object, list[dict]]],
) -> None:
    """Apply what is pending batch by batch: queries, deliveries and sessions per batch."""
    rows = []
    while True:
        cpu = time.process_time()
        batch, queries = queries_of(apply_batch)
        cpu = time.process_time() - cpu
        if not getattr(batch, "claimed", 0):
            break
        rows.append((batch.applied, len(batch.sessions), len(queries), cpu))
        if not batch.applied:
            break  # claimed but nothing applied (deferred or failed): do not spin
    if not rows:
        print(f"\n{label}: nothing was pending")
        return
    applied = sum(r[0] for r in rows)
    print(f"\n{label}: {len(rows)} batches, {applied} deliveries applied")
    print(f"  {'batch':>5} {'deliveries':>10} {'sessions':>8} {'queries':>7} {'q/delivery':>10}")
    for number, (done, sessions, queries, _) in enumerate(rows, start=1):
        if number <= 5 or number == len(rows):
            per = f"{queries / done:.2f}" if done else "-"
            print(f"  {number:>5} {done:>10} {sessions:>8} {queries:>7} {per:>10}")
        elif number == 6:
            print("  …")
    total_queries, total_cpu = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(
        f"  queries per batch: median {statistics.median(r[2] for r in rows):g}, "
        f"{total_queries / max(applied, 1):.2f} per delivery; CPU "
        f"{1000 * total_cpu / max(applied, 1):.2f} ms per delivery applied"
    )
