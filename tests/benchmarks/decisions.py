"""The record of decisions: server time and memory of reading it through `/api/decisions`
(a JSON page, and a whole range as JSON lines and as CSV) and `/api/decisions/summary`, over
`--rows` decisions (default 200,000) of 40 agents in 4 teams, a quarter of them confirmed.

A fresh database is migrated (SQLite in a temporary directory, or a dedicated PostgreSQL
database `onlooker_bench_decisions` when DATABASE_URL is set) and filled in bulk. Each
request is made in this process through Django's AsyncClient (the ASGI path the server
takes, streams included) with a person's API token, as a member of one team (a quarter of
the rows, plus none of no team) and as a superuser (every row). Time is wall time per
request, the median of `--rounds`; memory is the growth of this process's peak RSS while
the whole range streams, which stays flat when the stream reads in batches.

    python -m tests.benchmarks decisions [--rows N] [--rounds R]

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
from datetime import UTC, datetime, timedelta

from tests.benchmarks.workspace import Workspace

DESCRIPTION = "ms and MiB per /api/decisions page, jsonl and csv export, and summary"

BENCH_DATABASE = "onlooker_bench_decisions"
TEAMS = 4
AGENTS_PER_TEAM = 10
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5, help="timed requests of each kind")


def run(args: argparse.Namespace) -> int:
    if min(args.rows, args.rounds) < 1:
        raise SystemExit("--rows and --rounds ≥ 1, please")
    database_url = os.environ.get("DATABASE_URL", "").strip()
    with Workspace(database_url, database=BENCH_DATABASE) as workspace:
        print(f"decisions: {workspace.description}; migrating…", flush=True)
        workspace.set_up_here()
        from django.db import connections

        try:
            tokens = fill(args.rows)
            results = asyncio.run(measure(args, tokens))
        finally:
            connections.close_all()
    print_report(args, results, workspace.description)
    return 0


def fill(rows: int) -> dict[str, str]:
    """`rows` decisions spread over the last 30 days; the tokens of a member of the first
    team and of a superuser."""
    from django.contrib.auth.models import Group, User
    from django.db import transaction

    from tasks.api import auth
    from tasks.models import Decision, DecisionConfirmation

    teams = [Group.objects.create(name=f"team-{n}") for n in range(TEAMS)]
    member = User.objects.create_user("member")
    member.groups.add(teams[0])
    admin = User.objects.create_superuser("admin")
    made = ["approve", "deny", "answer", "dismiss"]
    started = time.perf_counter()
    with transaction.atomic():
        batch: list = []
        confirmations: list = []
        for n in range(rows):
            agent = n % (TEAMS * AGENTS_PER_TEAM)
            at = NOW - timedelta(seconds=(rows - n) * 30 * 86_400 // rows)
            batch.append(
                Decision(
                    interaction_pk=n + 1, interaction_id=f"i-{n}", round=1,
                    session_pk=n // 3 + 1, task_id=f"t-{n // 3}", agent_pk=agent + 1,
                    agent_name=f"agent-{agent}", team_pk=teams[agent % TEAMS].pk,
                    kind="approval", decision=made[n % 4], value=None,
                    reason="=cmd|' /C calc'!A0" if n % 50 == 0 else "ok",
                    by_pk=member.pk, by="member", via="page", at=at,
                    opened_at=at - timedelta(seconds=30 + n % 600), request_digest="0" * 64,
                    sent=n % 4 != 3,
                )
            )  # fmt: skip
            if n % 4 == 0:
                confirmations.append(DecisionConfirmation(interaction_pk=n + 1, round=1, at=at))
            if len(batch) == 5_000:
                Decision.objects.bulk_create(batch)
                DecisionConfirmation.objects.bulk_create(confirmations)
                batch, confirmations = [], []
        Decision.objects.bulk_create(batch)
        DecisionConfirmation.objects.bulk_create(confirmations)
    print(f"filled {rows:,} decisions in {time.perf_counter() - started:.1f} s", flush=True)
    return {"member": auth.make(member)[1], "superuser": auth.make(admin)[1]}


async def measure(args: argparse.Namespace, tokens: dict[str, str]) -> list[dict]:
    import time_machine
    from django.conf import settings
    from django.test import AsyncClient

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]  # the client's host

    since = (NOW - timedelta(days=31)).date().isoformat()
    requests = [
        ("page of 100 (json)", f"/api/decisions?since={since}"),
        ("page of 1,000 (json)", f"/api/decisions?since={since}&limit=1000"),
        ("whole range, jsonl", f"/api/decisions?since={since}&format=jsonl"),
        ("whole range, csv", f"/api/decisions?since={since}&format=csv"),
        ("summary, 30 days", "/api/decisions/summary?days=30"),
    ]
    results = []
    with time_machine.travel(NOW, tick=True):
        for who, token in tokens.items():
            client = AsyncClient()
            for name, url in requests:
                results.append(await _timed(client, token, who, name, url, args.rounds))
    return results


async def _timed(client, token: str, who: str, name: str, url: str, rounds: int) -> dict:
    times, size, rows, grown = [], 0, 0, 0.0
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        response = await client.get(url, headers={"authorization": f"Bearer {token}"})
        if response.status_code != 200:
            raise SystemExit(f"{url}: HTTP {response.status_code} {response.content[:200]!r}")
        size, rows = 0, 0
        # Counted as it comes, never kept: the growth measured is the server side's.
        chunks = response.streaming_content if response.streaming else _one(response.content)
        async for chunk in chunks:
            size, rows = size + len(chunk), rows + chunk.count(b"\n")
        times.append(time.perf_counter() - started)
        grown = max(grown, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
    return {
        "who": who, "name": name, "ms": statistics.median(times) * 1000,
        "bytes": size, "lines": rows, "rss": grown,
    }  # fmt: skip


async def _one(content: bytes):
    yield content


def print_report(args: argparse.Namespace, results: list[dict], where: str) -> None:
    print(f"\n/api/decisions over {args.rows:,} decisions ({where}), median of {args.rounds}")
    print(f"{'as':<10} {'request':<22} {'ms':>9} {'MiB out':>8} {'lines':>9} {'peak RSS +MiB':>14}")
    for r in results:
        print(
            f"{r['who']:<10} {r['name']:<22} {r['ms']:>9.1f} {r['bytes'] / 2**20:>8.1f} "
            f"{r['lines']:>9,} {r['rss']:>14.1f}"
        )
