"""`python manage.py push_configs AGENT_ID [--json]`: the push configurations an agent has in
use (answering/push_configs.live): the agent's own endpoint and each task's whose config is
not deleted yet, newest first, with where its ending stands. Never a token."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from tasks.answering import push_configs
from tasks.models import Agent


class Command(BaseCommand):
    help = (
        "List an agent's push configurations in use: endpoint id, task, followed/started/"
        "the agent's own, created, ended, and whether its delete is retrying (no secrets)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("agent_id", help="the agent's id (add_agent prints it)")
        parser.add_argument("--json", action="store_true", help="print one JSON array")

    def handle(self, *args, agent_id: str, **options) -> None:
        if not agent_id.isascii() or not agent_id.isdigit() or len(agent_id) > 18:
            raise CommandError(f"AGENT_ID must be a number, not {agent_id[:40]!r}")
        agent = Agent.objects.filter(pk=int(agent_id)).first()
        if agent is None:
            raise CommandError(f"No agent {agent_id}.")
        endpoints = push_configs.live(agent)
        if options["json"]:
            self.stdout.write(json.dumps([push_configs.as_json(e) for e in endpoints]))
            return
        count = len(endpoints)
        self.stdout.write(
            f"{agent.name} (agent {agent.pk}): {count} push configuration"
            f"{'' if count == 1 else 's'} in use."
        )
        for endpoint in endpoints:
            self.stdout.write(_line(endpoint))


def _line(endpoint) -> str:
    task = f"task {endpoint.task_id}" if endpoint.task_id else "no task"
    made = endpoint.created_at.strftime("%Y-%m-%d %H:%M")
    parts = [endpoint.public_id, push_configs.kind(endpoint), task, f"created {made}"]
    if endpoint.created_for is not None:
        parts.append(f"for {endpoint.created_for.get_username()}")
    if endpoint.ended_at is not None:
        parts.append(f"ended {endpoint.ended_at.strftime('%Y-%m-%d %H:%M')}")
    parts.append(push_configs.status(endpoint))
    return "  " + " · ".join(parts)
