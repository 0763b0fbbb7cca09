"""A team's notification channels, and the outbox of events waiting to reach them.

Writers: `tasks/notify/channels.py` creates channels (the `add_channel` command, the admin);
`outbox.py` alone inserts notifications (in the transaction of the change they report);
the sender (`sender.py` with `claims.py`) alone moves them from pending to sent, skipped
or failed, and records each channel's last success and error (the short text the team
sees, and apart from it the receiver's own words, for the admin).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q

from tasks.models.sealed import SealedTextField
from tasks.wire.stored_json import StoredJSONDecoder

PRIVATE_HELP = (
    "Lets this channel post to loopback, private (10.x, 192.168.x, fc00::/7), link-local "
    "(169.254.x, where clouds answer with their credentials) and other non-public "
    "addresses. Dangerous: Onlooker posts from inside your network, so such a channel can "
    "reach services that trust it (a metadata service, an internal admin page, a database). "
    "Tick it only for a receiver you run on your own network."
)


class NotificationChannel(models.Model):
    class Kind(models.TextChoices):
        SLACK = "slack", "Slack-compatible incoming webhook"
        WEBHOOK = "webhook", "signed webhook"
        EMAIL = "email"

    # Reminders stop after this many: a question nobody answers after three is a team's
    # decision, not a notification problem.
    MAX_REMINDERS = 3

    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="notification_channels")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # The webhook URL or the email address. A Slack URL is a credential: never displayed whole.
    target = SealedTextField()
    # Standard Webhooks secret (whsec_…) for a signed webhook; shown once, when made.
    signing_secret = SealedTextField(blank=True)
    remind_after = models.DurationField(
        null=True, blank=True, help_text="remind while still open after this long (at most 3)"
    )
    # An escalation channel: told only of questions still open this long after they opened
    # (`interaction.escalated`, once per round), not of every opening.
    escalate_after = models.DurationField(
        null=True, blank=True, help_text="tell this channel only of questions still open this long"
    )
    # The Slack app's signing secret: set, Slack's button clicks on this channel's messages
    # come back to /slack/<id>/interactions and decide (notify/slack_clicks.py). Never shown.
    slack_signing_secret = SealedTextField(blank=True)
    # Off unless whoever made it said so: then it may post to loopback, private, link-local
    # and other non-public addresses (tasks/notify/targets.py).
    allow_private = models.BooleanField(
        "allow a private address",
        default=False,
        help_text=PRIVATE_HELP,
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # What the team sees of the last failure ("HTTP 403", "timed out"), on /settings/.
    last_error = models.TextField(blank=True)
    # The same with the receiver's own words, which may be an internal page's: for the
    # admin and the logs only.
    last_error_detail = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team__name", "pk"]

    def __str__(self) -> str:
        return f"{self.team.name}: {self.get_kind_display()} {self.shown_target}"

    @property
    def shown_target(self) -> str:
        """Where it goes, without what would let someone post to it: a webhook URL's path
        is often its secret (Slack's are), so only the scheme and host are shown."""
        if self.kind == self.Kind.EMAIL:
            return self.target
        scheme, _, rest = self.target.partition("://")
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        return f"{scheme}://{host}/…"


class Notification(models.Model):
    """One event for one channel: its opening, a reminder, or its resolution. Unique per
    (channel, interaction, round, kind, reminder), so a change applied twice queues once;
    the sender sends it at most once after a 2xx."""

    class Kind(models.TextChoices):
        OPENED = "interaction.opened", "opened"
        REMINDER = "interaction.reminder", "reminder"
        RESOLVED = "interaction.resolved", "resolved"
        ESCALATED = "interaction.escalated", "escalated"

    class State(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        # Not worth sending any more: answered before it went out, or its opening never did.
        SKIPPED = "skipped"
        FAILED = "failed", "gave up"

    # Retries back off exponentially from a few seconds; after this, the sender gives up.
    GIVE_UP_AFTER = timedelta(hours=24)

    channel = models.ForeignKey(
        NotificationChannel, on_delete=models.CASCADE, related_name="notifications"
    )
    interaction = models.ForeignKey(
        "tasks.Interaction", on_delete=models.CASCADE, related_name="notifications"
    )
    round = models.PositiveIntegerField()
    kind = models.CharField(max_length=24, choices=Kind.choices)
    reminder = models.PositiveSmallIntegerField(default=0, help_text="1–3 for reminders")
    # The event as it was when queued (the interaction and its session), so a retry sends
    # the same facts; only "waiting for" is worked out when it is sent.
    payload = models.JSONField(encoder=DjangoJSONEncoder, decoder=StoredJSONDecoder)
    created_at = models.DateTimeField()
    due_at = models.DateTimeField(help_text="not sent before")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # A sender that took it may be sending it until then; another takes it only after.
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "interaction", "round", "kind", "reminder"],
                name="one_notification_per_event",
            )
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="notification_due",
                condition=Q(state="pending"),
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.interaction_id}.{self.round} → {self.channel_id}: {self.state}"

    @property
    def event_id(self) -> str:
        """The same for every attempt, so a receiver can drop a repeat (`webhook-id`)."""
        suffix = f".{self.reminder}" if self.kind == self.Kind.REMINDER else ""
        return f"onl_{self.interaction_id}_{self.round}_{self.get_kind_display()}{suffix}"


class SlackMember(models.Model):
    """A Slack member linked to an Onlooker account: their clicks decide as that person,
    with that person's permissions. Made by the member themselves, logged in to Onlooker,
    from a link Slack showed only them (`SlackLinkRequest`)."""

    slack_team_id = models.CharField(max_length=40)
    slack_user_id = models.CharField(max_length=40)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_members"
    )
    linked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["slack_team_id", "slack_user_id"], name="unique_slack_member"
            )
        ]

    def __str__(self) -> str:
        return f"{self.slack_team_id}/{self.slack_user_id} → {self.user_id}"


class SlackLinkRequest(models.Model):
    """The one-time link offered to a Slack member not linked yet: its token kept as a
    digest, good for one POST within `LIFETIME`."""

    LIFETIME = timedelta(minutes=15)

    token_digest = models.CharField(max_length=64, unique=True)
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE)
    slack_team_id = models.CharField(max_length=40)
    slack_user_id = models.CharField(max_length=40)
    # What Slack calls them, to show on the page that links them ("Link Slack member @bob").
    slack_name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"link {self.slack_team_id}/{self.slack_user_id}"
