"""Search: server time of `search.find` (and `search.count`) over 100,000 sessions and
1,000,000 transcript messages (DESIGN.md §6: ≤ 100 ms).

A fresh database is migrated (SQLite in a temporary directory, or a dedicated PostgreSQL
database `onlooker_bench_search` when DATABASE_URL is set), then filled in bulk, as fast as
the database takes it (raw SQL; COPY on PostgreSQL), through the same triggers / generated
columns that keep the index on the write path: sessions of 40 agents in 4 teams (and 8
agents of no team), their own text (title, agent name, plan steps, note) and on average 10
messages each. The text is drawn from a generated vocabulary of 20,000 words with Zipf-like
frequencies (the most common word is in most messages, the 1,000th in about 0.2% of them),
plus marker words at known rates: a rare one (about 20 messages), one in some titles.

Each query is then timed `--rounds` times after a warm-up, as a member of one team sees it
(`Session.objects.visible_to(user)`: that team's sessions and those of agents of no team),
one query also as a superuser (no filter): `find` for the first page of 50 (snippets
included) and `count`. Server time is the function call's wall time, in this process.

    python -m tests.benchmarks search [--sessions N] [--messages M] [--rounds R]

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from tests.benchmarks.workspace import Workspace

DESCRIPTION = "ms per search.find / search.count over 100,000 sessions and 1,000,000 messages"

BENCH_DATABASE = "onlooker_bench_search"
WARMUP_ROUNDS = 3
AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
VOCABULARY = 20_000
TEAMS = 4
AGENTS_PER_TEAM = 10
OPEN_AGENTS = 8
RARE = "zephyrine"  # in about RARE_MESSAGES messages
RARE_MESSAGES = 20
TITLE_WORD = "kubernetes"  # in about 1 title in TITLE_EVERY
TITLE_EVERY = 500
ONSET, NUCLEUS, CODA = "bcdfghklmnprstvwz", "aeiou", ("", "n", "r", "s", "l", "t")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=30, help="timed calls of each query")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--profile", metavar="QUERY", help="cProfile 10 calls of find for this text, and stop"
    )


def run(args: argparse.Namespace) -> int:
    if min(args.sessions, args.messages, args.rounds) < 1:
        raise SystemExit("--sessions, --messages and --rounds ≥ 1, please")
    database_url = os.environ.get("DATABASE_URL", "").strip()
    with Workspace(database_url, database=BENCH_DATABASE) as workspace:
        print(f"search: {workspace.description}; migrating…", flush=True)
        workspace.set_up_here()
        from django.db import connections

        try:
            built = build(args)
            if args.profile:
                return profile(args.profile, built)
            results = measure(args, built)
        finally:
            connections.close_all()
    print_report(args, built, results, workspace.description)
    return 0


# -- the data ---------------------------------------------------------------------------------


def vocabulary(rng: random.Random) -> list[str]:
    words: list[str] = []
    seen = {RARE, TITLE_WORD}
    while len(words) < VOCABULARY:
        syllables = rng.choice((1, 2, 2, 3, 3, 4))
        word = "".join(
            rng.choice(ONSET) + rng.choice(NUCLEUS) + rng.choice(CODA) for _ in range(syllables)
        )
        if len(word) >= 3 and word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Text:
    """Sentences of Zipf-distributed words (rank r drawn with weight 1/r)."""

    def __init__(self, rng: random.Random, words: list[str]) -> None:
        self.rng, self.words = rng, words
        self.cumulative = list(itertools.accumulate(1 / rank for rank in range(1, len(words) + 1)))

    def sentence(self, low: int, high: int) -> str:
        count = self.rng.randint(low, high)
        words = self.rng.choices(self.words, cum_weights=self.cumulative, k=count)
        return " ".join(words).capitalize() + "."


def build(args: argparse.Namespace) -> dict:
    from django.contrib.auth.models import Group, User
    from django.db import connection, transaction

    from tasks.models import Agent

    rng = random.Random(args.seed)
    words = vocabulary(rng)
    text = Text(rng, words)
    teams = [Group.objects.create(name=f"team-{n}") for n in range(TEAMS)]
    agents = []
    for number in range(TEAMS * AGENTS_PER_TEAM + OPEN_AGENTS):
        team = teams[number % TEAMS] if number < TEAMS * AGENTS_PER_TEAM else None
        agents.append(
            Agent.objects.create(
                name=f"{words[number * 37].capitalize()} {words[number * 53 + 1]} agent",
                card_url="http://agent.invalid/.well-known/agent-card.json",
                rpc_url="http://agent.invalid/a2a/jsonrpc",
                protocol_version="1.0",
                team=team,
            )
        )
    member = User.objects.create_user("member")
    member.groups.add(teams[0])
    boss = User.objects.create_superuser("boss")

    started = time.perf_counter()
    sessions, session_texts, messages = [], [], []
    rare_every = max(1, args.messages // RARE_MESSAGES)
    per_session = args.messages / args.sessions
    message_id = 0
    for number in range(1, args.sessions + 1):
        agent = agents[rng.randrange(len(agents))]
        updated = AT + timedelta(seconds=number * 30 + rng.randint(0, 20))
        title = text.sentence(3, 8)[:-1]
        if number % TITLE_EVERY == 0:
            title += f" on {TITLE_WORD}"
        plan = "\n".join(text.sentence(2, 5)[:-1] for _ in range(rng.randint(0, 6)))
        note = " ".join(text.sentence(6, 16) for _ in range(rng.randint(0, 3)))
        sessions.append((number, agent.pk, f"ctx-{number}", title, updated))
        session_texts.append((number, title, agent.name, plan, note))
        wanted = round(per_session * number) - message_id
        for index in range(wanted):
            message_id += 1
            body = text.sentence(8, 30)
            if message_id % rare_every == 0:
                body = f"{body} Saw {RARE} again."
            role = "ROLE_USER" if index == 0 else "ROLE_AGENT"
            at = updated - timedelta(seconds=wanted - index)
            messages.append((message_id, number, role, body, at))
    generated = time.perf_counter() - started

    started = time.perf_counter()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            _copy_postgres(connection, sessions, session_texts, messages)
        else:
            _insert_sqlite(connection, sessions, session_texts, messages)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE")
        else:
            cursor.execute("ANALYZE")
    analyzed = time.perf_counter() - started
    return {
        "words": words,
        "member": member,
        "boss": boss,
        "sessions": len(sessions),
        "messages": len(messages),
        "generated": generated,
        "loaded": loaded,
        "analyzed": analyzed,
    }


def _insert_sqlite(connection, sessions, session_texts, messages) -> None:
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO tasks_session (id, agent_id, context_id, title, state, needs_human, "
            "created_at, updated_at) VALUES (%s, %s, %s, %s, 'TASK_STATE_COMPLETED', false, "
            "%s, %s)",
            [(pk, agent, ctx, title, at, at) for pk, agent, ctx, title, at in sessions],
        )
        cursor.executemany(
            "INSERT INTO tasks_sessiontext (session_id, title, agent, plan, note) "
            "VALUES (%s, %s, %s, %s, %s)",
            session_texts,
        )
        for start in range(0, len(messages), 50_000):
            cursor.executemany(
                "INSERT INTO tasks_message (id, session_id, message_id, role, text, at, "
                "estimated_time, card_update, parts, files) "
                "VALUES (%s, %s, '', %s, %s, %s, false, false, '[]', '[]')",
                messages[start : start + 50_000],
            )


def _copy_postgres(connection, sessions, session_texts, messages) -> None:
    raw = connection.connection  # psycopg's own, for COPY
    with raw.cursor() as cursor:
        columns = "id, agent_id, context_id, title, state, needs_human, created_at, updated_at"
        with cursor.copy(f"COPY tasks_session ({columns}) FROM STDIN") as copy:
            for pk, agent, ctx, title, at in sessions:
                copy.write_row((pk, agent, ctx, title, "TASK_STATE_COMPLETED", False, at, at))
        with cursor.copy(
            "COPY tasks_sessiontext (session_id, title, agent, plan, note) FROM STDIN"
        ) as copy:
            for row in session_texts:
                copy.write_row(row)
        columns = (
            "id, session_id, message_id, role, text, at, estimated_time, card_update, parts, files"
        )
        with cursor.copy(f"COPY tasks_message ({columns}) FROM STDIN") as copy:
            for pk, session, role, body, at in messages:
                copy.write_row((pk, session, "", role, body, at, False, False, "[]", "[]"))
        for table in ("tasks_session", "tasks_message"):
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT MAX(id) FROM {table}))"
            )


# -- measuring --------------------------------------------------------------------------------


def queries(words: list[str]) -> list[tuple[str, str, bool]]:
    """(what, text, as the superuser)."""
    return [
        ("rare word", RARE, False),
        ("word in ~0.2% of messages", words[999], False),
        ("word in ~2% of messages", words[99], False),
        ("word in ~9% of messages", words[19], False),
        ("most common word", words[0], False),
        ("most common word, no filter", words[0], True),
        ("two words", f"{words[149]} {words[299]}", False),
        ("prefix (4 letters)", words[499][:4], False),
        ("title word", TITLE_WORD, False),
        ("title word, no filter", TITLE_WORD, True),
        ("three words, last a prefix", f"{words[9]} {words[59]} {words[199][:3]}", False),
        ("no match", "qqqxqqq", False),
    ]


def profile(text: str, built: dict) -> int:
    import cProfile
    import pstats

    from tasks.models import Session
    from tasks.sessions import search

    sessions = Session.objects.visible_to(built["member"])
    search.find(sessions, text)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(10):
        search.find(sessions, text)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return 0


def _timed(call) -> tuple[float, float, object]:
    """Wall time and this thread's CPU time (SQLite runs in it; PostgreSQL does not)."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    result = call()
    return time.perf_counter() - started, time.thread_time() - started_cpu, result


