"""`python manage.py set_agent_policy AGENT_ID [--expire-after 4h | --no-expiry]
[--on-expiry deny|leave] [--no-self-approval | --allow-self-approval] [--per-person |
--shared-credential] [--json]`: change the
team's policy for what an agent asks after it was registered (the admin changes it too).
What is not given stays as it is; the policy as it is now is printed."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from tasks.answering import agent_policy
from tasks.models import Agent


class Command(BaseCommand):
    help = "Change an agent's expiry and self-approval policy; prints the policy as it is now."

    def add_arguments(self, parser) -> None:
        parser.add_argument("agent_id", help="the agent's number (add_agent printed it)")
        expiry = parser.add_mutually_exclusive_group()
        expiry.add_argument(
            "--expire-after",
            metavar="DURATION",
            help="a question still open this long expires, e.g. 4h, 30m, 1d2h (1 minute to 30 "
            "days)",
        )
        expiry.add_argument(
            "--no-expiry", action="store_true", help="questions wait until someone answers"
        )
        parser.add_argument(
            "--on-expiry",
            choices=agent_policy.ON_EXPIRY,
            help="deny: an expired approval or connection is denied on the team's behalf; "
            "leave: only marked expired, the agent keeps waiting",
        )
        duties = parser.add_mutually_exclusive_group()
        duties.add_argument(
            "--no-self-approval",
            action="store_const",
            const=True,
            dest="no_self_approval",
            help="whoever started a task from the composer cannot approve its approvals",
        )
        duties.add_argument(
            "--allow-self-approval",
            action="store_const",
            const=False,
            dest="no_self_approval",
            help="whoever started a task may approve its approvals too",
        )
        credentials = parser.add_mutually_exclusive_group()
        credentials.add_argument(
            "--per-person",
            action="store_const",
            const=True,
            dest="per_person",
            help="answers need the person's own credential",
        )
        credentials.add_argument(
            "--shared-credential",
            action="store_const",
            const=False,
            dest="per_person",
            help="a person without their own credential answers with the shared one",
        )
        parser.add_argument("--json", action="store_true", help="print the policy as JSON")

    def handle(self, *args, agent_id: str, **options) -> None:
        agent = self._agent(agent_id)
        expire_after = agent_policy.UNCHANGED
        if options["no_expiry"]:
            expire_after = None
        elif options["expire_after"] is not None:
            try:
                expire_after = agent_policy.parse_expiry(options["expire_after"])
            except agent_policy.PolicyError as error:
                raise CommandError(f"--expire-after: {error}") from None
        given = (
            expire_after,
            options["on_expiry"],
            options["no_self_approval"],
            options["per_person"],
        )
        if given == (agent_policy.UNCHANGED, None, None, None):
            raise CommandError(
                "nothing to change: give --expire-after or --no-expiry, --on-expiry, "
                "--no-self-approval or --allow-self-approval, or --per-person or "
                "--shared-credential"
            )
        changed = agent_policy.set_policy(
            agent,
            expire_after=expire_after,
            on_expiry=options["on_expiry"],
            no_self_approval=options["no_self_approval"],
            per_person=options["per_person"],
        )
        if options["json"]:
            self.stdout.write(json.dumps({"agent": agent.pk, **agent_policy.as_json(agent)}))
            return
        said = "Changed" if changed else "Unchanged (it was so already)"
        self.stdout.write(
            self.style.SUCCESS(f"{said}: the policy of {agent.name} (agent {agent.pk}).")
        )
        for line in agent_policy.describe(agent):
            self.stdout.write(line)
        if agent.expire_after is None and options["on_expiry"]:
            self.stdout.write("On expiry applies once an expiry is set (--expire-after).")

    def _agent(self, agent_id: str) -> Agent:
        if not agent_id.isascii() or not agent_id.isdigit():
            raise CommandError(f"{agent_id!r} is not an agent's number (add_agent printed it)")
        agent = Agent.objects.filter(pk=int(agent_id)).first()
        if agent is None:
            raise CommandError(f"there is no agent {agent_id}: nothing was changed")
        return agent
