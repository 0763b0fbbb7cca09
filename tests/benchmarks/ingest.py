"""Ingest throughput: signed pushes per second through the real view, against a bare ASGI
endpoint that does the same HMAC check and one INSERT (DESIGN.md §6: Onlooker ≥ 50%).

Both run as real daphne processes on loopback, each on a fresh database: SQLite files in a
temporary directory by default, or, when DATABASE_URL is set, a dedicated PostgreSQL
database (`onlooker_bench`, dropped at the end) created through that URL. REDIS_URL, if
set, is passed through, so broadcasts go where they would in production. The load is
C concurrent httpx workers for N seconds after a warm-up that is not counted; every push is
a distinct, correctly signed statusUpdate with its own webhook-id.

    python -m tests.benchmarks ingest [--seconds N] [--concurrency C]
    python -m tests.benchmarks ingest --profile 500   # in-process cProfile + query count

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
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from standardwebhooks import Webhook

from tests.benchmarks import bare_push, workspace
from tests.benchmarks.workspace import SETTINGS_VARIABLES
from tests.processes import ROOT, free_port

DESCRIPTION = "signed pushes/s through the real view vs a bare ASGI endpoint (target ≥ 50%)"

BENCH_DATABASE = "onlooker_bench"
TARGET_RATIO = 0.5
TASKS = 50
REQUEST_TIMEOUT = 10.0

REGISTER_AGENT = """
import json
import django

