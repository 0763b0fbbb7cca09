"""`/api/decisions`: the record of decisions, as a person may read it (logged in, or with an API
token: tasks/api/auth.py), a page of JSON at a time or a whole range as JSON lines or CSV; and
`/api/decisions/summary`: how fast people answer (tasks/sessions/decisions_summary.py).
docs/api.md is the reference; the names here are a contract, as in tasks/api/sessions.py.

JSON lines and CSV stream: one query per batch of rows (tasks/sessions/decision_record.py),
each sent as it is read. The iterator is asynchronous because Onlooker is served over ASGI,
where Django reads a synchronous iterator whole before sending a byte of it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator, Callable

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from tasks.api.auth import login_or_token
from tasks.api.sessions import _error
from tasks.models import Decision
from tasks.sessions import decision_record, decisions_summary
from tasks.sessions.decision_record import BadQuery, Position, Query

FORMATS = ("json", "jsonl", "csv")
CSV_COLUMNS = (
    "id",
    "interaction",
    "round",
    "session",
    "taskId",
    "agent_id",
    "agent_name",
    "kind",
    "decision",
    "value",
    "reason",
    "by",
    "via",
    "at",
    "openedAt",
    "waitedSeconds",
    "requestDigest",
    "confirmed",
)
# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection);
# prompts, answers and reasons are written by agents and people.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@require_GET
@login_or_token
def decisions(request: HttpRequest) -> HttpResponse:
    """Rows of the record in the order they were made: `format=json` (the default) a page of
    `limit` with a `next` link, `jsonl` or `csv` every row of the range."""
    params = request.GET
    try:
        shape = params.get("format", "json")
        if shape not in FORMATS:
            raise BadQuery("bad format", "format is json (the default), jsonl or csv")
        query = decision_record.read_query(
            request.user, params.get("since"), params.get("until"), params.get("agent")
        )
        after = decision_record.read_cursor(params.get("after"))
        limit = decision_record.read_limit(params.get("limit"))
    except BadQuery as bad:
        return _error(bad.status, bad.error, str(bad))
    if shape == "json":
        return _page(request, query, after, limit)
    if shape == "jsonl":
        return _stream(request.user, query, after, _jsonl, "application/x-ndjson", "jsonl")
    return _stream(request.user, query, after, _csv, "text/csv; charset=utf-8", "csv")


def _page(request: HttpRequest, query: Query, after: Position | None, limit: int) -> JsonResponse:
    shown, following = decision_record.page(request.user, query, after, limit)
    link = None
    if following is not None:
        params = request.GET.copy()
        params["after"] = decision_record.cursor(following)
        link = f"{reverse('api-decisions')}?{params.urlencode()}"
    return JsonResponse({"decisions": [decision_record.row_json(r) for r in shown], "next": link})


def _stream(
    user, query: Query, after: Position | None, encode: Callable, content_type: str, ext: str
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        encode(_batches(user, query, after)), content_type=content_type
    )
    response["Content-Disposition"] = content_disposition_header(True, f"decisions.{ext}")
    response["Cache-Control"] = "no-store"
    return response


async def _batches(user, query: Query, after: Position | None) -> AsyncIterator[list[Decision]]:
    read = sync_to_async(decision_record.batch)
    while True:
        found = await read(user, query, after)
        if found:
            yield found
        if len(found) < decision_record.BATCH:
            return
        after = Position(found[-1].at, found[-1].id)


async def _jsonl(batches: AsyncIterator[list[Decision]]) -> AsyncIterator[bytes]:
    async for found in batches:
        lines = (json.dumps(decision_record.row_json(r), ensure_ascii=False) for r in found)
        yield ("\n".join(lines) + "\n").encode()


class _Line:
    """What csv.writer writes to: it hands back each line rather than keeping it."""

    def write(self, text: str) -> str:
        return text


async def _csv(batches: AsyncIterator[list[Decision]]) -> AsyncIterator[bytes]:
    writer = csv.writer(_Line())
    yield writer.writerow(CSV_COLUMNS).encode()
    async for found in batches:
        yield "".join(writer.writerow(csv_row(r)) for r in found).encode()


def csv_row(row: Decision) -> list:
    data = decision_record.row_json(row)
    agent = data.pop("agent")
    data["agent_id"], data["agent_name"] = agent["id"], agent["name"]
    value = data["value"]
    if value is not None and not isinstance(value, str):
        data["value"] = json.dumps(value, ensure_ascii=False)
    confirmed = data["confirmed"]
    data["confirmed"] = "" if confirmed is None else str(confirmed).lower()
    return [_cell(data[column]) for column in CSV_COLUMNS]


def _cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula starts with ' instead."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


@require_GET
@login_or_token
def summary(request: HttpRequest) -> JsonResponse:
    """`?days=N`: per agent and per person, over the N UTC days ending today, how many
    decisions, approved and denied, time to decision p50/p90, escalations and expiries."""
    try:
        days = decisions_summary.parse_days(request.GET.get("days"))
    except decisions_summary.BadDays as error:
        return _error(400, "bad days", str(error))
    return JsonResponse(decisions_summary.report(request.user, days))
