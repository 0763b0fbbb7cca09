"""Progress cards: render+sanitize time of a 1 KiB and an 8 KiB note, and card writes per
second through `tasks.sessions.progress_card.write` on a real database.

The notes are what an agent would write: headings, paragraphs with bold text and links,
bullet and numbered lists, markdown tables and `<progress value max>` bars, with a few
multi-byte characters. Each carries an 8-digit serial, so every variant has the same size
and none is ever served by `render`'s cache; timing calls `render.__wrapped__` as well.

Writes run one after another in a child process (django.setup() on a fresh database: a
SQLite file in a temporary directory by default or, when DATABASE_URL is set, a dedicated
PostgreSQL database `onlooker_bench_cards`, created through that URL and dropped at the
end). Each write is what the card API does: one transaction, the session row locked with
select_for_update, `progress_card.write`, the session's updated_at saved; the broadcast and the
HTTP layer are left out. Two loops per note: the markdown changes on every write (a real
render each time) and only the plan changes (the stored HTML is reused by content hash).

    python -m tests.benchmarks cards [--render-1k N] [--render-8k N] [--writes N] [--seconds S]

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time

from tests.benchmarks.workspace import Workspace
from tests.processes import ROOT

DESCRIPTION = "render+sanitize time of 1 KiB / 8 KiB notes and progress_card.write writes/s"

BENCH_DATABASE = "onlooker_bench_cards"
# (label, largest size in UTF-8 bytes, smallest accepted size)
NOTES = (("1 KiB", 1024, 1000), ("8 KiB", 8192, 8192 - 64))
SERIAL_WIDTH = 8
WARMUP_RENDERS = 5
WARMUP_WRITES = 5

CHILD = """
import sys
from tests.benchmarks.cards import child_main

sys.exit(child_main(sys.argv[1]))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--render-1k", type=int, default=200, help="renders of the 1 KiB note")
    parser.add_argument("--render-8k", type=int, default=100, help="renders of the 8 KiB note")
    parser.add_argument("--writes", type=int, default=300, help="writes per loop (4 loops)")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="time cap of each render or write loop"
    )


def run(args: argparse.Namespace) -> int:
    if min(args.render_1k, args.render_8k, args.writes) < 1 or args.seconds <= 0:
        raise SystemExit("--render-1k, --render-8k, --writes ≥ 1 and --seconds > 0, please")
    for label, _, _ in NOTES:
        check_size(label, build_note(label, 0))
    # As an exception, a SIGTERM unwinds: the child is killed and the database dropped.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    params = {
        "renders": {"1 KiB": args.render_1k, "8 KiB": args.render_8k},
        "writes": args.writes,
        "seconds": args.seconds,
    }
    # Six loops with a time cap each, and a margin for django.setup() and the checks.
    timeout = 6 * args.seconds + 120
    database_url = os.environ.get("DATABASE_URL", "").strip()
    with Workspace(database_url, database=BENCH_DATABASE) as workspace:
        env = workspace.onlooker_env()
        print(f"cards: {workspace.description}; {os.cpu_count()} CPUs; migrating…", flush=True)
        _run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env, 300)
        output = _run([sys.executable, "-c", CHILD, json.dumps(params)], env, timeout)
        results = json.loads(output.splitlines()[-1])
    print_report(results, workspace.description)
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run(command: list[str], env: dict[str, str], timeout: float) -> str:
    # stderr goes to the terminal: the child reports its progress there.
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed with exit code {result.returncode}")
    return result.stdout


# -- workspace: temporary data directory and the benchmark database ---------------------------


# -- the notes --------------------------------------------------------------------------------


def _header(serial: str) -> str:
    return (
        "## Migrating billing to PostgreSQL 16\n\n"
        f"**Status:** copying tables — run `{serial}`, see the "
        "[runbook](https://wiki.example.com/billing/pg16).\n\n"
        'Overall <progress value="3" max="6"></progress> 3 of 6 phases\n'
    )


