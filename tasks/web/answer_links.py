"""`/answer/<token>/`: where an answer link in an email, a webhook's event or a reminder leads
(tasks/answering/link_answers.py). Its GET (and HEAD) shows a confirm page and changes
nothing, whoever fetches it; only the page's POST (CSRF-checked) decides.

The token is in the URL, so no page of it is cached or indexed, and none names more than
Onlooker's origin in a Referer (`Referrer-Policy: strict-origin`): not the token, to another
site or to Onlooker's own pages. Not `no-referrer`: under it a browser sends `Origin: null`
with the form's POST, which CSRF protection rightly refuses.
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from tasks.answering import link_answers


def _private(response: HttpResponse) -> HttpResponse:
    response["Referrer-Policy"] = "strict-origin"
    response["X-Robots-Tag"] = "noindex, nofollow"
    return response


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
def answer_link(request: HttpRequest, token: str) -> HttpResponse:
    if not request.user.is_authenticated:
        # After logging in, the person lands on the confirm page, never on a decision.
        return _private(redirect_to_login(request.path))
    if request.method == "POST":
        followed = link_answers.decide(request.user, token, request.POST)
    else:
        followed = link_answers.follow(request.user, token)
    context = {"followed": followed, "token": token}
    response = render(request, "tasks/answer_link.html", context, status=followed.status)
    return _private(response)
