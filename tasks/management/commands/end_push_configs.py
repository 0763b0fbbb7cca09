"""`python manage.py end_push_configs [--keep-running]`: push configurations of ended tasks
deleted at their agents (answering/push_configs.py), one pass, printing what it did.

For deployments whose web processes do not run timed work (`ONLOOKER_NOTIFIER=external`):
run it from cron, or with --keep-running beside them. Safe beside other passes: each delete
is claimed by one of them."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tasks.answering import push_configs
from tasks.runtime.loop import run_in_foreground


class Command(BaseCommand):
    help = (
        "End the push configurations of tasks that have ended: mark them, then delete them "
        f"at their agents (at most {push_configs.BATCH} a pass; failures are retried later)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--keep-running", action="store_true", help="keep looking until stopped"
        )
        parser.add_argument(
            "--poll",
            type=float,
            default=push_configs.POLL_SECONDS,
            help=f"seconds between looks with --keep-running (default {push_configs.POLL_SECONDS})",
        )

    def handle(self, *args, keep_running: bool, poll: float, **options) -> None:
        if poll <= 0:
            raise CommandError("--poll must be more than 0 seconds")
        if keep_running:
            run_in_foreground(
                push_configs.Background(poll_seconds=poll),
                self.stdout.write,
                "Ending push configurations",
            )
            return
        ended = push_configs.end_all_finished()
        done = push_configs.delete_due()
        self.stdout.write(
            f"Ended {ended} push configuration{'' if ended == 1 else 's'} of finished tasks; "
            f"{done.words()}."
        )
        for error in done.errors:
            self.stdout.write(f"  not deleted: {error}")