def _section(index: int) -> str:
    """Section `index` of a note: a table, a bullet list, a numbered list or a paragraph."""
    n = index + 1
    kind = index % 4
    if kind == 0:
        bar = '<progress value="{}" max="100"></progress>'.format
        return (
            f"### Tables, batch {n}\n\n"
            "| Table | Rows | Copied | Progress |\n"
            "|---|---:|---:|---|\n"
            f"| invoices_{n} | 1,204,331 | 1,204,331 | {bar(100)} |\n"
            f"| payments_{n} | 880,102 | 612,450 | {bar(70)} |\n"
            f"| refunds_{n} | 45,980 | 0 | {bar(0)} |\n"
        )
    if kind == 1:
        return (
            f"### Checks, batch {n}\n\n"
            f"- **Row counts** match on {n * 3} tables ✓\n"
            "- Foreign keys validated, *no* orphans\n"
            f"- Lag ≥ 2 s on replica {n}: [graph](https://grafana.example.com/d/lag?r={n})\n"
            "- Sequences reset to `max(id) + 1`\n"
        )
    if kind == 2:
        return (
            f"### Next, batch {n}\n\n"
            f"1. Freeze writes for tenant group {n} (**5 min** window)\n"
            "2. Copy the remaining rows and re-check counts\n"
            f"3. Switch `DATABASE_URL` for group {n} and watch errors\n"
            "4. Keep the old primary read-only for 24 h\n"
        )
    return (
        f"Batch {n} note: the copy runs at about **38 MB/s**; the "
        f"[dashboard](https://status.example.com/migrations/{n}) has the live figures. "
        "Nothing needs a decision yet; a question will come before the cut-over.\n"
    )


_FILLER = (
    "Remaining work is routine: compare checksums, rotate credentials, archive the dump, "
    "update the runbook and close the change request once the team signs off."
)


def build_note(label: str, serial: int) -> str:
    """The note named `label` (see NOTES), as large as it can be without passing its size,
    with `serial` in it. Every serial gives a note of the same size."""
    limit = next(size for name, size, _ in NOTES if name == label)
    blocks = [_header(f"{serial:0{SERIAL_WIDTH}d}")]
    closing = "\n**Later:**"
    index = 0
    while _size("\n".join([*blocks, _section(index)]) + closing) <= limit:
        blocks.append(_section(index))
        index += 1
    note = "\n".join(blocks) + closing
    # Fill what is left with a closing paragraph, word by word, in ASCII.
    for word in _FILLER.split() * math.ceil(limit / 8):
        if _size(note) + len(" " + word + ".\n") > limit:
            break
        note += " " + word
    return note.rstrip(".,:") + ".\n"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def check_size(label: str, note: str) -> None:
    _, largest, smallest = next(n for n in NOTES if n[0] == label)
    if not smallest <= _size(note) <= largest:
        raise SystemExit(f"the {label} note is {_size(note)} bytes, not {smallest}–{largest}")


def describe(html: str) -> dict[str, int]:
    """What survived sanitizing, to show the notes are what they claim to be."""
    return {
        "tables": html.count("<table>"),
        "lists": html.count("<ul>") + html.count("<ol>"),
        "progress bars": len(re.findall(r"<progress(?=[^>]*\bvalue=)(?=[^>]*\bmax=)", html)),
        "links": html.count('rel="noopener noreferrer nofollow"'),
    }


# -- the child: measurements inside django.setup() --------------------------------------------


