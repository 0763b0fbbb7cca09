import json

from django.core.management.base import BaseCommand, CommandError

from tasks.models.notify import NotificationChannel
from tasks.notify.channels import ChannelError, add, parse_interval

Kind = NotificationChannel.Kind


class Command(BaseCommand):
    help = (
        "Give a team a notification channel: a Slack-compatible incoming webhook, a signed "
        "webhook (its signing secret is shown only this once) or an email address."
    )

    def add_arguments(self, parser):
        parser.add_argument("--team", required=True, help="the team (group; made if missing)")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--slack", metavar="URL", help="a Slack-compatible incoming webhook")
        where.add_argument("--webhook", metavar="URL", help="a URL for signed JSON events")
        where.add_argument("--email", metavar="ADDRESS", help="an email address")
        parser.add_argument(
            "--remind-after",
            metavar="DURATION",
            default="",
            help="remind while still open after this long, e.g. 15m (at most 3 reminders)",
        )
        parser.add_argument(
            "--after",
            metavar="DURATION",
            default="",
            help="an escalation channel: told only of questions still open this long, e.g. 30m "
            "(as interaction.escalated)",
        )
        parser.add_argument(
            "--slack-signing-secret",
            metavar="SECRET",
            default="",
            help="the Slack app's signing secret: its messages get Approve/Deny buttons, whose "
            "clicks come back to the printed interactions URL",
        )
        parser.add_argument(
            "--allow-private",
            action="store_true",
            help=(
                "let a --slack or --webhook URL go to a loopback, private, link-local or other "
                "non-public address (refused otherwise: Onlooker would post from inside your "
                "network to services that trust it)"
            ),
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="print one JSON object: channel, kind, signing_secret, interactions_url",
        )

    def handle(self, *args, **options):
        if options["slack"] is not None:
            kind, target = Kind.SLACK, options["slack"]
        elif options["webhook"] is not None:
            kind, target = Kind.WEBHOOK, options["webhook"]
        else:
            kind, target = Kind.EMAIL, options["email"]
        try:
            interval = parse_interval(options["remind_after"]) if options["remind_after"] else None
            escalate = (
                parse_interval(options["after"], what="an escalation delay")
                if options["after"]
                else None
            )
            added = add(
                options["team"],
                kind,
                target,
                remind_after=interval,
                allow_private=options["allow_private"],
                escalate_after=escalate,
                slack_signing_secret=options["slack_signing_secret"],
            )
        except ChannelError as error:
            raise CommandError(str(error)) from None
        channel = added.channel
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "channel": channel.pk,
                        "kind": channel.kind,
                        "signing_secret": added.signing_secret,
                        "interactions_url": added.interactions_url,
                    }
                )
            )
            return
        self.stdout.write(f"Channel {channel.pk}: {channel}")
        if channel.allow_private:
            self.stdout.write("It may post to a private address.")
        if channel.escalate_after:
            self.stdout.write(
                f"Escalation channel: told only of questions still open after {options['after']}."
            )
        if added.interactions_url:
            self.stdout.write(
                "Interactions URL (paste it into the Slack app's Interactivity & Shortcuts → "
                f"Request URL): {added.interactions_url}"
            )
        if channel.remind_after:
            self.stdout.write(f"Reminds after {options['remind_after']}, at most 3 times.")
        if added.signing_secret:
            self.stdout.write(
                "Signing secret (Standard Webhooks; shown only now, keep it in the receiver): "
                + added.signing_secret
            )
