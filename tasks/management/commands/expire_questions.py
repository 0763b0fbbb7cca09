"""`python manage.py expire_questions [--once]`: the expirer on its own (answering/expiry.py).

For deployments whose web processes do not run timed work (`ONLOOKER_NOTIFIER=external`),
and for expiring what is due by hand. Safe beside other expirers: each round of a question
is expired by one conditional update, so two expirers never deny it twice."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tasks.answering import expiry
from tasks.runtime.loop import run_in_foreground


class Command(BaseCommand):
    help = (
        "Expire questions open longer than their agent's declared expiry: what is due now "
        "(--once), or keep looking until stopped."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--once", action="store_true", help="expire what is due now, then exit")
        parser.add_argument(
            "--poll",
            type=float,
            default=expiry.POLL_SECONDS,
            help=f"seconds between looks (default {expiry.POLL_SECONDS})",
        )

    def handle(self, *args, once: bool, poll: float, **options) -> None:
        if poll <= 0:
            raise CommandError("--poll must be more than 0 seconds")
        if once:
            done = 0
            while True:  # a batch at a time, until a batch comes back short
                expired = expiry.expire_due()
                done += expired
                if expired < expiry.BATCH:
                    break
            self.stdout.write(f"Expired {done} question{'' if done == 1 else 's'}.")
            return
        run_in_foreground(
            expiry.Background(poll_seconds=poll), self.stdout.write, "Expiring questions"
        )
