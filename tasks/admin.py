"""Admin: register agents (secrets shown once), rotate signing secrets, see refusals and
the delivery log; team notification channels and their outbox are in tasks/notify/admin.py.
Secret fields are never rendered: the OAuth client secret is typed (or removed), never shown
back. An agent's page lists its live push configurations (answering/push_configs.live)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import Group
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join

from tasks.answering import agent_policy, agents, push_configs
from tasks.models import (
    Agent,
    Artifact,
    Delivery,
    Interaction,
    Message,
    ProgressCard,
    PushEndpoint,
    Refusal,
    Session,
    Task,
)
from tasks.pushes import applier

MAX_CLIENT_ID, MAX_CLIENT_SECRET = 200, 4096
OAUTH_CLIENT_HELP = (
    "For a card that declares an OAuth 2.0 authorization code flow: the client registered "
    "at the agent's authorization server, its redirect URI Onlooker's /oauth/callback/. "
    "People then Connect on their settings page."
)
BOTH_SECRETS = "Set a new OAuth client secret, or remove it: not both."
LIVE_CONFIGS_SHOWN = 50  # the newest; the rest are counted


class RegisterAgentForm(forms.Form):
    card_url = forms.URLField(label="Agent URL or card URL", assume_scheme="https")
    name = forms.CharField(required=False, help_text="Default: the name on its card")
    team = forms.ModelChoiceField(Group.objects.all(), required=False, help_text="None: everyone")
    generate_signing_secret = forms.BooleanField(
        required=False, initial=True, help_text="The agent signs its pushes (Standard Webhooks)"
    )
    signing_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Or the agent's existing whsec_ secret (leave the box above unticked)",
    )
    credential = forms.CharField(
        required=False, help_text='Authorization for calls to the agent, e.g. "Bearer …"'
    )
    allow_other_rpc_origin = forms.BooleanField(
        label="Allow a JSON-RPC URL at another origin",
        required=False,
        help_text=(
            "Onlooker sends the credential to the JSON-RPC URL the card names. Tick only if "
            "the card's host may send it to another host or port."
        ),
    )
    per_person = forms.BooleanField(
        label="Per-person credentials",
        required=False,
        help_text="Answers, messages and cancels need the person's own credential",
    )
    oauth_client_id = forms.CharField(
        label="OAuth client id",
        required=False,
        max_length=MAX_CLIENT_ID,
        help_text=OAUTH_CLIENT_HELP,
    )
    oauth_client_secret = forms.CharField(
        label="OAuth client secret",
        required=False,
        max_length=MAX_CLIENT_SECRET,
        widget=forms.PasswordInput(render_value=False),
        help_text="That client's secret (never shown back)",
    )


class AgentForm(forms.ModelForm):
    """The agent as the admin changes it: its expiry written as the commands take it
    ("4h", "30m", "1d2h"), checked the same way (1 minute to 30 days; empty for none); its
    OAuth client, whose secret is write-only (typed to replace it, or removed)."""

    expire_after = forms.CharField(
        required=False,
        help_text="A question still open this long expires, e.g. 4h, 30m, 1d2h; empty: none",
    )
    # Not the model field's name: the admin would copy an empty one onto the agent.
    new_oauth_client_secret = forms.CharField(
        required=False,
        max_length=MAX_CLIENT_SECRET,
        label="New OAuth client secret",
        widget=forms.PasswordInput(render_value=False),
        help_text="Never shown back. Leave empty to keep the one set.",
    )
    remove_oauth_client_secret = forms.BooleanField(
        required=False,
        label="Remove the OAuth client secret",
        help_text="Connect then goes to the authorization server without a client secret.",
    )

    class Meta:
        model = Agent
        fields = (
            "name",
            "team",
            "expire_after",
            "on_expiry",
            "no_self_approval",
            "per_person",
            "oauth_client_id",
        )
        help_texts = {"oauth_client_id": OAUTH_CLIENT_HELP}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["on_expiry"].required = False
        if self.instance.pk is not None:
            self.initial["expire_after"] = agent_policy.compact(self.instance.expire_after) or ""

    def clean(self):
        data = super().clean()
        secret = (data.get("new_oauth_client_secret") or "").strip()
        if data.get("remove_oauth_client_secret"):
            if secret:
                raise forms.ValidationError(BOTH_SECRETS)
            self.instance.oauth_client_secret = ""
        elif secret:
            if any(c.isspace() or not c.isprintable() for c in secret):
                self.add_error("new_oauth_client_secret", "A client secret has no spaces.")
            else:
                self.instance.oauth_client_secret = secret
        client_id = (data.get("oauth_client_id") or "").strip()
        if "oauth_client_id" in data:
            data["oauth_client_id"] = client_id
        if self.instance.oauth_client_secret and not client_id and not self.errors:
            raise forms.ValidationError("An OAuth client secret needs its client id.")
        return data

    def clean_on_expiry(self) -> str:
        # A form that does not show it (an older page, a script) leaves it as it is.
        return self.cleaned_data.get("on_expiry") or self.instance.on_expiry

    def clean_expire_after(self):
        text = self.cleaned_data["expire_after"].strip()
        if not text:
            return None
        try:
            return agent_policy.parse_expiry(text)
        except agent_policy.PolicyError as error:
            raise forms.ValidationError(str(error)) from None


class RefusalInline(admin.TabularInline):
    model = Refusal
    extra = 0
    can_delete = False
    readonly_fields = ("reason", "count", "last_at", "last_detail")

    def has_add_permission(self, request, obj=None):
        return False


class PushEndpointInline(admin.TabularInline):
    model = PushEndpoint
    extra = 0
    can_delete = False
    fields = ("public_id", "active", "created_at")
    readonly_fields = ("public_id", "created_at")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "team",
        "rpc_url",
        "rpc_url_moves",
        "protocol_version",
        "tier",
        "signs_pushes",
        "created_at",
    )
    fields = (
        "name",
        "team",
        "card_url",
        "rpc_url",
        "allow_other_rpc_origin",
        "rpc_url_moves",
        "protocol_version",
        "extensions",
        "tier",
        "push_notifications",
        "signs_pushes",
        "card_fetched_at",
        "last_error",
        "expire_after",
        "on_expiry",
        "no_self_approval",
        "per_person",
        "auth_scheme_shown",
        "oauth_client_id",
        "oauth_client_secret_set",
        "new_oauth_client_secret",
        "remove_oauth_client_secret",
        "live_push_configs",
    )
    form = AgentForm
    readonly_fields = (
        "card_url",
        "rpc_url",
        "allow_other_rpc_origin",
        "rpc_url_moves",
        "protocol_version",
        "extensions",
        "tier",
        "push_notifications",
        "signs_pushes",
        "card_fetched_at",
        "last_error",
        "auth_scheme_shown",
        "oauth_client_secret_set",
        "live_push_configs",
    )
    inlines = (PushEndpointInline, RefusalInline)
    actions = (
        "rotate_signing_secret",
        "retire_previous_signing_secret",
        "replace_api_token",
        "accept_refused_rpc_url",
    )

    @admin.display(description="tier (extensions it activated)")
    def tier(self, agent: Agent) -> str:
        if agent.extensions_echoed_at is None:
            return agent.tier
        when = date_format(timezone.localtime(agent.extensions_echoed_at), "DATETIME_FORMAT")
        return f"{agent.tier} (echoed {when})"

    @admin.display(description="how callers authenticate (from its card)")
    def auth_scheme_shown(self, agent: Agent) -> str:
        scheme = agent.auth_scheme or {}
        if scheme.get("kind") == "api_key":
            return f"API key in the {scheme.get('header')} header"
        if scheme.get("kind") == "oauth2":
            scopes = " ".join(scheme.get("scopes") or []) or "none"
            revokes = (
                "revokes at " + scheme["revocation_url"]
                if scheme.get("revocation_url")
                else "no revocation URL"
            )
            token_url = scheme.get("token_url")
            return f"OAuth 2.0 authorization code at {token_url} (scopes: {scopes}; {revokes})"
        return "HTTP bearer"

    @admin.display(description="OAuth client secret")
    def oauth_client_secret_set(self, agent: Agent) -> str:
        return "set (never shown)" if agent.oauth_client_secret else "none"

    @admin.display(description="live push configurations")
    def live_push_configs(self, agent: Agent) -> str:
        if agent.pk is None:
            return "—"
        live = push_configs.live(agent)
        if not live:
            return "none"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    endpoint.task_id or "— (the agent's own)",
                    "yes" if endpoint.followed else "no",
                    endpoint.created_for.get_username() if endpoint.created_for else "shared",
                    _when(endpoint.created_at),
                    _when(endpoint.ended_at),
                    push_configs.status(endpoint),
                )
                for endpoint in live[:LIVE_CONFIGS_SHOWN]
            ),
        )
        more = len(live) - LIVE_CONFIGS_SHOWN
        return format_html(
            "<table data-live-push-configs><thead><tr><th>task id</th><th>followed</th>"
            "<th>created for</th><th>created</th><th>ended</th><th>status</th></tr></thead>"
            "<tbody>{}</tbody></table>{}",
            rows,
            f"… and {more} older" if more > 0 else "",
        )

    @admin.display(description="signing secrets")
    def signs_pushes(self, agent: Agent) -> str:
        count = len(agent.signing_secrets)
        return {0: "none (token)", 1: "1", 2: "2 (rotating)"}[count]

    @admin.display(description="refused JSON-RPC URL")
    def rpc_url_moves(self, agent: Agent) -> str:
        if not agent.refused_rpc_url:
            return "none"
        at = agent.refused_rpc_url_at
        when = date_format(timezone.localtime(at), "DATETIME_FORMAT") if at else "a card refresh"
        return f"Since {when}, {agents.refused_move(agent)}."

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and {"name", "team"} & set(form.changed_data):
            agents.changed(obj)

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            return super().add_view(request, form_url, extra_context)
        form = RegisterAgentForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                registration = agents.register(
                    data["card_url"],
                    name=data["name"],
                    team=data["team"].name if data["team"] else "",
                    generate_signing_secret=data["generate_signing_secret"],
                    signing_secret=data["signing_secret"],
                    credential=data["credential"],
                    allow_other_rpc_origin=data["allow_other_rpc_origin"],
                    per_person=data["per_person"],
                    oauth_client_id=data["oauth_client_id"],
                    oauth_client_secret=data["oauth_client_secret"],
                )
            except agents.RegistrationError as error:
                form.add_error(None, str(error))
            else:
                self.log_addition(request, registration.agent, [{"added": {}}])
                return self._secrets_once(request, registration.agent, registration.as_json())
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "form": form,
            "title": "Register an agent",
        }
        return TemplateResponse(request, "admin/tasks/register_agent.html", context)

    def _secrets_once(self, request, agent: Agent, secrets: dict):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "agent": agent,
            "secrets": secrets,
            "title": f"Secrets for {agent.name}",
        }
        response = TemplateResponse(request, "admin/tasks/agent_secrets.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Rotate the signing secret (the old one stays valid)")
    def rotate_signing_secret(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Rotate one agent at a time.", messages.ERROR)
            return None
        agent = queryset.get()
        secret = agents.rotate_signing_secret(agent)
        self.log_change(request, agent, "Rotated the signing secret")
        return self._secrets_once(request, agent, {"signing_secret": secret})

    @admin.action(description="Replace the card API token (the old one stops working)")
    def replace_api_token(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Replace one agent's token at a time.", messages.ERROR)
            return None
        agent = queryset.get()
        token = agents.replace_api_token(agent)
        self.log_change(request, agent, "Replaced the card API token")
        return self._secrets_once(request, agent, {"api_token": token})

    @admin.action(description="Accept the refused JSON-RPC URL (calls and credential go there)")
    def accept_refused_rpc_url(self, request, queryset):
        for agent in queryset.exclude(refused_rpc_url=""):
            moved_to = agent.refused_rpc_url
            agents.accept_refused_rpc_url(agent)
            self.log_change(request, agent, f"Accepted the JSON-RPC URL {moved_to}")
            self.message_user(request, f"{agent.name} is called at {moved_to} from now on.")

    @admin.action(description="Retire the previous signing secret")
    def retire_previous_signing_secret(self, request, queryset):
        for agent in queryset:
            agents.retire_previous_signing_secret(agent)
            self.log_change(request, agent, "Retired the previous signing secret")
        self.message_user(request, "Previous signing secrets retired.")


def _when(at) -> str:
    return date_format(timezone.localtime(at), "DATETIME_FORMAT") if at else "—"


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "received_at",
        "agent",
        "kind",
        "task_id",
        "outcome",
        "duplicates",
        "attempts",
        "retry_at",
        "last_error",
    )
    # "pending" with attempts: deliveries whose apply failed, waiting for their retry.
    list_filter = ("outcome", "kind", "agent")
    actions = ("apply_now",)

    @admin.action(description="Apply now (pending deliveries whose apply failed)")
    def apply_now(self, request, queryset):
        count = applier.retry_now(queryset)
        self.message_user(request, f"{count} pending deliveries will be applied now.")

    search_fields = ("task_id", "idempotency_key")
    date_hierarchy = "received_at"


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "agent", "state", "needs_human", "updated_at")
    list_filter = ("needs_human", "state", "agent")
    search_fields = ("context_id", "title")


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("task_id", "agent", "session", "state", "status_timestamp")
    list_filter = ("state", "agent")
    search_fields = ("task_id",)


@admin.register(Interaction)
class InteractionAdmin(ReadOnlyAdmin):
    # The audit of answers: who answered what, and when (filter by state "answered").
    list_display = (
        "interaction_id",
        "kind",
        "state",
        "task",
        "opened_at",
        "answered_by",
        "answered_at",
        "answer",
        "last_error",
    )
    list_filter = ("kind", "state", "answered_by")
    search_fields = ("interaction_id", "prompt", "answered_by__username")
    date_hierarchy = "opened_at"


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("artifact_id", "sequence", "name", "task", "received_at")


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("at", "role", "session", "text")


@admin.register(ProgressCard)
class CardAdmin(ReadOnlyAdmin):
    list_display = ("session", "revision", "updated_at")
    search_fields = ("session__context_id", "session__title")
    exclude = ("html",)  # the sanitized HTML is shown on the pages, not as admin text


# Registers the admin of the record of decisions (read only), the team channels' and the
# outbox's (Django looks for admin.py in apps only).
from tasks.answering import record_admin as _record_admin  # noqa: E402, F401
from tasks.notify import admin as _notify_admin  # noqa: E402, F401