def child_main(raw_params: str) -> int:
    import django

    django.setup()
    from django.db import connection

    from tasks.sessions.progress_card import render

    params = json.loads(raw_params)
    results: dict = {"database": f"{connection.vendor} {_server_version(connection)}"}
    for label, _, _ in NOTES:
        note = build_note(label, 0)
        check_size(label, note)
        html = render.__wrapped__(note)
        entry = {"bytes": _size(note), "html bytes": _size(html), "content": describe(html)}
        _log(f"{label}: rendering ×{params['renders'][label]}")
        entry["render"] = measure_render(label, params["renders"][label], params["seconds"])
        for mode in ("markdown", "plan"):
            _log(f"{label}: writes, {'markdown changes' if mode == 'markdown' else 'plan only'}")
            entry[f"writes {mode}"] = measure_writes(
                label, mode, params["writes"], params["seconds"]
            )
        results[label] = entry
    print(json.dumps(results))
    return 0


def _server_version(connection) -> str:
    connection.ensure_connection()
    if connection.vendor == "sqlite":
        import sqlite3

        return sqlite3.sqlite_version
    version = connection.pg_version if hasattr(connection, "pg_version") else 0
    return f"{version // 10000}.{version % 10000}"


def _log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def measure_render(label: str, count: int, seconds: float) -> dict:
    """`render` without its cache, on a new serial each time; then the same notes stage by
    stage (markdown-it, the raw-text regex, bleach) to show where the time goes."""
    from tasks.sessions import progress_card, raw_html

    notes = [build_note(label, serial) for serial in range(1, count + WARMUP_RENDERS + 1)]
    for note in notes[:WARMUP_RENDERS]:
        progress_card.render.__wrapped__(note)
    totals = _timed(progress_card.render.__wrapped__, notes[WARMUP_RENDERS:], seconds)
    stages: dict[str, list[float]] = {"markdown-it": [], "raw-text regex": [], "bleach": []}
    deadline = time.perf_counter() + seconds
    same = True
    for note in notes[WARMUP_RENDERS : WARMUP_RENDERS + len(totals)]:
        started = time.perf_counter()
        html = progress_card._markdown.render(note)
        parsed = time.perf_counter()
        html = raw_html.drop_code_elements(html)
        stripped = time.perf_counter()
        html = progress_card._cleaner.clean(html).strip()
        cleaned = time.perf_counter()
        stages["markdown-it"].append(parsed - started)
        stages["raw-text regex"].append(stripped - parsed)
        stages["bleach"].append(cleaned - stripped)
        # If render() ever does more than these three stages, the breakdown is stale.
        same = same and html == progress_card.render.__wrapped__(note)
        if time.perf_counter() > deadline:
            break
    return {
        "n": len(totals),
        "median": statistics.median(totals),
        "p95": percentile(totals, 0.95),
        "stages": {name: statistics.median(times) for name, times in stages.items()},
        "stages match render": same,
    }


def _timed(function, inputs: list, seconds: float) -> list[float]:
    times = []
    deadline = time.perf_counter() + seconds
    for value in inputs:
        started = time.perf_counter()
        function(value)
        finished = time.perf_counter()
        times.append(finished - started)
        if finished > deadline:
            break
    return times


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def _plan(number: int) -> list[dict]:
    steps = ["Snapshot", "Schema diff", "Copy tables", "Verify", "Cut over", "Clean up"]
    current = number % len(steps)
    plan = []
    for index, step in enumerate(steps):
        status = "completed" if index < current else "pending"
        entry = {"step": f"{step} (billing)", "status": status}
        if index == current:
            entry.update(status="in_progress", note=f"write {number}")
        plan.append(entry)
    return plan


