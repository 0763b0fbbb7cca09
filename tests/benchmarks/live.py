"""Live updates against DESIGN.md §6: push → socket and push → DOM latency, fan-out of one
change to 1,000 sockets across two processes, and the overview with 1,000 sessions.

Everything runs on loopback against real daphne processes, on a fresh database: SQLite in a
temporary directory by default or, when DATABASE_URL is set, a dedicated PostgreSQL database
(`onlooker_bench_live`, dropped at the end) created through that URL. One agent on one team,
one logged-in team member whose session cookie every socket and the browser present.

1. Latency (one daphne per rate): `--sockets` websockets (half on the overview, half on a
   session page) while signed status pushes arrive at each `--rate` per second (by default
   50 and then 200, each on a fresh daphne), spread round-robin over `--sessions` sessions,
   for `--seconds` after a `--warmup` that is not counted. Each push sets its session's note
   to "Push N: …" with N the push's serial, rising with every push; pushes to one session
   are sent one after another (never overlapping), so a later push to a session has a
   higher N. A push's latency at a socket runs from just before its POST to the first
   message on that socket showing that session's note at N or later (bursts are coalesced
   and the latest wins, so a later push also delivers it; and with the durable spool one
   batch may apply several pushes to a session at once); a push that no message ever
   delivered to a socket is lost. The note, not the card revision, is what is matched: a
   push answered "accepted" is applied later, so its answer cannot say which revision it
   will make. Sockets ask for what their page shows, as pages do: the overview's for
   sidebar rows and tiles (the note is in the tile), a session page's for sidebar rows and
   its own card, so a session page counts its own session's pushes only (of the others it
   is sent the sidebar row, which shows no note). The channel layer is the environment's:
   in-memory, or Redis when REDIS_URL is set. Past the server's capacity a backlog builds
   up and latencies grow with the run's length; the report says what share of the messages
   the pushes called for arrived at all.
   Where the time goes: each push's answer names its delivery, and once the run is over
   the database says when the applier applied it (`Delivery.applied_at`, set as its batch
   applied its last push, before deriving, rendering, committing and hinting), so the
   report shows push → applied beside push → socket, and how many batches applied them.
   Meanwhile one real browser (Debian's chromium through playwright, unless
   `--skip-browser`) shows the first session's page; a MutationObserver records `Date.now()`
   the first time the visible `[data-live-card]` shows each push's note, against the
   `time.time()` taken before each POST (same machine, same clock).
2. Fan-out (two daphnes on Redis): `--fanout-sockets` overview sockets, half on each
   process; `--fanout-repeats` pushes, alternately to either process, each waited for at
   every socket: the time from the POST to the last socket. Redis is `--redis-url`, by
   default REDIS_URL or redis://127.0.0.1:6379/0; the keys live under Onlooker's channel
   prefix and sockets are closed (their groups discarded) before the servers stop. If Redis
   does not answer, this part is reported as skipped.
3. Overview: `--overview-sessions` sessions (working, waiting for approval or an answer,
   completed, failed; each with a plan and a markdown note) applied through the real ingest
   path in a child process, then `GET /` for the team member: in-process server time and
   query count (with 100 sessions and with all of them, to show the count is constant) and
   the wall time of the same page through daphne.

    python -m tests.benchmarks live [--seconds S] [--rate R [R …]] [--sockets N] [--skip-browser]
    python -m tests.benchmarks live --skip-latency --skip-overview   # fan-out only

The clients run on the same machine as the servers and share its CPUs: on a small machine
they are part of what is measured. The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from standardwebhooks import Webhook
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.benchmarks.ingest import Server
from tests.benchmarks.workspace import Workspace
from tests.processes import ROOT

DESCRIPTION = (
    "push → socket / DOM latency, 1,000-socket fan-out over Redis, overview with 1,000 sessions"
)

BENCH_DATABASE = "onlooker_bench_live"
AGENT_NAME = "Live benchmark"
USERNAME = "watcher"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BROWSER = "/usr/bin/chromium"
BROWSER_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
REQUEST_TIMEOUT = 10.0
GRACE = 5.0  # seconds after the last push for messages still on their way
CONNECT_BATCH = 50  # sockets opened at once: a burst of handshakes is not what is measured
COALESCE_GAP = 0.25  # between fan-out pushes: past the 0.1 s coalescing window, so none merge

# DESIGN.md §6.
TARGET_P50_MS = 20.0
TARGET_P99_MS = 100.0
TARGET_FANOUT_MS = 250.0
TARGET_OVERVIEW_MS = 150.0

# A hint's session and the notes it shows, read without parsing the rest (kilobytes of
# fragments) so the clients' CPU stays off the servers' share. Only the top-level key can
# match the session: inside a JSON string every quote is escaped. The note's serial may
# appear more than once (card, tile, summary; a title made from the first note): the
# highest is the note shown.
_SESSION = re.compile(rb'"session": ?(\d+)')
_MARK = re.compile(rb"Push (\d+):")

CHILD = """
import sys
from tests.benchmarks.live import child_main

