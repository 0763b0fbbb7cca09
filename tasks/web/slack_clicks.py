"""POST /slack/<channel>/interactions: where a channel's Slack app sends the clicks on its
messages' buttons (the app's Interactivity Request URL; add_channel prints it).

Slack cannot send a CSRF token: its signature over the raw body is the authentication
(answering/slack.py checks it before anything is read). The click is decided after the
answer, which Slack wants within 3 seconds: this view answers 200 with an empty body once
the click is queued, and Slack hears what it did through the click's response_url. A
refused request gets a JSON error saying why, and changes nothing.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from tasks.answering import slack

FORM = "application/x-www-form-urlencoded"


@csrf_exempt
@require_POST
def interactions(request: HttpRequest, channel_id: int) -> HttpResponse:
    try:
        channel = slack.authenticate(
            channel_id,
            request.body,
            request.headers.get("X-Slack-Request-Timestamp"),
            request.headers.get("X-Slack-Signature"),
        )
        if request.content_type != FORM:
            raise slack.Refused(400, f"Slack posts a form ({FORM}) with a payload field.")
        payload = request.POST.get("payload")
        if payload is None:
            raise slack.Refused(400, "The form has no payload field.")
        click = slack.parse_click(payload)
        if not click.opens_a_page:
            slack.accept(channel, click)
    except slack.Refused as refused:
        body = {"error": _ERRORS[refused.status], "detail": str(refused)}
        return JsonResponse(body, status=refused.status)
    return HttpResponse(status=200)


_ERRORS = {
    400: "bad request",
    401: "not signed by this channel's Slack app",
    403: "channel turned off",
    503: "busy",
}
