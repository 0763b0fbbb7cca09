"""`/slack/link/<token>/`: where a Slack member not linked yet is sent from Slack to link
their account (answering/slack_members.py). Login required; the GET shows who is about to
be linked to whom and changes nothing (Slack unfurls links, people preview them); only the
page's POST (CSRF-checked) links.

The token is in the URL, so its pages send only their origin as a Referer, none is cached,
none is indexed. A second POST by the person it linked (a double click) shows it linked.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from tasks.answering import slack_members

TEMPLATE = "tasks/slack_link.html"


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def link_member(request: HttpRequest, token: str) -> HttpResponse:
    try:
        if request.method == "POST":
            linked = slack_members.link(request.user, token)
            context = {"linked": True, "slack_name": slack_members.shown_name(linked)}
        else:
            pending = slack_members.pending(token)
            context = {
                "slack_name": slack_members.shown_name(pending),
                "expires_at": pending.expires_at,
            }
        status = 200
    except slack_members.LinkRefused as refused:
        context, status = {"refused": str(refused), "status": refused.status}, refused.status
    response = render(request, TEMPLATE, context, status=status)
    # The origin only: under no-referrer a browser posts the form with Origin: null, which
    # the CSRF check refuses.
    response["Referrer-Policy"] = "strict-origin"
    response["X-Robots-Tag"] = "noindex, nofollow"
    return response
