"""The read API for people and scripts: `/api/sessions`, `/api/sessions/<id>`, and
`/api/waiting` (what the person may answer now, for the browser's notifications).

Logged-in users only, and only sessions of agents the user may see. The JSON names here are
a contract: scripts depend on them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.db.models.functions import Substr
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from tasks.answering import rules
from tasks.models import Artifact, Interaction, Session
from tasks.sessions import activity, board, listing, search, timeline
from tasks.sessions.progress_card import strip_invisible
from tasks.wire.numbers import whole_number

MAX_LIMIT = 1000


def _error(status: int, error: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": error, "detail": detail}, status=status)


def api_login_required(view: Callable) -> Callable:
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        if not request.user.is_authenticated:
            return _error(401, "authentication required", "log in at /accounts/login/")
        return view(request, *args, **kwargs)

    return wrapper


def session_json(session: Session) -> dict:
    return {
        "id": session.pk,
        "agent": {"id": session.agent_id, "name": session.agent.name},
        "contextId": session.context_id,
        "title": session.title,
        "state": session.state or None,
        "needsHuman": session.needs_human,
        "updatedAt": session.updated_at,
        "card": _card(session),
    }


def _card(session: Session) -> dict | None:
    card = getattr(session, "card", None)  # a reverse one-to-one raises when absent
    return card.as_json() if card is not None else None


@require_GET
@api_login_required
def sessions(request: HttpRequest) -> JsonResponse:
    """Sessions the user may see, a page at a time: `{"sessions": [...], "next": cursor}`,
    `next` null on the last page; `before=<next>` with the same parameters gives the page
    after. Filters: agent, state, finished, from/to (UTC days, inclusive, on the last update),
    archived, and q (a search: best match first, each session with the `match` it was
    found by). The README's API section lists them."""
    query = request.GET
    try:
        filters, _ = board.Filters.read(query, strict=True)
    except board.BadFilter as error:
        return _error(400, error.error, str(error))
    sort = query.get("sort", "updated")
    if sort not in listing.SORTS:
        return _error(400, "bad sort", "sort is updated (the default) or attention")
    limit = whole_number(query.get("limit", "100"))
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        return _error(400, "bad limit", f"limit is a number from 1 to {MAX_LIMIT}")
    archived = query.get("archived")
    if archived not in (None, "0", "1"):
        return _error(400, "bad filter", "archived is 1 (archived sessions only) or 0 (none)")
    found = filters.apply(Session.objects.visible_to(request.user))
    if archived == "1":
        found = found.filter(listing.archived())
    elif archived == "0":
        found = found.exclude(listing.archived())
    before = query.get("before")
    try:
        if filters.q:
            offset = 0 if before is None else listing.read_search_cursor(before, filters.q)
            return _search(found, filters.q, offset, limit)
        position = None if before is None else listing.read_cursor(before, sort)
    except listing.BadCursor as error:
        return _error(400, "bad cursor", str(error))
    found = found.select_related("agent", "card")
    shown, following = listing.page(found, sort, position, limit)
    return JsonResponse({"sessions": [session_json(s) for s in shown], "next": following})


def _search(found, text: str, offset: int, limit: int) -> JsonResponse:
    try:
        hits, following = listing.search_page(found, text, offset, limit)
    except search.BadQuery as error:
        return _error(400, "bad query", str(error))
    loaded = Session.objects.select_related("agent", "card").in_bulk([h.session_id for h in hits])
    shown = []
    for hit in hits:
        if hit.session_id in loaded:  # unless deleted between the two queries
            data = session_json(loaded[hit.session_id])
            data["match"] = _match(hit.snippet)
            shown.append(data)
    return JsonResponse({"sessions": shown, "next": following})


def _match(snippet) -> dict | None:
    if snippet is None:
        return None
    return {
        "field": snippet.field,
        "text": snippet.text,
        "highlights": [[start, end] for start, end in snippet.ranges],
    }


