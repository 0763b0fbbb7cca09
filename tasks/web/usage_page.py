"""`/usage/`: what agents cost and how fast people decide, on a page of its own (it was the
bottom of the monitoring screen): cost per UTC day as a chart with its axes, the days that
cost anything, totals per agent and per team, and the "Decisions" table, all over one range
(`?days=1`, `7` or `30`) and for the agents this person may see."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tasks.sessions import board, decisions_summary, usage


@require_GET
@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    shown = usage.page(request.user, request.GET.get("days"))
    context = {
        "usage": shown,
        "decisions": decisions_summary.panel(request.user, shown["days"]),
        "sidebar": board.sidebar(request.user),
    }
    return render(request, "tasks/usage.html", context)
