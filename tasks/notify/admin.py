"""Admin for team notification channels (added through `channels.add`, a signed webhook's
secret shown once; afterwards only whether it is on and how often it reminds may change) and
their outbox (read only: the sender alone changes it). Neither ever shows a channel's signing
secret, nor a webhook's path (often its credential): `shown_target`, and errors through
`seen.shown_error`. A channel's page alone shows its last error as the receiver said it
(which the team never sees). A Slack channel's app signing secret is typed, never shown
back; with one, the page shows the interactions URL to paste into the Slack app. Slack
members linked to accounts can be looked at and unlinked (deleted), not changed. Registered
by tasks/admin.py importing this module."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.formats import date_format

from tasks.models.notify import PRIVATE_HELP, Notification, NotificationChannel, SlackMember
from tasks.notify import channels as notify_channels
from tasks.notify import seen


def _when(at) -> str:
    return date_format(timezone.localtime(at), "DATETIME_FORMAT") if at else "—"


BOTH = "Set a new Slack signing secret, or remove it: not both."
SLACK_SECRET_HELP = (
    "Slack channels only: the Slack app's signing secret (Basic Information → App "
    "Credentials). With it, messages get Approve/Deny buttons whose clicks decide as the "
    "linked person; paste the interactions URL shown on the channel's page into the app's "
    "Interactivity settings. Never shown back."
)


class AddChannelForm(forms.Form):
    team = forms.CharField(max_length=150, help_text="The team (group) told; made if missing")
    kind = forms.ChoiceField(choices=NotificationChannel.Kind.choices)
    target = forms.CharField(
        label="Webhook URL or email address",
        max_length=2000,
        # A Slack URL is a credential: typed, never shown back.
        widget=forms.PasswordInput(render_value=True),
        help_text="Shown afterwards only as its scheme and host (an email address whole)",
    )
    remind_after = forms.CharField(
        required=False,
        help_text="Remind while still open after this long, e.g. 15m (at most 3); empty: never",
    )
    allow_private = forms.BooleanField(
        required=False, label="Allow a private address", help_text=PRIVATE_HELP
    )
    slack_signing_secret = forms.CharField(
        required=False,
        max_length=200,
        label="Slack signing secret",
        widget=forms.PasswordInput(render_value=False),
        help_text=SLACK_SECRET_HELP,
    )


class ChannelChangeForm(forms.ModelForm):
    """Whether it is on, whether it may post to a private address (a channel made before
    addresses were checked, to an internal receiver, keeps working once ticked) and how often
    it reminds: where it goes and its secret are made once (remove the channel and add
    another to change them)."""

    remind_after = forms.CharField(
        required=False,
        help_text=(
            "e.g. 15m or 1h (at most 3 reminders); empty: never. Applies to questions "
            "opened from now on."
        ),
    )

    # Not the model field's name: the admin would copy an empty one onto the channel.
    new_slack_signing_secret = forms.CharField(
        required=False,
        max_length=200,
        label="New Slack signing secret",
        # Write only: the page never holds the secret, and empty keeps the one set.
        widget=forms.PasswordInput(render_value=False),
        help_text=SLACK_SECRET_HELP + " Leave empty to keep the one set.",
    )
    remove_slack_signing_secret = forms.BooleanField(
        required=False,
        label="Remove the Slack signing secret",
        help_text="Its buttons stop deciding: clicks are refused from now on.",
    )

    class Meta:
        model = NotificationChannel
        fields = ("enabled", "allow_private", "remind_after")
        labels = {"allow_private": "Allow a private address"}
        help_texts = {"allow_private": PRIVATE_HELP}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        interval = self.instance.remind_after if self.instance.pk else None
        self.initial["remind_after"] = _interval_text(interval)

    def clean(self):
        data = super().clean()
        secret = (data.get("new_slack_signing_secret") or "").strip()
        if data.get("remove_slack_signing_secret"):
            if secret:
                raise forms.ValidationError(BOTH)
            self.instance.slack_signing_secret = ""
        elif secret:
            if self.instance.kind != NotificationChannel.Kind.SLACK:
                raise forms.ValidationError("Only a Slack channel has a Slack signing secret.")
            try:
                self.instance.slack_signing_secret = notify_channels.check_slack_signing_secret(
                    secret
                )
            except notify_channels.ChannelError as error:
                self.add_error("new_slack_signing_secret", str(error))
        return data

    def clean_remind_after(self):
        text = self.cleaned_data["remind_after"].strip()
        if not text:
            return None
        try:
            return notify_channels.parse_interval(text)
        except notify_channels.ChannelError as error:
            raise forms.ValidationError(str(error)) from None


def _interval_text(interval) -> str:
    """A timedelta as `parse_interval` reads it back: "1h30m"."""
    if interval is None:
        return ""
    seconds, text = int(interval.total_seconds()), ""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size:
            text += f"{seconds // size}{unit}"
            seconds %= size
    return text


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    # Never the target whole (a Slack or webhook URL's path is its credential) nor the
    # signing secret: both are shown once, when the channel is made.
    form = ChannelChangeForm
    list_display = (
        "team",
        "kind",
        "goes_to",
        "enabled",
        "reminders",
        "last_success",
        "last_error_shown",
    )
    list_filter = ("kind", "enabled", "team")
    list_select_related = ("team",)
    fields = (
        "team",
        "kind",
        "goes_to",
        "allow_private",
        "enabled",
        "remind_after",
        "new_slack_signing_secret",
        "remove_slack_signing_secret",
        "interactions_url",
        "created_at",
        "last_success",
        "last_error_shown",
        "last_error_said",
    )
    readonly_fields = (
        "team",
        "kind",
        "goes_to",
        "interactions_url",
        "created_at",
        "last_success",
        "last_error_shown",
        "last_error_said",
    )

    def get_queryset(self, request):
        return super().get_queryset(request).defer("signing_secret")

    @admin.display(description="goes to")
    def goes_to(self, channel: NotificationChannel) -> str:
        return channel.shown_target

    @admin.display(description="interactions URL")
    def interactions_url(self, channel: NotificationChannel) -> str:
        # Where Slack posts clicks: no secret (the signing secret is what authenticates them).
        url = notify_channels.interactions_url(channel)
        if url:
            return url
        if channel.kind == NotificationChannel.Kind.SLACK:
            return "— (set the Slack signing secret for buttons that decide)"
        return "—"

    @admin.display(description="reminders")
    def reminders(self, channel: NotificationChannel) -> str:
        if not channel.remind_after:
            return "none"
        return f"every {seen.interval_words(channel.remind_after)}, at most 3"

    @admin.display(description="last success", ordering="last_success_at")
    def last_success(self, channel: NotificationChannel) -> str:
        return _when(channel.last_success_at)

    @admin.display(description="last error", ordering="last_error_at")
    def last_error_shown(self, channel: NotificationChannel) -> str:
        if channel.last_error_at is None:
            return "—"
        return f"{_when(channel.last_error_at)}: {seen.shown_error(channel) or '(no text)'}"

    @admin.display(description="last error, as the receiver said it")
    def last_error_said(self, channel: NotificationChannel) -> str:
        # The receiver's own words: for the admin only (the team sees last_error). Its URL's
        # path and any signing secret are taken out, as everywhere.
        if not channel.last_error_detail:
            return "—"
        return seen.without_secrets(channel, channel.last_error_detail)

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            return super().add_view(request, form_url, extra_context)
        form = AddChannelForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                interval = (
                    notify_channels.parse_interval(data["remind_after"])
                    if data["remind_after"].strip()
                    else None
                )
                added = notify_channels.add(
                    data["team"],
                    data["kind"],
                    data["target"],
                    remind_after=interval,
                    allow_private=data["allow_private"],
                    slack_signing_secret=data["slack_signing_secret"],
                )
            except notify_channels.ChannelError as error:
                form.add_error(None, str(error))
            else:
                channel = added.channel
                self.log_addition(request, channel, [{"added": {}}])
                if added.signing_secret is None:
                    said = f"Added the channel {channel}."
                    if added.interactions_url:
                        said += f" Its Slack app's interactions URL: {added.interactions_url}"
                    self.message_user(request, said)
                    return redirect("admin:tasks_notificationchannel_changelist")
                return self._secret_once(request, channel, added.signing_secret)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "form": form,
            "title": "Add a team channel",
        }
        return TemplateResponse(request, "admin/tasks/add_channel.html", context)

    def _secret_once(self, request, channel: NotificationChannel, secret: str):
        # Like an agent's secrets: a page of its own that no cache keeps, rather than a
        # message kept in a cookie or the session until it is shown.
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "channel": channel,
            "secret": secret,
            "title": f"Signing secret for {channel}",
        }
        response = TemplateResponse(request, "admin/tasks/channel_secret.html", context)
        response["Cache-Control"] = "no-store"
        return response


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """The outbox: what each channel was, is being or could not be told. The sender alone
    changes it."""

    list_display = (
        "created_at",
        "channel",
        "kind",
        "reminder",
        "interaction",
        "round",
        "state",
        "attempts",
        "next_attempt_at",
        "sent_at",
        "error_shown",
    )
    list_filter = ("state", "kind", "channel__team")
    list_select_related = ("channel__team", "interaction")
    fields = (
        "channel",
        "interaction",
        "round",
        "kind",
        "reminder",
        "event_id",
        "state",
        "created_at",
        "due_at",
        "attempts",
        "next_attempt_at",
        "claimed_until",
        "sent_at",
        "error_shown",
        "payload",
    )
    readonly_fields = fields
    date_hierarchy = "created_at"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        rows = super().get_queryset(request).select_related("channel__team", "interaction")
        return rows.defer("payload", "channel__signing_secret")

    @admin.display(description="last error")
    def error_shown(self, notification: Notification) -> str:
        return seen.shown_error(notification.channel, notification.last_error) or "—"


@admin.register(SlackMember)
class SlackMemberAdmin(admin.ModelAdmin):
    """Slack members linked to accounts (answering/slack_members.py): each links itself, from
    Slack; an administrator may only remove a link (a member who linked the wrong account,
    or an account that should no longer decide from Slack)."""

    list_display = ("slack_team_id", "slack_user_id", "user", "linked_at")
    list_filter = ("slack_team_id",)
    search_fields = ("slack_user_id", "user__username")
    list_select_related = ("user",)
    readonly_fields = ("slack_team_id", "slack_user_id", "user", "linked_at")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