@require_GET
@api_login_required
def session_detail(request: HttpRequest, session_id: int) -> JsonResponse:
    session = (
        Session.objects.visible_to(request.user)
        .select_related("agent", "card")
        .filter(pk=session_id)
        .first()
    )
    if session is None:
        return _error(404, "not found", f"no session {session_id} that you may see")
    tasks = list(session.tasks.order_by("created_at", "id"))
    data = session_json(session)
    data["agent"]["tier"] = session.agent.tier  # from the extensions it echoes
    data["tasks"] = [
        {
            "taskId": t.task_id,
            "state": t.state,
            "statusTimestamp": t.shown_timestamp,
            "telemetry": t.telemetry if isinstance(t.telemetry, dict) else None,
        }
        for t in tasks
    ]
    data["totals"] = activity.totals(session)
    data["interactions"] = [
        i.as_json()
        for i in Interaction.objects.filter(task__session=session)
        .select_related("task", "answered_by")
        .order_by("opened_at", "id")
    ]
    data["artifacts"] = [
        {
            "artifactId": a.artifact_id,
            "taskId": a.task.task_id,
            "name": a.name,
            "version": (a.files or {}).get("version", a.sequence),
            "kind": (a.files or {}).get("kind"),
            "size": (a.files or {}).get("size"),
            "sha256": (a.files or {}).get("sha256"),
            "path": (a.files or {}).get("path"),
            "complete": a.complete,  # false while its chunks are still arriving (lastChunk)
        }
        for a in Artifact.objects.filter(task__session=session).select_related("task")
    ]
    data["messages"] = [
        # A message's files (up to 2 MB) load only with their download.
        {"role": m.role, "text": m.text, "at": m.at, "parts": _parts(session, m.pk, m.parts)}
        for m in session.messages.defer("files")
    ]
    # What happened, in time order (tasks/sessions/timeline.py): the newest timeline.LIMIT entries.
    history = timeline.of_session(session)
    data["timeline"] = history.as_json()
    data["timelineTruncated"] = history.truncated
    return JsonResponse(data)


def _parts(session: Session, message_pk: int, parts: object) -> list[dict]:
    """A message's links, files and data as the page shows them (bounded when stored), each
    kept file with the URL of its download."""
    shown = []
    for part in parts if isinstance(parts, list) else []:
        part = dict(part)
        index = part.pop("file", None)
        if isinstance(index, int):
            part["download"] = reverse("session-message-file", args=(session.pk, message_pk, index))
        shown.append(part)
    return shown


WAITING_LIMIT = 50  # the newest open interactions a browser is told about
WAITING_PROMPT_CHARS = 300  # of each prompt: a desktop notification shows a few lines


@require_GET
@api_login_required
def waiting(request: HttpRequest) -> JsonResponse:
    """What is open for this person to answer right now: the newest WAITING_LIMIT open
    interactions in sessions they may see, and none at all without the answer permission
    (static/js/notify.js turns new ones into desktop notifications). Only open ones: an
    interaction being answered, sent, answered or closed waits for nobody. A few queries
    however many there are: one for the rows (their session and agent joined), and the
    permission check's own."""
    if not rules.may_answer(request.user):
        return JsonResponse({"interactions": []})
    rows = (
        Interaction.objects.filter(
            state=Interaction.State.OPEN,
            task__session__in=Session.objects.visible_to(request.user),
        )
        # A prompt can be 1 MB: load only what a notification shows.
        .annotate(shown_prompt=Substr("prompt", 1, WAITING_PROMPT_CHARS + 1))
        .values(
            "pk",
            "round",
            "kind",
            "opened_at",
            "asked_at",
            "shown_prompt",
            "task__session_id",
            "task__session__title",
            "task__session__context_id",
            "task__session__agent_id",
            "task__session__agent__name",
        )
        .order_by("-opened_at", "-id")[:WAITING_LIMIT]
    )
    return JsonResponse({"interactions": [_waiting_json(row) for row in rows]})


def _waiting_json(row: dict) -> dict:
    prompt = row["shown_prompt"] or ""
    if len(prompt) > WAITING_PROMPT_CHARS:  # one more was loaded to tell
        prompt = prompt[: WAITING_PROMPT_CHARS - 1] + "…"
    prompt = strip_invisible(prompt)
    session_id = row["task__session_id"]
    title = row["task__session__title"] or row["task__session__context_id"]
    # A later round is asked by a later status: its asking time, by the agent's clock.
    opened = (row["asked_at"] if row["round"] > 1 else None) or row["opened_at"]
    return {
        # One round of one interaction: a browser notifies once per key.
        "key": f"{row['pk']}:{row['round']}",
        "id": row["pk"],
        "round": row["round"],
        "kind": row["kind"],
        "prompt": prompt,
        "agent": {
            "id": row["task__session__agent_id"],
            "name": strip_invisible(row["task__session__agent__name"]),
        },
        "session": {
            "id": session_id,
            "title": strip_invisible(title),
            "url": reverse("session", args=(session_id,)),
        },
        "openedAt": opened,
    }
