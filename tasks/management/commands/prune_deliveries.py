"""`python manage.py prune_deliveries --older-than 30d`: forget old raw deliveries.

A delivery row is the push as received and its idempotency key. Agents retry a push for at
most a day (profile v2), so after that the key has done its job; what the push changed stays
in sessions, tasks, cards and the transcript."""

from __future__ import annotations

import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from tasks.pushes import deliveries

_AGE = re.compile(r"^(\d+)([hd])$")
MIN_AGE = timedelta(days=2)  # longer than any agent retries a push


class Command(BaseCommand):
    help = "Delete deliveries received longer ago than --older-than (e.g. 30d, 72h)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--older-than", required=True, help="an age: 30d or 72h")
        parser.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    def handle(self, *args, older_than: str, dry_run: bool, **options) -> None:
        match = _AGE.match(older_than)
        if not match:
            raise CommandError(f"--older-than {older_than!r}: give an age like 30d or 72h")
        age = timedelta(**{"days" if match[2] == "d" else "hours": int(match[1])})
        if age < MIN_AGE:
            raise CommandError(
                "--older-than must be at least 2d: agents may still retry younger pushes, "
                "and their keys are what makes a retry a duplicate"
            )
        # A pending delivery is a push not applied yet (its apply keeps failing): kept until
        # it is, however old (deliveries.prune).
        if dry_run:
            count = deliveries.prune(age, dry_run=True)
            self.stdout.write(f"{count} deliveries older than {older_than} would go.")
            return
        deleted = deliveries.prune(age)
        self.stdout.write(f"Deleted {deleted} deliveries older than {older_than}.")
