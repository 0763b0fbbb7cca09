"""The session page's activity: server time of the refetch a live page makes when its session
changes (`GET /sessions/<id>/activity/`, at most once a second per open page while an agent
streams, tasks/web/views.py) and of the whole session page, over a session of `--messages`
transcript messages (default 500, what one page shows).

The transcript is what a streaming agent leaves: agent notes in markdown (rendered and
sanitized once, as the applier stores them), runs of card receipts, and a person's message
with a link now and then. A fresh database is migrated (SQLite in a temporary directory, or
a dedicated PostgreSQL database `onlooker_bench_activity` when DATABASE_URL is set). Each
request is made in this process through Django's test client as a signed-in person; CPU is
this process's (the view, its queries' client side and the template), wall includes the
database. Queries are counted in a round of their own. All times and ids are fixed, so
`digest` (of the activity's markup) names it exactly: compare it before and after a change
that should not change what the page shows.

    python -m tests.benchmarks activity [--messages N] [--rounds R]

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import time
from datetime import UTC, datetime, timedelta

from tests.benchmarks.workspace import Workspace

DESCRIPTION = "ms per session activity refetch and session page over a long transcript"

BENCH_DATABASE = "onlooker_bench_activity"
WARMUP_ROUNDS = 3
AT = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
NOTE = (
    "## Copying table group {n}\n\n"
    "Moved **{n}** of 40 shards; `orders_{n}` is next.\n\n"
    '- checksums match\n- <progress value="{n}" max="40"></progress> shards\n\n'
    "See [the runbook](https://example.com/runbook#step-{n})."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=500, help="transcript messages")
    parser.add_argument("--rounds", type=int, default=30, help="timed requests of each kind")


def run(args: argparse.Namespace) -> int:
    if min(args.messages, args.rounds) < 1:
        raise SystemExit("--messages and --rounds ≥ 1, please")
    database_url = os.environ.get("DATABASE_URL", "").strip()
    with Workspace(database_url, database=BENCH_DATABASE) as workspace:
        print(f"activity: {workspace.description}; migrating…", flush=True)
        workspace.set_up_here()
        from django.db import connections

        try:
            session_id, user = build(args.messages)
            results = measure(args, session_id, user)
        finally:
            connections.close_all()
    print_report(args, results, workspace.description)
    return 0


def build(count: int) -> tuple[int, object]:
    """A session whose transcript holds `count` messages: per ten, six agent notes, three
    card receipts in a row and a person's message with a link."""
    from django.contrib.auth.models import User

    from tasks.models import Agent, Message, Session, Task
    from tasks.sessions import artifact_markdown

    agent = Agent.objects.create(
        name="Billing migrator",
        card_url="http://agent.invalid/.well-known/agent-card.json",
        rpc_url="http://agent.invalid/a2a/jsonrpc",
        protocol_version="1.0",
    )
    session = Session.objects.create(
        agent=agent, context_id="ctx-activity", title="Billing migration", updated_at=AT
    )
    task = Task.objects.create(
        agent=agent,
        session=session,
        task_id="task-activity",
        state="TASK_STATE_WORKING",
        status_received_at=AT,
    )
    rows = []
    for n in range(count):
        at = AT + timedelta(seconds=n)
        kind = n % 10
        if kind < 6:
            text = NOTE.format(n=n)
            rows.append(
                Message(
                    session=session, task=task, role=Message.Role.AGENT, text=text,
                    html=artifact_markdown.message_html(text), at=at,
                )
            )  # fmt: skip
        elif kind < 9:
            rows.append(
                Message(
                    session=session, task=task, role=Message.Role.AGENT, at=at,
                    text=f"Progress card updated (rev {n}, {n % 5}/5 done)", card_update=True,
                )
            )  # fmt: skip
        else:
            rows.append(
                Message(
                    session=session, task=task, role=Message.Role.USER, at=at,
                    text=f"Please check shard {n} before moving on.", message_id=f"m-{n}",
                    parts=[{"kind": "url", "url": f"https://example.com/shards/{n}",
                            "link": True, "mediaType": "text/html"}],
                )
            )  # fmt: skip
    Message.objects.bulk_create(rows, batch_size=500)
    user = User.objects.create_superuser("watcher")
    return session.pk, user


def measure(args: argparse.Namespace, session_id: int, user) -> list[dict]:
    import time_machine
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]  # the client's host
    client = Client()
    client.force_login(user)
    requests = [
        ("activity refetch", f"/sessions/{session_id}/activity/"),
        ("session page", f"/sessions/{session_id}/"),
    ]
    results = []
    # The page says how long ago things happened: a fixed now keeps its markup the same.
    with time_machine.travel(AT + timedelta(hours=1), tick=False):
        for name, url in requests:
            results.append(_measure(client, connection, name, url, args.rounds))
    return results


def _measure(client, connection, name: str, url: str, rounds: int) -> dict:
    for _ in range(WARMUP_ROUNDS):
        _get(client, url)
    # Counted by a wrapper: Django empties its own query log as each request starts.
    queries: list[str] = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        body = _get(client, url)
    cpu, wall = [], []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        _get(client, url)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return {
        "name": name,
        "cpu": statistics.median(cpu) * 1000,
        "cpu_min": min(cpu) * 1000,
        "wall": statistics.median(wall) * 1000,
        "queries": len(queries),
        "bytes": len(body),
        # Names the markup exactly, its forms' CSRF tokens left out (the page's own holds a
        # fresh id as well).
        "digest": hashlib.sha256(_CSRF.sub(b"", body)).hexdigest()[:12]
        if name.startswith("activity")
        else "",
    }


_CSRF = re.compile(rb'name="csrfmiddlewaretoken" value="[^"]*"')


def _get(client, url: str) -> bytes:
    response = client.get(url)
    if response.status_code != 200:
        raise SystemExit(f"{url}: HTTP {response.status_code} {response.content[:200]!r}")
    return response.content


def print_report(args: argparse.Namespace, results: list[dict], where: str) -> None:
    print(f"\nsession activity over {args.messages:,} messages ({where}), median of {args.rounds}")
    print(
        f"{'request':<18} {'CPU ms':>8} {'CPU min':>8} {'wall ms':>8} {'queries':>8} "
        f"{'KiB':>7}  digest"
    )
    for r in results:
        print(
            f"{r['name']:<18} {r['cpu']:>8.1f} {r['cpu_min']:>8.1f} {r['wall']:>8.1f} "
            f"{r['queries']:>8} {r['bytes'] / 1024:>7.0f}  {r['digest']}"
        )
