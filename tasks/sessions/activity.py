"""What the session page shows of a session's transcript and artifacts: the newest of them,
within a size budget, with links to the rest.

Eight 900 KB pushes once made one session page 10.8 MB. Sizes here are characters of agent
text, measured by the database. Messages are cut there too, so a page loads no more of
them than it shows; artifact parts are cut here, after loading, so what a page loads of
them has a budget of its own. Every cut text has a plain-text view that shows it whole;
earlier messages and artifact versions are one link away (`?before=`, `?artifacts_before=`).

What agents wait for (interactions) has budgets of its own, since it is shown on the
session page and, twenty at a time, on the monitoring screen: a prompt is cut in the
database, and a detail is loaded only when it is small enough to offer choices and a link
from; "show all" opens a question whole.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast, Length, Substr

from tasks.models import Artifact, Interaction, Message, Session, Task
from tasks.sessions import artifact_markdown, progress_card, question_detail, transcript_rows
from tasks.sessions.progress_card import strip_invisible
from tasks.wire import agent_text

MESSAGE_CHARS = 10_000  # of one message, on the page
TRANSCRIPT_CHARS = 100_000  # of all the messages on one page
VERSION_CHARS = 10_000  # of one artifact version's parts, on the page
DESCRIPTION_CHARS = 2_000  # of one artifact version's description, on the page
ARTIFACT_CHARS = 100_000  # of all the artifact versions on one page
ARTIFACT_LIMIT = 200  # artifact versions on one page, however small
# A version's parts are loaded whole to cut them: bound what one page loads as well.
ARTIFACT_LOAD_CHARS = 2_000_000
LINK_CHARS = 2_000  # a longer URL is shown cut, not linked
PROMPT_CHARS = 4_000  # of one question's prompt, on the page
CHOICE_CHARS = 200  # a longer choice is not offered as a button (it can still be typed)
# A question's detail is loaded only to find its choices and link, which fit in far less.
DETAIL_LOAD_CHARS = 20_000
_ID = re.compile(r"[0-9]{1,18}")  # longer would overflow the database's integers


class BadAnchor(ValueError):
    """A `before` that names nothing on this session: the message says which parameter."""


@dataclass(frozen=True)
class Shown:
    """One page of messages or artifact versions. `earlier` is the id to pass as the
    anchor for the ones before these, or None when these go back to the start."""

    items: list
    earlier: int | None


def _anchor(rows, raw: str | None, name: str, what: str, *fields: str):
    """The row `raw` names among `rows`, loading only `fields` (not its large texts)."""
    if raw is None:
        return None
    found = rows.only("pk", *fields).filter(pk=int(raw)).first() if _ID.fullmatch(raw) else None
    if found is None:
        raise BadAnchor(f"{name} must be the id of {what} in this session, not {raw[:40]!r}")
    return found


def _newest_within(
    sizes: list[tuple[int, int, int]], shown_budget: int, loaded_budget: int
) -> list[int]:
    """The ids of `(id, characters shown, characters loaded)`, newest first, that fit both
    budgets together; at least one, so a page is never empty while there is something to
    show."""
    chosen, shown, loaded = [], 0, 0
    for pk, shows, loads in sizes:
        if chosen and (shown + shows > shown_budget or loaded + loads > loaded_budget):
            break
        chosen.append(pk)
        shown, loaded = shown + shows, loaded + loads
    return chosen


def transcript(session: Session, before: str | None, limit: int) -> Shown:
    """The newest messages (before the message `before`, if given) that fit the budget, in
    reading order, as rows the page shows (transcript_rows.Row), each cut to MESSAGE_CHARS."""
    rows = session.messages.all()
    anchor = _anchor(rows, before, "before", "a message", "at")
    if anchor is not None:
        rows = rows.filter(Q(at__lt=anchor.at) | Q(at=anchor.at, pk__lt=anchor.pk))
    sizes = list(
        rows.order_by("-at", "-id")
        .annotate(length=Length("text"), parts_length=Length(Cast("parts", TextField())))
        .values_list("pk", "length", "parts_length")[: limit + 1]
    )
    # The database cuts the text: a message loads what it shows. Its shown parts are bounded
    # when stored (message_parts.MAX_SHOWN_CHARS) and count too; a file's bytes load only
    # with its download.
    capped = [
        (pk, shown := min(n, MESSAGE_CHARS) + (parts or 0), shown) for pk, n, parts in sizes[:limit]
    ]
    chosen = _newest_within(capped, TRANSCRIPT_CHARS, TRANSCRIPT_CHARS)
    messages = transcript_rows.rows(
        Message.objects.filter(pk__in=chosen).order_by("at", "id"), cut_at=MESSAGE_CHARS
    )
    earlier = messages[0].pk if messages and len(chosen) < len(sizes) else None
    return Shown(messages, earlier)


def artifacts(session: Session, before: str | None) -> Shown:
    """The newest artifact versions (before the version `before`, if given) that fit the
    budget, in the order the page lists them; each with `preview` (its parts, cut to
    VERSION_CHARS), `shown_description`, `description_cut` and `cut`."""
    rows = Artifact.objects.filter(task__session=session)
    anchor = _anchor(rows, before, "artifacts_before", "an artifact version")
    if anchor is not None:
        rows = rows.filter(pk__lt=anchor.pk)
    sizes = list(
        rows.order_by("-id")
        .annotate(
            parts_length=Length(Cast("parts", TextField())),
            description_length=Length("description"),
        )
        .values_list("pk", "parts_length", "description_length")[: ARTIFACT_LIMIT + 1]
    )
    capped = [
        (pk, min(parts, VERSION_CHARS) + min(description, DESCRIPTION_CHARS), parts)
        for pk, parts, description in sizes[:ARTIFACT_LIMIT]
    ]
    chosen = _newest_within(capped, ARTIFACT_CHARS, ARTIFACT_LOAD_CHARS)
    versions = list(
        Artifact.objects.filter(pk__in=chosen)
        .select_related("task")
        .defer("description")
        .annotate(
            shown_description=Substr("description", 1, DESCRIPTION_CHARS),
            description_length=Length("description"),
        )
    )
    for version in versions:
        markdown = version.files if version.markdown_html else _NOT_MARKDOWN
        version.preview, parts_cut = preview(version.parts, markdown_files=markdown)
        version.description_cut = version.description_length > DESCRIPTION_CHARS
        version.cut = parts_cut or version.description_cut or _markdown_cut(version)
        version.downloads = downloads(version)
    earlier = min(chosen) if chosen and len(chosen) < len(sizes) else None
    return Shown(_grouped(versions), earlier)


@dataclass(frozen=True)
class ArtifactGroup:
    """One artifact of one turn, as the page lists it: its newest version on this page, and
    the older ones (folded)."""

    latest: Artifact
    older: list[Artifact]


def _grouped(versions: list[Artifact]) -> list[ArtifactGroup]:
    """Versions grouped per artifact (artifact ids are unique within a task): the artifact
    with the newest version first, each one's versions latest first."""
    groups: dict[tuple[int, str], list[Artifact]] = {}
    for version in sorted(versions, key=lambda v: (v.sequence, v.pk), reverse=True):
        groups.setdefault((version.task_id, version.artifact_id), []).append(version)
    ordered = sorted(groups.values(), key=lambda group: max(v.pk for v in group), reverse=True)
    return [ArtifactGroup(group[0], group[1:]) for group in ordered]


