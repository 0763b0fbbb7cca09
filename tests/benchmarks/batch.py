"""One applier batch: its statements, wall time and CPU, by how many sessions it holds.

On PostgreSQL every statement is a round trip: the applier's process sends it, waits, and
PostgreSQL's process wakes to answer, on the same cores. A lone push's batch is what a push
waits for on its way to the browser; a thin batch (one delivery in each of several sessions)
is what the applier does most of the time at tens of pushes a second.

For each size N: N tasks get `--pushes` pushes each (one by default) through the real view
(Django's test client, `ONLOOKER_APPLIER=external`, so the request only keeps it), then one
`applier.apply_batch()` applies them in this process, timed. The first round (creating the
sessions) is not counted; every later round is as many pushes to each of the same N tasks.
Several pushes to a session in one batch are what the applier holds under load: each but
the last is a note the batch supersedes, kept in the transcript as said. `--said C` first
fills what each session's agent said before (the search text of the notes its card
replaced) to C characters, as a session an agent has streamed to for a while has it.
Browsers' hints are handed to nothing (the applier process writes each as a line to its
server; no server here), so the figures are the batch's own. Statements are counted by
Django (BEGIN, COMMIT and savepoints included), in a round before the timed ones.

The database: SQLite in a temporary directory, or a fresh PostgreSQL database
`onlooker_bench_batch` (dropped at the end) when DATABASE_URL is set.

    python -m tests.benchmarks batch                     # 1, 6 and 50 sessions, 40 rounds
    python -m tests.benchmarks batch --sessions 1 --rounds 200
    python -m tests.benchmarks batch --sessions 10 --pushes 3 --said 20000   # streaming
    python -m tests.benchmarks batch --sessions 10 --statements   # what the round trips are
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime

from standardwebhooks import Webhook

from tests.benchmarks import ingest, workspace

DESCRIPTION = "statements, wall time and CPU of one applier batch, by sessions in it"

BENCH_DATABASE = "onlooker_bench_batch"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sessions", type=int, nargs="+", default=[1, 6, 50], help="sessions per batch"
    )
    parser.add_argument("--rounds", type=int, default=40, help="batches timed per size")
    parser.add_argument("--pushes", type=int, default=1, help="pushes per session per batch")
    parser.add_argument(
        "--said", type=int, default=0, help="characters said before, filled in first (per session)"
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="print the counted batch's statements (each shortened), to read its round trips",
    )


def run(args: argparse.Namespace) -> int:
    if args.rounds < 1 or min(args.sessions) < 1 or args.pushes < 1 or args.said < 0:
        raise SystemExit("--rounds, --sessions and --pushes ≥ 1, --said ≥ 0, please")
    url = os.environ.get("DATABASE_URL", "").strip()
    with workspace.Workspace(url, database=BENCH_DATABASE) as place:
        env = place.onlooker_env()
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            env=env,
            check=True,
            cwd=ingest.ROOT,
        )
        registered = subprocess.run(
            [sys.executable, "-c", ingest.REGISTER_AGENT],
            env=env,
            check=True,
            cwd=ingest.ROOT,
            capture_output=True,
            text=True,
        )
        agent = json.loads(registered.stdout.splitlines()[-1])
        print(
            f"batch: {place.description}; {os.cpu_count()} CPUs; {args.rounds} rounds per size; "
            f"{args.pushes} push(es) per session per batch; {args.said} characters said before"
        )
        rows = _measure(
            env, agent, args.sessions, args.rounds, args.pushes, args.said, args.statements
        )
    _print(rows)
    return 0


def _measure(
    env: dict[str, str],
    agent: dict,
    sizes: list[int],
    rounds: int,
    pushes: int,
    said: int,
    show: bool = False,
) -> list[tuple]:
    os.environ.update(env)
    os.environ["ONLOOKER_APPLIER"] = "external"
    import django

    django.setup()
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from tasks.live import broadcast
    from tasks.models import SessionText
    from tasks.pushes import applier
    from tasks.sessions import search

    broadcast.relay_to(lambda *said: None)
    client = Client(HTTP_HOST="127.0.0.1")
    webhook = Webhook(agent["secret"])
    base = datetime.now(UTC)
    rows = []
    for size in sizes:
        numbers = itertools.count()
        run_name = f"batch{size}"

        def push_each(size: int = size, numbers=numbers, run_name: str = run_name) -> None:
            for _ in range(size * pushes):
                body, headers = ingest.signed_push(
                    webhook, run_name, next(numbers), base, tasks=size
                )
                extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
                response = client.post(
                    agent["path"], body, content_type="application/json", **extra
                )
                if response.status_code != 200:
                    raise SystemExit(f"push refused: {response.status_code} {response.content!r}")

        push_each()
        while applier.apply_batch().claimed:  # the sessions and tasks are created
            pass
        # What each agent said before, as lines of an artifact's name (search.also_said):
        # the text a note the card replaces is added to.
        lines = [f"Report {n:05d} of the nightly build run" for n in range(said // 38)]
        mine = SessionText.objects.filter(session__context_id__startswith=f"{run_name}-")
        for session_id in mine.values_list("session_id", flat=True):
            for line in lines:  # 37 characters and a newline each
                search.also_said(session_id, line)
        # The statements are counted in a round of their own: Django's capture wraps every
        # statement in its debug cursor, which the timed rounds must not pay for.
        push_each()
        reset_queries()
        with CaptureQueriesContext(connection) as captured:
            applier.apply_batch()
        statements = len(captured.captured_queries)
        if show:
            print(f"\n{size} session(s): the batch's {statements} statements")
            for n, query in enumerate(captured.captured_queries, 1):
                sql = " ".join(query["sql"].split())
                print(f"{n:>4} {sql[:160]}{' …' if len(sql) > 160 else ''}")
        walls, cpus = [], []
        for _ in range(rounds):
            push_each()
            wall, cpu = time.perf_counter(), time.process_time()
            batch = applier.apply_batch()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if (batch.applied, len(batch.sessions)) != (size * pushes, size):
                raise SystemExit(f"a batch applied {batch.applied} in {len(batch.sessions)}")
            walls.append(wall)
            cpus.append(cpu)
        rows.append((size, statements, walls, cpus))
    return rows


def _print(rows: list[tuple]) -> None:
    header = (
        f"{'sessions':>8} {'statements':>10} {'per session':>11} {'wall p50':>9} "
        f"{'wall min':>9} {'CPU p50':>8} {'CPU min':>8} {'CPU/session':>11}"
    )
    print()
    print(header)
    print("-" * len(header))
    for size, statements, walls, cpus in rows:
        cpu_p50 = statistics.median(cpus)
        print(
            f"{size:>8} {statements:>10} {statements / size:>11.1f} "
            f"{1000 * statistics.median(walls):>7.1f}ms {1000 * min(walls):>7.1f}ms "
            f"{1000 * cpu_p50:>6.1f}ms {1000 * min(cpus):>6.1f}ms {1000 * cpu_p50 / size:>9.2f}ms"
        )
    print(
        "\nwall and CPU per batch (the applier's process: applying, deriving, rendering, storing;"
        " PostgreSQL's own CPU is not in it, its answers' wait is in the wall time)"
    )
