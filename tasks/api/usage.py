"""`/api/usage`: telemetry/v1 cost, tokens and steps per UTC day and per agent, for the
agents the caller may see (tasks/sessions/usage.py keeps and sums them). Its JSON names are a
contract, like the rest of the read API (tasks/api/sessions.py)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from tasks.api.sessions import _error, api_login_required
from tasks.sessions import usage


@require_GET
@api_login_required
def usage_json(request: HttpRequest) -> JsonResponse:
    """`?days=N` (1–366, default 30): `{"days": [{"date", "costUsd", "tokens", "steps"}, …],
    "byAgent": [{"agent": {"id", "name"}, "costUsd", "tokens", "steps"}, …]}`, every day of
    the range oldest first (the last is today, UTC), agents with usage most costly first."""
    try:
        days = usage.parse_days(request.GET.get("days"))
    except usage.BadDays as error:
        return _error(400, "bad days", str(error))
    return JsonResponse(usage.report(request.user, days))