_NOT_MARKDOWN = object()


def _markdown_cut(version: Artifact) -> bool:
    """Whether the rendered markdown is only the start of the version's markdown text."""
    if not version.markdown_html:
        return False
    total = sum(
        len(part["text"])
        for part in version.parts
        if artifact_markdown.is_markdown_part(part, version.files)
    )
    return total > artifact_markdown.MAX_ARTIFACT_MARKDOWN_CHARS


def _data_text(data: Any) -> str:
    try:
        return json.dumps(data, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):  # huge numbers, very deep nesting
        return "(data that cannot be shown as text)"


def _part(part: dict, room: int) -> tuple[dict | None, int, bool]:
    """What the page shows of one part, given `room` characters: (shown, size, cut)."""
    if isinstance(part.get("text"), str) and part["text"]:
        text = part["text"]
        return {"kind": "text", "text": text[:room]}, min(len(text), room), len(text) > room
    if isinstance(part.get("url"), str):
        url, name = part["url"], part.get("filename")
        label = name if isinstance(name, str) and name else url
        if agent_text.web_url(url) and len(url) <= LINK_CHARS:
            label = label[:LINK_CHARS]
            return {"kind": "link", "url": url, "label": label}, len(url) + len(label), False
        room = min(room, LINK_CHARS)
        return {"kind": "url", "label": url[:room]}, min(len(url), room), len(url) > room
    if part.get("raw") is not None:
        name, media = part.get("filename"), part.get("mediaType")
        shown = {
            "kind": "file",
            "label": name[:LINK_CHARS] if isinstance(name, str) and name else "file",
            "media_type": media[:200] if isinstance(media, str) and media else "binary",
        }
        return shown, 0, False
    if "data" in part and part["data"] is not None:
        text = _data_text(part["data"])
        return {"kind": "data", "text": text[:room]}, min(len(text), room), len(text) > room
    return None, 0, False


