"""Fragment rendering: CPU time of `fragments.render` per session, as the applier calls it
after each batch (tasks/pushes/applier.py: `render_many`), for the kinds of card agents send.

Each kind below is a session with a stored card written through `progress_card.store` (so its note
is sanitized HTML and its facts are what ingest writes): no card, a plan of 5 or 20 steps
(a tile shows 5 of them), a note, an open question, an answer sent, a finished session with
cost, trace id and unconfirmed effects. Every round loads each session the way the applier
holds it (the locked row, with the agent its batch loaded) and its card the way
`render_many` reads it; only `fragments.render` is timed, lazy lookups it makes
included.

Runs in this process after migrating a fresh database (SQLite in a temporary directory, or a
dedicated PostgreSQL database `onlooker_bench_render` when DATABASE_URL is set). All times
and ids are fixed, so `digest` (of every fragment rendered) names the markup exactly:
compare it before and after a change to the templates that should not change what they
show; `--out FILE` writes the fragments themselves, to diff.

    python -m tests.benchmarks render [--rounds N] [--copies C] [--out FILE]

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from datetime import UTC, datetime, timedelta

from tests.benchmarks.workspace import Workspace

DESCRIPTION = "CPU ms per session of fragments.render (card, tile, summary, sidebar row)"

BENCH_DATABASE = "onlooker_bench_render"
WARMUP_ROUNDS = 3
WORKING, INPUT, FAILED = "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_FAILED"
AT = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)

NOTE = (
    "## Migrating billing\n\n**Status:** copying tables, see the "
    "[runbook](https://wiki.example.com/billing).\n\n"
    "- invoices: 1,204,331 rows ✓\n- payments: 612,450 of 880,102\n\n"
    'Overall <progress value="3" max="6"></progress> 3 of 6 phases\n'
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=30, help="timed renders of each session")
    parser.add_argument("--copies", type=int, default=5, help="sessions of each kind")
    parser.add_argument("--out", help="write every fragment rendered (JSON) to this file")


def run(args: argparse.Namespace) -> int:
    if min(args.rounds, args.copies) < 1:
        raise SystemExit("--rounds and --copies ≥ 1, please")
    database_url = os.environ.get("DATABASE_URL", "").strip()
    with Workspace(database_url, database=BENCH_DATABASE) as workspace:
        print(f"render: {workspace.description}; migrating…", flush=True)
        workspace.set_up_here()
        from django.db import connections

        try:
            results = measure(args)
        finally:
            connections.close_all()
    print_report(results, workspace.description)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump(results["fragments"], out, indent=1, ensure_ascii=False)
        print(f"fragments written to {args.out}")
    return 0


# -- the sessions -----------------------------------------------------------------------------


def _plan(size: int, current: int, *, ended: bool = False) -> list[dict]:
    plan = []
    for index in range(size):
        status = "completed" if index < current else "pending"
        step = {
            "step": f"Step {index + 1}: copy table group {index + 1} & check it",
            "status": status,
        }
        if index == current:
            step.update(status="in_progress", note="about 4 min left")
        if ended and index == size - 1:
            step.update(status="failed", note="checksum mismatch")
        plan.append(step)
    return plan


def _telemetry() -> dict:
    return {"costUsd": 0.4231, "tokens": 18342, "steps": 12, "traceId": "4bf92f3577b34da6"}


# (kind, session state, needs a person, plan, markdown, facts)
KINDS = (
    ("no card", WORKING, False, None, None, None),
    ("plan of 5", WORKING, False, _plan(5, 2), None, {"state": WORKING}),
    ("plan of 20", WORKING, False, _plan(20, 11), None, {"state": WORKING}),
    ("note", WORKING, False, None, NOTE, {"state": WORKING}),
    (
        "question",
        INPUT,
        True,
        _plan(5, 3),
        NOTE,
        {"state": INPUT, "question": {"kind": "approval", "prompt": "Cut over now?"}},
    ),
    (
        "answer sent",
        INPUT,
        False,
        _plan(5, 3),
        None,
        {"state": INPUT, "answer": {"kind": "approval", "text": "Approved by Alice"}},
    ),
    (
        "finished, telemetry",
        FAILED,
        False,
        _plan(20, 14, ended=True),
        NOTE,
        {
            "state": FAILED,
            "uncertain": ["upload:report.pdf", "notify-team"],
            "telemetry": _telemetry(),
        },
    ),
)


def make_sessions(copies: int) -> list[tuple[str, int]]:
    from django.db import transaction

    from tasks.models import Agent, ProgressCard, Session
    from tasks.sessions import progress_card

    agent = Agent.objects.create(
        name="Billing migrator",
        card_url="http://agent.invalid/.well-known/agent-card.json",
        rpc_url="http://agent.invalid/a2a/jsonrpc",
        protocol_version="1.0",
    )
    made = []
    for copy in range(copies):
        for number, (kind, state, needs_human, plan, markdown, facts) in enumerate(KINDS):
            at = AT + timedelta(minutes=copy * len(KINDS) + number)
            with transaction.atomic():
                session = Session.objects.create(
                    agent=agent,
                    context_id=f"ctx-{copy}-{number}",
                    title=f"Billing migration, {kind} #{copy}",
                    state=state,
                    needs_human=needs_human,
                    updated_at=at,
                )
                if plan is not None or markdown is not None or facts:
                    progress_card.store(session, plan, markdown, facts, only_if_changed=False)
                    # Fixed times, so the fragments (and their digest) are the same every run.
                    ProgressCard.objects.filter(session=session).update(updated_at=at, source_at=at)
            made.append((kind, session.pk))
    return made


# -- measuring --------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict:
    from tasks.models import Agent, ProgressCard, Session
    from tasks.sessions import fragments

    made = make_sessions(args.copies)
    agent = Agent.objects.get()
    times: dict[str, list[float]] = {kind: [] for kind, *_ in KINDS}
    cpu_times: dict[str, list[float]] = {kind: [] for kind, *_ in KINDS}
    rendered: dict[int, dict[str, str]] = {}
    for round_number in range(WARMUP_ROUNDS + args.rounds):
        for kind, pk in made:
            # As the applier holds them: the locked row with the agent its batch loaded;
            # the card as render_many reads it.
            session = Session.objects.get(pk=pk)
            session.agent = agent
            card = ProgressCard.objects.filter(session=session).first()
            started, started_cpu = time.perf_counter(), time.process_time()
            html = fragments.render(session, card)
            elapsed_cpu = time.process_time() - started_cpu
            elapsed = time.perf_counter() - started
            if round_number < WARMUP_ROUNDS:
                rendered[pk] = html
                continue
            if html != rendered[pk]:
                raise SystemExit(f"session {pk} ({kind}) rendered differently on a later round")
            times[kind].append(elapsed)
            cpu_times[kind].append(elapsed_cpu)
    fragments_by_kind = {
        f"{kind} #{index // len(KINDS)}": rendered[pk] for index, (kind, pk) in enumerate(made)
    }
    digest = hashlib.sha256(json.dumps(fragments_by_kind, sort_keys=True).encode()).hexdigest()
    return {
        "medians": {kind: statistics.median(values) for kind, values in times.items()},
        "cpu medians": {kind: statistics.median(values) for kind, values in cpu_times.items()},
        "mean": statistics.fmean(t for values in times.values() for t in values),
        "cpu mean": statistics.fmean(t for values in cpu_times.values() for t in values),
        "renders": sum(len(values) for values in times.values()),
        "sessions": len(made),
        "sizes": {
            kind: sum(len(html) for html in rendered[pk].values())
            for kind, pk in dict((kind, pk) for kind, pk in made).items()
        },
        "digest": digest[:16],
        "fragments": fragments_by_kind,
    }


# -- report -----------------------------------------------------------------------------------


def print_report(results: dict, database: str) -> None:
    print(f"\ndatabase: {database}")
    print(f"{results['sessions']} sessions, {results['renders']} timed renders")
    header = f"{'card':<22} {'median ms':>10} {'CPU median ms':>14} {'HTML bytes':>11}"
    print(header)
    print("-" * len(header))
    for kind, median in results["medians"].items():
        cpu = results["cpu medians"][kind]
        size = results["sizes"][kind]
        print(f"{kind:<22} {1000 * median:>10.3f} {1000 * cpu:>14.3f} {size:>11,}")
    print("-" * len(header))
    print(
        f"{'mean of all':<22} {1000 * results['mean']:>10.3f} {1000 * results['cpu mean']:>14.3f}"
    )
    print(f"fragments digest: {results['digest']}")