sys.exit(child_main(sys.argv[1], sys.argv[2]))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Defaults take about 1-2 minutes. The database is SQLite in a temporary directory, "
        "or a fresh PostgreSQL database `onlooker_bench_live` (dropped at the end) when "
        "DATABASE_URL is set. Part 1 uses the in-memory channel layer, or Redis if REDIS_URL "
        "is set. Part 2 always needs Redis: --redis-url, else REDIS_URL, else "
        f"{DEFAULT_REDIS_URL}; if it does not answer, part 2 is reported as skipped. "
        "Past the server's capacity a backlog builds up, so latencies grow with --seconds: "
        "the report says what share of the due messages arrived."
    )
    latency = parser.add_argument_group("latency (one daphne)")
    latency.add_argument("--sockets", type=int, default=100, help="open websockets")
    latency.add_argument(
        "--rate",
        type=float,
        nargs="+",
        default=[50.0, 200.0],
        help="pushes per second; several rates are measured one after another (default 50 200)",
    )
    latency.add_argument("--sessions", type=int, default=10, help="sessions the pushes go to")
    latency.add_argument("--seconds", type=float, default=20.0, help="measured seconds")
    latency.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds first")
    latency.add_argument(
        "--processes",
        type=int,
        default=None,
        help="serve through `manage.py serve` with this many processes (needs REDIS_URL "
        "for more than one), not one bare daphne",
    )
    latency.add_argument("--skip-browser", action="store_true", help="no push → DOM figure")
    latency.add_argument("--browser", default=BROWSER, help="the chromium executable")
    latency.add_argument("--skip-latency", action="store_true", help="skip part 1")
    fanout = parser.add_argument_group("fan-out (two daphnes, Redis channel layer)")
    fanout.add_argument("--fanout-sockets", type=int, default=1000, help="sockets, half per daphne")
    fanout.add_argument("--fanout-repeats", type=int, default=10, help="pushes, each timed")
    fanout.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", "").strip() or DEFAULT_REDIS_URL,
        help=f"Redis for the fan-out (default: REDIS_URL, else {DEFAULT_REDIS_URL})",
    )
    fanout.add_argument("--skip-fanout", action="store_true", help="skip part 2")
    parser.add_argument(
        "--app",
        default="dashboard.asgi:application",
        help="the ASGI app every daphne serves (a wrapper, to measure a change against it)",
    )
    overview = parser.add_argument_group("overview")
    overview.add_argument("--overview-sessions", type=int, default=1000, help="sessions shown")
    overview.add_argument("--overview-requests", type=int, default=20, help="timed GET / each")
    overview.add_argument("--skip-overview", action="store_true", help="skip part 3")


def run(args: argparse.Namespace) -> int:
    if (
        args.sockets < 1
        or min(args.rate) <= 0
        or args.sessions < 1
        or args.seconds <= 0
        or args.warmup < 0
        or (args.processes is not None and args.processes < 1)
        or args.fanout_sockets < 2
        or args.fanout_repeats < 1
        or args.overview_sessions < 1
        or args.overview_requests < 1
    ):
        raise SystemExit("counts ≥ 1 (--fanout-sockets ≥ 2), --rate and --seconds > 0, please")
    # A SIGTERM would end the process without unwinding; as an exception, the servers and the
    # browser are stopped and the benchmark database is dropped on the way out.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _raise_open_files_limit(2 * args.fanout_sockets + 2 * args.sockets + 256)
    report = Report()
    with Workspace(os.environ.get("DATABASE_URL", "").strip(), database=BENCH_DATABASE) as space:
        env = space.onlooker_env()
        # Setup and the overview's child talk to no browser: keep their hints off Redis.
        quiet_env = {k: v for k, v in env.items() if k != "REDIS_URL"}
        _run_checked([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], quiet_env)
        setup = Setup(**_child(quiet_env, "setup", {}))
        layer = "Redis" if env.get("REDIS_URL") else "in-memory"
        print(
            f"live: {space.description}; {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f} at the start; clients on the same machine",
            flush=True,
        )
        for rate in [] if args.skip_latency else args.rate:
            servers = (
                "one daphne"
                if args.processes is None
                else f"manage.py serve, {args.processes} processes"
            )
            print(
                f"1. latency: {servers}, {layer} channel layer; {args.sockets} sockets, "
                f"{rate:g} pushes/s over {args.sessions} sessions, "
                f"{args.warmup:g} s warm-up + {args.seconds:g} s"
                f"{'' if args.skip_browser else '; one chromium on the first session'}",
                flush=True,
            )
            with Server(
                f"latency-{rate:g}", args.app, env, space.directory, processes=args.processes
            ) as server:
                result = asyncio.run(latency_benchmark(args, server, setup, rate))
                _when_applied(result, quiet_env)
                report.latency.append((rate, result))
                _check_alive(server)
        if not args.skip_fanout:
            print(
                f"2. fan-out: two daphnes on Redis ({args.redis_url}); "
                f"{args.fanout_sockets} sockets; {args.fanout_repeats} pushes",
                flush=True,
            )
            report.fanout = run_fanout(args, space, env, setup)
        if not args.skip_overview:
            print(
                f"3. overview: {args.overview_sessions} sessions through ingest; "
                f"{args.overview_requests} timed GET / per measurement",
                flush=True,
            )
            report.overview = _child(
                quiet_env,
                "overview",
                {"sessions": args.overview_sessions, "requests": args.overview_requests},
            )
            with Server("overview", args.app, env, space.directory) as server:
                report.overview["http_ms"] = _overview_over_http(
                    server, setup, args.overview_requests
                )
    report.print()
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (other work skews the figures)")
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _raise_open_files_limit(wanted: int) -> None:
    """A thousand client sockets plus the servers' ends: the default soft limit (often 1024)
    is too low. Raised here, it is inherited by the daphne children."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def _run_checked(command: list[str], env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def _child(env: dict[str, str], command: str, params: dict) -> dict:
    """Run `child_main(command)` in a fresh interpreter on the workspace's settings (this
    process never sets Django up: it only plays clients)."""
    out = _run_checked([sys.executable, "-c", CHILD, command, json.dumps(params)], env)
    return json.loads(out.splitlines()[-1])


def _when_applied(result: LatencyResult, env: dict[str, str]) -> None:
    """When the applier applied each counted push, from the database (its clock is this
    machine's, as the pushes' `sent_ms` are)."""
    counted = [r for r in result.records if r.counted and r.delivery and not r.error]
    applied = _child(env, "applied", {"ids": [r.delivery for r in counted]})
    at = {int(pk): ms for pk, ms in applied.items()}
    result.applied_ms = [at[r.delivery] - r.sent_ms for r in counted if r.delivery in at]
    result.batches = len({at[r.delivery] for r in counted if r.delivery in at})


def _check_alive(*servers: Server) -> None:
    for server in servers:
        if server.process.poll() is not None:
            print(f"{server.name} died during the run:\n{server.log_tail()}", file=sys.stderr)


# -- the benchmark's actors -----------------------------------------------------------------


@dataclass
class Setup:
    """What the setup child made: the agent's push path and signing secret, and the team
    member's session cookie."""

    path: str
    secret: str
    cookie: str