def preview(
    parts: Any, budget: int = VERSION_CHARS, *, markdown_files: Any = _NOT_MARKDOWN
) -> tuple[list[dict], bool]:
    """The parts a page shows of one artifact version, and whether that is not all. With
    `markdown_files` (the version's files/v1 data), its markdown text parts are left out:
    the page shows them rendered. Each part shown has its `index` in `parts`."""
    shown: list[dict] = []
    room = budget
    for index, part in enumerate(parts if isinstance(parts, list) else []):
        if not isinstance(part, dict):
            continue
        if markdown_files is not _NOT_MARKDOWN and artifact_markdown.is_markdown_part(
            part, markdown_files
        ):
            continue
        if room <= 0:
            return shown, True
        item, size, cut = _part(part, room)
        if item is not None:
            shown.append({**item, "index": index})
        room -= size
        if cut:
            return shown, True
    return shown, False


def artifact_text(version: Artifact) -> str:
    """One artifact version in full, as plain text: what "show all" opens."""
    lines = [f"{version.name or version.artifact_id} (version {version.sequence})"]
    if version.description:
        lines += ["", version.description]
    if version.files:
        lines += ["", f"files/v1: {_data_text(version.files)}"]
    for part in version.parts if isinstance(version.parts, list) else []:
        if not isinstance(part, dict):
            continue
        lines.append("")
        if isinstance(part.get("text"), str) and part["text"]:
            lines.append(part["text"])
        elif isinstance(part.get("url"), str):
            lines.append(part["url"])
        elif part.get("raw") is not None:
            raw = part["raw"]
            size = f"{len(raw)} characters of base64" if isinstance(raw, str) else "inline"
            lines.append(f"{part.get('filename') or 'file'} ({size}; not shown)")
        elif part.get("data") is not None:
            lines.append(_data_text(part["data"]))
    return "\n".join(lines) + "\n"


# -- downloads --------------------------------------------------------------------------


class NotDownloadable(LookupError):
    """The part named is not one Onlooker can offer as a file."""


@dataclass(frozen=True)
class Download:
    content: bytes
    filename: str
    content_type: str


_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\:*?\"<>|]+")
FILENAME_CHARS = 120


def _filename(part: dict, version: Artifact, extension: str) -> str:
    """The agent's filename, or one made from the artifact's name: no path, no control or
    bidi characters (a right-to-left override turns "gpj.exe" into "exe.jpg")."""
    name = part.get("filename")
    if not isinstance(name, str) or not name.strip():
        name = f"{version.name or version.artifact_id}-v{version.sequence}{extension}"
    name = _UNSAFE_NAME.sub("_", progress_card.strip_invisible(name)).strip(" .")
    return name[-FILENAME_CHARS:] or f"artifact{extension}"


