"""Admin for the record of decisions (tasks/models/decisions.py): read only. Nobody may add,
change or delete a row there, a superuser included, and there are no actions (Django's
"delete selected" among them): the record is append-only in every code path, and the
database refuses the rest (migration 0024). Registered by tasks/admin.py importing this
module."""

from __future__ import annotations

from django.contrib import admin

from tasks.models import Decision, DecisionConfirmation


class AppendOnlyAdmin(admin.ModelAdmin):
    actions = None

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Decision)
class DecisionAdmin(AppendOnlyAdmin):
    list_display = ("at", "decision", "agent_name", "interaction_id", "round", "by", "via", "sent")
    list_filter = ("decision", "via", "kind")
    search_fields = ("interaction_id", "agent_name", "by", "task_id")
    date_hierarchy = "at"


@admin.register(DecisionConfirmation)
class DecisionConfirmationAdmin(AppendOnlyAdmin):
    list_display = ("at", "interaction_pk", "round")
