"""Pages for people, and the health check."""

from __future__ import annotations

import asyncio
import logging
import uuid
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.db.models import Q
from django.db.models.functions import Substr
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotFound,
    JsonResponse,
)
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_POST

from tasks.answering import answers, callers, dismissals, duties, held, rules, talking
from tasks.api.sessions import api_login_required
from tasks.live import fanout
from tasks.models import TERMINAL_STATES, Agent, Artifact, Interaction, Session, TaskState, states
from tasks.notify import seen
from tasks.runtime import outage
from tasks.sessions import (
    activity,
    board,
    decision_words,
    fragments,
    listing,
    search,
    timeline,
    transcript_rows,
)
from tasks.wire import message_parts
from tasks.wire.numbers import whole_number

log = logging.getLogger(__name__)
HEALTH_TIMEOUT = 3.0


def _database_ok() -> None:
    if outage.is_away():  # known: not another wait for the pool
        raise RuntimeError("the database is away (tasks/runtime/outage.py)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.close()


async def _channel_layer_ok() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel("health.")
    await layer.send(channel, {"type": "health.ping"})
    # A receive the timeout below surely ends: the Redis layer's can lose a cancellation.
    message = await fanout.receive(layer, channel)
    if message.get("type") != "health.ping":
        raise RuntimeError("the channel layer returned another message")


@require_GET
async def healthz(request: HttpRequest) -> JsonResponse:
    checks = {
        "database": sync_to_async(_database_ok, thread_sensitive=False),
        "channel layer": _channel_layer_ok,
    }
    down = []
    for name, check in checks.items():
        try:
            await asyncio.wait_for(check(), timeout=HEALTH_TIMEOUT)
        except Exception as error:  # noqa: BLE001 - any failure means "down"
            # The reason (hosts, ports, driver text) goes to the log only: anyone may ask.
            log.warning("health check: %s is down: %s: %s", name, type(error).__name__, error)
            down.append(name)
    if down:
        return JsonResponse({"status": "down", "down": down}, status=503)
    return JsonResponse({"status": "ok", "checks": list(checks)})


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """The team monitoring screen: what waits for a person as one list on top, then every
    other visible session as its card, OVERVIEW_LIMIT at a time with "Older" links for the
    rest; with `q`, the search's results instead. Filters live in the URL so a wall screen
    can be bookmarked; they apply to the list, the tiles and the counts alike. A filter or
    cursor that means nothing is left out with a message: a stale bookmark still opens."""
    filters, problems = board.Filters.read(request.GET)
    wall = request.GET.get("display") == "wall"
    before = request.GET.get("before")
    context = {
        "counts": board.counts(request.user, filters),
        "agents": Agent.objects.visible_to(request.user).order_by("name"),
        "states": states.filter_choices(),
        "filters": filters,
        "finished_states": " ".join(sorted(TERMINAL_STATES)),
        "wall": wall,
        "sidebar": board.sidebar(request.user),
        "message_id": uuid.uuid4().hex,
        "problems": problems,
        "results": None,
        "waiting": [],
        "older": None,
        "newest": None,
        "archive_days": settings.ONLOOKER_ARCHIVE_AFTER_DAYS,
    }
    if filters.q and not wall:
        context.update(_search_page(request.user, filters, before, problems))
        return render(request, "tasks/overview.html", context)
    position = None
    if before is not None and not wall:  # the wall pages by itself (static/js/wall.js)
        try:
            position = listing.read_cursor(before, "attention")
            context["newest"] = f"?{filters.query()}"
        except listing.BadCursor as error:
            problems.append(f"{error}; showing the newest sessions.")
    # The wall has no list: there a waiting session stays a tile, and a finished one too.
    tiles = board.tiles(
        request.user, filters, include_waiting=wall, before=position, split_finished=not wall
    )
    if position is None and not wall:  # the list is the first page's, above its tiles
        context["waiting"] = board.waiting(request.user, filters)
        duties.mark_needs_another(request.user, context["waiting"])
        duties.mark_needs_credential(request.user, context["waiting"])
        context["decided"] = board.recently_decided(request.user)
    context.update(
        tiles=tiles.html,
        finished=tiles.finished,
        shown=len(tiles.html) + len(tiles.finished),
        total=tiles.total,
        live_tiles=position is None,  # an older page is a still picture (live.js leaves it)
        older=f"?{filters.query(before=tiles.next)}" if tiles.next and not wall else None,
        nothing_visible=not tiles.html
        and not tiles.finished
        and not context["waiting"]
        and not board.anything_visible(request.user),
    )
    return render(request, "tasks/wall.html" if wall else "tasks/overview.html", context)


def _search_page(user, filters: board.Filters, before: str | None, problems: list[str]) -> dict:
    offset = 0
    if before is not None:
        try:
            offset = listing.read_search_cursor(before, filters.q)
        except listing.BadCursor as error:
            problems.append(f"{error}; showing the best matches.")
    try:
        results = board.results(user, filters, offset)
    except search.BadQuery as error:
        problems.append(f"Nothing was searched: {error}.")
        return {"results": board.Results([], 0, None)}
    return {
        "results": results,
        "older": f"?{filters.query(before=results.next)}" if results.next else None,
        "newest": f"?{filters.query()}" if offset else None,
        "first_result": offset + 1,
        "last_result": offset + len(results.found),
    }


@require_GET
@api_login_required
def live_board(request: HttpRequest) -> JsonResponse:
    """What a (re)connecting page refetches: the counts (for the filters given), the sidebar
    rows and, with `?tiles=1`, the monitoring screen's first page of tiles for those filters
    and the cursor of the page after it (`next`), and with `?waiting=1` its list of what
    waits for a person (then the tiles leave those sessions out, as the page does), rendered
    with the same partials as the pages."""
    filters = board.Filters.from_query(request.GET)
    with_waiting = bool(request.GET.get("waiting"))
    data = {
        "counts": board.counts(request.user, filters),
        "sidebar": "".join(board.sidebar(request.user)),
    }
    if request.GET.get("tiles"):
        split = bool(request.GET.get("finished_rows"))
        tiles = board.tiles(
            request.user, filters, include_waiting=not with_waiting, split_finished=split
        )
        data["tiles"] = "".join(tiles.html)
        if split:  # the monitoring screen's finished sessions, its rows under the tiles
            data["finished"] = "".join(tiles.finished)
        data["total"] = tiles.total
        data["next"] = tiles.next
    if with_waiting:  # per person: the forms depend on their permission
        waiting = {"waiting": board.waiting(request.user, filters)}
        duties.mark_needs_another(request.user, waiting["waiting"])
        duties.mark_needs_credential(request.user, waiting["waiting"])
        data["waiting"] = render_to_string("tasks/_waiting.html", waiting, request=request)
        decided = {"decided": board.recently_decided(request.user)}
        data["decided"] = render_to_string("tasks/_decided.html", decided, request=request)
    return JsonResponse(data)


def _visible_session(request: HttpRequest, session_id: int) -> Session:
    session = (
        Session.objects.visible_to(request.user)
        .select_related("agent", "card", "fragments")
        .filter(pk=session_id)
        .first()
    )
    if session is None:
        raise Http404("No such session, or not one you may see.")
    return session


TRANSCRIPT_LIMIT = 500  # messages on one page; tasks/sessions/activity.py bounds their size too


def _activity(session: Session, query) -> dict:
    """The session page's body below the heading: transcript, artifacts, open interactions.
    `query` may name where the transcript (`before`) or the artifact versions
    (`artifacts_before`) shown end; raises activity.BadAnchor when it names nothing here."""
    anchors = {key: query.get(key) for key in ("before", "artifacts_before")}
    transcript = activity.transcript(session, anchors["before"], TRANSCRIPT_LIMIT)
    versions = activity.artifacts(session, anchors["artifacts_before"])
    kept = {key: value for key, value in anchors.items() if value is not None}
    open_ones = activity.questions(
        Interaction.objects.filter(
            task__session=session,
            state__in=Interaction.LISTED,
        )
        .select_related("answered_by")
        .order_by("opened_at", "id")
    )
    # The list shows 120 characters of each prompt: load no more (a prompt can be 1 MB).
    # Answered, or sent and then closed by the agent moving on: a decision someone made.
    answered = list(
        Interaction.objects.filter(
            Q(state=Interaction.State.ANSWERED)
            | Q(state=Interaction.State.CLOSED, answer__isnull=False),
            task__session=session,
        )
        .select_related("answered_by")
        .defer("prompt", "detail")
        .annotate(shown_prompt=Substr("prompt", 1, 121))
        .order_by("-answered_at")[:50]
    )
    # Which team channels were told of each, and when: one query for all of them, per
    # request (the sender changes it without changing the session).
    seen.attach([*open_ones, *answered])
    return {
        "transcript": transcript_rows.markup(transcript.items),
        "earlier_messages": transcript.earlier,
        "artifacts": versions.items,
        "earlier_artifacts": versions.earlier,
        "anchors": kept,
        "activity_query": f"?{urlencode(kept)}" if kept else "",
        "interactions": open_ones,
        "answered": answered,
        "totals": activity.totals(session),
        "turns": activity.turns(session),
        "working_task": _running(session),
        "queued_tasks": _queued(session),
        "reply_task": talking.waiting_task(session),
        # Refetched with the rest of the activity whenever the session changes: it is live.
        "timeline": timeline.of_session(session),
    }


def _running(session: Session):
    """The task "Cancel task" cancels: the newest one at work, not one queued
    behind it (a queued task is newer, and is not what a person sees running)."""
    unfinished = session.tasks.exclude(state__in=TERMINAL_STATES).order_by(
        "-status_received_at", "-id"
    )
    return unfinished.exclude(state=TaskState.SUBMITTED).first() or unfinished.first()


def _queued(session: Session) -> list:
    """Tasks the agent answered a message with but has not started, because another task of
    the session is still going: they wait their turn."""
    going = session.tasks.exclude(state__in=TERMINAL_STATES)
    if not going.exclude(state=TaskState.SUBMITTED).exists():
        return []
    return list(going.filter(state=TaskState.SUBMITTED).order_by("created_at", "id"))


def _bad_anchor(error: activity.BadAnchor) -> HttpResponse:
    return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")


@require_GET
@login_required
def session_page(request: HttpRequest, session_id: int) -> HttpResponse:
    session = _visible_session(request, session_id)
    try:
        shown = _activity(session, request.GET)
    except activity.BadAnchor as error:
        return _bad_anchor(error)
    duties.mark_needs_another(request.user, shown["interactions"])
    duties.mark_needs_credential(request.user, shown["interactions"])
    decision_words.attach(shown["answered"])
    timeline.name_turns(shown["turns"])
    context = {
        "session": session,
        "card": getattr(session, "card", None),
        "html": fragments.of(session),  # the card placements show what live messages send
        "sidebar": board.sidebar(request.user),
        "counts": board.counts(request.user),
        "message_id": uuid.uuid4().hex,  # makes a double submit one message at the agent
        # The agent takes messages only with the person's own credential, and they have none.
        "composer_needs_credential": callers.needs_credential(session.agent, request.user),
        **shown,
    }
    return render(request, "tasks/session.html", context)


@require_GET
@api_login_required
def session_activity(request: HttpRequest, session_id: int) -> HttpResponse:
    """The session page's activity, refetched when a live message says the session changed;
    with the page's `before` anchors, so reading earlier messages is not cut short."""
    session = _visible_session(request, session_id)
    try:
        shown = _activity(session, request.GET)
    except activity.BadAnchor as error:
        return _bad_anchor(error)
    duties.mark_needs_another(request.user, shown["interactions"])  # per person
    duties.mark_needs_credential(request.user, shown["interactions"])
    decision_words.attach(shown["answered"])
    timeline.name_turns(shown["turns"])
    context = {"session": session, "card": getattr(session, "card", None), **shown}
    return render(request, "tasks/_activity.html", context)


def _plain_text(text: str) -> HttpResponse:
    # Agent text, whole: as text/plain (with nosniff) it can never run as a page.
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


@require_GET
@login_required
def message_text(request: HttpRequest, session_id: int, message_id: int) -> HttpResponse:
    """One transcript message in full: where the page's "show all" leads."""
    session = _visible_session(request, session_id)
    message = session.messages.filter(pk=message_id).first()
    if message is None:
        raise Http404("No such message in this session.")
    return _plain_text(message.text)


@require_GET
@login_required
def message_file(
    request: HttpRequest, session_id: int, message_id: int, file_index: int
) -> HttpResponse:
    """A file an agent sent inside a message (a raw part), as a download: never shown inline
    at Onlooker's origin, and typed as itself only when that type is harmless."""
    session = _visible_session(request, session_id)
    message = session.messages.filter(pk=message_id).only("parts", "files").first()
    found = message_parts.download(message.parts, message.files, file_index) if message else None
    if found is None:
        raise Http404("No such file in this message.")
    response = HttpResponse(found.content, content_type=found.content_type)
    response["Content-Disposition"] = content_disposition_header(
        as_attachment=True, filename=found.filename
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    return response


@require_GET
@login_required
def artifact_text(request: HttpRequest, session_id: int, artifact_id: int) -> HttpResponse:
    """One artifact version in full: where the page's "show all" leads."""
    session = _visible_session(request, session_id)
    version = Artifact.objects.filter(task__session=session, pk=artifact_id).first()
    if version is None:
        raise Http404("No such artifact version in this session.")
    return _plain_text(activity.artifact_text(version))


@require_GET
@login_required
def artifact_download(
    request: HttpRequest, session_id: int, artifact_id: int, index: int
) -> HttpResponse:
    """One part of an artifact version as a file: always an attachment, in a content type
    that cannot run as a page, whatever the agent said it was."""
    session = _visible_session(request, session_id)
    version = Artifact.objects.filter(task__session=session, pk=artifact_id).first()
    if version is None:
        raise Http404("No such artifact version in this session.")
    try:
        found = activity.download(version, index)
    except activity.NotDownloadable as error:
        return HttpResponseNotFound(str(error), content_type="text/plain; charset=utf-8")
    response = HttpResponse(found.content, content_type=found.content_type)
    response["Content-Disposition"] = content_disposition_header(True, found.filename)
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_GET
@login_required
def question_text(request: HttpRequest, interaction_id: int) -> HttpResponse:
    """One question (its prompt and detail) in full: where its "show all" leads."""
    try:
        question = answers.visible(request.user, interaction_id)
    except rules.NotFound as error:
        raise Http404(str(error)) from None
    return _plain_text(activity.question_text(question))


@require_GET
@api_login_required
def session_card(request: HttpRequest, session_id: int) -> JsonResponse:
    """The session's current fragments: what a browser refetches on every (re)connect."""
    snapshot = fragments.snapshot(_visible_session(request, session_id))
    del snapshot["type"]
    return JsonResponse(snapshot)


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _refused(request: HttpRequest, error: rules.AnswerError, session_id: int) -> HttpResponse:
    if _wants_json(request):
        body = {"error": type(error).__name__, "detail": str(error)}
        return JsonResponse(body, status=error.status)
    if isinstance(error, rules.NotFound):
        raise Http404(str(error))
    messages.error(request, str(error))
    return redirect("session", session_id)


def _acted(request: HttpRequest, session_id: int, act) -> HttpResponse:
    """Run one action for a person; JSON for the page's script, or a redirect back to the
    session with a message for a plain form post. Refusals say what was wrong."""
    try:
        state, detail = act()
    except rules.AnswerError as error:
        return _refused(request, error, session_id)
    if _wants_json(request):
        return JsonResponse({"state": state, "detail": detail})
    messages.success(request, detail)
    return redirect("session", session_id)


@require_POST
@api_login_required
def answer_interaction(request: HttpRequest, interaction_id: int) -> HttpResponse:
    """Approve, deny, answer or connect. CSRF-checked like every POST; the permission is
    checked in answers.answer, on every post."""
    try:
        interaction = answers.visible(request.user, interaction_id)
    except rules.NotFound as error:
        return _refused(request, error, 0)

    # A page's answer is held for Undo (ONLOOKER_UNDO_SECONDS, answering/held.py): the
    # reply says what goes, and where Undo posts while it has not gone yet.
    try:
        decision = answers.parse_decision(interaction.kind, request.POST)
        done = held.answer_from_page(request.user, interaction, decision)
    except rules.AnswerError as error:
        return _refused(request, error, interaction.task.session_id)
    reply = held.as_json(done)
    if _wants_json(request):
        return JsonResponse(reply)
    messages.success(request, reply["detail"])
    return redirect("session", interaction.task.session_id)


@require_POST
@api_login_required
def dismiss_interaction(request: HttpRequest, interaction_id: int) -> HttpResponse:
    """Dismiss a question the agent no longer knows. CSRF-checked like every POST; the
    permission (the one that answers) and the agent's own word are checked in
    dismissals.dismiss, on every post."""
    try:
        interaction = answers.visible(request.user, interaction_id)
    except rules.NotFound as error:
        return _refused(request, error, 0)

    def act():
        done = dismissals.dismiss(request.user, interaction)
        return done.state, done.detail

    return _acted(request, interaction.task.session_id, act)


@require_POST
@api_login_required
def send_message(request: HttpRequest, session_id: int) -> HttpResponse:
    """The composer: a person's message to the session's agent."""

    def act():
        sent = talking.send_message(request.user, session_id, talking.parse_message(request.POST))
        return sent.state, sent.describe()

    return _acted(request, session_id, act)


@require_POST
@api_login_required
def start_session(request: HttpRequest) -> HttpResponse:
    """ "New session" on the monitoring screen: the first message to an agent."""
    agent = whole_number(request.POST.get("agent", ""))
    try:
        if agent is None:
            raise rules.AnswerError("agent must be the id of an agent")
        composed = talking.parse_message(request.POST)
        session = talking.start_session(request.user, agent, composed)
    except rules.AnswerError as error:
        if _wants_json(request) or isinstance(error, rules.NotFound):
            return _refused(request, error, 0)
        messages.error(request, str(error))
        return redirect("overview")
    if _wants_json(request):
        return JsonResponse({"session": session.pk, "url": session_url(session)})
    return redirect("session", session.pk)


def session_url(session: Session) -> str:
    return reverse("session", args=[session.pk])


CANCEL_UNCONFIRMED = (
    "Nothing was cancelled: confirm it with the “Cancel task” button under "
    "“Cancel this task?” (the form sends confirm=yes)."
)


@require_POST
@api_login_required
def cancel_task(request: HttpRequest, session_id: int) -> HttpResponse:
    """The session page's "Cancel task": only a confirmed post (`confirm=yes`, which only the
    form behind "Cancel task…" carries) reaches the agent, so one press never stops its work."""

    def act():
        if request.POST.get("confirm") != "yes":
            raise rules.AnswerError(CANCEL_UNCONFIRMED)
        return "sent", talking.cancel(request.user, session_id, request.POST.get("task_id", ""))

    return _acted(request, session_id, act)
