"""`python -m tests.benchmarks <benchmark> [options]`.

A benchmark is a module here with `DESCRIPTION`, `add_arguments(parser)` and
`run(args) -> int`; list it in BENCHMARKS to make it a subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand → module. Modules are imported only when their subcommand runs, so one
# benchmark's dependencies never stop another from starting.
BENCHMARKS = {
    "ingest": "tests.benchmarks.ingest",
    "batch": "tests.benchmarks.batch",
    "burst": "tests.benchmarks.burst",
    "cards": "tests.benchmarks.cards",
    "render": "tests.benchmarks.render",
    "live": "tests.benchmarks.live",
    "socket_access": "tests.benchmarks.socket_access",
    "notify": "tests.benchmarks.notify",
    "search": "tests.benchmarks.search",
    "decisions": "tests.benchmarks.decisions",
    "activity": "tests.benchmarks.activity",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks")
    parser.add_argument("benchmark", choices=sorted(BENCHMARKS), help="which benchmark to run")
    known = parser.parse_args(argv[:1])
    module = importlib.import_module(BENCHMARKS[known.benchmark])
    sub = argparse.ArgumentParser(
        prog=f"python -m tests.benchmarks {known.benchmark}", description=module.DESCRIPTION
    )
    module.add_arguments(sub)
    args = sub.parse_args(argv[1:])
    try:
        return module.run(args)
    except KeyboardInterrupt:
        # The benchmark's own cleanup (servers, databases) has run by the time this arrives.
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
