"""Burst: signed pushes at a fixed rate (open loop: a push is sent when it is due, whether or
not the ones before it were answered) into a set of sessions, then the drain.

    python -m tests.benchmarks burst [--rate 500] [--seconds 20] [--sessions 50]

One daphne on a fresh database (SQLite in a temporary directory, or `onlooker_bench_burst`
on the PostgreSQL server DATABASE_URL names, dropped at the end); the sessions are created
first by one push each (not counted). Every push of the burst is signed before it starts, so
the client spends its CPU on sending; its latency runs from when it was *due* (so a client
that fell behind, or all `--connections` busy, counts against the server rather than hiding
its slowness). A push that could not even start within `--timeout` of being due (every
connection still waiting for an answer) is an error, as one that timed out: a sender's
queue does not grow without bound. The last push to each session carries a known note: the
backlog has drained when no delivery is pending (read from the database directly) and
/api/sessions shows every final push that was acknowledged. Server CPU per push is daphne's
CPU from the start of the burst to the end of the drain (applying included), over the pushes
answered.

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from standardwebhooks import Webhook

from tests.benchmarks import raw_http
from tests.benchmarks.ingest import (
    IN_REQUEST_NOTE,
    REGISTER_AGENT,
    Server,
    Workspace,
    _run_checked,
    final_text,
    outcome_of,
    signed_push,
    wait_visible,
)

DESCRIPTION = "500 pushes/s open-loop for 20 s into 50 sessions: errors, latency, drain, CPU"

BENCH_DATABASE = "onlooker_bench_burst"
REQUEST_TIMEOUT = 10.0  # each of connect, pool wait, write and read
PENDING_POLL = 0.05
# What sending one push with the raw client can end in, short of an answer.
RAW_FAILURES = (OSError, TimeoutError, asyncio.IncompleteReadError, raw_http.BadAnswer)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rate", type=float, default=500.0, help="pushes per second, sent open-loop"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the burst")
    parser.add_argument("--sessions", type=int, default=50, help="sessions the pushes go to")
    parser.add_argument(
        "--connections", type=int, default=256, help="the client's connection pool (at most)"
    )
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="what sends the burst: keep-alive sockets with prebuilt requests (raw_http.py, "
        "cheap enough to send 500/s beside the server on 2 cores) or httpx (1–2 ms of CPU a "
        "request)",
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=300.0, help="seconds to wait for the drain"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=REQUEST_TIMEOUT,
        help="the client's timeout for connecting, waiting for a pooled connection, and reading",
    )
    parser.add_argument(
        "--applier",
        choices=("background", "external", "inline"),
        help="ONLOOKER_APPLIER for the server (default: the settings' default)",
    )
    parser.add_argument(
        "--app",
        default="dashboard.asgi:application",
        help="the Onlooker ASGI app daphne serves (a wrapper, to measure a change against it)",
    )


@dataclass
class Burst:
    due: int = 0  # pushes scheduled
    sent: int = 0  # pushes whose POST started
    ok_ms: list[float] = field(default_factory=list)  # due → 2xx, per 2xx push
    post_ms: list[float] = field(default_factory=list)  # POST started → 2xx (pool wait too)
    errors: Counter = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    outcomes: Counter = field(default_factory=Counter)
    late_ms: list[float] = field(default_factory=list)  # due → POST started (client lag)
    seconds: float = 0.0  # first due → last answer
    client_cpu: float = 0.0


def run(args: argparse.Namespace) -> int:
    if args.rate <= 0 or args.seconds <= 0 or args.sessions < 1 or args.connections < 1:
        raise SystemExit("--rate and --seconds > 0, --sessions and --connections ≥ 1, please")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with Workspace(os.environ.get("DATABASE_URL", "").strip(), database=BENCH_DATABASE) as space:
        env = space.onlooker_env()
        if args.applier:
            env["ONLOOKER_APPLIER"] = args.applier
        _run_checked([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env)
        agent = json.loads(
            _run_checked([sys.executable, "-c", REGISTER_AGENT], env).splitlines()[-1]
        )
        total = max(args.sessions, round(args.rate * args.seconds))
        print(
            f"burst: {space.description}; one daphne (applier: "
            f"{args.applier or 'settings default'}); {total} pushes at {args.rate:g}/s open-loop "
            f"over {args.seconds:g} s into {args.sessions} sessions; client: {args.client}, "
            f"{args.connections} connections at most; {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f} at the start; client on the same machine",
            flush=True,
        )
        with Server("burst", args.app, env, space.directory) as server:
            report = asyncio.run(_burst(args, server, space, agent, total))
            if server.process.poll() is not None:
                print(f"the server died during the run:\n{server.log_tail()}", file=sys.stderr)
    _print(report, args)
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


async def _burst(
    args: argparse.Namespace, server: Server, space: Workspace, agent: dict, total: int
) -> dict:
    url = server.base_url + agent["path"]
    webhook = Webhook(agent["secret"])
    run = "burst"
    sessions = args.sessions
    limits = httpx.Limits(
        max_connections=args.connections, max_keepalive_connections=args.connections
    )
    async with httpx.AsyncClient(limits=limits, timeout=args.timeout) as client:
        # The sessions exist before the burst (one push each, in their own past).
        setup_base = datetime.now(UTC)
        for task in range(sessions):
            body, headers = signed_push(webhook, f"{run}", task, setup_base, tasks=sessions)
            response = await client.post(url, content=body, headers=headers)
            if response.status_code != 200:
                raise SystemExit(f"setup push answered {response.status_code}: {response.text}")
        setup = {f"{run}-ctx-{t}": f"Step {t}:" for t in range(sessions)}
        if await wait_visible(client, server.base_url, agent["cookies"], setup, 60) is None:
            raise SystemExit("the sessions' first pushes were not visible within 60 s")
        # Signed now (the signatures' timestamps stay well inside the tolerance): numbers
        # after the setup's, the last one to each session with its final note.
        base = datetime.now(UTC)
        pushes = []
        for n in range(sessions, sessions + total):
            task = n % sessions
            final = n >= sessions + total - sessions
            text = final_text(run, task) if final else None
            pushes.append(signed_push(webhook, run, n, base, tasks=sessions, text=text))

        burst = Burst(due=total)
        # At most `connections` pushes in flight: the rest wait here, not in httpx's pool,
        # so how long they may wait is ours to bound.
        slots = asyncio.Semaphore(args.connections)
        pool = raw_http.Pool("127.0.0.1", server.port, args.connections)
        path = agent["path"]
        prebuilt = [
            raw_http.request("POST", f"127.0.0.1:{server.port}", path, headers, body)
            for body, headers in pushes
        ]
        acknowledged: set[int] = set()
        cpu_start, client_start = server.cpu_seconds(), time.process_time()
        start = time.perf_counter() + 0.2
        last_answer = start

        async def one_raw(number: int, due: float) -> None:
            nonlocal last_answer
            try:
                connection = await pool.acquire(due + args.timeout - time.perf_counter())
            except TimeoutError:
                burst.errors["not sent: every connection busy"] += 1
                return
            except OSError as error:
                burst.errors[type(error).__name__] += 1
                _sample(burst, f"{type(error).__name__}: {error}")
                return
            reusable = False
            try:
                burst.sent += 1
                posted = time.perf_counter()
                burst.late_ms.append((posted - due) * 1000)
                answer = await raw_http.exchange(connection, prebuilt[number], args.timeout)
                reusable = answer.keep_alive
            except RAW_FAILURES as error:
                burst.errors[type(error).__name__] += 1
                _sample(burst, f"{type(error).__name__}: {error}")
                return
            finally:
                pool.release(connection, reusable=reusable)
                last_answer = max(last_answer, time.perf_counter())
            _answered(number, due, posted, answer)

        def _answered(number: int, due: float, posted: float, response) -> None:
            if 200 <= response.status_code < 300:
                acknowledged.add(number)
                burst.ok_ms.append((time.perf_counter() - due) * 1000)
                burst.post_ms.append((time.perf_counter() - posted) * 1000)
                burst.outcomes[outcome_of(response)] += 1
            else:
                burst.errors[response.status_code] += 1
                _sample(burst, f"{response.status_code}: {response.text[:200]}")

        async def one(number: int, due: float) -> None:
            nonlocal last_answer
            body, headers = pushes[number]
            try:
                await asyncio.wait_for(
                    slots.acquire(), timeout=max(0.0, due + args.timeout - time.perf_counter())
                )
            except TimeoutError:
                burst.errors["not sent: every connection busy"] += 1
                return
            try:
                burst.sent += 1
                posted = time.perf_counter()
                burst.late_ms.append((posted - due) * 1000)
                response = await client.post(url, content=body, headers=headers)
            except httpx.HTTPError as error:
                burst.errors[type(error).__name__] += 1
                _sample(burst, f"{type(error).__name__}: {error}")
                return
            finally:
                slots.release()
                last_answer = max(last_answer, time.perf_counter())
            _answered(number, due, posted, response)

        send = one_raw if args.client == "raw" else one

        tasks = []
        for number in range(total):
            due = start + number / args.rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(number, due)))
        load_end_due = time.perf_counter()
        await asyncio.gather(*tasks)
        answered = time.perf_counter()
        await pool.close()
        burst.client_cpu = time.process_time() - client_start
        burst.seconds = last_answer - start
        cpu_burst = server.cpu_seconds()
        backlog = await asyncio.to_thread(space.count_pending)
        # Only the finals that were stored can show; a failed one is not waited for.
        finals = range(total - sessions, total)
        expected = {
            f"{run}-ctx-{(sessions + n) % sessions}": final_text(run, (sessions + n) % sessions)
            for n in finals
            if n in acknowledged
        }
        unacknowledged_finals = len(finals) - len(expected)

        # The drain: no delivery pending (database), then every final note visible (API);
        # the server is not asked before, so the polling takes nothing from its applier.
        deadline = time.perf_counter() + args.drain_timeout
        empty = None
        while time.perf_counter() < deadline:
            if not await asyncio.to_thread(space.count_pending):
                empty = time.perf_counter()
                break
            await asyncio.sleep(PENDING_POLL)
        visible = None
        if empty is not None:
            visible = await wait_visible(
                client, server.base_url, agent["cookies"], expected, deadline - empty
            )
        cpu_end = server.cpu_seconds()
        left = await asyncio.to_thread(space.count_pending)
    return {
        "burst": burst,
        "schedule_end": load_end_due - start,
        "answered_at": answered - start,
        "backlog": backlog,
        "left": left,
        "visible_after": None if visible is None else visible - answered,
        "empty_after": None if empty is None else max(0.0, empty - answered),
        "cpu_burst": None if cpu_start is None or cpu_burst is None else cpu_burst - cpu_start,
        "cpu_total": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
        "unacknowledged_finals": unacknowledged_finals,
    }


def _sample(burst: Burst, text: str) -> None:
    if len(burst.error_samples) < 5 and text[:200] not in burst.error_samples:
        burst.error_samples.append(text[:200])


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def _print(report: dict, args: argparse.Namespace) -> None:
    burst: Burst = report["burst"]
    ok = len(burst.ok_ms)
    errors = sum(burst.errors.values())
    keeps_first = burst.outcomes.get("accepted", 0) > 0

    def seconds(value: float | None) -> str:
        return f"> {args.drain_timeout:g} (NOT DRAINED)" if value is None else f"{value:.2f}"

    def per_push(cpu: float | None) -> str:
        return "n/a" if cpu is None or not ok else f"{1000 * cpu / ok:.2f}"

    rows = [
        ("pushes due / sent", f"{burst.due} / {burst.sent}"),
        ("2xx", f"{ok} ({ok / max(burst.seconds, 1e-9):.1f}/s over {burst.seconds:.1f} s)"),
        ("errors (must be 0)", f"{errors}" + (f" {dict(burst.errors)}" if errors else "")),
        (
            "2xx latency p50 / p99 ms",
            f"{_percentile(burst.ok_ms, 0.5):.1f} / "
            f"{_percentile(burst.ok_ms, 0.99):.1f} (from when each push was due)",
        ),
        (
            "  POST → 2xx p50 / p99 ms",
            f"{_percentile(burst.post_ms, 0.5):.1f} / {_percentile(burst.post_ms, 0.99):.1f} "
            "(from the POST's start: without the wait for a free connection)",
        ),
        (
            "wait to send p50 / p99 ms",
            f"{_percentile(burst.late_ms, 0.5):.1f} / "
            f"{_percentile(burst.late_ms, 0.99):.1f} "
            "(due → POST started: a free connection, the client's lag)",
        ),
        ("backlog when all answered", str(report["backlog"]) + ("" if keeps_first else " (n/a)")),
        ("drain: all visible, s", seconds(report["visible_after"])),
        ("drain: none pending, s", seconds(report["empty_after"]) if keeps_first else "n/a"),
        ("server CPU ms/push, burst", per_push(report["cpu_burst"])),
        ("server CPU ms/push, total", per_push(report["cpu_total"])),
    ]
    width = max(len(label) for label, _ in rows)
    print()
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print(
        f"\nanswers: {dict(burst.outcomes)}; drain times run from the last answer; 'burst' CPU "
        "is daphne's from the first push to the last answer, 'total' until the drain ended "
        f"(or timed out); the schedule's last push was started {report['schedule_end']:.1f} s "
        f"after the first (due: {args.seconds:g} s); client CPU "
        f"{100 * burst.client_cpu / max(report['answered_at'], 1e-9):.0f}% of one core; "
        f"client timeout {args.timeout:g} s."
    )
    if not keeps_first:
        print(f"drain: {IN_REQUEST_NOTE}; 'all visible' is the last answer → /api/sessions")
    if report["unacknowledged_finals"]:
        print(
            f"{report['unacknowledged_finals']} sessions' final pushes failed: 'all visible' "
            "waited only for the others"
        )
    if report["left"]:
        print(f"{report['left']} deliveries still pending at the end")
    for sample in burst.error_samples:
        print(f"  error: {sample}")