def _base64(raw: str) -> bytes:
    padded = raw.strip() + "=" * (-len(raw.strip()) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return base64.urlsafe_b64decode(padded)  # ProtoJSON accepts both alphabets


DOWNLOADS_SHOWN = 20


def downloads(version: Artifact) -> list[dict]:
    """The parts of a version offered as files: `{index, name}` each, the first twenty."""
    found = []
    for index, part in enumerate(version.parts if isinstance(version.parts, list) else []):
        kind = _download_kind(part, version.files)
        if kind is not None:
            found.append({"index": index, "name": _filename(part, version, kind[0])})
        if len(found) == DOWNLOADS_SHOWN:
            break
    return found


def _download_kind(part: Any, files: Any) -> tuple[str, str] | None:
    """(extension, content type) of a part offered as a file, or None."""
    if not isinstance(part, dict):
        return None
    if isinstance(part.get("text"), str):
        markdown = artifact_markdown.is_markdown_part(part, files)
        return (".md" if markdown else ".txt"), "text/plain; charset=utf-8"
    if isinstance(part.get("raw"), str):
        # Never the agent's media type, which could say text/html.
        return ".bin", "application/octet-stream"
    if part.get("data") is not None:
        return ".json", "application/json"
    return None


def download(version: Artifact, index: int) -> Download:
    """Part `index` of an artifact version as a file: text as UTF-8 text, raw bytes as
    application/octet-stream (never the agent's media type, which could say text/html),
    data as JSON. Raises NotDownloadable for anything else."""
    parts = version.parts if isinstance(version.parts, list) else []
    part = parts[index] if 0 <= index < len(parts) else None
    kind = _download_kind(part, version.files)
    if kind is None:
        raise NotDownloadable("no part to download there (a link, or no such part)")
    extension, content_type = kind
    if isinstance(part.get("text"), str):
        content = part["text"].encode("utf-8", errors="replace")
    elif isinstance(part.get("raw"), str):
        try:
            content = _base64(part["raw"])
        except (binascii.Error, ValueError):
            raise NotDownloadable("this part's bytes are not valid base64") from None
    else:
        content = _data_text(part["data"]).encode("utf-8", errors="replace")
    return Download(content, _filename(part, version, extension), content_type)


# -- telemetry ----------------------------------------------------------------------------

TURNS_SHOWN = 50


def _number(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else 0


def totals(session: Session) -> dict:
    """The session's telemetry/v1 summed over all its turns (tasks): {"costUsd", "tokens",
    "steps"}, 0 for what no turn reported."""
    cost, tokens, steps = [], 0, 0
    for telemetry in (
        session.tasks.exclude(telemetry=None).values_list("telemetry", flat=True).iterator()
    ):
        if not isinstance(telemetry, dict):
            continue
        cost.append(_number(telemetry.get("costUsd")))
        tokens += int(_number(telemetry.get("tokens")))
        steps += int(_number(telemetry.get("steps")))
    # Summed exactly, then rounded past what a cost shows: 0.1 + 0.2 is 0.3.
    return {"costUsd": round(math.fsum(cost), 9), "tokens": tokens, "steps": steps}


def turns(session: Session) -> list[Task]:
    """The session's newest turns (tasks) that reported telemetry, newest first: what the
    page lists under the totals, each with its own cost and trace id."""
    return list(
        session.tasks.exclude(telemetry=None)
        .only("task_id", "state", "telemetry", "status_timestamp", "status_received_at")
        .order_by("-created_at", "-id")[:TURNS_SHOWN]
    )


def questions(rows: QuerySet[Interaction]) -> list[Interaction]:
    """`rows` as the page shows them, loading neither their prompts nor large details
    whole: each with `shown_prompt` (its first PROMPT_CHARS), `prompt_length`,
    `prompt_cut`, `offered` (the choices offered as buttons), `link` (a connection's page),
    `shown_detail` (the detail, when `detail_loaded`: small enough) and `cut` (whether "show
    all" shows more than this). Agent text is cleaned of invisible and bidi-control
    characters. The template must not read `prompt` or `detail`: they are not loaded."""
    found = list(
        rows.defer("prompt", "detail").annotate(
            shown_prompt=Substr("prompt", 1, PROMPT_CHARS),
            prompt_length=Length("prompt"),
            detail_length=Length(Cast("detail", TextField())),
        )
    )
    small = [q.pk for q in found if (q.detail_length or 0) <= DETAIL_LOAD_CHARS]
    details = dict(Interaction.objects.filter(pk__in=small).values_list("pk", "detail"))
    for question in found:
        detail = details.get(question.pk)
        question.shown_prompt = strip_invisible(question.shown_prompt)
        question.shown_detail = detail
        question.detail_loaded = question.pk in details
        offered = question_detail.offered_choices(detail)
        # A button's label is the value the agent receives: a choice that would read
        # differently once cleaned of invisible and bidi-control characters is not offered
        # as a button (it is in the detail, cleaned, and can be typed).
        question.offered = [
            choice
            for choice in offered
            if len(choice) <= CHOICE_CHARS and strip_invisible(choice) == choice
        ]
        link = question_detail.connect_url(detail)
        question.link = link if len(link) <= LINK_CHARS else ""
        question.shown_detail = _beside_buttons(detail, question.offered, question.link)
        question.prompt_cut = question.prompt_length > PROMPT_CHARS
        question.cut = (
            question.prompt_cut
            or question.pk not in details
            or len(question.offered) < len(offered)
            or link != question.link
        )
    return found


def _beside_buttons(detail: Any, offered: list[str], link: str) -> Any:
    """The detail as the table shows it, without what the form already shows: choices that
    are all buttons, and the connection page that is the link."""
    if not isinstance(detail, dict):
        return detail
    shown = dict(detail)
    for key in ("choices", "options"):
        if (
            key in shown
            and offered
            and question_detail.offered_choices({key: shown[key]}) == offered
        ):
            del shown[key]
    if link and shown.get("url") == link:
        del shown["url"]
    return shown or None


def question_text(question: Interaction) -> str:
    """One question in full, as plain text: what "show all" opens."""
    lines = [question.prompt or "(no prompt)"]
    if question.detail is not None:
        lines += ["", f"detail: {_data_text(question.detail)}"]
    return "\n".join(lines) + "\n"
