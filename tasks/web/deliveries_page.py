"""One task's deliveries as Onlooker received them, newest first: for people debugging an
agent. Each push's body pretty-printed (or as received, when it is not JSON), its outcome,
the warnings applying it left, failed attempts and how many duplicates of it arrived.

Only for people who may see the session; a page holds `PAGE` deliveries, and `?before=<id>`
pages back. A body is loaded and shown up to `BODY_CHARS` characters (a push can be
megabytes): a longer one is shown cut, as received, with its size.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.db.models.functions import Length, Substr
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tasks.models import Delivery, Session, Task
from tasks.sessions import board

PAGE = 20
BODY_CHARS = 64 * 1024  # of one body, loaded and shown
_ID = re.compile(r"[0-9]{1,18}")  # longer would overflow the database's integers
# What json.loads leaves of a lone "\ud800" escape: a character no page can be encoded with.
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Shown:
    delivery: Delivery
    body: str
    pretty: bool  # pretty-printed JSON, rather than the body as received
    cut: bool
    size: int  # characters in the whole body


def pretty(body: str) -> tuple[str, bool]:
    """The body as indented JSON (not ASCII-escaped, so people read what was sent), or as it
    is when it is not JSON; whether it was pretty-printed."""
    try:
        text = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return _escaped(body), False
    return _escaped(text), True


def _escaped(text: str) -> str:
    # Written back as the JSON escape it came as: the page stays UTF-8 and says what was sent.
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def shown(delivery: Delivery) -> Shown:
    size = delivery.body_size
    if size > BODY_CHARS:
        return Shown(delivery, _escaped(delivery.shown_body), pretty=False, cut=True, size=size)
    body, was_json = pretty(delivery.shown_body)
    cut = len(body) > BODY_CHARS  # indenting made it longer
    return Shown(delivery, body[:BODY_CHARS], pretty=was_json, cut=cut, size=size)


@require_GET
@login_required
def task_deliveries(request: HttpRequest, session_id: int, task_pk: int) -> HttpResponse:
    session = Session.objects.visible_to(request.user).filter(pk=session_id).first()
    task = Task.objects.filter(pk=task_pk, session=session).first() if session else None
    if task is None:
        raise Http404("No such task, or not one you may see.")
    rows = (
        Delivery.objects.filter(agent_id=task.agent_id, task_id=task.task_id)
        .defer("body")
        .annotate(shown_body=Substr("body", 1, BODY_CHARS), body_size=Length("body"))
        .order_by("-id")
    )
    before = request.GET.get("before")
    if before is not None:
        if not _ID.fullmatch(before):
            return HttpResponseBadRequest(
                "before must be a delivery id (a number)", content_type="text/plain; charset=utf-8"
            )
        rows = rows.filter(id__lt=int(before))
    page = list(rows[: PAGE + 1])
    earlier = page[PAGE - 1].pk if len(page) > PAGE else None
    context = {
        "session": session,
        "task": task,
        "deliveries": [shown(delivery) for delivery in page[:PAGE]],
        "earlier": earlier,
        "paged": before is not None,
        "body_chars": BODY_CHARS,
        "sidebar": board.sidebar(request.user),
        "counts": board.counts(request.user),
    }
    return render(request, "tasks/deliveries.html", context)
