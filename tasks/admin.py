"""Admin: register agents (secrets shown once), rotate signing secrets, see refusals and
the delivery log; team notification channels and their outbox are in tasks/notify/admin.py.
Secret fields are never rendered."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import Group
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.formats import date_format

from tasks.answering import agents
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
    )
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


# Registers the team channels' and the outbox's admin (Django looks for admin.py in apps only).
from tasks.notify import admin as _notify_admin  # noqa: E402, F401
