"""`python manage.py apply_deliveries [--once]`: the applier on its own.

For deployments whose web processes only keep pushes (`ONLOOKER_APPLIER=external`), and for
applying what is pending by hand. Safe beside other appliers on PostgreSQL: batches are
claimed with SKIP LOCKED."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from tasks.pushes import applier, process
from tasks.runtime.loop import run_in_foreground


class Command(BaseCommand):
    help = "Apply received pushes: drain what is pending (--once) or keep applying until stopped."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="apply what is pending now, then exit"
        )
        parser.add_argument(
            "--child",
            action="store_true",
            help="run as a server's applier process (tasks/pushes/process.py): woken on "
            "stdin, answering on stdout; not for people",
        )
        parser.add_argument(
            "--shared",
            action="store_true",
            help="run as the one applier of `manage.py serve`'s server processes: woken on "
            "stdin, hints through Redis; not for people",
        )
        parser.add_argument(
            "--poll",
            type=float,
            default=0.2,
            help="seconds between looks for new deliveries (default 0.2)",
        )

    def handle(self, *args, once: bool, poll: float, child: bool, shared: bool, **options) -> None:
        if poll <= 0:
            raise CommandError("--poll must be more than 0 seconds")
        if shared and not settings.REDIS_URL:
            raise CommandError("--shared needs REDIS_URL: its hints reach the servers through it")
        if child or shared:
            process.run_child(applier.Background(), shared=shared)
            return
        if once:
            applied = applier.drain()
            self.stdout.write(f"Applied {applied} deliveries.")
            return
        run_in_foreground(
            applier.Background(poll_seconds=poll), self.stdout.write, "Applying deliveries"
        )
