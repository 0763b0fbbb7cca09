"""Ending live sockets when access ends: the cost of one access sweep over `--sockets` open
sockets (what `tasks.live.access` runs once a second per process) against re-checking a socket's
access on every message it would be sent.

A child process (django.setup() on a fresh database: SQLite in a temporary directory or,
when DATABASE_URL is set, a dedicated PostgreSQL database `onlooker_bench_sockets`, dropped
at the end) makes `--teams` teams, `--people` people (each on one or two teams, one a
superuser), `--sessions` sessions spread over one agent per team, and one Django login per
socket (sockets as many browsers: every socket has its own session); half the sockets are on
a session page. Then it times `access.verdicts`, the function the sweep runs off the event
loop, with the sockets the consumer would register:

- the first sweep over all sockets (it decodes every stored session once),
- `--sweeps` steady sweeps (a session is decoded again only when its stored data or the
  user's password changed),
- `--checks` single-socket checks: what re-checking on every message costs per message and
  socket (each is one call with one socket, i.e. the same queries for one).

CPU is this process's (`time.process_time`): Python, the ORM and, on SQLite, the database
engine; on PostgreSQL the server's own CPU is not included. Queries are counted with
Django's CaptureQueriesContext. The per-message figures are projected for `--rates`
messages per second reaching every socket.

    python -m tests.benchmarks socket_access [--sockets N] [--sweeps N] [--rates 1,10]

The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from tests.benchmarks.workspace import Workspace
from tests.processes import ROOT

DESCRIPTION = "access sweep over 1,000 live sockets vs re-checking access on every message"

BENCH_DATABASE = "onlooker_bench_sockets"
WARMUP = 3

CHILD = """
import sys
from tests.benchmarks.socket_access import child_main

sys.exit(child_main(sys.argv[1]))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sockets", type=int, default=1000, help="open sockets (logins)")
    parser.add_argument("--people", type=int, default=100, help="people the sockets belong to")
    parser.add_argument("--teams", type=int, default=10, help="teams")
    parser.add_argument("--sessions", type=int, default=200, help="sessions (session pages)")
    parser.add_argument("--sweeps", type=int, default=20, help="steady sweeps timed")
    parser.add_argument("--checks", type=int, default=300, help="single-socket checks timed")
    parser.add_argument(
        "--rates",
        default="1,10",
        help="messages per second to every socket, for the per-message projection",
    )