def measure(args: argparse.Namespace, built: dict) -> list[dict]:
    from tasks.models import Session
    from tasks.sessions import search

    results = []
    for what, text, unfiltered in queries(built["words"]):
        user = built["boss"] if unfiltered else built["member"]
        find_times, find_cpu, count_times = [], [], []
        hits, total = [], 0
        sessions = Session.objects.visible_to(user)
        for round_number in range(WARMUP_ROUNDS + args.rounds):
            elapsed, cpu, hits = _timed(lambda s=sessions, t=text: search.find(s, t, limit=50))
            counted, _, total = _timed(lambda s=sessions, t=text: search.count(s, t))
            if round_number >= WARMUP_ROUNDS:
                find_times.append(elapsed)
                find_cpu.append(cpu)
                count_times.append(counted)
        results.append(
            {
                "what": what,
                "text": text,
                "hits": len(hits),
                "total": total,
                "snippets": sum(hit.snippet is not None for hit in hits),
                "find": _percentiles(find_times),
                "find cpu": _percentiles(find_cpu),
                "count": _percentiles(count_times),
            }
        )
    return results


def _percentiles(times: list[float]) -> dict:
    ordered = sorted(times)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


# -- report -----------------------------------------------------------------------------------


def print_report(args: argparse.Namespace, built: dict, results: list[dict], database: str) -> None:
    print(f"\ndatabase: {database}")
    print(
        f"{built['sessions']:,} sessions, {built['messages']:,} messages; generated in "
        f"{built['generated']:.0f} s, loaded (indexed) in {built['loaded']:.0f} s, "
        f"analyzed in {built['analyzed']:.0f} s; {args.rounds} timed calls per query"
    )
    print("member of 1 of 4 teams (sees ~35% of sessions) unless 'no filter'; find = page of 50")
    print("ms; CPU = this process's thread (on SQLite, the query's work; on PostgreSQL, only ours)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    header = (
        f"{'query':<30} {'text':<24} {'total':>6} {'find p50':>9} {'p95':>7} {'CPU p50':>8} "
        f"{'count p50':>10} {'p95':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in results:
        find, count = row["find"], row["count"]
        print(
            f"{row['what']:<30} {row['text'][:24]:<24} {row['total']:>6} "
            f"{1000 * find['p50']:>9.1f} {1000 * find['p95']:>7.1f} "
            f"{1000 * row['find cpu']['p50']:>8.1f} "
            f"{1000 * count['p50']:>10.1f} {1000 * count['p95']:>7.1f}"
        )
    print("-" * len(header))
    worst = max(row["find"]["p95"] for row in results)
    print(f"slowest find p95: {1000 * worst:.1f} ms (target ≤ 100 ms)")
    print(json.dumps({row["what"]: round(1000 * row["find"]["p95"], 1) for row in results}))
