"""`python manage.py send_notifications [--once]`: the notification sender on its own.

For deployments whose web processes do not send (`ONLOOKER_NOTIFIER=external`), and for
sending what is due by hand. Safe beside other senders: rows are leased before they are
sent (SKIP LOCKED on PostgreSQL), so two senders never send the same row."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tasks.notify import sender
from tasks.runtime.loop import run_in_foreground


class Command(BaseCommand):
    help = "Send team notifications: what is due now (--once) or keep sending until stopped."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--once", action="store_true", help="send what is due now, then exit")
        parser.add_argument(
            "--poll",
            type=float,
            default=sender.POLL_SECONDS,
            help=f"seconds between looks for due notifications (default {sender.POLL_SECONDS})",
        )

    def handle(self, *args, once: bool, poll: float, **options) -> None:
        if poll <= 0:
            raise CommandError("--poll must be more than 0 seconds")
        if once:
            sent = sender.send_due()
            self.stdout.write(f"Sent {sent} notification{'' if sent == 1 else 's'}.")
            return
        run_in_foreground(
            sender.Background(poll_seconds=poll), self.stdout.write, "Sending notifications"
        )