def measure_writes(label: str, mode: str, count: int, seconds: float) -> dict:
    """Writes to one session's card, one transaction each, as the card API does them.
    mode "markdown": a new serial (a real render) every write; "plan": the same markdown
    every write, only the plan changes."""
    from django.db import transaction
    from django.utils import timezone

    from tasks.models import Agent, Session
    from tasks.sessions import progress_card

    agent, _ = Agent.objects.get_or_create(
        name="Benchmark",
        defaults={
            "card_url": "http://agent.invalid/.well-known/agent-card.json",
            "rpc_url": "http://agent.invalid/a2a/jsonrpc",
            "protocol_version": "1.0",
        },
    )
    session = Session.objects.create(
        agent=agent, context_id=f"bench-{label}-{mode}", updated_at=timezone.now()
    )
    # Built up front, so making the notes is not timed; serials far from the render loop's.
    total = WARMUP_WRITES + count
    base = 10_000_000
    if mode == "markdown":
        notes = [build_note(label, base + number) for number in range(total)]
    else:
        notes = [build_note(label, base)] * total
    plans = [_plan(number) for number in range(total)]

    def write(number: int) -> None:
        with transaction.atomic():
            locked = Session.objects.select_for_update().get(pk=session.pk)
            progress_card.write(locked, plan=plans[number], markdown=notes[number])
            locked.updated_at = timezone.now()
            locked.save(update_fields=["updated_at"])

    for number in range(WARMUP_WRITES):
        write(number)
    done = 0
    started = time.perf_counter()
    deadline = started + seconds
    for number in range(WARMUP_WRITES, total):
        write(number)
        done += 1
        if time.perf_counter() > deadline:
            break
    elapsed = time.perf_counter() - started
    card = Session.objects.get(pk=session.pk).card
    last = notes[WARMUP_WRITES + done - 1]
    return {
        "writes": done,
        "seconds": elapsed,
        "per second": done / elapsed,
        # Every write is a revision, and the stored HTML is the last note's.
        "revisions ok": card.revision == WARMUP_WRITES + done,
        "html ok": card.html == progress_card.render.__wrapped__(last) and card.markdown == last,
    }


# -- report -----------------------------------------------------------------------------------


def print_report(results: dict, database: str) -> None:
    header = (
        f"{'note size':<16} {'render median ms':>16} {'render p95 ms':>13}"
        f" {'writes/s (markdown changes)':>27} {'writes/s (plan only)':>20}"
    )
    print(f"\ndatabase: {database} — {results['database']}")
    print(header)
    print("-" * len(header))
    for label, _, _ in NOTES:
        entry = results[label]
        render, changed, plan_only = entry["render"], entry["writes markdown"], entry["writes plan"]
        size = f"{label} ({entry['bytes']:,} B)"
        print(
            f"{size:<16} {1000 * render['median']:>16.2f} {1000 * render['p95']:>13.2f}"
            f" {changed['per second']:>27.1f} {plan_only['per second']:>20.1f}"
        )
    print()
    for label, _, _ in NOTES:
        entry = results[label]
        render, changed, plan_only = entry["render"], entry["writes markdown"], entry["writes plan"]
        content = ", ".join(f"{count} {name}" for name, count in entry["content"].items())
        stages = render["stages"]
        stage_total = sum(stages.values())
        breakdown = ", ".join(
            f"{name} {1000 * value:.2f} ms ({value / stage_total:.0%})"
            for name, value in stages.items()
        )
        write_ms = 1000 / changed["per second"] - 1000 / plan_only["per second"]
        print(f"{label}: {entry['bytes']:,} B of markdown → {entry['html bytes']:,} B of HTML")
        print(f"  kept after sanitizing: {content}")
        print(f"  renders: {render['n']}; median by stage: {breakdown}")
        print(
            f"  writes: {changed['writes']} in {changed['seconds']:.1f} s (markdown changes),"
            f" {plan_only['writes']} in {plan_only['seconds']:.1f} s (plan only);"
            f" a changed markdown adds {write_ms:.2f} ms per write"
        )
        problems = [
            text
            for ok, text in (
                (render["stages match render"], "the stage breakdown no longer matches render()"),
                (changed["revisions ok"] and plan_only["revisions ok"], "revisions skipped"),
                (changed["html ok"] and plan_only["html ok"], "stored HTML is not the note's"),
            )
            if not ok
        ]
        for problem in problems:
            print(f"  WARNING: {problem}")
