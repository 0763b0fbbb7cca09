"""`python manage.py sync_agents [--since 2h|2026-11-30T10:00Z] [--agent ID] [--as USERNAME]`:
recover updates whose pushes never arrived. Safe to run on a schedule: a second run changes
nothing.

Agents list only the tasks of the subject a call authenticated as. Without `--as` each agent
is called with its shared credential; `--as alice` calls the agents alice may see as she
would (her own credential, else the shared one), so the tasks she started elsewhere are
found too, and become sessions her team sees like any other. An agent that takes only each
person's own credential, when she has none, stops the command before anything is sent.

An agent registered twice (`add_agent --again`) lists the same tasks to both registrations:
each task is synced into the registration that holds it (or its context), never into both.

One line per agent on stdout. Whatever an agent answers, every agent is synced: an agent that
could not be synced, and each task of its list that could not be, gets a line on stderr
naming the agent and what was wrong, and the command then exits with status 1."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from tasks.answering import callers, rules, sync
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
        parser.add_argument(
            "--as",
            dest="person",
            metavar="USERNAME",
            help="call as this person (their own credential), to find the tasks they started",
        )

    def handle(
        self,
        *args,
        since: str | None = None,
        agent: list[int] | None = None,
        person: str | None = None,
        **options,
    ):
        start = parse_since(since) if since else None
        agents = Agent.objects.order_by("pk")
        if agent:
            agents = agents.filter(pk__in=agent)
        asking = _callers(list(agents), person, agent or [])
        failed = False
        for one, caller in asking:
            report = sync.sync_agent(one, start, caller=caller)
            name = f"{one.name} (#{one.pk}{f', as {person}' if person else ''})"
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


def _callers(
    agents: list[Agent], person: str | None, asked: list[int]
) -> list[tuple[Agent, callers.Caller | None]]:
    """Who calls each agent: its shared credential (None), or `person` as the agent page's
    Refresh would call, on the agents they may see and call. Everything is checked before
    anything is sent."""
    if person is None:
        return [(one, None) for one in agents]
    user = get_user_model().objects.filter(username=person, is_active=True).first()
    if user is None:
        raise CommandError(f"--as {person!r}: no active user has that username")
    if not rules.may_answer(user):
        raise CommandError(
            f"--as {person}: they may not call agents (that takes the permission to answer)"
        )
    visible = set(Agent.objects.visible_to(user).values_list("pk", flat=True))
    hidden = sorted(pk for pk in asked if pk not in visible)
    if hidden:
        raise CommandError(f"--as {person}: they may not see agent #{hidden[0]}")
    asking = []
    for one in agents:
        if one.pk not in visible:
            continue
        try:
            asking.append((one, callers.for_person(one, user)))
        except callers.NeedsCredential:
            raise CommandError(
                f"--as {person}: {one.name} (#{one.pk}) takes only each person's own "
                f"credential and {person} has none; they connect one on /settings/, or sync "
                "it without --as"
            ) from None
    return asking