@dataclass
class BenchSession:
    index: int
    context: str
    id: int = 0
    mark: int = 0  # the serial of the last push accepted for it (its note says "Push N:")


class Pusher:
    """Signed status pushes, each a new note ("Push N: …") on its session's card."""

    def __init__(self, setup: Setup, run: str) -> None:
        self.path = setup.path
        self.cookie = setup.cookie
        self.webhook = Webhook(setup.secret)
        self.run = run
        self.serial = 0

    def body(self, session: BenchSession) -> tuple[bytes, dict[str, str]]:
        """The next push to `session`; its note carries `self.serial` after the call."""
        self.serial += 1
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
        body = {
            "statusUpdate": {
                "taskId": f"{session.context}-task",
                "contextId": session.context,
                "status": {
                    "state": "TASK_STATE_WORKING",
                    "timestamp": stamp,
                    "message": {
                        "messageId": f"{self.run}-{self.serial}",
                        "role": "ROLE_AGENT",
                        "parts": [{"text": f"Push {self.serial}: **still working**."}],
                    },
                },
            }
        }
        raw = json.dumps(body)
        msg_id = f"msg_{self.run}_{self.serial}"
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self.webhook.sign(msg_id, now, raw),
        }
        return raw.encode(), headers

    async def push(
        self, client: httpx.AsyncClient, base_url: str, session: BenchSession
    ) -> PushRecord:
        """POST one push; the record's clocks are read just before the request is sent.
        Applied in the request ("applied") or kept to be applied soon ("accepted"): either
        way its note is what the sockets will show. A push that failed may have been applied
        all the same; its note is then simply seen, and it does not confuse the next push's
        (a higher serial)."""
        body, headers = self.body(session)
        serial = self.serial
        record = PushRecord(session.index, time.perf_counter(), time.time() * 1000)
        try:
            response = await client.post(base_url + self.path, content=body, headers=headers)
            record.answered = time.perf_counter()
        except httpx.HTTPError as error:
            record.error = f"{type(error).__name__}: {error}"[:200]
            return record
        answer = response.json() if response.status_code == 200 else {}
        outcome = answer.get("outcome")
        if outcome not in ("applied", "accepted"):
            record.error = f"{response.status_code} {response.text[:200]}"
            return record
        record.outcome = outcome
        record.delivery = int(answer.get("delivery") or 0)
        session.mark = record.mark = serial
        return record


@dataclass
class PushRecord:
    session: int  # BenchSession.index
    sent: float  # perf_counter just before the POST
    sent_ms: float  # time.time() in ms, to compare with the browser's Date.now()
    mark: int = 0  # the serial its note shows; 0 when it was refused
    outcome: str = ""  # "applied" (in the request) or "accepted" (kept, applied after)
    answered: float = 0.0  # perf_counter when the response arrived
    delivery: int = 0  # the id its answer named
    error: str = ""
    counted: bool = True