django.setup()
from tasks.agents import new_endpoint, new_signing_secret
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
print(json.dumps({"path": f"/a2a/push/{endpoint.public_id}/", "secret": secret}))
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
        "--profile-out", type=Path, help="also save the profile's pstats there (for snakeviz)"
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
        return _load_test(args, workspace, env, agent["path"], agent["secret"])


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
        statement = "SELECT count(*) FROM tasks_delivery"
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
    """One daphne process on loopback; stopped (then killed) on exit, whatever happened."""

    def __init__(self, name: str, app: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log = log_dir / f"{name}.log"
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
        """User + system CPU of the server process (all threads), from /proc; None elsewhere."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        # Fields 14 and 15 (utime, stime) of proc(5); the split above starts at field 3.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


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

    @property
    def completed(self) -> int:
        return len(self.latencies)

    @property
    def succeeded(self) -> int:
        return self.completed - sum(self.errors.values())

    @property
    def throughput(self) -> float:
        return self.succeeded / self.seconds

    def percentile(self, fraction: float) -> float:
        """Nearest-rank percentile in milliseconds."""
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
        return ordered[index] * 1000


def signed_push(webhook: Webhook, run: str, n: int, base: datetime) -> tuple[bytes, dict]:
    """Push number n: a WORKING status with a message, on one of TASKS tasks, later than n-1."""
    task = n % TASKS
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
                    "parts": [{"text": f"Step {n}: still working on task {task}"}],
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


async def generate_load(
    server: Server,
    url: str,
    secret: str,
    *,
    seconds: float,
    warmup: float,
    concurrency: int,
    run: str = "",
) -> Measurement:
    """C workers push back to back; only pushes completing inside the window are counted.
    `run` names this run's tasks and webhook ids, so a later round is not all duplicates."""
    measurement = Measurement(server.name, seconds)
    webhook = Webhook(secret)
    numbers = itertools.count()
    base = datetime.now(UTC)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    start = time.perf_counter()
    window_start, window_end = start + warmup, start + warmup + seconds
    cpu: dict[str, tuple[float | None, float]] = {}

    async def sample_cpu(label: str, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        cpu[label] = (server.cpu_seconds(), time.process_time())

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
    (server_start, client_start), (server_end, client_end) = cpu["start"], cpu["end"]
    if server_start is not None and server_end is not None:
        measurement.server_cpu = server_end - server_start
    measurement.client_cpu = client_end - client_start
    return measurement


def _load_test(
    args: argparse.Namespace, workspace: Workspace, env: dict[str, str], path: str, secret: str
) -> int:
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
        f"{os.cpu_count()} CPUs",
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
        targets = ((bare, f"{bare.base_url}/push"), (onlooker, onlooker.base_url + path))
        for round_number in range(args.rounds):
            for server, url in targets:
                run = f"{server.name}{round_number}"
                measured = asyncio.run(generate_load(server, url, secret, run=run, **load))
                results[server.name].add(measured)
        stored = {
            "bare": bare_push.count_rows(bare_db),
            "onlooker": workspace.count_deliveries(),
        }
        for server in (bare, onlooker):
            if server.process.poll() is not None:
                print(f"{server.name} died during the run:\n{server.log_tail()}")
    print_table(list(results.values()), stored)
    return 0


def print_table(results: list[Measurement], stored: dict[str, int]) -> None:
    header = (
        f"{'server':<10} {'pushes/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}"
        f" {'srv CPU %':>9} {'srv CPU ms/push':>15} {'client CPU %':>12} {'acked/stored':>14}"
    )
    print()
    print(header)
    print("-" * len(header))
    for m in results:
        ok = m.succeeded
        srv = "n/a" if m.server_cpu is None else f"{100 * m.server_cpu / m.seconds:.0f}"
        per_push = "n/a" if m.server_cpu is None or not ok else f"{1000 * m.server_cpu / ok:.2f}"
        print(
            f"{m.server:<10} {m.throughput:>9.1f} {m.percentile(0.5):>8.1f}"
            f" {m.percentile(0.99):>8.1f} {sum(m.errors.values()):>7} {srv:>9} {per_push:>15}"
            f" {100 * m.client_cpu / m.seconds:>12.0f}"
            f" {f'{m.acknowledged}/{stored.get(m.server, 0)}':>14}"
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
    if bare and onlooker and bare.throughput > 0:
        ratio = onlooker.throughput / bare.throughput
        verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
        print(
            f"\nonlooker/bare = {ratio:.0%} of the baseline's pushes/s: {verdict} the "
            f"≥ {TARGET_RATIO:.0%} target (DESIGN.md §6)"
        )
        if bare.server_cpu and onlooker.server_cpu and bare.succeeded and onlooker.succeeded:
            cost = (onlooker.server_cpu / onlooker.succeeded) / (bare.server_cpu / bare.succeeded)
            print(f"server CPU per push: onlooker costs {cost:.1f}× the baseline")


# -- profile --------------------------------------------------------------------------------


def profile_in_process(
    env: dict[str, str], path: str, secret: str, pushes: int, out: Path | None = None
) -> None:
    """Push through the real view with Django's test client (same view, middleware and
    database as the server): count the queries of one push and show where the time of
    `pushes` pushes goes.

    What this does not show is the ASGI path: under daphne each sync middleware method,
    the request signals and the view are separate thread hops, and the broadcast goes back
    to the server's event loop instead of a fresh one as here. The load test's
    "srv CPU ms/push" is the whole figure; compare it with the CPU per push printed here."""
    os.environ.update(env)
    import django

    django.setup()
    from django.db import close_old_connections, connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    webhook = Webhook(secret)
    numbers = itertools.count()
    base = datetime.now(UTC)

    def one_push() -> None:
        body, headers = signed_push(webhook, "profile", next(numbers), base)
        extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
        response = client.post(path, body, content_type="application/json", **extra)
        if response.status_code != 200:
            raise SystemExit(f"push refused: {response.status_code} {response.content[:300]!r}")
        # The test client keeps the connection across requests; the server does not
        # (CONN_MAX_AGE=0), so close it here too or the profile would hide the reconnects.
        close_old_connections()

    def queries_of_one_push() -> list[dict]:
        # request_started empties the query log, and captured_queries slices that log when
        # read: start from an empty log and copy the slice before the next request.
        reset_queries()
        with CaptureQueriesContext(connection) as captured:
            one_push()
        return list(captured.captured_queries)

    first = queries_of_one_push()  # a new task: creates its session and task
    for _ in range(TASKS - 1):
        one_push()  # the remaining tasks, so what follows is the steady state
    steady = queries_of_one_push()
    for label, queries in (("starts a task", first), ("goes to an existing task", steady)):
        print(f"queries for a push that {label}: {len(queries)}")
        for query in queries:
            print(f"  {query['time']:>6}s  {query['sql'][:140]}")

    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(pushes):
        one_push()
    plain, cpu = time.perf_counter() - started, time.process_time() - cpu_started
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
    )
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).strip_dirs().sort_stats(order).print_stats(30)
        print(f"\n-- top 30 by {order} --")
        print(text.getvalue().strip())
