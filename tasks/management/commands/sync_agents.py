"""`python manage.py sync_agents [--since 2h|2026-11-30T10:00Z] [--agent ID]`: recover
updates whose pushes never arrived. Safe to run on a schedule: a second run changes
nothing.

An agent registered twice (`add_agent --again`) lists the same tasks to both registrations:
each task is synced into the registration that holds it (or its context), never into both.

One line per agent on stdout. Whatever an agent answers, every agent is synced: an agent that
could not be synced, and each task of its list that could not be, gets a line on stderr
naming the agent and what was wrong, and the command then exits with status 1."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from tasks.answering import sync
from tasks.models import Agent
from tasks.wire import protocol

_DURATION = re.compile(r"^(\d+)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
SHOWN_PER_AGENT = 10  # lines naming tasks that could not be synced


def parse_since(value: str) -> datetime:
    match = _DURATION.match(value)
    if match:
        return timezone.now() - timedelta(**{_UNITS[match[2]]: int(match[1])})
    try:
        return protocol.parse_timestamp(value)
    except ValueError:
        raise CommandError(
            f"--since {value!r}: give a duration like 30m, 2h or 7d, or an ISO 8601 time with "
            "its zone, like 2026-11-30T10:00:00Z"
        ) from None


class Command(BaseCommand):
    help = "Ask every agent what changed since Onlooker last heard, and apply what is new."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--since", help="30m, 2h, 7d or an ISO time (default: last seen)")
        parser.add_argument("--agent", type=int, action="append", help="only this agent id")

    def handle(self, *args, since: str | None = None, agent: list[int] | None = None, **options):
        start = parse_since(since) if since else None
        agents = Agent.objects.order_by("pk")
        if agent:
            agents = agents.filter(pk__in=agent)
        failed = False
        for one in agents:
            report = sync.sync_agent(one, start)
            name = f"{one.name} (#{one.pk})"
            line = (
                f"{name}: {report.listed} listed, {report.fetched} fetched, "
                f"{report.applied} applied"
            )
            if report.elsewhere:
                # Not a failure: the agent is registered twice and the other one has them.
                line += f", {report.elsewhere} left to its other registration"
            if report.skipped:
                line += f", {len(report.skipped)} not synced"
            if report.errors:
                self.stderr.write(f"{line}; failed: {report.errors[-1]}")
            elif report.skipped:
                self.stderr.write(line)
            else:
                self.stdout.write(line)
            failed = failed or bool(report.errors or report.skipped)
            # An agent may list thousands of broken tasks: the first few say what is wrong.
            for problem in report.skipped[:SHOWN_PER_AGENT]:
                self.stderr.write(f"{name}: {problem}")
            if len(report.skipped) > SHOWN_PER_AGENT:
                more = len(report.skipped) - SHOWN_PER_AGENT
                self.stderr.write(f"{name}: and {more} more tasks not synced")
            for warning in report.warnings:
                self.stderr.write(f"{name}: {warning}")
        if failed:
            raise CommandError("some agents could not be synced (see above)")