class Listener:
    """One open socket, and when it first saw each push's note on each session."""

    def __init__(self, ws: ClientConnection, page_session: int | None = None) -> None:
        self.ws = ws
        self.page_session = page_session  # the session page it stands for; None: overview
        self.messages = 0
        self.bytes = 0
        self.seen: dict[int, dict[int, float]] = {}  # session id → mark → perf_counter
        self.latest: dict[int, int] = {}  # session id → newest mark seen
        self.task: asyncio.Task | None = None

    async def listen(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                at = time.perf_counter()
                self.messages += 1
                self.bytes += len(raw)
                hint = _session_and_mark(raw)
                if hint is None:
                    continue
                session, mark = hint
                marks = self.seen.setdefault(session, {})
                marks.setdefault(mark, at)
                if mark > self.latest.get(session, -1):
                    self.latest[session] = mark

    def delivered_at(self, session: int, mark: int) -> float | None:
        """When this socket first saw the note of push `mark` on `session`, or a later one."""
        times = [t for r, t in self.seen.get(session, {}).items() if r >= mark]
        return min(times) if times else None


def _session_and_mark(raw: str | bytes) -> tuple[int, int] | None:
    """A hint's session and the serial of the note it shows; None for anything else the
    server sends (or a session whose note no benchmark push wrote)."""
    data = raw.encode() if isinstance(raw, str) else raw
    session, marks = _SESSION.search(data), _MARK.findall(data)
    if session and marks:
        return int(session[1]), max(int(m) for m in marks)
    return None


class Delivery:
    """Every listener's first receipts, indexed for "push N's note or a later one" lookups."""

    def __init__(self, listener: Listener) -> None:
        self.index: dict[int, tuple[list[int], list[float]]] = {}
        for session, marks in listener.seen.items():
            ordered = sorted(marks.items())
            # Earliest receipt among this mark and every later one, from the end.
            earliest, running = [], math.inf
            for _, at in reversed(ordered):
                running = min(running, at)
                earliest.append(running)
            earliest.reverse()
            self.index[session] = ([r for r, _ in ordered], earliest)

    def at(self, session: int, mark: int) -> float | None:
        marks, earliest = self.index.get(session, ([], []))
        position = bisect.bisect_left(marks, mark)
        return earliest[position] if position < len(marks) else None


async def open_sockets(
    ws_base: str, origin: str, cookie: str, session_ids: Iterable[int | None]
) -> list[Listener]:
    """Open one socket per entry (a session page's for an id, the overview's for None),
    CONNECT_BATCH at a time, each listening from the moment it is open."""

    async def one(session_id: int | None) -> Listener:
        # What the pages ask for (static/js/live.js): a session page keeps its sidebar and its
        # own card live, the overview its sidebar and tiles.
        query = f"?session={session_id}&show=sidebar" if session_id else "?show=sidebar,tiles"
        url = f"{ws_base}/ws/live/{query}"
        ws = await connect(
            url,
            origin=origin,
            additional_headers={"Cookie": f"sessionid={cookie}"},
            # Nothing but the measurement on the wire: no keepalive pings to answer late.
            ping_interval=None,
            open_timeout=30,
            max_size=2**22,
        )
        listener = Listener(ws, session_id)
        listener.task = asyncio.create_task(listener.listen())
        return listener

    ids = list(session_ids)
    listeners: list[Listener] = []
    try:
        for start in range(0, len(ids), CONNECT_BATCH):
            batch = ids[start : start + CONNECT_BATCH]
            opened = await asyncio.gather(*(one(s) for s in batch), return_exceptions=True)
            listeners += [o for o in opened if isinstance(o, Listener)]
            failed = [o for o in opened if not isinstance(o, Listener)]
            if failed:
                raise SystemExit(f"{len(failed)} sockets did not open: {failed[0]!r}")
    except BaseException:
        await close_sockets(listeners)
        raise
    return listeners


async def close_sockets(listeners: list[Listener]) -> None:
    """Close cleanly, so each consumer discards its groups (on Redis they would otherwise
    linger until they expire)."""
    await asyncio.gather(*(listener.ws.close() for listener in listeners), return_exceptions=True)
    for listener in listeners:
        if listener.task is not None:
            listener.task.cancel()
    await asyncio.gather(*(lst.task for lst in listeners if lst.task), return_exceptions=True)


async def create_sessions(
    client: httpx.AsyncClient, base_url: str, pusher: Pusher, setup: Setup, contexts: list[str]
) -> list[BenchSession]:
    """One push each creates the sessions; the read API gives their ids once applied (at
    once when pushes are applied in the request, soon after with the durable spool)."""
    sessions = [BenchSession(i, context) for i, context in enumerate(contexts)]
    for session in sessions:
        record = await pusher.push(client, base_url, session)
        if record.error:
            raise SystemExit(f"the first push to {session.context} failed: {record.error}")
    deadline = time.perf_counter() + 30
    while True:
        response = await client.get(
            f"{base_url}/api/sessions?limit=1000", cookies={"sessionid": setup.cookie}
        )
        response.raise_for_status()
        found = {s["contextId"]: s for s in response.json()["sessions"]}
        if all(s.context in found for s in sessions):
            break
        if time.perf_counter() > deadline:
            missing = [s.context for s in sessions if s.context not in found]
            raise SystemExit(f"sessions not applied within 30 s of their first push: {missing}")
        await asyncio.sleep(0.05)
    for session in sessions:
        session.id = found[session.context]["id"]
    return sessions


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest rank."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


# -- 1. latency -----------------------------------------------------------------------------


@dataclass
class LatencyResult:
    pushes: int = 0
    errors: list[str] = field(default_factory=list)
    achieved_rate: float = 0.0
    messages: int = 0  # every message every socket received, repeats included
    message_bytes: int = 0
    messages_due: int = 0  # what every applied push sends: one to each socket
    socket_ms: list[float] = field(default_factory=list)  # one per (counted push, socket)
    socket_lost: int = 0
    socket_later: int = 0  # deliveries made by a later push's note (coalesced, one batch)
    answer_ms: list[float] = field(default_factory=list)  # POST → its 200
    applied_ms: list[float] = field(default_factory=list)  # POST → its batch applied it
    batches: int = 0  # how many batches applied the counted pushes
    client_cpu: float = 0.0
    server_cpu: float | None = None  # share of one core, over the pushing time
    # The daphne process alone (not its applier): µs of CPU per socket message it sent while
    # pushes came, taking the pushes in included.
    daphne_us_per_message: float | None = None
    seconds: float = 0.0
    browser: BrowserResult | None = None
    records: list[PushRecord] = field(default_factory=list)
    outcomes: Counter = field(default_factory=Counter)


@dataclass
class BrowserResult:
    dom_ms: list[float] = field(default_factory=list)
    lost: int = 0
    notes: list[str] = field(default_factory=list)


async def latency_benchmark(
    args: argparse.Namespace, server: Server, setup: Setup, rate: float
) -> LatencyResult:
    base = server.base_url
    limits = httpx.Limits(max_connections=args.sessions + 2, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT) as client:
        run = f"latency{rate:g}"
        pusher = Pusher(setup, run)
        sessions = await create_sessions(
            client, base, pusher, setup, [f"{run}-{i}" for i in range(args.sessions)]
        )
        # Half overview sockets, half session pages spread over the sessions.
        ids = [
            None if n % 2 == 0 else sessions[(n // 2) % len(sessions)].id
            for n in range(args.sockets)
        ]
        listeners = await open_sockets(f"ws://127.0.0.1:{server.port}", base, setup.cookie, ids)
        probe = None
        try:
            if not args.skip_browser:
                probe = BrowserProbe(args.browser)
                await probe.open(base, setup.cookie, sessions[0].id)
            result = await _drive_pushes(
                args, rate, server, client, base, pusher, sessions, listeners
            )
            if probe is not None:
                result.browser = await probe.measure([p for p in result.records if p.session == 0])
        finally:
            await close_sockets(listeners)
            if probe is not None:
                await probe.close()
    return result


async def _drive_pushes(
    args: argparse.Namespace,
    rate: float,
    server: Server,
    client: httpx.AsyncClient,
    base: str,
    pusher: Pusher,
    sessions: list[BenchSession],
    listeners: list[Listener],
) -> LatencyResult:
    total = max(1, round(rate * (args.warmup + args.seconds)))
    records: list[PushRecord] = []
    cpu_start, server_cpu_start = time.process_time(), server.cpu_seconds()
    daphne_cpu_start = server.daphne_cpu_seconds()
    messages_start = sum(listener.messages for listener in listeners)
    start = time.perf_counter() + 0.5
    measured_from = start + args.warmup

    async def drive(session: BenchSession) -> None:
        # One session's pushes, in order and never overlapping: each note is the newest.
        for slot in range(session.index, total, len(sessions)):
            due = start + slot / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            record = await pusher.push(client, base, session)
            record.counted = due >= measured_from
            records.append(record)

    await asyncio.gather(*(drive(s) for s in sessions))
    finished, cpu_used = time.perf_counter(), time.process_time() - cpu_start
    server_cpu_end = server.cpu_seconds()
    daphne_cpu_end = server.daphne_cpu_seconds()
    messages_sent = sum(listener.messages for listener in listeners) - messages_start
    # Stragglers: wait until every socket has every session's last note, or GRACE.
    deadline = finished + GRACE
    while time.perf_counter() < deadline and not all(
        listener.latest.get(s.id, -1) >= s.mark for listener in listeners for s in sessions
    ):
        await asyncio.sleep(0.01)
    result = LatencyResult(client_cpu=cpu_used / max(finished - start, 1e-9), records=records)
    if server_cpu_start is not None and server_cpu_end is not None:
        result.server_cpu = (server_cpu_end - server_cpu_start) / max(finished - start, 1e-9)
    if daphne_cpu_start is not None and daphne_cpu_end is not None and messages_sent:
        result.daphne_us_per_message = 1e6 * (daphne_cpu_end - daphne_cpu_start) / messages_sent
    counted = [r for r in records if r.counted]
    result.pushes = len(counted)
    result.seconds = finished - measured_from
    result.achieved_rate = len([r for r in counted if not r.error]) / max(result.seconds, 1e-9)
    result.errors = [r.error for r in counted if r.error]
    result.outcomes = Counter(r.outcome for r in counted if not r.error)
    result.answer_ms = [(r.answered - r.sent) * 1000 for r in counted if not r.error]
    result.messages = sum(listener.messages for listener in listeners)
    result.message_bytes = sum(listener.bytes for listener in listeners)
    result.messages_due = len(listeners) * sum(1 for r in records if not r.error)
    by_index = {s.index: s for s in sessions}
    for listener in listeners:
        delivery = Delivery(listener)
        for record in counted:
            if record.error:
                continue
            session_id = by_index[record.session].id
            if listener.page_session not in (None, session_id):
                continue  # a session page is sent other sessions' sidebar rows: no note
            at = delivery.at(session_id, record.mark)
            if at is None:
                result.socket_lost += 1
                continue
            result.socket_ms.append((at - record.sent) * 1000)
            if record.mark not in listener.seen.get(session_id, {}):
                result.socket_later += 1
    return result


class BrowserProbe:
    """One chromium on a session page; records when the visible live card first shows each
    push's note ("Push N:", the highest N on the card)."""

    OBSERVE = """
    (sessionId) => {
      const times = {};
      window.__liveBenchmark = times;
      const record = () => {
        const now = Date.now();
        for (const holder of document.querySelectorAll("[data-live-card]")) {
          if (!holder.checkVisibility()) continue;
          const card = holder.querySelector(`article[data-session="${sessionId}"]`);
          if (card === null) continue;
          const marks = [...card.textContent.matchAll(/Push (\\d+):/g)].map((m) => Number(m[1]));
          if (marks.length === 0) continue;
          const mark = Math.max(...marks);
          if (!(mark in times)) times[mark] = now;
        }
      };
      new MutationObserver(record).observe(document.documentElement, {
        subtree: true, childList: true, characterData: true, attributes: true,
        attributeFilter: ["data-revision"],
      });
      record();
      return Object.keys(times);
    }
    """

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.notes: list[str] = []
        self._stack = contextlib.AsyncExitStack()
        self.page = None

    async def open(self, base: str, cookie: str, session_id: int) -> None:
        from playwright.async_api import async_playwright

        if not Path(self.executable).exists():
            raise SystemExit(f"no browser at {self.executable} (use --browser or --skip-browser)")
        playwright = await self._stack.enter_async_context(async_playwright())
        browser = await playwright.chromium.launch(
            executable_path=self.executable, args=BROWSER_ARGS
        )
        self._stack.push_async_callback(browser.close)
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        await context.add_cookies([{"name": "sessionid", "value": cookie, "url": base}])
        self.page = page = await context.new_page()
        page.on("pageerror", lambda error: self._note(f"page error: {error}"))
        page.on("console", self._console)
        page.on(
            "response",
            lambda r: r.status >= 400 and self._note(f"{r.status} for {r.url[len(base) :]}"),
        )
        response = await page.goto(f"{base}/sessions/{session_id}/")
        if response is None or response.status != 200:
            raise SystemExit(f"the session page answered {response and response.status}")
        try:
            # A selector, not wait_for_function: the page's CSP forbids the eval that needs.
            await page.wait_for_selector('[data-live-status]:text-is("live")', timeout=10_000)
        except Exception:  # noqa: BLE001 - the figure is still worth measuring; say why
            self._note("the page never showed [data-live-status] 'live' within 10 s")
        shown = await page.evaluate(self.OBSERVE, session_id)
        if not shown:
            self._note("no visible [data-live-card] with this session's card when observed")

    def _console(self, message) -> None:
        # A failed request is noted with its URL by the response handler (the favicon's
        # 404, which has no page response, is noise).
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self._note(f"console: {message.text}")

    def _note(self, text: str) -> None:
        if len(self.notes) < 8 and text not in self.notes:
            self.notes.append(text[:300])

    async def measure(self, records: list[PushRecord]) -> BrowserResult:
        """DOM latency of each counted push to the page's session: to the first time the
        card showed its note or a later one."""
        times = await self.page.evaluate("window.__liveBenchmark")
        if times is None:
            self._note("the page was reloaded while measuring: its observer is gone")
        shown = sorted((int(mark), at) for mark, at in (times or {}).items())
        result = BrowserResult(notes=self.notes)
        for record in records:
            if not record.counted or record.error:
                continue
            later = [at for mark, at in shown if mark >= record.mark]
            if later:
                result.dom_ms.append(min(later) - record.sent_ms)
            else:
                result.lost += 1
        if records and len(shown) <= 1:  # the note shown when the observer started
            self._note("the card never changed in the DOM: is static/js swapping fragments?")
        return result

    async def close(self) -> None:
        await self._stack.aclose()


# -- 2. fan-out -----------------------------------------------------------------------------


@dataclass
class FanoutResult:
    sockets: int = 0
    last_ms: list[float] = field(default_factory=list)  # per push: POST → last socket
    median_ms: list[float] = field(default_factory=list)  # per push: POST → half the sockets
    missing: int = 0  # (push, socket) pairs never delivered
    errors: list[str] = field(default_factory=list)
    skipped: str = ""


def run_fanout(
    args: argparse.Namespace, space: Workspace, env: dict[str, str], setup: Setup
) -> FanoutResult:
    problem = _redis_problem(args.redis_url)
    if problem:
        return FanoutResult(skipped=f"Redis at {args.redis_url} did not answer: {problem}")
    redis_env = {**env, "REDIS_URL": args.redis_url}
    with (
        Server("fanout-a", args.app, redis_env, space.directory) as a,
        Server("fanout-b", args.app, redis_env, space.directory) as b,
    ):
        result = asyncio.run(fanout_benchmark(args, (a, b), setup))
        _check_alive(a, b)
    return result


def _redis_problem(url: str) -> str:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except Exception as error:  # noqa: BLE001 - any failure means "no fan-out today"
        return str(error) or type(error).__name__
    return ""


async def fanout_benchmark(
    args: argparse.Namespace, servers: tuple[Server, Server], setup: Setup
) -> FanoutResult:
    result = FanoutResult()
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        pusher = Pusher(setup, "fanout")
        (session,) = await create_sessions(client, servers[0].base_url, pusher, setup, ["fanout-0"])
        per_server = args.fanout_sockets // 2
        listeners: list[Listener] = []
        try:
            for server in servers:
                listeners += await open_sockets(
                    f"ws://127.0.0.1:{server.port}",
                    server.base_url,
                    setup.cookie,
                    [None] * per_server,
                )
            result.sockets = len(listeners)
            # One push to each server not counted: their first use of Redis connects.
            for number in range(-2, args.fanout_repeats):
                await asyncio.sleep(COALESCE_GAP)
                server = servers[number % 2]
                record = await pusher.push(client, server.base_url, session)
                if record.error:
                    result.errors.append(record.error)
                    continue
                deadline = time.perf_counter() + GRACE
                while time.perf_counter() < deadline and any(
                    lst.latest.get(session.id, -1) < record.mark for lst in listeners
                ):
                    await asyncio.sleep(0.002)
                arrivals = [lst.delivered_at(session.id, record.mark) for lst in listeners]
                if number < 0:
                    continue
                got = [(at - record.sent) * 1000 for at in arrivals if at is not None]
                result.missing += len(arrivals) - len(got)
                if got:
                    result.last_ms.append(max(got))
                    result.median_ms.append(statistics.median(got))
        finally:
            await close_sockets(listeners)
    return result


# -- 3. overview ----------------------------------------------------------------------------


def _overview_over_http(server: Server, setup: Setup, requests: int) -> float:
    timings = []
    with httpx.Client(timeout=REQUEST_TIMEOUT, cookies={"sessionid": setup.cookie}) as client:
        for number in range(requests + 2):
            started = time.perf_counter()
            response = client.get(server.base_url + "/")
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise SystemExit(f"GET / answered {response.status_code} through daphne")
            if number >= 2:  # two warm-up requests
                timings.append(elapsed * 1000)
    return statistics.median(timings)


# -- children (run with the workspace's settings) -------------------------------------------


def child_main(command: str, params: str) -> int:
    import django

    django.setup()
    handler = {"setup": _child_setup, "overview": _child_overview, "applied": _child_applied}[
        command
    ]
    print(json.dumps(handler(**json.loads(params))))
    return 0


def _child_setup() -> dict:
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from tasks.answering.agents import new_endpoint, new_signing_secret
    from tasks.models import Agent

    team = Group.objects.create(name="bench")
    secret = new_signing_secret()
    agent = Agent.objects.create(
        name=AGENT_NAME,
        card_url="http://agent.invalid/.well-known/agent-card.json",
        rpc_url="http://agent.invalid/a2a/jsonrpc",
        protocol_version="1.0",
        signing_secret=secret,
        team=team,
    )
    endpoint, _, _ = new_endpoint(agent)
    user = User.objects.create_user(USERNAME)
    user.groups.add(team)
    client = Client()
    client.force_login(user)
    return {
        "path": f"/a2a/push/{endpoint.public_id}/",
        "secret": secret,
        "cookie": client.cookies["sessionid"].value,
    }


def _child_applied(ids: list[int]) -> dict:
    """Each delivery's applied_at, in ms since the epoch, by id (those not applied left out).
    A batch gives its pushes one applied_at, so distinct values count batches."""
    from tasks.models import Delivery

    rows = Delivery.objects.filter(pk__in=ids, applied_at__isnull=False)
    return {pk: at.timestamp() * 1000 for pk, at in rows.values_list("pk", "applied_at")}


def overview_session_body(number: int) -> dict:
    """A realistic session for the overview: a plan, a markdown note with a table and a
    progress bar (different for each, so every one is rendered), and one of several states."""
    from tasks.wire import profile
    from tests.builders import approval, progress, status

    done = number % 6
    steps = [(f"Step {n + 1} of session {number}", "completed") for n in range(done)]
    steps += [(f"Step {n + 1} of session {number}", "pending") for n in range(done, 6)]
    kind = number % 10
    metadata = {}
    if kind < 8 and done < 6:
        steps[done] = (steps[done][0], "in_progress")
    metadata.update(progress(*steps))
    state = {0: "AUTH_REQUIRED", 1: "INPUT_REQUIRED", 2: "COMPLETED", 3: "FAILED"}.get(
        kind, "WORKING"
    )
    if kind == 0:
        metadata.update(approval(f"approve-{number}", f"Deploy build {number} to staging?"))
    elif kind == 1:
        metadata.update(approval(f"ask-{number}", "Which branch?", kind="question"))
    elif kind == 2:
        metadata[profile.TELEMETRY] = {"costUsd": 0.0123 * number, "tokens": 1000 + number}
    note = (
        f"## Build {number}\n\n"
        f"Working through **{6 - done} remaining steps**; see [the log](https://ci.example/{number}).\n\n"
        f"| check | result |\n|---|---|\n| unit | {number % 7} failed |\n| lint | clean |\n\n"
        f'<progress value="{done}" max="6"></progress> {done}/6\n'
    )
    return status(
        state,
        task=f"overview-task-{number}",
        context=f"overview-{number}",
        at=number,
        text=note,
        message_id=f"overview-msg-{number}",
        metadata=metadata,
    )


def _child_overview(sessions: int, requests: int) -> dict:
    from django.contrib.auth.models import User
    from django.db import close_old_connections, connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from tasks.models import Agent, Session
    from tasks.pushes import applier, deliveries
    from tasks.wire import protocol

    user = User.objects.get(username=USERNAME)
    endpoint = Agent.objects.get(name=AGENT_NAME).endpoints.get()
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    made = Session.objects.visible_to(user).count()
    number = 0
    create_seconds = 0.0
    measured = []
    for checkpoint in sorted({min(100, sessions), sessions}):
        started = time.perf_counter()
        while made < checkpoint:
            raw = json.dumps(overview_session_body(number)).encode()
            number += 1
            key, event = deliveries.idempotency_key(None, raw), protocol.parse(raw)
            # Kept, then applied by this process's applier below.
            deliveries.receive(endpoint, key, raw, event)
            made += 1
        applier.drain()
        create_seconds += time.perf_counter() - started
        close_old_connections()
        timings, counts = [], []
        for attempt in range(requests + 2):
            # request_started empties the query log and captured_queries slices it when
            # read: start from an empty log and count before the next request.
            reset_queries()
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get("/")
                elapsed = time.perf_counter() - started
                queries = len(captured.captured_queries)
            if response.status_code != 200:
                raise SystemExit(f"GET / answered {response.status_code}")
            if attempt >= 2:  # two warm-up requests
                timings.append(elapsed * 1000)
                counts.append(queries)
        measured.append(
            {
                "sessions": checkpoint,
                "requests": len(timings),
                "median_ms": statistics.median(timings),
                "p99_ms": _percentile(timings, 0.99),
                "max_ms": max(timings),
                "queries": sorted(set(counts)),
                "bytes": len(response.content),
            }
        )
    visible = Session.objects.visible_to(user)
    return {
        "measured": measured,
        "create_per_second": number / create_seconds if number else 0,
        "waiting": visible.filter(needs_human=True).count(),
        "states": dict(Counter(visible.values_list("state", flat=True))),
    }


# -- report ---------------------------------------------------------------------------------

HEADER = ("measurement", "n", "p50 ms", "p99 ms", "max ms", "lost", "queries", "target", "verdict")


@dataclass
class Report:
    latency: list[tuple[float, LatencyResult]] = field(default_factory=list)  # per rate
    fanout: FanoutResult | None = None
    overview: dict | None = None

    def print(self) -> None:
        rows: list[tuple[str, ...]] = []
        notes: list[str] = []
        for rate, latency in self.latency:
            rows += self._latency_rows(rate, latency, notes)
        if self.fanout is not None:
            rows += self._fanout_rows(notes)
        if self.overview is not None:
            rows += self._overview_rows(notes)
        widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]

        def line(row: tuple[str, ...]) -> str:
            cells = [
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            return "  ".join(cells)

        print()
        print(line(HEADER))
        print("-" * len(line(HEADER)))
        for row in rows:
            print(line(row))
        for note in notes:
            print(f"\n{note}")

    def _latency_rows(
        self, rate: float, lat: LatencyResult, notes: list[str]
    ) -> list[tuple[str, ...]]:
        target = f"p50 ≤ {TARGET_P50_MS:g}, p99 ≤ {TARGET_P99_MS:g}"
        rows = [
            _row(
                f"push → socket @ {rate:g}/s (every socket)",
                lat.socket_ms,
                lat.socket_lost,
                target,
                _verdict_p50_p99(lat.socket_ms, lat.socket_lost),
            )
        ]
        rows.append(_row("  push POST → its 200 response", lat.answer_ms, 0, "", ""))
        rows.append(_row("  push POST → its batch applied it", lat.applied_ms, 0, "", ""))
        notes.append(
            f"latency @ {rate:g}/s: {lat.pushes} pushes counted ({lat.achieved_rate:.1f}/s "
            f"achieved; answered {dict(lat.outcomes)}), "
            f"{len(lat.errors)} refused or failed; the sockets received {lat.messages} "
            f"messages ({lat.message_bytes / max(lat.messages, 1) / 1024:.1f} KiB each on "
            f"average), {lat.messages / max(lat.messages_due, 1):.0%} of the "
            f"{lat.messages_due} the pushes called for (every push goes to every socket "
            "once, its own session's pages included; the rest were coalesced or dropped); "
            f"{lat.socket_later} deliveries "
            "came through a later push's note (coalesced, or applied in one batch); the "
            f"applier applied them in {lat.batches} batches "
            f"({len(lat.applied_ms) / max(lat.batches, 1):.1f} pushes each); CPU while "
            "pushing: daphne "
            f"{_share(lat.server_cpu)}, clients {_share(lat.client_cpu)} of one core; daphne "
            f"alone {_micro(lat.daphne_us_per_message)} of CPU per socket message (taking the "
            "pushes in included). "
            "The §6 target is for push → DOM; the socket row is the same path without the "
            "browser."
        )
        if lat.achieved_rate < 0.9 * rate:
            notes.append(
                f"  the pushes fell behind {rate:g}/s: each session's pushes are sent one after "
                "another, so a slow answer slows them (the server's capacity, not the client's)"
            )
        notes += [f"  push error: {error}" for error in sorted(set(lat.errors))[:5]]
        if lat.browser is not None:
            b = lat.browser
            rows.append(
                _row(
                    f"push → DOM @ {rate:g}/s (1 chromium)",
                    b.dom_ms,
                    b.lost,
                    target,
                    _verdict_p50_p99(b.dom_ms, b.lost),
                )
            )
            if b.notes:
                notes.append("browser: " + "; ".join(b.notes))
        return rows

    def _fanout_rows(self, notes: list[str]) -> list[tuple[str, ...]]:
        f = self.fanout
        if f.skipped:
            notes.append(f"fan-out skipped: {f.skipped}")
            return [("fan-out (skipped)", *[""] * (len(HEADER) - 1))]
        verdict = "no data"
        if f.last_ms:
            p50, worst = statistics.median(f.last_ms), max(f.last_ms)
            if worst <= TARGET_FANOUT_MS and not f.missing:
                verdict = "meets"
            elif p50 <= TARGET_FANOUT_MS:
                verdict = "p50 meets, max MISSES"
            else:
                verdict = "MISSES"
        notes.append(
            f"fan-out: each of {len(f.last_ms)} pushes timed from its POST to the last of "
            f"{f.sockets} sockets (and to half of them); 'lost' counts (push, socket) pairs "
            f"never delivered within {GRACE:g} s; one uncounted push to each process first."
        )
        notes += [f"  fan-out push error: {error}" for error in f.errors[:5]]
        target = f"≤ {TARGET_FANOUT_MS:g}"
        return [
            _row(f"fan-out → last of {f.sockets} sockets", f.last_ms, f.missing, target, verdict),
            _row("fan-out → half of them", f.median_ms, f.missing, "", ""),
        ]

    def _overview_rows(self, notes: list[str]) -> list[tuple[str, ...]]:
        o = self.overview
        counts = {tuple(m["queries"]) for m in o["measured"]}
        constant = len(counts) == 1 and len(next(iter(counts))) == 1
        rows = []
        for m in o["measured"]:
            within = m["median_ms"] <= TARGET_OVERVIEW_MS
            verdict = ("meets" if within else "MISSES") + ("" if constant else ", queries grow")
            rows.append(
                (
                    f"overview GET /, {m['sessions']} sessions",
                    str(m["requests"]),
                    f"{m['median_ms']:.1f}",
                    f"{m['p99_ms']:.1f}",
                    f"{m['max_ms']:.1f}",
                    "-",
                    "/".join(str(q) for q in m["queries"]),
                    f"≤ {TARGET_OVERVIEW_MS:g}, constant",
                    verdict,
                )
            )
        notes.append(
            "overview: server time through Django's test client in one process (middleware, "
            "view, templates, database; no network); queries per request are "
            f"{'the same' if constant else 'NOT the same'} at every size. Through daphne the "
            f"page took {o['http_ms']:.1f} ms (median wall time on loopback). The sessions were "
            f"applied through ingest at {o['create_per_second']:.0f}/s ({o['waiting']} waiting "
            f"for a human; states {_states(o['states'])}); the last page was "
            f"{o['measured'][-1]['bytes'] / 1024:.0f} KiB."
        )
        return rows


def _row(label: str, values: list[float], lost: int, target: str, verdict: str) -> tuple[str, ...]:
    if not values:
        return (label, "0", "-", "-", "-", str(lost), "-", target, verdict or "no data")
    return (
        label,
        str(len(values)),
        f"{_percentile(values, 0.5):.1f}",
        f"{_percentile(values, 0.99):.1f}",
        f"{max(values):.1f}",
        str(lost),
        "-",
        target,
        verdict,
    )


def _states(states: dict[str, int]) -> str:
    return ", ".join(
        f"{(k or 'none').removeprefix('TASK_STATE_').lower()} {v}" for k, v in states.items()
    )


def _micro(us: float | None) -> str:
    return "n/a" if us is None else f"{us:.0f} µs"


def _share(cpu: float | None) -> str:
    return "n/a" if cpu is None else f"{100 * cpu:.0f}%"


def _verdict_p50_p99(values: list[float], lost: int) -> str:
    if not values:
        return "no data"
    p50, p99 = _percentile(values, 0.5), _percentile(values, 0.99)
    misses = [
        name
        for name, value, target in (("p50", p50, TARGET_P50_MS), ("p99", p99, TARGET_P99_MS))
        if value > target
    ]
    if lost:
        misses.append("lost")
    return "meets" if not misses else "MISSES " + ", ".join(misses)