def run(args: argparse.Namespace) -> int:
    try:
        rates = [float(rate) for rate in args.rates.split(",")]
    except ValueError:
        raise SystemExit("--rates is a comma-separated list of numbers, e.g. 1,10") from None
    counts = (args.sockets, args.people, args.teams, args.sessions, args.sweeps, args.checks)
    if min(counts) < 1 or not rates or min(rates) <= 0:
        raise SystemExit("counts ≥ 1 and rates > 0, please")
    # As an exception, a SIGTERM unwinds: the child is killed and the database dropped.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    params = {
        "sockets": args.sockets,
        "people": args.people,
        "teams": args.teams,
        "sessions": args.sessions,
        "sweeps": args.sweeps,
        "checks": args.checks,
    }
    with Workspace(os.environ.get("DATABASE_URL", "").strip(), database=BENCH_DATABASE) as space:
        env = space.onlooker_env()
        print(f"socket_access: {space.description}; {os.cpu_count()} CPUs; migrating…", flush=True)
        _run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env)
        output = _run([sys.executable, "-c", CHILD, json.dumps(params)], env)
        results = json.loads(output.splitlines()[-1])
    print_report(results, rates)
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run(command: list[str], env: dict[str, str]) -> str:
    # stderr goes to the terminal: the child reports its progress there.
    result = subprocess.run(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, timeout=900, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed with exit code {result.returncode}")
    return result.stdout


# -- the child --------------------------------------------------------------------------------


def child_main(raw_params: str) -> int:
    import django

    django.setup()
    from django.db import connection

    params = json.loads(raw_params)
    _log("making teams, people, sessions and logins")
    sockets = _make_sockets(params)
    results = {
        "database": connection.vendor,
        "sockets": len(sockets),
        "people": params["people"],
        "page sockets": sum(1 for s in sockets if s.page_session is not None),
    }
    _log(f"timing sweeps over {len(sockets)} sockets")
    results["first sweep"] = _timed([sockets], warmup=0)
    results["steady sweep"] = _timed([sockets] * params["sweeps"], warmup=WARMUP)
    _log(f"timing {params['checks']} single-socket checks")
    singles = [[sockets[n % len(sockets)]] for n in range(params["checks"])]
    results["per message"] = _timed(singles, warmup=WARMUP)
    print(json.dumps(results))
    return 0


def _timed(calls: list[list], *, warmup: int) -> dict:
    """Median CPU and wall milliseconds and the queries of `access.verdicts`, once per list
    of sockets in `calls`, after `warmup` untimed calls."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tasks.live import access

    for watched in calls[:warmup]:
        access.verdicts(watched)
    cpu, wall, queries = [], [], []
    for watched in calls:
        with CaptureQueriesContext(connection) as captured:
            started, started_cpu = time.perf_counter(), time.process_time()
            closing = access.verdicts(watched)
            cpu.append((time.process_time() - started_cpu) * 1000)
            wall.append((time.perf_counter() - started) * 1000)
        queries.append(len(captured.captured_queries))
        if closing:
            raise SystemExit(f"{len(closing)} sockets lost access: the setup is wrong")
    return {
        "n": len(calls),
        "cpu_ms": statistics.median(cpu),
        "wall_ms": statistics.median(wall),
        "max_wall_ms": max(wall),
        "queries": sorted(set(queries)),
    }


def _make_sockets(params: dict) -> list:
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import Group, User
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from tasks.live import access
    from tasks.models import Agent, Session

    teams = [Group.objects.create(name=f"team {n}") for n in range(params["teams"])]
    agents = [
        Agent.objects.create(
            name=f"Agent of {team.name}",
            card_url="http://agent.invalid/.well-known/agent-card.json",
            rpc_url="http://agent.invalid/a2a/jsonrpc",
            protocol_version="1.0",
            team=team,
        )
        for team in teams
    ]
    # Fixture rows, not agent events: what is measured reads sessions, never writes them.
    now = timezone.now()
    sessions = Session.objects.bulk_create(
        Session(agent=agents[n % len(agents)], context_id=f"bench-{n}", updated_at=now)
        for n in range(params["sessions"])
    )
    by_team = {team.pk: [s for s in sessions if s.agent.team_id == team.pk] for team in teams}
    people = []
    for n in range(params["people"]):
        if n == 0:
            person = User.objects.create_superuser(f"person{n}")
        else:
            person = User.objects.create_user(f"person{n}")
            person.groups.add(teams[n % len(teams)], teams[(n * 7) % len(teams)])
        people.append(person)
    backend = settings.AUTHENTICATION_BACKENDS[-1]
    wanted = []
    for n in range(params["sockets"]):
        person = people[n % len(people)]
        # The socket's page: a session of the person's first team, or the overview.
        mine = by_team[teams[n % len(people) % len(teams)].pk] or sessions
        page = mine[(n // 2) % len(mine)].pk if n % 2 else None
        store = SessionStore()
        store[SESSION_KEY] = str(person.pk)
        store[BACKEND_SESSION_KEY] = backend
        store[HASH_SESSION_KEY] = person.get_session_auth_hash()
        store.create()
        wanted.append((person, store.session_key, page))
    superusers = {person.pk: person.is_superuser for person in people}
    allowed = access.allowed_groups(superusers, [(p.pk, page) for p, _, page in wanted])
    return [
        access.Watched(person.pk, key, page, frozenset(groups), revoke=None)
        for (person, key, page), groups in zip(wanted, allowed, strict=True)
    ]


def _log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


# -- report -----------------------------------------------------------------------------------


def print_report(results: dict, rates: list[float]) -> None:
    sockets = results["sockets"]
    first, steady, single = results["first sweep"], results["steady sweep"], results["per message"]
    header = ("approach", "n", "queries", "CPU ms", "wall ms", "per second", "queries/s", "CPU")
    rows = [
        _row("first sweep (decodes every session)", first, "once", None, None),
        _row(f"sweep of {sockets} sockets, steady", steady, "1 sweep", 1, steady["cpu_ms"]),
    ]
    for rate in rates:
        checks = rate * sockets
        rows.append(
            _row(
                f"re-check per message, {rate:g} msg/s to each socket",
                single,
                f"{checks:,.0f} checks",
                checks,
                checks * single["cpu_ms"],
            )
        )
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    print()
    for number, row in enumerate([header, *rows]):
        cells = [
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells))
        if number == 0:
            print("-" * len("  ".join(cells)))
    print(
        f"\n{results['database']}; {sockets} sockets of {results['people']} people (one a "
        f"superuser), {results['page sockets']} on a session page, each socket its own login. "
        "CPU and wall are medians per call of access.verdicts (one sweep, or one socket's "
        "check); CPU is a share of one core, this process only (on PostgreSQL the server's "
        "work is not in it). The sweep runs once a second per process, off the event loop."
    )


def _row(label: str, measured: dict, per_second: str, calls: float | None, cpu_ms):
    queries = measured["queries"]
    per_call = max(queries)
    return (
        label,
        str(measured["n"]),
        "/".join(str(q) for q in queries),
        f"{measured['cpu_ms']:.2f}",
        f"{measured['wall_ms']:.2f}",
        per_second,
        "-" if calls is None else f"{calls * per_call:,.0f}",
        "-" if cpu_ms is None else f"{cpu_ms / 10:.1f}%",
    )
